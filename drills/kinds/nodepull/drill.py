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
STARTS = {"detect": "fault", "evict": "detect", "replace": "evict", "resume": "replace", "total": "fault"}
"""The instant each phase is timed from; it ends at the instant of its own name (``total``: at the resume)."""
GRACE_SHARE, GRACE_MIN = 0.25, 1.0
"""Past a phase's threshold the drill waits this share of it (at least GRACE_MIN seconds) more, so that a phase
missed by a little is reported with its value; later than that the promise is broken whatever comes, and the
scenario ends (fail fast: a broken platform ends about as fast as an honest one passes)."""


def grace(limit: float) -> float:
    """Seconds a phase of threshold ``limit`` is waited for past the threshold before it is called never."""
    return max(GRACE_MIN, limit * GRACE_SHARE)


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

    def _grace(self, limit: float) -> float:
        """The grace past a threshold: :func:`grace`, or the run's ``--keep-measuring`` where that is longer."""
        return max(grace(limit), getattr(self.target, "keep_measuring", 0.0) or 0.0)

    def observe_phase(self, phase: str, limit: float) -> None:
        """Wait for ``phase``'s end instant until its threshold plus :func:`grace` past its start instant (the
        start itself waited for as long, should it not have come yet), then record the phase measurements."""
        start, end = STARTS[phase], "resume" if phase == "total" else phase
        allowed = limit + self._grace(limit)
        clock = self.target.timeline.clock

        def over() -> bool:
            began = self.instants.get(start)
            return end in self.instants or (began is not None and clock.mono() >= began.mono + allowed)
        self._wait(over, allowed * 2)
        self.observe_until(phase, 0.0)

    def end_if_never(self, phase: str, limit: float) -> None:
        """Fail fast: when the instant ``phase`` needs never came within its threshold and grace, every later
        phase starts from it and cannot be measured, so the scenario ends here (FAIL, naming the phase that missed
        and those never reached) instead of waiting out each later deadline in turn."""
        needed = "resume" if phase in AFTER_RESUME else phase
        if "fault" not in self.instants or needed in self.instants or needed not in CHAIN:
            return
        later = [*CHAIN[CHAIN.index(needed) + 1:], *AFTER_RESUME]
        since, more = STARTS["total" if phase in AFTER_RESUME else needed], self._grace(limit)
        why = (f"the promise of {limit:g} s and {more:g} s of grace" if phase != "lost steps" else
               f"lost steps are counted at the resume, waited for {limit:g} s and {more:g} s of grace")
        self.result.halt(f"{needed} never came: t_{needed} was not observed within {limit + more:g} s of "
                         f"t_{since} ({why}), so {', '.join(later)} could never be measured; the scenario ends here")
