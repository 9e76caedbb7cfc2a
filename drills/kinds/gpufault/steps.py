"""The GPU fault drill's sentences (docs/STEPS.md, docs/GPU_FAULT.md). The canary job, its checkpoint, detect,
the resume, the total and the steps lost are node pull's sentences: they act on this drill in a scenario that
fails a GPU."""

from __future__ import annotations

from drills.kinds.gpufault.drill import NO_BURN_IN_RECORD, GpuFaultDrill
from drills.records.verdict import Threshold
from drills.scenario.back_in_service import FAULTED
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import Requires, step

GPU_FAILED, REPAIRED = "gpu failed", "gpu repaired"
NEEDS_FAILED = Requires((GPU_FAILED,), "no GPU has failed yet in this scenario",
                        "put 'When the GPU of worker 0 fails with Xid 79' before it")
NEEDS_REPAIR = Requires((REPAIRED,), "the GPU was not repaired before it",
                        "put 'When the GPU is repaired' (or '... but fails its burn-in') before it")


def _gpu_fault(drill: ScenarioContext) -> GpuFaultDrill:
    return drill.drill(GpuFaultDrill)


@step("When", "the GPU of worker {rank:Whole} fails with Xid {xid:Count}",
      "the GPU of worker 0 fails with Xid 79", sets=(FAULTED, GPU_FAILED))
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


@step("When", "the GPU is repaired", "the GPU is repaired", requires=(NEEDS_FAILED,), sets=(REPAIRED,),
      reference_only=NO_BURN_IN_RECORD)
def gpu_repaired(drill: ScenarioContext) -> None:
    """Once the platform has taken the failed GPU out of service, its fault is fixed (a reset, a swap: on the
    reference platform the Xid injection is removed). The platform may return it only after its burn-in (a
    diagnostic and a short collective on the node) passes (docs/HEALING.md, "A GPU's way back")."""
    _gpu_fault(drill).repair()


@step("When", "the GPU is repaired but fails its burn-in", "the GPU is repaired but fails its burn-in",
      requires=(NEEDS_FAILED,), sets=(REPAIRED,), reference_only=NO_BURN_IN_RECORD)
def gpu_repaired_burn_in_fails(drill: ScenarioContext) -> None:
    """As 'the GPU is repaired', but every burn-in of the GPU fails (the reference platform's diagnostic is set
    to fail first): the platform must keep it out until a person clears it."""
    _gpu_fault(drill).repair(burn_in_fails=True)


@step("When", "the GPU fails again with Xid {xid:Count} {delay:Duration} after its return",
      "the GPU fails again with Xid 79 2 seconds after its return", requires=(NEEDS_REPAIR,), sets=(GPU_FAILED,),
      reference_only=NO_BURN_IN_RECORD)
def gpu_fails_again(drill: ScenarioContext, xid: int, delay: float) -> None:
    """Once the repaired GPU is back in service (its allocatable), it fails again that long after: a flapping
    GPU. It must leave service again at once (else FAIL, named); repair it again to see whether it stays out."""
    _gpu_fault(drill).fail_again(xid, delay)


@step("Then", "the GPU returns to service within {limit:Duration} of its burn-in passing",
      "the GPU returns to service within 5 seconds of its burn-in passing", requires=(NEEDS_REPAIR,),
      reference_only=NO_BURN_IN_RECORD)
def gpu_returns_after_burn_in(drill: ScenarioContext, limit: float) -> None:
    """return after its burn-in = t_back - t_passed: the node's allocatable GPUs are whole again within that long
    of the end of a burn-in the platform passed after the repair (its own record), and not before one: a GPU back
    with no passed burn-in before it FAILs, as does one that passed and stays out. Waits up to 30 s after the
    repair for the burn-in."""
    _gpu_fault(drill).judge_return_after_burn_in(limit)


@step("Then", "the GPU stays out of service for {seconds:Duration}", "the GPU stays out of service for 10 seconds",
      requires=(NEEDS_REPAIR,), reference_only=NO_BURN_IN_RECORD)
def gpu_stays_out(drill: ScenarioContext, seconds: float) -> None:
    """For that long after the last repair the node's allocatable GPUs stay short of the failed GPU: a GPU whose
    burn-in failed, or that failed again soon after its return, is kept out until a person clears it. A return
    FAILs, naming the GPU and why it had to stay out."""
    _gpu_fault(drill).judge_stays_out(seconds)


def _phase(drill: ScenarioContext, phase: str, limit: float) -> None:
    run = _gpu_fault(drill)
    run.observe_phase(phase, limit)
    drill.result.check(Threshold(phase, limit, "s"))
    run.end_if_never(phase, limit)
