"""Simulated workloads, stepped on a virtual clock (no sleeps)."""

from __future__ import annotations

import pytest

from refplatform.agent.clock import VirtualClock, rfc3339_millis
from refplatform.agent.errors import WorkloadConfigError
from refplatform.agent.workload import (
    ANN_CHECKPOINT_EVERY,
    ANN_CHECKPOINT_STEP,
    ANN_EXIT_CODE,
    ANN_RUN_SECONDS,
    ANN_STEP,
    ANN_STEP_SECONDS,
    ANN_STEPS_TOTAL,
    ANN_WORKLOAD,
    IdleWorkload,
    TrainingParams,
    TrainingWorkload,
    workload_for,
)


def training(**ann: str) -> dict[str, str]:
    return {ANN_WORKLOAD: "training", **ann}


def texts(lines) -> list[str]:
    return [line.text for line in lines]


def progress(w) -> dict[str, str]:
    """Step and checkpoint only (the stall counters have their own tests)."""
    return {k: v for k, v in w.progress().items() if k in (ANN_STEP, ANN_CHECKPOINT_STEP)}


def test_no_annotation_is_an_idle_process_that_never_ends() -> None:
    clock = VirtualClock()
    w = workload_for({})
    assert isinstance(w, IdleWorkload)
    assert w.start(clock.now()) == []
    clock.advance(10 * 365 * 86400)
    assert w.advance(clock.now()) == []
    assert w.running and w.exit is None
    assert w.progress() == {}


def test_idle_with_run_seconds_exits_with_the_given_code_at_the_right_instant() -> None:
    clock = VirtualClock()
    w = workload_for({ANN_RUN_SECONDS: "2.5", ANN_EXIT_CODE: "3"})
    start = clock.now()
    w.start(start)
    clock.advance(2.4)
    w.advance(clock.now())
    assert w.running
    clock.advance(1.0)
    w.advance(clock.now())
    assert w.exit is not None
    assert (w.exit.code, w.exit.reason) == (3, "Error")
    assert (w.exit.finished_at - start).total_seconds() == pytest.approx(2.5)


def test_training_defaults() -> None:
    w = workload_for(training())
    assert isinstance(w, TrainingWorkload)
    assert w.params == TrainingParams(steps_total=0, step_seconds=0.5, checkpoint_every=10)


def test_training_steps_once_per_step_seconds_and_checkpoints() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEP_SECONDS: "0.5", ANN_CHECKPOINT_EVERY: "4"}))
    start = clock.now()
    first = texts(w.start(start))
    assert first == [
        f"{rfc3339_millis(start)} starting training steps_total=0 step_seconds=0.5 checkpoint_every=4",
        f"{rfc3339_millis(start)} resumed from checkpoint step=0",
    ]
    assert progress(w) == {ANN_STEP: "0", ANN_CHECKPOINT_STEP: "0"}

    clock.advance(0.49)
    assert w.advance(clock.now()) == []
    clock.advance(0.01)
    (line,) = w.advance(clock.now())
    assert line.text.startswith(f"{rfc3339_millis(clock.now())} step=1 loss=")
    assert line.time == clock.now()

    clock.advance(1.6)  # t = 2.1 s: steps 2, 3 and 4 are due, 4 is a checkpoint
    lines = w.advance(clock.now())
    assert [t.split(" ", 1)[1].split(" loss=")[0] for t in texts(lines)] == [
        "step=2",
        "step=3",
        "step=4",
        "checkpoint step=4",
    ]
    # Each line carries the instant its step completed, not the instant we looked.
    assert [(ln.time - start).total_seconds() for ln in lines] == [1.0, 1.5, 2.0, 2.0]
    assert progress(w) == {ANN_STEP: "4", ANN_CHECKPOINT_STEP: "4"}
    assert w.running


def test_training_loss_decreases_and_log_line_format() -> None:
    assert TrainingWorkload.loss(1000) < TrainingWorkload.loss(10)
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEP_SECONDS: "1"}))
    w.start(clock.now())
    clock.advance(1.123)
    (line,) = w.advance(clock.now())
    assert line.text.startswith("2026-11-30T00:00:01.000Z step=1 loss=")
    float(line.text.rsplit("loss=", 1)[1])


def test_training_exits_zero_when_steps_total_is_reached() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEPS_TOTAL: "5", ANN_STEP_SECONDS: "1", ANN_CHECKPOINT_EVERY: "2"}))
    start = clock.now()
    w.start(start)
    clock.advance(60)
    lines = texts(w.advance(clock.now()))
    assert lines[-1].endswith("training complete step=5")
    assert sum(" step=" in t and "loss=" in t for t in lines) == 5
    assert w.exit is not None and (w.exit.code, w.exit.reason) == (0, "Completed")
    assert (w.exit.finished_at - start).total_seconds() == 5
    assert progress(w) == {ANN_STEP: "5", ANN_CHECKPOINT_STEP: "4"}
    assert not w.running
    clock.advance(10)
    assert w.advance(clock.now()) == []


def test_training_resumes_from_its_checkpoint() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEPS_TOTAL: "12", ANN_STEP_SECONDS: "1", ANN_CHECKPOINT_STEP: "10"}))
    lines = texts(w.start(clock.now()))
    assert lines[-1].endswith("resumed from checkpoint step=10")
    clock.advance(1)
    assert texts(w.advance(clock.now()))[0].split(" ")[1] == "step=11"
    clock.advance(1)
    w.advance(clock.now())
    assert w.exit is not None and w.exit.code == 0


def test_stop_is_sigterm() -> None:
    clock = VirtualClock()
    w = workload_for(training())
    w.start(clock.now())
    clock.advance(1.0)
    lines = texts(w.stop(clock.now()))
    assert lines[-1].endswith("received SIGTERM, exiting")
    assert sum("step=" in t for t in lines) == 2  # what was due is still logged first
    assert w.exit is not None and (w.exit.code, w.exit.reason) == (143, "Error")
    assert w.stop(clock.now()) == []


def test_a_long_stall_is_caught_up_in_bounded_batches() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEP_SECONDS: "0.001", ANN_CHECKPOINT_EVERY: "0"}))
    w.start(clock.now())
    clock.advance(25)  # 25,000 steps due
    assert len(w.advance(clock.now())) == 10_000
    assert len(w.advance(clock.now())) == 10_000
    assert len(w.advance(clock.now())) == 5_000
    assert w.progress()[ANN_CHECKPOINT_STEP] == "0"


@pytest.mark.parametrize(
    "annotations, message",
    [
        ({ANN_WORKLOAD: "bogus"}, "unknown workload 'bogus'"),
        (training(**{ANN_STEPS_TOTAL: "ten"}), "not an integer"),
        (training(**{ANN_STEPS_TOTAL: "-1"}), "below 0"),
        (training(**{ANN_STEP_SECONDS: "0"}), "above 0"),
        (training(**{ANN_STEP_SECONDS: "nan"}), "finite"),
        (training(**{ANN_STEPS_TOTAL: "5", ANN_CHECKPOINT_STEP: "6"}), "beyond steps-total"),
    ],
)
def test_bad_annotations_are_config_errors(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(WorkloadConfigError, match=message):
        workload_for(annotations)


def test_advance_before_start_is_a_bug() -> None:
    with pytest.raises(RuntimeError):
        workload_for({}).advance(VirtualClock().now())


# -- a rank of a job: gang-gated stepping, checkpoint records, fencing --------------------------

from datetime import UTC, datetime, timedelta  # noqa: E402

from refplatform.agent.workload import (  # noqa: E402
    ANN_COMM_STALL_SECONDS,
    ANN_COMM_STALL_SHARE,
    ANN_EPOCH,
    ANN_INPUT_STALL_SECONDS,
    ANN_INPUT_STALL_SHARE,
    ANN_PEER_WAIT_SECONDS,
    ANN_RANK,
    ANN_WORLD_SIZE,
    FENCED_EXIT,
    Fence,
    GangStatus,
    RecordOutcome,
    StallKind,
    WorkloadEvent,
)


class ScriptedGang:
    """A gang whose view the test sets: complete over ``window``, else stalled for ``kind``."""

    def __init__(self) -> None:
        self.window: tuple[datetime, datetime] | None = None
        self.kind = StallKind.PEERS
        self.reason = "waiting for peers (1/2 ranks of epoch 0 running)"

    def status(self, now: datetime) -> GangStatus:
        return GangStatus(self.window, self.kind, self.reason)


class FakeLink:
    def __init__(self, resume: int | None = None) -> None:
        self.resume: int | None = resume
        self.fenced: Fence | None = None
        self.records: list[tuple[int, datetime]] = []
        self.pending_outcomes: list[RecordOutcome] = []

    def resume_step(self) -> int | None:
        return self.resume

    def fence(self) -> Fence | None:
        return self.fenced

    def record(self, step: int, at: datetime) -> None:
        self.records.append((step, at))

    def outcomes(self) -> list[RecordOutcome]:
        out, self.pending_outcomes = self.pending_outcomes, []
        return out


def rank(r: int = 0, world: int = 2, epoch: int = 0, **ann: str) -> dict[str, str]:
    return training(**{ANN_RANK: str(r), ANN_WORLD_SIZE: str(world), ANN_EPOCH: str(epoch), ANN_STEP_SECONDS: "1",
                       ANN_CHECKPOINT_EVERY: "2", **ann})


def body(lines) -> list[str]:
    """Log texts without their timestamps."""
    return [line.text.split(" ", 1)[1] for line in lines]


FOREVER = timedelta(days=3650)


def test_a_rank_waits_for_its_resume_point_before_stepping() -> None:
    clock = VirtualClock()
    gang, link = ScriptedGang(), FakeLink(resume=None)
    gang.window = (clock.now(), clock.now() + FOREVER)
    w = workload_for(rank(), gang, link)
    assert body(w.start(clock.now())) == ["starting training steps_total=0 step_seconds=1 checkpoint_every=2 rank=0 world_size=2 epoch=0"]
    clock.advance(5)
    assert w.advance(clock.now()) == [] and w.step == 0  # still reading the Job's record
    link.resume = 20
    assert body(w.advance(clock.now())) == ["resumed from checkpoint step=20"]
    clock.advance(1)
    assert body(w.advance(clock.now()))[0].startswith("step=21 loss=")
    assert w.resumed_from == 20 and progress(w) == {ANN_STEP: "21", ANN_CHECKPOINT_STEP: "20"}


def test_a_rank_steps_only_while_its_gang_is_known_complete() -> None:
    clock = VirtualClock()
    t0 = clock.now()
    gang, link = ScriptedGang(), FakeLink(resume=0)
    w = workload_for(rank(), gang, link)
    # Never complete yet: a stall line at the start, no steps, peer wait counted.
    assert body(w.start(t0))[-1] == "stalled: waiting for peers (1/2 ranks of epoch 0 running)"
    clock.advance(3)
    assert w.advance(clock.now()) == []
    assert w.stalled is StallKind.PEERS and w.step == 0
    # Complete from t=3.5 (the first poll that saw every rank), vouched for until t=7.
    gang.window = (t0 + timedelta(seconds=3.5), t0 + timedelta(seconds=7))
    gang.kind, gang.reason = StallKind.STALE, "peer view stale (last poll 2.5s ago)"
    clock.advance(7)  # t = 10
    lines = w.advance(clock.now())
    assert body(lines)[0] == "stepping resumed after 3.5s stalled"
    steps = [ln for ln in lines if " loss=" in ln.text]
    assert [(ln.time - t0).total_seconds() for ln in steps] == [4.5, 5.5, 6.5]  # 3.5 s of work: 3 steps
    assert body(lines)[-1] == "stalled: peer view stale (last poll 2.5s ago)"
    assert lines[-1].time == t0 + timedelta(seconds=7)
    assert w.peer_wait_us == 6_500_000  # 10 s minus 3.5 s of work
    # Published as of the last completed step (t=6.5): 3.5 s waited, 3 s stepped.
    assert w.progress()[ANN_PEER_WAIT_SECONDS] == "3.500"
    # The half step done by t=7 is not lost: the next window finishes it.
    gang.window = (t0 + timedelta(seconds=11), t0 + FOREVER)
    clock.advance(1.5)  # t = 11.5
    lines = w.advance(clock.now())
    assert [(ln.time - t0).total_seconds() for ln in lines if " loss=" in ln.text] == [11.5]


def test_the_stall_line_changes_only_when_its_kind_does() -> None:
    clock = VirtualClock()
    gang, link = ScriptedGang(), FakeLink(resume=0)
    w = workload_for(rank(), gang, link)
    w.start(clock.now())
    for _ in range(3):
        clock.advance(1)
        w.advance(clock.now())
    gang.kind, gang.reason = StallKind.STALE, "peer view stale (last poll 1.6s ago)"
    clock.advance(1)
    assert body(w.advance(clock.now())) == ["stalled: peer view stale (last poll 1.6s ago)"]
    clock.advance(1)
    assert w.advance(clock.now()) == []


def test_rank_zero_records_its_checkpoints_and_logs_the_outcomes() -> None:
    clock = VirtualClock()
    t0 = clock.now()
    links = [FakeLink(resume=0), FakeLink(resume=0)]
    ranks = [workload_for(rank(r), ScriptedGang(), links[r]) for r in (0, 1)]
    for w in ranks:
        w.gang.window = (t0, t0 + FOREVER)  # type: ignore[attr-defined]
        w.start(t0)
    clock.advance(4)
    for w in ranks:
        assert sum("checkpoint step=" in t for t in texts(w.advance(clock.now()))) == 2
    assert [(s, (at - t0).total_seconds()) for s, at in links[0].records] == [(2, 2.0), (4, 4.0)]
    assert links[1].records == []  # only rank 0 writes the record
    links[0].pending_outcomes = [RecordOutcome(2, t0 + timedelta(seconds=2.1)),
                                 RecordOutcome(4, t0 + timedelta(seconds=4.1), "API unreachable (partitioned)")]
    assert body(ranks[0].advance(clock.now())) == [
        "checkpoint record step=2 written",
        "checkpoint record step=4 failed: API unreachable (partitioned)",
    ]


def test_a_fenced_rank_stops_at_once_and_fails_with_reason_fenced() -> None:
    clock = VirtualClock()
    gang, link = ScriptedGang(), FakeLink(resume=0)
    gang.window = (clock.now(), clock.now() + FOREVER)
    w = workload_for(rank(1, world=4, epoch=2), gang, link)
    w.start(clock.now())
    clock.advance(2.5)
    w.advance(clock.now())
    link.fenced = Fence(3, "the Job's epoch is newer")
    clock.advance(10)
    assert body(w.advance(clock.now())) == ["fenced: job restarted at epoch 3; rank 1 of epoch 2 stops"]
    assert w.step == 2  # no step after it learned
    assert w.exit is not None and (w.exit.code, w.exit.reason) == (FENCED_EXIT, "Fenced") and FENCED_EXIT != 0
    assert "the Job's epoch is newer" in w.exit.message
    assert w.advance(clock.now()) == []


def test_a_rank_fenced_before_it_resumed_never_steps() -> None:
    clock = VirtualClock()
    link = FakeLink(resume=None)
    link.fenced = Fence(1, "the Job's epoch is newer")
    w = workload_for(rank(0), ScriptedGang(), link)
    lines = body(w.start(clock.now()))
    assert lines[-1] == "fenced: job restarted at epoch 1; rank 0 of epoch 0 stops" and w.exit is not None


def test_stall_shares_are_accounted_per_step() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEP_SECONDS: "2", ANN_INPUT_STALL_SHARE: "0.25", ANN_COMM_STALL_SHARE: "0.1"}))
    first = texts(w.start(clock.now()))
    assert first[0].endswith("checkpoint_every=10 input_stall_share=0.25 comm_stall_share=0.1")
    clock.advance(9)  # 4 steps of 2 s (the steps still take step-seconds in total)
    w.advance(clock.now())
    assert w.step == 4
    p = w.progress()
    assert (p[ANN_INPUT_STALL_SECONDS], p[ANN_COMM_STALL_SECONDS], p[ANN_PEER_WAIT_SECONDS]) == ("2.000", "0.800", "0.000")


@pytest.mark.parametrize(
    "annotations, message",
    [
        (training(**{ANN_INPUT_STALL_SHARE: "1.5"}), "between 0 and 1"),
        (training(**{ANN_COMM_STALL_SHARE: "-0.1"}), "between 0 and 1"),
        (training(**{ANN_INPUT_STALL_SHARE: "0.7", ANN_COMM_STALL_SHARE: "0.4"}), "exceeds 1"),
        (training(**{ANN_INPUT_STALL_SHARE: "lots"}), "not a number"),
        (rank(2, world=2), "not below"),
        (rank(0, world=0), "below 1"),
    ],
)
def test_bad_rank_and_stall_annotations_are_config_errors(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(WorkloadConfigError, match=message):
        workload_for(annotations)


def test_a_thawed_rank_is_not_credited_with_work_for_the_frozen_time() -> None:
    clock = VirtualClock()
    gang, link = ScriptedGang(), FakeLink(resume=0)
    gang.window = (clock.now(), clock.now() + FOREVER)  # the view says nothing against it
    w = workload_for(rank(), gang, link)
    w.start(clock.now())
    clock.advance(1.5)
    w.advance(clock.now())
    assert w.step == 1
    clock.advance(30)  # SIGSTOP ... SIGCONT
    w.thaw(clock.now())
    assert w.advance(clock.now()) == []
    clock.advance(0.5)  # the half step done before the freeze completes now
    assert [ln.time for ln in w.advance(clock.now()) if " loss=" in ln.text] == [clock.now()]


def test_a_rank_that_resumes_at_steps_total_completes_at_once() -> None:
    clock = VirtualClock()
    w = workload_for(rank(**{ANN_STEPS_TOTAL: "10"}), ScriptedGang(), FakeLink(resume=10))
    lines = body(w.start(clock.now()))
    assert lines[-2:] == ["resumed from checkpoint step=10", "training complete step=10"]
    assert w.exit is not None and w.exit.code == 0


# -- the events a workload reports (the agent records them on the pod) --------------------------


def test_a_rank_reports_resumed_at_its_first_step_beyond_the_checkpoint_and_fenced_when_it_learns() -> None:
    clock = VirtualClock(datetime(2026, 11, 30, 1, 2, 3, 123456, tzinfo=UTC))
    gang, link = ScriptedGang(), FakeLink(resume=None)
    w = workload_for(rank(0, **{ANN_STEP_SECONDS: "0.75"}), gang, link)
    w.start(clock.now())
    clock.advance(1)
    link.resume = 6
    w.advance(clock.now())
    assert w.take_events() == []  # resumed, stalled: not a step yet
    clock.advance(2)
    gang.window = (clock.now(), clock.now() + FOREVER)
    opened = clock.now()
    clock.advance(5)
    w.advance(clock.now())
    first = opened + timedelta(seconds=0.75)
    assert w.take_events() == [
        WorkloadEvent(first, "Normal", "Resumed", "Resumed training at step 7 beyond checkpoint 6")
    ]
    assert w.resumed_at == first and w.take_events() == []  # once, and taken once
    clock.advance(3)
    w.advance(clock.now())
    assert w.take_events() == []
    link.fenced = Fence(1, "the Job's epoch is newer")
    clock.advance(0.4)
    w.advance(clock.now())
    assert w.exit is not None
    assert w.take_events() == [WorkloadEvent(clock.now(), "Warning", "Fenced", w.exit.message)]
    assert not w.killed


def test_a_lone_trainer_reports_resumed_from_zero_and_stop_marks_it_killed() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEP_SECONDS: "0.5"}))
    w.start(clock.now())
    assert w.take_events() == []
    clock.advance(0.2)
    w.advance(clock.now())
    assert w.take_events() == []
    clock.advance(2)
    w.stop(clock.now())  # the catch-up before the SIGTERM completes the steps due
    (resumed,) = w.take_events()
    assert (resumed.at, resumed.message) == (clock.now() - timedelta(seconds=1.7),
                                             "Resumed training at step 1 beyond checkpoint 0")
    assert w.killed and w.exit is not None and w.exit.code == 143


def test_an_idle_workload_reports_nothing() -> None:
    clock = VirtualClock()
    w = workload_for({ANN_RUN_SECONDS: "1"})
    w.start(clock.now())
    clock.advance(2)
    w.advance(clock.now())
    assert w.exit is not None and w.take_events() == [] and not w.killed


# -- the snapshot the accounting reads: progress-at and stepped-seconds ------------------------

from refplatform.agent.workload import ANN_PROGRESS_AT, ANN_STEPPED_SECONDS  # noqa: E402

COUNTERS = (ANN_STEPPED_SECONDS, ANN_INPUT_STALL_SECONDS, ANN_COMM_STALL_SECONDS, ANN_PEER_WAIT_SECONDS)


def snapshot(w) -> tuple[datetime, dict[str, float]]:
    """``(progress-at, counters in seconds)`` as a reader of the pod's annotations sees them."""
    p = w.progress()
    at = datetime.fromisoformat(p[ANN_PROGRESS_AT].replace("Z", "+00:00"))
    return at, {k: float(p[k]) for k in COUNTERS}


def test_two_snapshots_give_active_and_compute_seconds_over_the_wall_time_between_them() -> None:
    t0 = datetime(2026, 11, 30, 1, 2, 3, 123456, tzinfo=UTC)
    clock = VirtualClock(t0)
    gang, link = ScriptedGang(), FakeLink(resume=0)
    gang.window = (t0, t0 + timedelta(seconds=5))  # complete until t=5, then a peer stall until t=9
    ann = {ANN_STEP_SECONDS: "2", ANN_CHECKPOINT_EVERY: "0", ANN_INPUT_STALL_SHARE: "0.25", ANN_COMM_STALL_SHARE: "0.1"}
    w = workload_for(rank(**ann), gang, link)
    w.start(t0)
    # Before the first step: the resume instant, every counter 0.
    assert w.progress()[ANN_PROGRESS_AT] == "2026-11-30T01:02:03.123Z"
    assert snapshot(w)[1] == dict.fromkeys(COUNTERS, 0.0)

    clock.advance(4.5)
    w.advance(clock.now())
    at1, c1 = snapshot(w)
    assert w.progress()[ANN_PROGRESS_AT] == "2026-11-30T01:02:07.123Z"  # step 2 completed at t=4 (milliseconds, Z)
    assert c1 == {ANN_STEPPED_SECONDS: 4.0, ANN_INPUT_STALL_SECONDS: 1.0, ANN_COMM_STALL_SECONDS: 0.4,
                  ANN_PEER_WAIT_SECONDS: 0.0}

    for seconds in (1.5, 2.0, 1.5):  # t = 6, 8 (stalled on peers), 9.5 (complete again from t=9)
        clock.advance(seconds)
        w.advance(clock.now())
        if clock.now() < t0 + timedelta(seconds=9):
            gang.window = (t0 + timedelta(seconds=9), t0 + FOREVER)
    assert w.stalled is None and w.step == 2  # the half step done before the stall is not finished yet
    clock.advance(3.5)  # t = 13: step 3 at t=10 (1 s of work left from before the stall), step 4 at t=12
    lines = w.advance(clock.now())
    at2, c2 = snapshot(w)
    assert at2 == max(ln.time for ln in lines if " loss=" in ln.text).replace(microsecond=123000)
    assert (at2 - at1).total_seconds() == pytest.approx(8.0)

    d = {k: c2[k] - c1[k] for k in COUNTERS}
    active = d[ANN_STEPPED_SECONDS] - d[ANN_INPUT_STALL_SECONDS]
    compute = active - d[ANN_COMM_STALL_SECONDS]
    assert d[ANN_STEPPED_SECONDS] == pytest.approx(4.0)  # two 2 s steps, input and comm stalls included
    assert active == pytest.approx(4.0 * 0.75)
    assert compute == pytest.approx(4.0 * 0.65)
    assert d[ANN_PEER_WAIT_SECONDS] == pytest.approx(4.0)  # t=5..9: no steps, not counted as stepped
    # The wall time between the snapshots is exactly stepped plus peer-wait (no frozen time here).
    assert (at2 - at1).total_seconds() == pytest.approx(d[ANN_STEPPED_SECONDS] + d[ANN_PEER_WAIT_SECONDS])


def test_a_snapshot_holds_exactly_what_was_accrued_by_its_progress_at() -> None:
    t0 = datetime(2026, 11, 30, tzinfo=UTC)
    clock = VirtualClock(t0)
    gang, link = ScriptedGang(), FakeLink(resume=None)
    w = workload_for(rank(**{ANN_STEP_SECONDS: "1", ANN_INPUT_STALL_SHARE: "0.25", ANN_COMM_STALL_SHARE: "0.1"}),
                     gang, link)
    w.start(t0)
    assert snapshot(w) == (t0, dict.fromkeys(COUNTERS, 0.0))  # still reading the resume point: the start
    clock.advance(2)
    link.resume = 30
    w.advance(clock.now())
    assert snapshot(w) == (t0 + timedelta(seconds=2), dict.fromkeys(COUNTERS, 0.0))  # resumed: counters start here
    gang.window = (t0 + timedelta(seconds=3), t0 + FOREVER)  # peers complete from t=3: 1 s of peer wait first
    step_at: dict[int, datetime] = {}
    for _ in range(23):  # observe at t = 2.3, 2.6, ... 8.9: inside steps as well as at their ends
        clock.advance(0.3)
        for ln in w.advance(clock.now()):
            if " loss=" in ln.text:
                step_at[int(ln.text.split("step=")[1].split(" ")[0])] = ln.time
        at, c = snapshot(w)
        done = [s for s, t in step_at.items() if t <= at]
        # Exactly the steps completed by progress-at (the last one completed at it), none after.
        assert done == sorted(step_at) and (not done or step_at[done[-1]] == at)
        n = len(done)
        assert c == {ANN_STEPPED_SECONDS: pytest.approx(n * 1.0), ANN_INPUT_STALL_SECONDS: pytest.approx(n * 0.25),
                     ANN_COMM_STALL_SECONDS: pytest.approx(n * 0.1),
                     ANN_PEER_WAIT_SECONDS: pytest.approx(1.0 if n else 0.0)}
        assert w.progress()[ANN_STEP] == str(30 + n)
    assert len(step_at) == 5  # steps 31..35 at t = 4..8
