"""The GPU fault drill's instants come from the node's allocatable and the canaries' own start lines: detect when
the failed GPU leaves service, replace only when new ranks named GPUs other than the failed one (issue 26)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from drills.kinds.gpufault.drill import FailedGpu, GpuFaultDrill
from drills.kinds.nodepull.drill import NodePullDrill
from drills.records.verdict import DrillResult, Verdict
from drills.scenario.context import ScenarioContext
from drills.target.profile import reference_profile
from drills.workloads.canarylog import parse_line
from drills.workloads.training import Instant, TrainingRun

BAD, GOOD = "GPU-bad", "GPU-good"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_800_000_000.0 + self.t


def drill_with(xid: int = 79) -> GpuFaultDrill:
    clock = Clock()
    target = SimpleNamespace(profile=reference_profile(), embedded=object(),
                             timeline=SimpleNamespace(clock=clock, action=lambda *a, **k: None))
    drill = GpuFaultDrill(target=target, result=DrillResult("gpu-fault"), run_id="r")  # type: ignore[arg-type]
    drill.spec = SimpleNamespace(min_available=2)  # type: ignore[assignment]
    drill.failed = FailedGpu("gpu-node-1", 0, BAD, xid, 0, 8)
    drill.holders, drill.before_fault = {"a"}, {"a", "b"}
    drill.nodes["gpu-node-1"] = node(8)
    drill.instants["fault"] = Instant(clock.mono(), clock.wall())
    return drill


def node(allocatable: int, unhealthy: str = "") -> dict[str, Any]:
    return {"metadata": {"name": "gpu-node-1", "annotations": {"firedrill.dev/unhealthy-gpus": unhealthy}},
            "status": {"allocatable": {"nvidia.com/gpu": str(allocatable)}}}


def pod(uid: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": f"pod-{uid}", "uid": uid}, "spec": {"nodeName": "gpu-node-1"},
            "status": {"phase": phase}}


def started(drill: GpuFaultDrill, uid: str, gpus: list[str]) -> None:
    clock = drill.target.timeline.clock
    line = parse_line(json.dumps({"seq": 1, "ts": "2027-01-15T08:00:00.000000Z", "event": "start", "rank": 0,
                                  "gpus": gpus}), pod=f"pod-{uid}", uid=uid, node="gpu-node-1",
                      mono=clock.mono(), wall=clock.wall())
    assert line is not None
    drill.canary.add(line)


def test_detect_is_the_gpu_leaving_allocatable_and_off_the_holder_gone() -> None:
    drill = drill_with()
    drill.pods = {"a": pod("a"), "b": pod("b")}
    drill._advance()
    assert "detect" not in drill.instants and "off" not in drill.instants
    drill.nodes["gpu-node-1"] = node(7, "0")
    drill.pods["a"] = pod("a", "Failed")
    drill._advance()
    assert {"detect", "off"} <= set(drill.instants)


def test_a_replacement_given_the_failed_gpu_is_no_replacement_and_is_named() -> None:
    drill = drill_with()
    drill.nodes["gpu-node-1"] = node(7, "0")
    drill.pods = {"c": pod("c"), "d": pod("d")}
    drill.target.timeline.clock.t += 1
    started(drill, "c", [BAD, "GPU-1"])
    started(drill, "d", [GOOD])
    drill._advance()
    assert "off" in drill.instants and "replace" not in drill.instants
    drill.judge_never_given()
    assert drill.result.verdict is Verdict.FAIL
    assert ("was given again while it was out of order, to pod-c (its canary named it)"
            in drill.result.findings[0])


def test_a_pod_bound_to_the_failed_gpu_ends_the_scenario_naming_it_though_it_never_starts() -> None:
    drill = drill_with()
    drill.nodes["gpu-node-1"] = node(7, "0")
    bound = pod("c", "Pending")
    bound["metadata"]["annotations"] = {"firedrill.dev/gpu-index": "0,1,2,3"}
    elsewhere = pod("d", "Pending")
    elsewhere["metadata"]["annotations"] = {"firedrill.dev/gpu-index": "4,5,6,7"}
    drill.pods = {"a": pod("a", "Failed"), "d": elsewhere}
    drill._advance()
    assert not drill.result.halted  # a replacement on the node's healthy GPUs is no finding
    drill.pods["c"] = bound
    drill._advance()
    assert drill.result.verdict is Verdict.FAIL and drill.result.halted
    assert drill.result.findings == ["the failed GPU 0 of gpu-node-1 (GPU-bad, Xid 79) was given again while it was "
                                     "out of order, to pod-c (bound to GPUs 0,1,2,3): the platform kept handing it "
                                     "out"]
    drill.judge_never_given()  # said once
    assert len(drill.result.findings) == 1
    assert drill.result.measurements["pods given the failed GPU"].value == 1.0


def test_a_binding_before_the_gpu_left_service_waits_for_detect_which_names_the_first_cause() -> None:
    drill = drill_with()  # allocatable still 8: the platform has not taken the GPU out of service
    bound = pod("c", "Pending")
    bound["metadata"]["annotations"] = {"firedrill.dev/gpu-index": "0,1,2,3"}
    drill.pods = {"a": pod("a", "Failed"), "c": bound}
    drill._advance()
    assert not drill.result.halted and drill.bound_to_failed == {"pod-c": "0,1,2,3"}
    drill.nodes["gpu-node-1"] = node(7, "0")  # it leaves service now: handing it out is the scheduler's fault
    drill._advance()
    assert drill.result.halted and "to pod-c (bound to GPUs 0,1,2,3)" in drill.result.findings[0]


def test_new_ranks_on_healthy_gpus_replace_once_each_has_named_its_gpus() -> None:
    drill = drill_with()
    drill.nodes["gpu-node-1"] = node(7, "0")
    drill.pods = {"c": pod("c"), "d": pod("d")}
    started(drill, "c", [GOOD])
    drill._advance()
    assert "replace" not in drill.instants  # d has not said which GPUs it was given yet
    started(drill, "d", ["GPU-2"])
    drill._advance()
    assert "replace" in drill.instants


def test_after_an_application_xid_the_healthy_gpu_may_serve_the_replacement() -> None:
    drill = drill_with(xid=13)
    drill.pods = {"c": pod("c"), "d": pod("d")}
    started(drill, "c", [BAD])
    started(drill, "d", [GOOD])
    drill._advance()
    assert "replace" in drill.instants and "detect" not in drill.instants


def test_a_gpu_kept_in_service_after_its_xid_is_named_when_detect_never_comes() -> None:
    drill = drill_with()
    drill.target.timeline.clock.t += 10
    drill.end_if_never("detect", 3.0)
    assert drill.result.verdict is Verdict.FAIL and drill.result.halted
    assert "kept the failed GPU 0 of gpu-node-1 in service after Xid 79: allocatable stayed 8 of 8" in \
        drill.result.findings[0]
    assert "so off, replace, resume, total, lost steps could never be measured" in drill.result.halted


def test_the_shared_training_sentences_start_the_drill_the_scenario_is_about() -> None:
    target = SimpleNamespace(profile=reference_profile())
    ctx = ScenarioContext(target, DrillResult("scenario"), kinds=(NodePullDrill, GpuFaultDrill))  # type: ignore[arg-type]
    assert type(ctx.drill_for(TrainingRun, NodePullDrill)) is GpuFaultDrill
    assert type(ScenarioContext(target, DrillResult("s"), kinds=(NodePullDrill,))  # type: ignore[arg-type]
                .drill_for(TrainingRun, NodePullDrill)) is NodePullDrill
