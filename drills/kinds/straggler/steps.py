"""The straggler drill's sentences (docs/STEPS.md, docs/STRAGGLER.md). The canary job and its checkpoint are node
pull's sentences: they act on this drill in a scenario that slows a GPU."""

from __future__ import annotations

from drills.kinds.straggler.drill import RECOVERED_AFTER_NAMING, StragglerDrill
from drills.records.verdict import Threshold
from drills.scenario.back_in_service import FAULTED
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import parse_percent, placeholder, step


placeholder("Percent", parse_percent, doc=(
    "- `<speed>` and `<tolerance>`: a percentage above 0 % and below 100 % (`25 %`, `12.5%`);",))


def _straggler(drill: ScenarioContext) -> StragglerDrill:
    return drill.drill(StragglerDrill)


@step("When", "the GPU of worker {rank:Whole} slows to {speed:Percent} of its speed",
      "the GPU of worker 0 slows to 25 % of its speed", sets=(FAULTED,))
def gpu_slows(drill: ScenarioContext, rank: int, speed: float) -> None:
    """The first GPU of a worker's pod (ranks count from 0) runs at that fraction of its speed, as a GPU held down
    by thermal or power capping does: nothing fails, every step of the synchronous job waits for that rank. On the
    reference platform the node's agent applies it as the GPU's clock (docs/STRAGGLER.md)."""
    _straggler(drill).slow_gpu(rank, speed)


@step("When", "every worker waits {delay:Duration} longer for its input each step",
      "every worker waits 300 ms longer for its input each step", sets=(FAULTED,))
def input_slows(drill: ScenarioContext, delay: float) -> None:
    """Every rank's input pipeline slows alike (an input-bound job): the job runs slower, no GPU is at fault."""
    _straggler(drill).slow_input(delay)


@step("Then", "the platform names the slow node within {limit:Duration}",
      "the platform names the slow node within 20 seconds")
def named(drill: ScenarioContext, limit: float) -> None:
    """named = t_named - t_fault: the slow GPU's node carries the platform's naming (the reference platform's
    ``firedrill.dev/straggler`` taint or a ``StragglerDetected`` Event on the Node); naming any other node FAILs."""
    run = _straggler(drill)
    run.observe_phase("named", limit)
    drill.result.check(Threshold("named", limit, "s"))
    run.judge_only_the_slow_node()
    run.end_if_never("named", limit)


@step("Then", "the job's step time is back within {tolerance:Percent} of its pre-fault median "
              "within {limit:Duration} of the fault",
      "the job's step time is back within 20 % of its pre-fault median within 60 seconds of the fault")
def recovered(drill: ScenarioContext, tolerance: float, limit: float) -> None:
    """recovered = t_recovered - t_fault: after the slowdown showed, the median of the job's last 5 steps (each the
    slowest rank's ``wall_s``, from the canaries' own lines) is back within the tolerance of the median before."""
    run = _straggler(drill)
    run.observe_recovery(tolerance, limit)
    drill.result.check(Threshold("recovered", limit, "s"))
    run.judge_only_the_slow_node()


@step("Then", "the job's step time is back within {tolerance:Percent} of its pre-fault median "
              "within {limit:Duration} of the naming",
      "the job's step time is back within 20 % of its pre-fault median within 10 seconds of the naming")
def recovered_after_naming(drill: ScenarioContext, tolerance: float, limit: float) -> None:
    """recovered after naming = t_recovered - t_named: the same recovery, timed from the instant the platform named
    the slow node. A platform that names the node but never acts on it (no eviction, or one that never takes
    effect) FAILs here, within this window and its grace, naming what became of the slow rank's pod, instead of
    when the window from the fault runs out; the scenario ends there."""
    run = _straggler(drill)
    run.observe_recovery(tolerance, limit, since="named")
    drill.result.check(Threshold(RECOVERED_AFTER_NAMING, limit, "s"))
    run.judge_only_the_slow_node()


@step("Then", "no node is named for {limit:Duration}", "no node is named for 20 seconds")
def none_named(drill: ScenarioContext, limit: float) -> None:
    """For that long after the fault the platform names no node: every rank slowed alike, so no node is at fault,
    and a detector that accuses one moves healthy work."""
    _straggler(drill).watch_none_named(limit)
    drill.result.check(Threshold("healthy nodes named", 0.0, "nodes"))
