"""The GPU fault drill's sentences (docs/STEPS.md, docs/GPU_FAULT.md). The canary job, its checkpoint, detect,
the resume, the total and the steps lost are node pull's sentences: they act on this drill in a scenario that
fails a GPU."""

from __future__ import annotations

from drills.kinds.gpufault.drill import GpuFaultDrill
from drills.records.verdict import Threshold
from drills.scenario.back_in_service import FAULTED
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import step


def _gpu_fault(drill: ScenarioContext) -> GpuFaultDrill:
    return drill.drill(GpuFaultDrill)


@step("When", "the GPU of worker {rank:Whole} fails with Xid {xid:Count}",
      "the GPU of worker 0 fails with Xid 79", sets=(FAULTED,))
def gpu_fails(drill: ScenarioContext, rank: int, xid: int) -> None:
    """The first GPU of a worker's pod (ranks count from 0) takes an Xid while its node lives: 79 fell off the bus,
    48 double-bit ECC, 95 uncontained ECC, 94 contained ECC, ... take the GPU out of service; 13, 31, 43, 45 and 68
    are the application's errors and leave it in service. On the reference platform the node's agent applies it:
    the processes on that GPU see their next call fail."""
    _gpu_fault(drill).fail_gpu(rank, xid)


@step("Then", "the worker's pod is off the GPU within {limit:Duration}",
      "the worker's pod is off the GPU within 3 seconds")
def pod_off(drill: ScenarioContext, limit: float) -> None:
    """off = t_off - t_fault: no pod that held the GPU at the fault is running any more."""
    _phase(drill, "off", limit)


@step("Then", "the job runs again on healthy GPUs within {limit:Duration} of that",
      "the job runs again on healthy GPUs within 10 seconds of that")
def replaced_on_healthy(drill: ScenarioContext, limit: float) -> None:
    """replace = t_replace - t_off: minMember new pods Running, each of whose canaries named its GPUs, none the
    failed one (after an application Xid the GPU is healthy and may serve again)."""
    _phase(drill, "replace", limit)


@step("Then", "no pod is given the failed GPU while it is out of order",
      "no pod is given the failed GPU while it is out of order")
def never_given(drill: ScenarioContext) -> None:
    """Every canary started after the fault names its GPUs in its start line: none may name the failed one."""
    _gpu_fault(drill).judge_never_given()
    drill.result.check(Threshold("pods given the failed GPU", 0.0, "pods"))


@step("Then", "the GPU stays in service for {limit:Duration}", "the GPU stays in service for 5 seconds")
def stays_in_service(drill: ScenarioContext, limit: float) -> None:
    """For that long after the Xid the node's allocatable GPUs do not drop (an application Xid is the program's
    fault, not the GPU's)."""
    _gpu_fault(drill).watch_in_service(limit)
    drill.result.check(Threshold("GPUs taken out of service", 0.0, "GPUs"))


def _phase(drill: ScenarioContext, phase: str, limit: float) -> None:
    run = _gpu_fault(drill)
    run.observe_phase(phase, limit)
    drill.result.check(Threshold(phase, limit, "s"))
    run.end_if_never(phase, limit)
