"""The harness's reading of the canary's log: parsing, dedup, and the questions the drills ask."""

from __future__ import annotations

import json

import pytest

from drills.workloads.canarylog import CanaryEvent, CanaryLog, parse_line

T0 = 1_800_000_000.0


def line(event: str, seq: int, ts: float, *, rank: int = 0, generation: str = "0", **fields: object) -> str:
    stamp = f"2027-01-15T08:00:{ts - T0:09.6f}Z"
    return json.dumps({"seq": seq, "ts": stamp, "event": event, "rank": rank, "world_size": 2,
                       "generation": generation, **fields})


def add(log: CanaryLog, text: str, *, uid: str = "u0", pod: str = "job-worker-0", mono: float = 0.0) -> bool:
    parsed = parse_line(text, pod=pod, uid=uid, node="n0", mono=mono, wall=mono)
    assert parsed is not None, text
    return log.add(parsed)


def test_a_line_parses_with_its_own_instant_and_fields() -> None:
    text = line("step", 7, T0 + 1.5, step=3, input_s=0.01, compute_s=0.1, comm_s=0.0, wall_s=0.11)
    parsed = parse_line(text, pod="p", uid="u", node="n", mono=5.0, wall=6.0)
    assert parsed is not None
    assert parsed.event is CanaryEvent.STEP and parsed.seq == 7 and parsed.step == 3
    assert parsed.ts == pytest.approx(parse_line(line("start", 1, T0 + 1.5), pod="p", uid="u", node="n",
                                                 mono=0, wall=0).ts)  # type: ignore[union-attr]
    assert parsed.number("compute_s") == pytest.approx(0.1)
    assert (parsed.mono, parsed.wall, parsed.node) == (5.0, 6.0, "n")


@pytest.mark.parametrize("text", [
    "Traceback (most recent call last):",
    "",
    "{not json",
    json.dumps({"seq": 1, "ts": "2027-01-15T08:00:00Z", "event": "teleported"}),
    json.dumps({"seq": "1", "ts": "2027-01-15T08:00:00Z", "event": "step"}),
    json.dumps({"seq": 1, "ts": "yesterday", "event": "step"}),
    json.dumps({"ts": "2027-01-15T08:00:00Z", "event": "step"}),
])
def test_anything_else_is_not_a_canary_line(text: str) -> None:
    assert parse_line(text, pod="p", uid="u", node="n", mono=0, wall=0) is None


def test_a_refollowed_log_does_not_count_twice_but_a_new_pod_under_the_same_name_does() -> None:
    log = CanaryLog()
    heard: list[int] = []
    log.listeners.append(lambda ln: heard.append(ln.seq))
    assert add(log, line("step", 5, T0, step=1))
    assert not add(log, line("step", 5, T0, step=1))
    assert add(log, line("step", 5, T0, step=1), uid="u-new")
    assert heard == [5, 5] and len(log.lines) == 2


def fault_story() -> CanaryLog:
    """Two ranks checkpoint every 20 steps; the fault comes at T0+13 after step 30; the job resumes."""
    log = CanaryLog()
    seq = {"a": 0, "b": 0}
    for step in range(1, 31):
        for uid, rank in (("a", 0), ("b", 1)):
            seq[uid] += 1
            add(log, line("step", seq[uid], T0 + step * 0.4, rank=rank, step=step, wall_s=0.4, input_s=0.1,
                          compute_s=0.25, comm_s=0.05), uid=uid, mono=step * 0.4)
        if step == 20:
            seq["a"] += 1
            add(log, line("checkpoint", seq["a"], T0 + step * 0.4 + 0.01, step=20), uid="a", mono=step * 0.4)
    # replacements: rank 0 resumes from 20 and steps on; the harness hears its step 21 at mono 20
    add(log, line("resumed", 3, T0 + 19, generation="1", from_step=20, checkpoint="ckpt-0000000020.json",
                  skipped=[]), uid="c", mono=19.0)
    add(log, line("step", 4, T0 + 19.5, generation="1", step=21, wall_s=0.4), uid="c", mono=20.0)
    return log


def test_the_fault_is_read_from_the_canary_itself() -> None:
    log = fault_story()
    fault = T0 + 12.1  # after step 30 (T0+12.0) was logged
    assert log.last_step_before(fault) == 30
    assert log.last_checkpoint_before(fault) == 20
    assert log.last_checkpoint_before(T0 + 7.0) == 0
    assert log.checkpoints() == {20}
    (r,) = log.resumptions(exclude={"a", "b"})
    assert (r.from_step, r.checkpoint, r.first_step.step, r.first_step.mono) == (20, "ckpt-0000000020.json", 21, 20.0)
    assert log.median_step_seconds(before=fault) == pytest.approx(0.4)


def test_a_rank_that_resumed_but_has_not_stepped_beyond_is_not_a_resumption_yet() -> None:
    log = CanaryLog()
    add(log, line("resumed", 1, T0, from_step=20, checkpoint=None, skipped=["ckpt-0000000040.json"]), uid="c")
    add(log, line("step", 2, T0 + 1, step=20), uid="c")  # not beyond its resume point
    assert log.resumptions(exclude=set()) == []
    add(log, line("step", 3, T0 + 2, step=21), uid="c")
    (r,) = log.resumptions(exclude=set())
    assert r.skipped == ("ckpt-0000000040.json",) and r.checkpoint is None


def test_old_ranks_training_after_a_given_instant_are_found() -> None:
    log = fault_story()
    assert log.trained_after({"a", "b"}, after_mono=20.0) == []
    add(log, line("step", 99, T0 + 21, step=31), uid="b", mono=21.0)
    (late,) = log.trained_after({"a", "b"}, after_mono=20.0)
    assert late.step == 31 and late.uid == "b"


def test_window_totals_are_each_rank_s_own_measurements() -> None:
    log = fault_story()
    totals = log.totals({"a", "b"}, T0 + 4.0, T0 + 8.0)  # steps 10..19 complete in [4.0, 8.0)
    assert totals["a"].steps == 10 and totals["b"].steps == 10
    assert totals["a"].input_s == pytest.approx(1.0) and totals["a"].comm_s == pytest.approx(0.5)
    assert totals["a"].wall_s == pytest.approx(4.0)


def test_stepping_needs_two_steps() -> None:
    log = CanaryLog()
    add(log, line("step", 1, T0, step=1), uid="x")
    assert log.stepping({"x"}) == set()
    add(log, line("step", 2, T0 + 1, step=2), uid="x")
    assert log.stepping({"x", "y"}) == {"x"}


def test_a_preemption_is_rank_0_s_sigterm_checkpoint() -> None:
    log = CanaryLog()
    add(log, line("checkpoint", 1, T0 + 1, step=20, file="ckpt-0000000020.json", digest="d"), mono=1.0)
    add(log, line("exit", 1, T0 + 2, rank=1, code=143, reason="sigterm", step=38), uid="b", mono=2.0)
    assert log.preemption() is None  # another rank stopping says nothing of the step the job keeps
    add(log, line("checkpoint", 2, T0 + 3, step=38, file="ckpt-0000000038.json", digest="e", trigger="sigterm"),
        mono=3.0)
    add(log, line("exit", 3, T0 + 3.1, code=143, reason="sigterm", step=38), mono=3.1)
    stop = log.preemption()
    assert stop is not None and stop.event is CanaryEvent.CHECKPOINT and stop.step == 38


def test_a_preemption_right_after_a_periodic_checkpoint_is_rank_0_s_sigterm_exit() -> None:
    """Rank 0 checkpoints nothing on SIGTERM when its last step is already durable: its exit line says where the
    job stopped (a preemption 1 step in every checkpoint interval once went unseen)."""
    log = CanaryLog()
    add(log, line("checkpoint", 1, T0 + 1, step=40, file="ckpt-0000000040.json", digest="d"), mono=1.0)
    assert log.preemption() is None
    add(log, line("exit", 2, T0 + 1.1, code=143, reason="sigterm", step=40), mono=1.1)
    stop = log.preemption()
    assert stop is not None and stop.event is CanaryEvent.EXIT and stop.step == 40


def test_an_exit_for_another_reason_is_no_preemption() -> None:
    log = CanaryLog()
    add(log, line("exit", 1, T0 + 1, code=1, reason="peer-timeout", step=12), mono=1.0)
    assert log.preemption() is None


def test_a_checkpoint_begun_is_no_checkpoint_until_its_durable_line() -> None:
    log = CanaryLog()
    add(log, line("checkpoint-begin", 1, T0 + 1, step=20, file="ckpt-0000000020.json"), mono=1.0)
    add(log, line("checkpoint-begin", 1, T0 + 1, step=20, file="ckpt-0000000020.json"), uid="other", mono=1.5)
    (begun, _) = log.checkpoint_begins()
    assert begun.event is CanaryEvent.CHECKPOINT_BEGIN and begun.step == 20
    assert begun.fields["file"] == "ckpt-0000000020.json" and begun.mono == 1.0
    assert [ln.uid for ln in log.checkpoint_begins(uids={"other"})] == ["other"]
    assert log.checkpoints() == set() and log.last_checkpoint_before(T0 + 5) == 0
    add(log, line("checkpoint", 2, T0 + 3, step=20, file="ckpt-0000000020.json", digest="d"), mono=3.0)
    assert log.checkpoints() == {20} and len(log.checkpoint_begins()) == 2
