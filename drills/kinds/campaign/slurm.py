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

from drills.kinds.campaign.bynode import NodeCampaign
from drills.kinds.campaign.drill import CampaignDrill
from drills.scenario.drill import slurm_side
from drills.slurm.state import JobState
from drills.workloads.slurmtraining import SlurmTrainingRun
from drills.workloads.training import Instant

__all__ = ["SlurmCampaign"]


@slurm_side(CampaignDrill)
@dataclass
class SlurmCampaign(SlurmTrainingRun, NodeCampaign):
    """The campaign on a Slurm cluster (``target`` is a :class:`drills.target.slurmtarget.SlurmTarget`)."""

    restarts_before: int = 0
    """The job's restart count when the current fault came."""

    def _note_aim(self, generation: str) -> None:
        self.restarts_before = self.job.restarts if self.job is not None else 0

    def _forget_before_pull(self) -> None:
        self.node_down_at = None

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
            fault.stamp("detect", self.node_down_at or now)
        if "replace" not in fault.instants and job.state is JobState.RUNNING and \
                job.restarts > self.restarts_before and fault.node not in job.nodes:
            fault.stamp("replace", now)
        self._stamp_fault_resume(fault)
