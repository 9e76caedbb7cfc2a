"""Effective training time and badput from a recorded canary log whose truth is computed by hand (issue 27,
Done-when 3: within 0.5 percentage points; here exact to the millisecond)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from drills.workloads.canarylog import CanaryLine, parse_line
from drills.workloads.goodput import FaultSpan, goodput

T = 1_800_000_000.0


class Log:
    def __init__(self) -> None:
        self.lines: list[CanaryLine] = []
        self.seq: dict[str, int] = {}

    def add(self, uid: str, at: float, event: str, **fields: object) -> None:
        self.seq[uid] = self.seq.get(uid, 0) + 1
        ts = datetime.fromtimestamp(T + at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        line = parse_line(json.dumps({"seq": self.seq[uid], "ts": ts, "event": event, "rank": 0, **fields}),
                          pod=f"pod-{uid}", uid=uid, node="n", mono=0.0, wall=0.0)
        assert line is not None
        self.lines.append(line)

    def step(self, uid: str, at: float, step: int, wall: float) -> None:
        self.add(uid, at, "step", step=step, input_s=0.0, compute_s=wall, comm_s=0.0, wall_s=wall)


def recorded_run() -> Log:
    """100 s: steps of 1 s; checkpoint 30 written in 0.2 s; a fault at 40.5 s; detected at 43.5, replaced at 45.5;
    the new incarnation resumes from 30 and completes step 31 at 50.5 s, then one step a second to step 80."""
    log = Log()
    for n in range(1, 31):
        log.step("g1", n, n, 1.0)
    log.add("g1", 30.2, "checkpoint", step=30, file="ckpt-30", digest="x")
    log.step("g1", 31.0, 31, 0.8)
    for n in range(32, 41):
        log.step("g1", n, n, 1.0)
    log.add("g2", 49.0, "resumed", from_step=30, checkpoint="ckpt-30", skipped=[])
    for k, n in enumerate(range(31, 81)):
        log.step("g2", 50.5 + k, n, 1.0)
    return log


def test_effective_training_time_and_every_cause_of_badput_match_the_hand_computed_truth() -> None:
    g = goodput(recorded_run().lines, T, T + 100, [FaultSpan("node-kill", T + 40.5, T + 43.5, T + 45.5, T + 50.5)])
    # counted: steps 1-30 (30 s) and the second completions of 31-80 (50 s); 31-40 of the first incarnation were
    # recomputed (0.8 + 9 x 1.0 s); the remaining 1 s is the two half steps cut by the fault and by the window's end
    assert g.percent == pytest.approx(80.0, abs=1e-6)
    assert (g.steps_counted, g.steps_recomputed) == (80, 10)
    b = g.badput
    assert (b.recomputed, b.checkpointing, b.detection, b.rescheduling, b.restart, b.straggler) == pytest.approx(
        (9.8, 0.2, 3.0, 2.0, 4.0, 0.0), abs=1e-6)
    assert b.other == pytest.approx(1.0, abs=1e-6)
    assert g.effective_s + sum(b.as_dict().values()) == pytest.approx(100.0, abs=1e-6)


def test_a_hung_rank_s_wait_for_its_naming_is_badput_hung_not_detection() -> None:
    """The same run, the fault a hung rank: its 3 s from the hang to the platform's naming are the job holding every
    GPU without progress ("hung"), and nothing is left under detection."""
    g = goodput(recorded_run().lines, T, T + 100, [FaultSpan("rank-hang", T + 40.5, T + 43.5, T + 45.5, T + 50.5)])
    b = g.badput
    assert (b.hung, b.detection, b.rescheduling, b.restart) == pytest.approx((3.0, 0.0, 2.0, 4.0), abs=1e-6)
    assert b.as_dict()["hung"] == pytest.approx(3.0) and g.percent == pytest.approx(80.0, abs=1e-6)
    assert g.effective_s + sum(b.as_dict().values()) == pytest.approx(100.0, abs=1e-6)


def test_steps_slowed_by_a_straggler_count_only_their_typical_time() -> None:
    log = Log()
    for n in range(1, 61):
        log.step("g", n if n <= 40 else 40 + 2 * (n - 40), n, 1.0 if n <= 40 else 2.0)  # the last 20 at half speed
    g = goodput(log.lines, T, T + 80)
    assert g.badput.straggler == pytest.approx(20.0)  # 20 steps x (2 s - 1 s typical)
    assert g.percent == pytest.approx(75.0)           # 60 steps of 1 s of progress in 80 s


def test_an_empty_window_has_no_goodput() -> None:
    g = goodput([], T, T)
    assert (g.window_s, g.percent, g.steps_counted) == (0.0, 0.0, 0)
