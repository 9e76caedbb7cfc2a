"""What the campaign does alike on a Slurm and on a Ray cluster: each node fault of the mix is aimed at the node a
rank of the canary says it runs on, pulled with the profile's command (written in the run's journal first), and
confirmed by that rank falling silent.  Each cluster's side says only what it notes at the fault and forgets
before the pull (:meth:`NodeCampaign._note_aim`, :meth:`NodeCampaign._forget_before_pull`)."""

from __future__ import annotations

from dataclasses import dataclass

from drills.kinds.campaign.drill import NODE_METHODS, CampaignDrill, CampaignFault
from drills.records.verdict import DrillInconclusive

__all__ = ["NodeCampaign"]


@dataclass
class NodeCampaign(CampaignDrill):
    """The campaign's aim and injection where a node is pulled with the site's own command (Slurm, Ray)."""

    victim: str = ""
    """The rank (``<job>.<generation>.<rank>``) on the current fault's node: its silence confirms the fault."""

    def _note_aim(self, generation: str) -> None:
        """Under the lock: what the cluster's side keeps of the job at the fault (``generation``: its current run)."""

    def _forget_before_pull(self) -> None:
        """Under the lock: what the cluster's side saw of the last fault, cleared before the next pull."""

    def _aim(self, fault: CampaignFault) -> bool:
        """Under the lock: the node ``fault.rank`` said it runs on, and the ranks so far (a resumption must come from
        a later run of the job)."""
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
        self._note_aim(generation)
        return True

    def _inject(self, fault: CampaignFault) -> None:
        why = self._cannot_inject(fault.kind)
        if why or fault.kind not in NODE_METHODS:
            raise DrillInconclusive(why or f"{fault.kind.value} is not a node fault")
        method = self.target.profile.fault.method_for(NODE_METHODS[fault.kind], reference=False)
        with self._cond:
            self.pulled, self.before_fault = fault.node, set(fault.before)
            self._forget_before_pull()
        fault.record = self.target.pull(fault.node, method, self.run_id, NODE_METHODS[fault.kind])
        if not fault.record.confirmed:
            raise DrillInconclusive(f"the {method.value} fault failed: {fault.record.detail}")
        confirmed, why = self._confirm(self.victim, fault.record.acted_at or self.target.timeline.clock.mono())
        if not confirmed:
            raise DrillInconclusive(f"the {method.value} fault on {fault.node} could not be confirmed ({why})")
