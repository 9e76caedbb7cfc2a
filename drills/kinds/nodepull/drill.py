"""The node pull drill: a node dies under a training job; time detect, evict, replace, resume.

Steady state before (a canary job running whole, a checkpoint written) -> act (pull the node hosting one rank,
confirm the fault) -> observe (each phase instant, from the harness's watches and the canary's own log) -> judge
(each phase against its threshold; the resume point; lost steps; split brain) -> rollback (the fault undone,
everything the drill made deleted).  The run itself, and what each instant means, is
:class:`drills.workloads.training.TrainingRun`; this kind is that run as a scenario's drill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from drills.scenario.drill import Drill, register
from drills.target.profile import TargetProfile
from drills.target.access import Permission
from drills.workloads.training import TrainingRun, training_job_problem, training_permissions

CHAIN = ("detect", "evict", "replace", "resume")
"""The phases in order: each starts at the instant the one before it ends."""
AFTER_RESUME = ("total", "lost steps")
"""What is measured from the resume."""


@register
@dataclass
class NodePullDrill(TrainingRun, Drill):
    kind: ClassVar[str] = "node-pull"

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return training_job_problem(profile)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        return training_permissions(profile, "node pull")  # the fault's own: drills.target.faults

    def end_if_never(self, phase: str, waited: float) -> None:
        """Fail fast: when the instant ``phase`` needs never came within ``waited`` seconds, every later phase
        starts from it and cannot be measured, so the scenario ends here (FAIL, naming the phase that missed and
        those never reached) instead of waiting out each later deadline in turn."""
        needed = "resume" if phase in AFTER_RESUME else phase
        if "fault" not in self.instants or needed in self.instants or needed not in CHAIN:
            return
        later = [*CHAIN[CHAIN.index(needed) + 1:], *AFTER_RESUME]
        self.result.halt(f"{needed} never came: t_{needed} was not observed within {waited:g} s, so "
                         f"{', '.join(later)} could never be measured; the scenario ends here")
