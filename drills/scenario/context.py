"""What one scenario carries from step to step: the target, the run id, the drills it started, the result."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import TypeVar

from drills.records.verdict import DrillInconclusive, DrillResult
from drills.scenario.drill import KINDS, Drill
from drills.scenario.guard import AbortGuard
from drills.scenario.raywatch import RayInvariantWatch
from drills.scenario.slurmwatch import SlurmInvariantWatch
from drills.scenario.watch import InvariantWatch
from drills.target.connect import Target
from drills.target.profile import FaultMethod, FaultUnavailable

log = logging.getLogger(__name__)
D = TypeVar("D", bound=Drill)
T = TypeVar("T")


def new_run_id() -> str:
    """Short, DNS-safe and unique enough to label everything one scenario creates."""
    return "fd" + secrets.token_hex(3)


@dataclass
class ScenarioContext:
    target: Target
    result: DrillResult
    run_id: str = field(default_factory=new_run_id)
    drills: list[Drill] = field(default_factory=list)
    """The drills this scenario started, oldest first (most scenarios start one)."""
    invariants: InvariantWatch | SlurmInvariantWatch | RayInvariantWatch | None = None
    """What must hold in every scenario, watched from :meth:`watch_invariants` until the verdict."""
    guard: AbortGuard | None = None
    """The profile's abort conditions, watched with the invariants (:mod:`drills.scenario.guard`)."""
    kinds: tuple[type[Drill], ...] = ()
    """The drill kinds the scenario's sentences drive (:func:`drills.scenario.needs.needs_of`), set before its
    first step: a sentence two kinds share starts the drill of the kind the scenario is about
    (:meth:`drill_for`)."""

    def watch_invariants(self) -> InvariantWatch | SlurmInvariantWatch | RayInvariantWatch:
        """Start watching the invariants of this scenario's pods (docs/INVARIANTS.md), and the profile's abort
        conditions (docs/SAFETY.md; the scenario's blast radius starts empty)."""
        if self.invariants is None:
            self.target.touched.clear()
            self.target.note_service()
            if self.target.profile.on_slurm:  # a Slurm profile names no abort conditions (docs/SLURM.md)
                self.invariants = SlurmInvariantWatch(self.target, self.result, self.run_id).start()
            elif self.target.profile.on_ray:  # nor does a Ray profile (docs/RAY.md)
                self.invariants = RayInvariantWatch(self.target, self.result, self.run_id).start()
            else:
                self.guard = AbortGuard(self.target, self.result, lambda: set(self.target.touched)).start()
                self.invariants = InvariantWatch(self.target, self.result, self.run_id).start()
        return self.invariants

    def stop_invariants(self) -> None:
        """Stop watching the invariants (before the verdict is delivered, and before any rollback)."""
        if self.invariants is not None:
            self.invariants.stop()

    def drill(self, kind: type[D]) -> D:
        """The scenario's drill of this kind, started on first use; the result then takes the kind's name."""
        for running in self.drills:
            if type(running) is kind or type(running) is kind.on_target(self.target):
                return running  # type: ignore[return-value]
        if KINDS.get(kind.kind) is not kind:
            raise TypeError(f"{kind.__qualname__} is not a registered drill kind (decorate it with "
                            "drills.scenario.drill.register)")
        started = kind.on_target(self.target)(self.target, self.result, self.run_id)  # type: ignore[arg-type]
        self.result.drill = kind.kind
        self.drills.append(started)
        return started

    def drill_for(self, base: type[T], default: type[D]) -> D:
        """A sentence several kinds share (a canary training job, its checkpoint, the resume): the scenario's drill
        of the kind among its sentences' kinds that is a ``base`` other than ``default`` (the GPU fault drill for a
        scenario that fails a GPU), else of ``default`` (node pull)."""
        for running in self.drills:
            if isinstance(running, base):
                return running  # type: ignore[return-value]
        chosen = next((k for k in self.kinds if issubclass(k, base) and k is not default), default)
        return self.drill(chosen)  # type: ignore[arg-type,return-value]

    def fault_method(self, named: FaultMethod | None) -> FaultMethod:
        """The method that injects the fault a sentence names (None: "the configured fault method") on this
        target; a fault the target cannot inject makes the scenario INCONCLUSIVE, saying how to map it."""
        try:
            return self.target.profile.fault.method_for(named, reference=self.target.embedded is not None)
        except FaultUnavailable as exc:
            raise DrillInconclusive(str(exc)) from None

    def running_as(self, protocol: type[T], missing: str) -> T:
        """The newest drill of this scenario that is a ``protocol`` (a sentence shared by several kinds acts on
        it); none: ValueError with ``missing``, which says which sentence starts one."""
        for running in reversed(self.drills):
            if isinstance(running, protocol):
                return running
        raise ValueError(missing)

    def rollback(self) -> None:
        """Every exit path ends here: undo faults, delete what the drills made (newest drill first), stop
        watching."""
        self.stop_invariants()
        for drill in reversed(self.drills):
            try:
                drill.rollback()
            except Exception as exc:  # noqa: BLE001 - rollback must reach every drill
                log.warning("rollback failed: %s", exc)
        self.target.restore_all()
        self.target.settle_gpus()
        self.target.restore_roles()
        self.target.stop_watches()
