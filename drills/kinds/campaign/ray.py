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

from drills.kinds.campaign.bynode import NodeCampaign
from drills.kinds.campaign.drill import CampaignDrill
from drills.scenario.drill import ray_side
from drills.workloads.raytraining import RayTrainingRun

__all__ = ["RayCampaign"]


@ray_side(CampaignDrill)
@dataclass
class RayCampaign(RayTrainingRun, NodeCampaign):
    """The campaign on a Ray cluster (``target`` is a :class:`drills.target.raytarget.RayTarget`)."""

    def _note_aim(self, generation: str) -> None:
        self.generation_at_fault = int(generation)

    def _forget_before_pull(self) -> None:
        assert self.pulled is not None
        self.pulled_id, self.noticed_at, self.evicted_at = self._node_id_of(self.pulled), None, None

    def _advance(self) -> None:
        """Under the lock, on every change: the current fault's detect, replace and resume."""
        fault = self.current
        if fault is None or "fault" not in fault.instants or self.spec is None:
            return
        if "detect" not in fault.instants and self.noticed_at is not None:
            fault.stamp("detect", self.noticed_at)
        if "replace" not in fault.instants:
            started = self._restarted()
            if started is not None:
                fault.stamp("replace", started)
        self._stamp_fault_resume(fault)
