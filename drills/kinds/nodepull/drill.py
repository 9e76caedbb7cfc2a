"""The node pull drill: a node dies under a training job; time detect, evict, replace, resume.

Steady state before (a canary job running whole, a checkpoint written) -> act (pull the node hosting one rank,
confirm the fault) -> observe (each phase instant, from the harness's watches and the canary's own log) -> judge
(each phase against its threshold; the resume point; lost steps; split brain) -> rollback (the fault undone,
everything the drill made deleted).  The run itself, and what each instant means, is
:class:`drills.workloads.training.TrainingRun` (on a Slurm cluster :class:`drills.workloads.slurmtraining
.SlurmTrainingRun`, on a Ray cluster :class:`drills.workloads.raytraining.RayTrainingRun`); this kind is that run
as a scenario's drill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from drills.scenario.drill import Drill, ray_side, register, slurm_side
from drills.target.profile import TargetProfile
from drills.target.access import Permission
from drills.workloads.raytraining import RayTrainingRun, ray_storage_problem
from drills.workloads.slurmtraining import SlurmTrainingRun, slurm_storage_problem
from drills.workloads.training import TrainingRun, training_job_problem, training_permissions


@register
@dataclass
class NodePullDrill(TrainingRun, Drill):
    """A node dies under the training job: detect, evict, replace, resume (the chain of :class:`TrainingRun`)."""

    kind: ClassVar[str] = "node-pull"

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return training_job_problem(profile)

    @classmethod
    def unsupported_on_slurm(cls, profile: TargetProfile) -> str | None:
        return slurm_storage_problem(profile)

    @classmethod
    def unsupported_on_ray(cls, profile: TargetProfile) -> str | None:
        return ray_storage_problem(profile)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        return training_permissions(profile, "node pull")  # the fault's own: drills.target.faults


@slurm_side(NodePullDrill)
@dataclass
class SlurmNodePull(SlurmTrainingRun, NodePullDrill):
    """The node pull on a Slurm cluster: the same sentences and judgement, the job a requeueable batch job
    (:class:`SlurmTrainingRun`)."""


@ray_side(NodePullDrill)
@dataclass
class RayNodePull(RayTrainingRun, NodePullDrill):
    """The node pull on a Ray cluster: the same sentences and judgement, the job a Ray Train job that Ray itself
    restarts (:class:`RayTrainingRun`)."""
