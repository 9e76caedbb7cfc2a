"""The blip drill's sentences (docs/STEPS.md, docs/BLIP.md). The canary job and its checkpoint are node pull's
sentences: they act on this drill in a scenario with an outage."""

from __future__ import annotations

from drills.kinds.blip.drill import BlipDrill
from drills.records.verdict import Threshold
from drills.scenario.back_in_service import FAULTED
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import step
from drills.target.profile import FaultMethod


def _blip(drill: ScenarioContext) -> BlipDrill:
    return drill.drill(BlipDrill)


@step("When", "the control plane is unreachable for {seconds:Duration}",
      "the control plane is unreachable for 15 seconds", sets=(FAULTED,))
def control_plane_away(drill: ScenarioContext, seconds: float) -> None:
    """The API server stops (SIGSTOP on the reference platform) for that long, then continues: nodes and
    controllers alike cannot reach it; every node and pod lives on. A real cluster's control plane cannot be
    stopped by the harness: INCONCLUSIVE there."""
    _blip(drill).control_plane_outage(seconds)


@step("When", "{count:Nodes}, the job's among them, lose the control plane for {seconds:Duration}",
      "3 nodes, the job's among them, lose the control plane for 15 seconds", sets=(FAULTED,))
def nodes_cut_off(drill: ScenarioContext, count: int, seconds: float) -> None:
    """That many nodes (those running the job first) are cut off from the control plane at once, their pods
    running on: the reference platform's partition fault; on a real cluster the profile's stand-in for
    partition (fault.stand_ins.partition, with a restore_template that heals it)."""
    _blip(drill).nodes_outage(count, seconds, drill.fault_method(FaultMethod.PARTITION))


@step("Then", "training never pauses for more than {limit:Duration} during the outage",
      "training never pauses for more than 2 seconds during the outage")
def never_pauses(drill: ScenarioContext, limit: float) -> None:
    """Each rank's longest gap between two steps inside the outage (its edges included), by the canary's own step
    times read from its log after the outage."""
    _blip(drill).judge_training(limit)
    drill.result.check(Threshold("longest training pause", limit, "s"))


@step("Then", "no pod of the job is evicted or restarted within {settle:Duration} of the outage's end",
      "no pod of the job is evicted or restarted within 10 seconds of the outage's end")
def undisturbed(drill: ScenarioContext, settle: float) -> None:
    """Until then, every pod of the job at the outage is Running, not deleted, not restarted, and no new pod of the
    job exists (the harness's watch)."""
    _blip(drill).judge_undisturbed(settle)
    drill.result.check(Threshold("job pods evicted or restarted", 0.0, "pods"))


@step("Then", "every write the API server acknowledged survives the outage",
      "every write the API server acknowledged survives the outage")
def writes_survive(drill: ScenarioContext) -> None:
    """A writer created a Lease every 0.1 s from before the outage to after it; each one answered 201 must be
    there."""
    _blip(drill).judge_writes()
    drill.result.check(Threshold("acknowledged writes lost", 0.0, "writes"))


@step("Then", "every node is Ready again within {limit:Duration} of the outage's end",
      "every node is Ready again within 10 seconds of the outage's end")
def ready_again(drill: ScenarioContext, limit: float) -> None:
    """ready = t_ready - t_end: every node Ready before the outage is Ready again, without unreachable/not-ready
    taints."""
    _blip(drill).observe_ready(limit)
    drill.result.check(Threshold("ready", limit, "s"))
