"""The straggler drill's numbers come from the canaries' own step lines: the job's step is its slowest rank's, the
waiting is every rank's time in the all-reduce for the slowest; a node is named by the platform's taint or Event,
and naming any node but the slow GPU's is an accusation (issue 26)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from drills.kinds.straggler.drill import NAMING_TAINT, Slowdown, StragglerDrill
from drills.kinds.straggler.timing import job_steps, median_step, rolling_median, waiting_gpu_seconds
from drills.records.verdict import DrillResult, Verdict
from drills.target.profile import reference_profile
from drills.workloads.canarylog import CanaryLine, parse_line
from drills.workloads.training import Instant


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_800_000_000.0 + self.t


def step(rank: int, n: int, mono: float, compute: float, wall: float, gen: str = "g0", inp: float = 0.0,
         seq: int = 0) -> CanaryLine:
    line = parse_line(json.dumps({"seq": seq or n * 10 + rank, "ts": "2027-01-15T08:00:00.000000Z", "event": "step",
                                  "rank": rank, "generation": gen, "step": n, "input_s": inp, "compute_s": compute,
                                  "comm_s": wall - compute - inp, "wall_s": wall}),
                      pod=f"pod-{gen}-{rank}", uid=f"{gen}-{rank}", node=f"node-{rank}", mono=mono, wall=mono)
    assert line is not None
    return line


def test_the_jobs_step_is_its_slowest_ranks_and_incomplete_steps_are_left_out() -> None:
    lines = [step(0, 1, 1.0, 0.4, 0.41), step(1, 1, 1.01, 0.1, 0.41), step(0, 2, 1.4, 0.4, 0.4)]
    (only,) = job_steps(lines, 2)
    assert (only.step, only.mono, only.wall_s, only.busy) == (1, 1.01, 0.41, {0: 0.4, 1: 0.1})
    assert waiting_gpu_seconds([only], 4) == (0.4 - 0.1) * 4


def test_generations_are_apart_and_the_rolling_median_follows_completion() -> None:
    lines = [step(r, n, n + r * 0.01, 0.1, w) for n, w in enumerate([0.1, 0.1, 0.4, 0.4, 0.4], 1) for r in (0, 1)]
    lines += [step(r, 3, 10 + n, 0.1, 0.1, gen="g1") for n in range(1) for r in (0, 1)]  # restarted from 2
    steps = job_steps(lines, 2)
    assert [(s.generation, s.step) for s in steps][-1] == ("g1", 3)
    assert median_step(steps) == 0.25
    assert [round(m, 2) for _, m in rolling_median(steps, 3)] == [0.1, 0.4, 0.4, 0.4]


def drill_with(uniform: bool = False) -> StragglerDrill:
    clock = Clock()
    target = SimpleNamespace(profile=reference_profile(),
                             timeline=SimpleNamespace(clock=clock, action=lambda *a, **k: None))
    drill = StragglerDrill(target=target, result=DrillResult("straggler"), run_id="r")  # type: ignore[arg-type]
    drill.spec = SimpleNamespace(workers=2, gpus_per_worker=4, min_available=2)  # type: ignore[assignment]
    drill.slowdown = (Slowdown(("node-0", "node-1"), input_delay_s=0.3) if uniform
                      else Slowdown(("node-0",), 0, 0, "GPU-a", 0.25))
    drill.before_step_s = 0.1
    drill.instants["fault"] = Instant(clock.mono(), clock.wall())
    return drill


def tainted(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"taints": [{"key": NAMING_TAINT, "effect": "NoSchedule"}]}}


def test_the_slow_node_named_by_its_taint_stamps_named_and_passes() -> None:
    drill = drill_with()
    drill.target.timeline.clock.t += 4.0
    drill.nodes["node-0"] = tainted("node-0")
    drill._advance()
    assert drill.instants["named"].mono == 104.0 and drill.named_nodes == {"node-0": 4.0}
    drill.judge_only_the_slow_node()
    assert drill.result.verdict is Verdict.PASS


def test_an_event_on_a_healthy_node_is_an_accusation() -> None:
    drill = drill_with()
    drill.events.append({"reason": "StragglerDetected", "involvedObject": {"kind": "Node", "name": "node-1"}})
    drill._advance()
    drill.judge_only_the_slow_node()
    assert "named" not in drill.instants and drill.result.verdict is Verdict.FAIL
    assert "accused healthy node(s) node-1 (0.0 s after the fault)" in drill.result.findings[0]
    assert "only GPU 0 of node-0 was slow" in drill.result.findings[0]


def test_a_taint_there_before_the_fault_names_nobody() -> None:
    drill = drill_with(uniform=True)
    drill._tainted_before = {"node-1"}
    drill.nodes["node-1"] = tainted("node-1")
    drill._advance()
    assert drill.named_nodes == {}


def test_the_slowdown_and_the_recovery_come_from_the_canaries() -> None:
    drill = drill_with()
    walls = [0.1, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.1, 0.1, 0.1, 0.1, 0.1]
    for n, wall in enumerate(walls, 1):
        for r in (0, 1):
            drill.canary.add(step(r, n, 100.0 + n, wall if r == 0 else 0.1, wall))
    drill._advance()
    assert drill.instants["slow"].mono == 105.0  # the 5th step's rolling median of 5 is the first beyond 20 %
    assert drill._recovered_at(0.2) == 110.0



def test_a_real_cluster_is_inconclusive_naming_what_is_missing() -> None:
    why = StragglerDrill.unsupported(reference_profile(), reference=False)
    assert why is not None and "fault.throttle" in why and "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" in why
    assert StragglerDrill.unsupported(reference_profile(), reference=True) is None


def test_a_slowdown_that_never_shows_is_inconclusive_not_a_pass() -> None:
    drill = drill_with()
    for n in range(1, 8):
        for r in (0, 1):
            drill.canary.add(step(r, n, 100.0 + n, 0.1, 0.1))
    drill._advance()
    drill._measure()
    assert drill.result.verdict is Verdict.INCONCLUSIVE
    assert "the slowdown never showed in the canaries' step times" in drill.result.findings[0]
