"""The campaign on a Ray cluster: the node faults of a mix arrive at the canary's Ray Train job
(:class:`~drills.workloads.raytraining.RayTrainingRun`), one at a time, each pulled with the profile's command and
undone with its restore; the effective training time and each recovery are judged by the same code as on
Kubernetes (:class:`~drills.kinds.campaign.drill.CampaignDrill`).

Each fault's instants, on the harness's clock: ``fault`` the command acted and the rank there fell silent (or the
node went DEAD); ``detect`` Ray noticed (the GCS marks the node DEAD, or Ray Train's controller finds its worker gone); ``replace`` every rank of a later worker group logged its
start, off the node; ``resume`` a rank of that group logs a step beyond the step it resumed from.  The job's
``FailureConfig.max_failures`` is the campaign's own (:attr:`CampaignDrill.MAX_RETRY`): the job must outlive every
fault of the schedule.  The mix's GPU faults are skipped and counted, as on any real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from drills.kinds.campaign.drill import NODE_METHODS, CampaignDrill, CampaignFault
from drills.records.verdict import DrillInconclusive
from drills.scenario.drill import ray_side
from drills.workloads.raytraining import RayTrainingRun, later

__all__ = ["RayCampaign"]


@ray_side(CampaignDrill)
@dataclass
class RayCampaign(RayTrainingRun, CampaignDrill):
    """The campaign on a Ray cluster (``target`` is a :class:`drills.target.raytarget.RayTarget`)."""

    victim: str = ""
    """The rank (``<job>.<generation>.<rank>``) on the current fault's node: its silence confirms the fault."""

    def _aim(self, fault: CampaignFault) -> bool:
        """Under the lock: the node ``fault.rank`` said it runs on, the ranks so far (a resumption must come from a
        later worker group) and the group at the fault."""
        assert self.spec is not None
        stepping = self._stepping()
        if len(stepping) < self.spec.min_available:
            fault.skipped = "the job was not training whole at its arrival"
            return False
        generation = self._generation()
        uid = next((u for u in stepping if u.endswith(f".{generation}.{fault.rank}")), None)
        if uid is None or not self.rank_nodes.get(uid):
            fault.skipped = f"worker {fault.rank} was not training at its arrival"
            return False
        fault.node, self.victim = self.rank_nodes[uid], uid
        fault.before = frozenset(self.canary.uids())
        self.generation_at_fault = int(generation)
        return True

    def _inject(self, fault: CampaignFault) -> None:
        why = self._cannot_inject(fault.kind)
        if why or fault.kind not in NODE_METHODS:
            raise DrillInconclusive(why or f"{fault.kind.value} is not a node fault")
        method = self.target.profile.fault.method_for(NODE_METHODS[fault.kind], reference=False)
        with self._cond:
            self.pulled, self.before_fault = fault.node, set(fault.before)
            self.pulled_id, self.noticed_at, self.evicted_at = self._node_id_of(fault.node), None, None
        fault.record = self.target.pull(fault.node, method, self.run_id, NODE_METHODS[fault.kind])
        if not fault.record.confirmed:
            raise DrillInconclusive(f"the {method.value} fault failed: {fault.record.detail}")
        confirmed, why = self._confirm(self.victim, fault.record.acted_at or self.target.timeline.clock.mono())
        if not confirmed:
            raise DrillInconclusive(f"the {method.value} fault on {fault.node} could not be confirmed ({why})")

    def _advance(self) -> None:
        """Under the lock, on every change: the current fault's detect, replace and resume."""
        fault = self.current
        if fault is None or "fault" not in fault.instants or self.spec is None:
            return
        if "detect" not in fault.instants and self.noticed_at is not None:
            fault.instants["detect"] = self.noticed_at
        if "replace" not in fault.instants:
            started = self._restarted()
            if started is not None:
                fault.instants["replace"] = later(started, fault.instants.get("detect") or fault.instants["fault"])
        self._stamp_fault_resume(fault)
