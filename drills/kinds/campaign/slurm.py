"""The campaign on a Slurm cluster: the node faults of a mix arrive at the canary job (a batch job,
:class:`~drills.workloads.slurmtraining.SlurmTrainingRun`), one at a time, each pulled with the profile's command
and undone with its restore; the effective training time and each recovery are judged by the same code as on
Kubernetes (:class:`~drills.kinds.campaign.drill.CampaignDrill`).

Each fault's instants, on the harness's clock: ``fault`` the command acted and the rank there fell silent (or the
node showed down); ``detect`` the node shows ``NOT_RESPONDING`` or ``DOWN``; ``replace`` the job runs again (a later
restart than at the fault) off the node; ``resume`` a rank of that run logs a step beyond the step it resumed
from.  The mix's GPU faults are skipped and counted, as on any real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from drills.kinds.campaign.drill import NODE_METHODS, CampaignDrill, CampaignFault
from drills.records.verdict import DrillInconclusive
from drills.scenario.drill import slurm_side
from drills.slurm.state import JobState
from drills.workloads.slurmtraining import SlurmTrainingRun
from drills.workloads.training import Instant

__all__ = ["SlurmCampaign"]


@slurm_side(CampaignDrill)
@dataclass
class SlurmCampaign(SlurmTrainingRun, CampaignDrill):
    """The campaign on a Slurm cluster (``target`` is a :class:`drills.target.slurmtarget.SlurmTarget`)."""

    restarts_before: int = 0
    """The job's restart count when the current fault came."""
    victim: str = ""
    """The rank (``<job>.<generation>.<rank>``) on the current fault's node: its silence confirms the fault."""

    def _aim(self, fault: CampaignFault) -> bool:
        """Under the lock: the node ``fault.rank`` said it runs on, the ranks so far (a resumption must come from a
        later run of the job) and the job's restarts at the fault."""
        assert self.spec is not None
        stepping = self._stepping()
        if len(stepping) < self.spec.min_available:
            fault.skipped = "the job was not training whole at its arrival"
            return False
        uid = next((u for u in stepping if u.endswith(f".{self._generation()}.{fault.rank}")), None)
        if uid is None or not self.rank_nodes.get(uid):
            fault.skipped = f"worker {fault.rank} was not training at its arrival"
            return False
        fault.node, self.victim = self.rank_nodes[uid], uid
        fault.before = frozenset(self.canary.uids())
        self.restarts_before = self.job.restarts if self.job is not None else 0
        return True

    def _inject(self, fault: CampaignFault) -> None:
        why = self._cannot_inject(fault.kind)
        if why or fault.kind not in NODE_METHODS:
            raise DrillInconclusive(why or f"{fault.kind.value} is not a node fault")
        method = self.target.profile.fault.method_for(NODE_METHODS[fault.kind], reference=False)
        with self._cond:
            self.pulled, self.node_down_at, self.before_fault = fault.node, None, set(fault.before)
        fault.record = self.target.pull(fault.node, method, self.run_id, NODE_METHODS[fault.kind])
        if not fault.record.confirmed:
            raise DrillInconclusive(f"the {method.value} fault failed: {fault.record.detail}")
        confirmed, why = self._confirm(self.victim, fault.record.acted_at or self.target.timeline.clock.mono())
        if not confirmed:
            raise DrillInconclusive(f"the {method.value} fault on {fault.node} could not be confirmed ({why})")

    def _advance(self) -> None:
        """Under the lock, on every change: the current fault's detect, replace and resume."""
        fault = self.current
        job = self.job
        if fault is None or "fault" not in fault.instants or self.spec is None or job is None:
            return
        clock = self.target.timeline.clock
        now = Instant(clock.mono(), clock.wall())
        node = self.cluster.get(fault.node)
        if "detect" not in fault.instants and (self.node_down_at is not None or (node is not None and node.down)):
            fault.instants["detect"] = self.node_down_at or now
        if "replace" not in fault.instants and job.state is JobState.RUNNING and \
                job.restarts > self.restarts_before and fault.node not in job.nodes:
            fault.instants["replace"] = now
        self._stamp_fault_resume(fault)
