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


@step("Given", "{count:Whole} single-GPU pods run on a node away from the job",
      "4 single-GPU pods run on a node away from the job", reference_only=FLEET_ONLY_REFERENCE)
def single_gpu_pods_away(drill: ScenarioContext, count: int) -> None:
    """That many pods of one GPU each (the training canary alone, one rank) pinned to one schedulable node that
    runs no rank of the canary job and has that many GPUs free; the scenario starts once each is Running."""
    _remediation(drill).place_bystanders(count)


@step("When", "that node reports a fatal GPU fault that clears after its first eviction",
      "that node reports a fatal GPU fault that clears after its first eviction", sets=(FAULTED,),
      reference_only=FLEET_ONLY_REFERENCE)
def fault_clears_halfway(drill: ScenarioContext) -> None:
    """The node of the single-GPU pods reports a fatal GPU fault; as soon as the harness sees the platform evict
    the first of them (its deletion stamped), the report is removed: t_clear. A platform that evicts none within
    10 s leaves nothing to judge: INCONCLUSIVE."""
    _remediation(drill).report_clearing_fault()


@step("Then", "the platform stops draining it within {limit:Duration} of the fault clearing",
      "the platform stops draining it within 2 seconds of the fault clearing")
def drain_stops(drill: ScenarioContext, limit: float) -> None:
    """drain stop = the last eviction of the node's pods after t_clear. An eviction later than the limit, or the node
    tainted node.kubernetes.io/out-of-service after t_clear (its remediation carried out anyway), FAILs, naming the
    pods and when; watched until the limit and a second more."""
    _remediation(drill).judge_drain_stops(limit)


@step("Then", "at least {count:Whole} of its pods run on undisturbed", "at least 2 of its pods run on undisturbed")
def pods_spared(drill: ScenarioContext, count: int) -> None:
    """pods spared = the single-GPU pods the drill made that were never evicted and still run."""
    _remediation(drill).judge_spared(count)


@step("Then", "the node is schedulable again within {limit:Duration} of the fault clearing",
      "the node is schedulable again within 3 seconds of the fault clearing")
def schedulable_again(drill: ScenarioContext, limit: float) -> None:
    """schedulable again = the first instant after t_clear the node is neither cordoned nor tainted
    node.kubernetes.io/out-of-service (the harness's node watch)."""
    _remediation(drill).judge_schedulable_again(limit)
