"""The progress watchdog's decision on a virtual clock: a job is hung once its progress has stood still for its
threshold while every rank runs; a declared pause or a restart restarts the clock; named once per hang; the rank
that stopped first from who waits on whom; the ``restart-on-pause`` switch."""

from __future__ import annotations

import pytest

from refplatform.core.progress import (Hang, JobProgress, RankProgress, WatchState, first_stopped, format_ranks,
                                       parse_ranks, parse_timeout, renamable, watch)

T0 = 1_800_000_000.0


def rank(i: int, step: int | None = 10, *, activity: str | None = None, on: tuple[int, ...] | None = None,
         running: bool = True, gen: str = "a") -> RankProgress:
    return RankProgress(f"uid-{gen}-{i}", f"ns/job-worker-{i}", i, running, step, activity, on)


def job(*ranks: RankProgress, timeout: float = 10.0, min_available: int | None = None, uid: str = "job-1",
        name: str = "ns/job") -> JobProgress:
    return JobProgress(name, uid, timeout, len(ranks) if min_available is None else min_available, tuple(ranks))


def run(ticks: list[tuple[float, list[JobProgress]]], **kw: bool) -> list[list[Hang]]:
    """The hangs named at each tick (seconds after T0)."""
    state, out = WatchState(), []
    for t, jobs in ticks:
        named, state = watch(jobs, state, T0 + t, **kw)
        out.append(named)
    return out


def named_at(ticks: list[tuple[float, list[JobProgress]]], **kw: bool) -> list[float]:
    return [t for (t, _), hangs in zip(ticks, run(ticks, **kw), strict=True) if hangs]


def test_a_job_standing_still_for_its_threshold_is_named_once() -> None:
    still = [job(rank(0), rank(1))]
    ticks = [(t, still) for t in (0, 5, 9.9, 10, 11, 30)]
    assert named_at(ticks) == [10]
    (hang,) = run(ticks)[3]
    assert (hang.job, hang.step, hang.timeout_s, hang.since, hang.stalled_s) == ("ns/job", 10, 10.0, T0, 10.0)
    assert hang.pods == ("uid-a-0", "uid-a-1")
    assert hang.message() == ("Job ns/job made no progress past step 10 for 10.0 s (threshold 10 s) with all 2 of "
                              "its ranks running; rank that stopped first: unknown; restarting the job from its "
                              "checkpoint")


def test_progress_restarts_the_clock_and_the_highest_rank_counts() -> None:
    ticks = [(0, [job(rank(0, 10), rank(1, 10))]),
             (8, [job(rank(0, 11), rank(1, 10))]),  # one rank moved: the job's progress moved
             (17.9, [job(rank(0, 11), rank(1, 11))]),
             (18, [job(rank(0, 11), rank(1, 11))])]
    assert named_at(ticks) == [18]


@pytest.mark.parametrize("case, ranks, min_available", [
    ("a rank pending", [rank(0), rank(1, running=False)], 2),
    ("a rank without a step yet", [rank(0), rank(1, None)], 2),
    ("fewer ranks than minAvailable", [rank(0)], 2),
    ("no rank at all", [], 1),
])
def test_the_clock_runs_only_while_every_rank_runs_with_a_step(case: str, ranks: list[RankProgress],
                                                              min_available: int) -> None:
    j = job(*ranks, min_available=min_available)
    assert named_at([(t, [j]) for t in (0, 10, 20, 60)]) == [], case


def test_a_declared_pause_stops_the_clock_and_restarts_it_when_it_ends() -> None:
    plain = job(rank(0), rank(1, on=(0,)))
    paused = job(rank(0, activity="checkpoint"), rank(1, on=(0,)))
    ticks = [(0, [plain]), (5, [paused]), (40, [paused]), (45, [plain]), (54.9, [plain]), (55, [plain])]
    assert named_at(ticks) == [55]  # 10 s after the pause ended, not 10 s after the last step


def test_restart_on_pause_ignores_the_declared_activity() -> None:
    paused = job(rank(0, activity="checkpoint"), rank(1, on=(0,)))
    ticks = [(t, [paused]) for t in (0, 5, 10, 11)]
    assert named_at(ticks) == []
    assert named_at(ticks, ignore_activity=True) == [10]


def test_a_restarted_job_is_a_new_watch_and_can_hang_again() -> None:
    old = job(rank(0), rank(1))
    going = job(rank(0, running=False), rank(1, running=False))  # being deleted
    new = job(rank(0, 8, gen="b"), rank(1, 8, gen="b"))  # resumed from the checkpoint at step 8
    ticks = [(0, [old]), (10, [old]), (11, [going]), (12, [new]), (21.9, [new]), (22, [new]), (40, [new])]
    assert named_at(ticks) == [10, 22]


def test_jobs_are_judged_apart_and_forgotten_when_gone() -> None:
    a, b = job(rank(0), uid="a", name="ns/a"), job(rank(0, gen="b"), uid="b", name="ns/b", timeout=20)
    hangs = run([(0, [a, b]), (10, [a, b]), (20, [a, b])])
    assert [[h.job for h in tick] for tick in hangs] == [[], ["ns/a"], ["ns/b"]]
    _, state = watch([a], WatchState(), T0)
    _, state = watch([], state, T0 + 1)
    assert dict(state.jobs) == {}


def test_a_naming_that_went_nowhere_is_named_again() -> None:
    j = job(rank(0))
    _, state = watch([j], WatchState(), T0)
    (hang,), state = watch([j], state, T0 + 10)
    assert watch([j], state, T0 + 11)[0] == []
    again, _ = watch([j], renamable(state, "job-1"), T0 + 11)
    assert [h.stalled_s for h in again] == [11.0]
    assert renamable(WatchState(), "nobody") == WatchState()


@pytest.mark.parametrize("case, ranks, first", [
    ("a hung leaf: rank 0 waits on all its peers, the other leaves on rank 0",
     [rank(0, on=(1, 2)), rank(1, on=(0,)), rank(2)], 2),
    ("a hung leaf, rank 0 naming only the one it waits on", [rank(0, on=(2,)), rank(1, on=(0,)), rank(2)], 2),
    ("a hung rank 0: every leaf names it", [rank(0), rank(1, on=(0,)), rank(2, on=(0,))], 0),
    ("two ranks, the leaf hung", [rank(0, on=(1,)), rank(1)], 1),
    ("two ranks, rank 0 hung", [rank(0), rank(1, on=(0,))], 0),
    ("nobody waits: unknown", [rank(0), rank(1)], None),
    ("rank 0 waits on unnamed peers, two leaves quiet: unknown", [rank(0, on=()), rank(1), rank(2)], None),
    ("everyone waits on everyone: unknown", [rank(0, on=(1,)), rank(1, on=(0,))], None),
])
def test_the_rank_that_stopped_first(case: str, ranks: list[RankProgress], first: int | None) -> None:
    assert first_stopped(ranks) == first, case


def test_the_hang_names_the_rank_that_stopped_first() -> None:
    j = job(rank(0, on=(1, 2)), rank(1, on=(0,)), rank(2))
    (hang,) = run([(0, [j]), (10, [j])])[1]
    assert hang.first == 2 and "rank that stopped first: 2;" in hang.message()


@pytest.mark.parametrize("raw, value", [
    ("30", 30.0), (" 2.5 ", 2.5), ("0", None), ("-1", None), ("nan", None), ("inf", None), ("soon", None),
    (None, None), (True, None),
])
def test_the_threshold_annotation(raw: object, value: float | None) -> None:
    assert parse_timeout(raw) == value


def test_ranks_round_trip_through_the_annotation() -> None:
    assert format_ranks([2, 1, 2]) == "1,2"
    assert parse_ranks("1,2") == (1, 2) and parse_ranks("0") == (0,)
    assert parse_ranks("") == () and parse_ranks("peers") == () and parse_ranks(None) is None
