"""The blip drill's judgements come from the canaries' own step times and the harness's watch of the job's pods
(issue 26): a pause inside the outage is measured edge to edge, an evicted or replaced rank is named, a node is
Ready again only once its Lease was renewed after the outage."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from drills.kinds.blip.drill import BlipDrill, Outage
from drills.records.verdict import DrillResult, Verdict
from drills.target.profile import reference_profile
from drills.workloads.canarylog import parse_line
from drills.workloads.training import Instant

EPOCH = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return EPOCH + self.t


def drill_with() -> BlipDrill:
    clock = Clock()
    target = SimpleNamespace(profile=reference_profile(),
                             timeline=SimpleNamespace(clock=clock, action=lambda *a, **k: None))
    drill = BlipDrill(target=target, result=DrillResult("blip"), run_id="r")  # type: ignore[arg-type]
    drill.outage = Outage("nodes", 10.0, ("gpu-node-0",))
    drill.before_fault = {"a", "b"}
    drill.restarts_before = {"a": 0, "b": 0}
    drill.pods = {"a": pod("a"), "b": pod("b")}
    drill.instants["fault"] = Instant(clock.mono(), clock.wall())
    drill.instants["end"] = Instant(clock.mono() + 10, clock.wall() + 10)
    return drill


def pod(uid: str, phase: str = "Running", restarts: int = 0, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"pod-{uid}", "uid": uid, **meta}, "spec": {"nodeName": "gpu-node-0"},
            "status": {"phase": phase, "containerStatuses": [{"restartCount": restarts}]}}


def steps(drill: BlipDrill, uid: str, rank: int, at: list[float]) -> None:
    """Step lines of one rank at ``at`` seconds after the fault (the canary's own ts)."""
    for i, t in enumerate(at, start=1):
        ts = datetime.fromtimestamp(drill.instants["fault"].wall + t, timezone.utc)
        line = parse_line(json.dumps({"seq": i, "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "event": "step",
                                      "rank": rank, "step": i}), pod=f"pod-{uid}", uid=uid, node="gpu-node-0",
                          mono=0.0, wall=0.0)
        assert line is not None
        drill.canary.add(line)


def every(start: float, stop: float, dt: float) -> list[float]:
    return [round(start + k * dt, 3) for k in range(int((stop - start) / dt) + 1)]


def test_training_through_the_outage_passes_and_the_longest_gap_is_measured_edge_to_edge() -> None:
    drill = drill_with()
    steps(drill, "a", 0, every(-1.0, 11.0, 0.1))
    steps(drill, "b", 1, every(-1.0, 11.0, 0.1))
    drill.judge_training(2.0)
    pause = drill.result.measurements["longest training pause"].value
    assert pause is not None and 0.09 <= pause <= 0.11
    assert drill.result.verdict is not Verdict.FAIL
    assert drill.result.measurements["steps during the outage"].value == 101


def test_a_rank_that_stops_inside_the_outage_is_a_pause_named_with_its_rank() -> None:
    drill = drill_with()
    steps(drill, "a", 0, every(-1.0, 11.0, 0.1))
    steps(drill, "b", 1, [*every(-1.0, 3.0, 0.1), *every(8.0, 11.0, 0.1)])  # stalled 3 s to 8 s
    drill.judge_training(2.0)
    assert drill.result.verdict is Verdict.FAIL
    assert drill.result.measurements["longest training pause"].value is not None
    assert "rank 1 (pod-b) logged no step from 3.00 s to 8.00 s" in drill.result.findings[0]


def test_an_evicted_restarted_or_replaced_rank_is_named() -> None:
    drill = drill_with()
    assert drill._disturbed().found == []
    drill.pods = {"a": pod("a", deletionTimestamp="2027-01-01T00:00:00Z"), "b": pod("b", restarts=1),
                  "c": pod("c")}
    disturbed = drill._disturbed()
    assert disturbed.found == ["pod-a was evicted (deletionTimestamp set)", "pod-b restarted (1 restarts, 0 before)",
                               "new pod(s) pod-c replaced the job's ranks"]
    assert disturbed.pods == 2  # pod-c is pod-a's rank again, not a third pod disturbed


def test_a_replacement_alone_counts_as_the_pods_it_brought() -> None:
    drill = drill_with()
    drill.pods = {**drill.pods, "c": pod("c")}  # the job's pods at the fault untouched, one more beside them
    disturbed = drill._disturbed()
    assert disturbed.pods == 1 and disturbed.found == ["new pod(s) pod-c replaced the job's ranks"]


def test_a_node_is_ready_again_only_after_a_lease_renewal_since_the_end() -> None:
    drill = drill_with()
    drill.ready_before = {"gpu-node-0"}
    drill.nodes["gpu-node-0"] = {"metadata": {"name": "gpu-node-0"}, "spec": {},
                                 "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    drill.renewed["gpu-node-0"] = drill.instants["end"].wall - 5  # the node object seen before the outage
    drill._advance()
    assert "ready" not in drill.instants
    drill.renewed["gpu-node-0"] = drill.instants["end"].wall + 0.5
    drill._advance()
    assert "ready" in drill.instants
