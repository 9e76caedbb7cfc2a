"""The remediation drill's sentences (docs/STEPS.md, docs/HEALING.md). The canary job and its checkpoint are node
pull's sentences: they act on this drill in a scenario where many nodes report a fault."""

from __future__ import annotations

from drills.kinds.remediation.drill import FLEET_ONLY_REFERENCE, RemediationDrill
from drills.scenario.back_in_service import FAULTED
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import step


def _remediation(drill: ScenarioContext) -> RemediationDrill:
    return drill.drill(RemediationDrill)


@step("When", "{count:Nodes} away from the job report a fatal GPU fault at once",
      "3 nodes away from the job report a fatal GPU fault at once", sets=(FAULTED,),
      reference_only=FLEET_ONLY_REFERENCE)
def fleet_reports_fault(drill: ScenarioContext, count: int) -> None:
    """That many schedulable GPU nodes running no rank of the canary job report the same fatal GPU fault at the
    same moment (a bad driver roll-out, a monitoring bug): on the reference platform each node's agent posts the
    condition GpuFault=True. The reports expire by themselves after two minutes should the run die."""
    _remediation(drill).report_fleet_fault(count)


@step("Then", "the platform quarantines at most {most:Whole} of them",
      "the platform quarantines at most 1 of them")
def quarantines_at_most(drill: ScenarioContext, most: int) -> None:
    """The nodes taken out since the reports (cordoned, or tainted node.kubernetes.io/out-of-service), watched
    until the platform says it stopped acting (and a second more) or 5 s after the reports, and counted again at
    the end of the scenario: more than that many FAILs, naming them."""
    _remediation(drill).judge_at_most(most)


@step("Then", "the platform says it stopped acting within {limit:Duration}",
      "the platform says it stopped acting within 5 seconds")
def says_it_stopped(drill: ScenarioContext, limit: float) -> None:
    """stopped-acting notice = t_halt - t_fault: the platform's own Event (the reference platform's healer:
    RemediationHalted, on each node it leaves alone) says its budget is spent and a person must look."""
    _remediation(drill).judge_halt_notice(limit)


@step("Then", "the job trains on undisturbed for {seconds:Duration}", "the job trains on undisturbed for 10 seconds")
def trains_on_undisturbed(drill: ScenarioContext, seconds: float) -> None:
    """For that long after the reports no pod of the canary job is evicted, deleted, restarted or replaced, and
    its canary logs steps."""
    _remediation(drill).judge_trains_on(seconds)
