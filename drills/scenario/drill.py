"""One shape for every drill: the lifecycle each kind follows, and the registry that finds the kinds.

A drill kind is a package under :mod:`drills.kinds` with two modules:

- ``drill.py``: a dataclass subclass of :class:`Drill`, decorated with :func:`register`, naming its ``kind``
  (the name the verdict table and the evidence give the scenario's drill);
- ``steps.py``: its sentences (:func:`drills.scenario.vocabulary.step`), each of which asks the scenario
  context for the drill (``ctx.drill(GangDrill)``) and calls one of its methods.

Every drill goes through the same lifecycle, one stage per kind of sentence:

``steady state`` (Given)
    the drill checks, or sets up, what must hold before the act: enough free capacity, a canary training,
    a partitioned node, a service under load; a steady state that cannot be had makes the scenario
    INCONCLUSIVE (:class:`~drills.records.verdict.DrillInconclusive`), since the act would then prove nothing.
``act`` (When)
    the drill does the one thing the promise is about: submit gangs, pull a node, overrun a slice.
``observe`` and ``judge`` (Then)
    the drill measures from its own watches, the workloads' logs and its clocks, and each sentence judges a
    measurement against the threshold it states (:class:`~drills.records.verdict.DrillResult`).
``rollback`` (every exit path)
    :meth:`Drill.rollback` undoes what the drill made, pass, fail, error or Ctrl-C alike; the scenario context
    calls it, newest drill first.

The context starts a drill on first use and holds the drills of its scenario (a scenario may use more than
one: a capacity check before a node pull), so nothing central names a kind.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from drills.records.verdict import DrillResult
from drills.target.access import Permission
from drills.target.connect import Target
from drills.target.profile import TargetProfile

PAUSE_SLICE = 0.2
"""Seconds between two looks at whether the scenario was halted, while a drill lets time pass."""

KINDS_PACKAGE = "drills.kinds"
STEPS_MODULE = "steps"
OBSERVE_FACTOR, OBSERVE_MARGIN = 2.0, 10.0
"""Waiting longer than a threshold tells "missed by a little" from "never": a Then sentence observes for this
many times its threshold, plus a fixed margin, before calling it never."""


def observe_window(limit: float) -> float:
    """Seconds a Then sentence with threshold ``limit`` observes before it calls the measurement never."""
    return limit * OBSERVE_FACTOR + OBSERVE_MARGIN


@dataclass
class Drill(ABC):
    """A drill of one kind, in one scenario: it acts on ``target`` and records into ``result``; ``run_id``
    labels everything it creates, so its rollback (and an operator) can find it."""

    kind: ClassVar[str]
    """The drill's name in the verdict table and the evidence (``node-pull``, ``gang-submission``, ...)."""

    target: Target
    result: DrillResult
    run_id: str

    measures_control_plane: ClassVar[str] = ""
    """Why a drill of this kind measures the control plane itself (its latency SLOs, what it acknowledges), or "".
    ``firedrill run --parallel`` runs its scenarios with nothing beside them: another scenario's load would be
    measured with it (:mod:`drills.bdd.parallel`)."""
    needs_whole_cluster: ClassVar[str] = ""
    """Why a drill of this kind acts on every node of the cluster it runs on (most nodes cut off at once), or "".
    Where parallel pools share one control plane such a scenario runs alone; where each pool is a node group with
    a control plane of its own (the embedded platform's pools), the pool is its whole cluster."""

    @abstractmethod
    def rollback(self) -> None:
        """Undo every fault and delete everything the drill made; called once, on every exit path."""

    def pause(self, seconds: float) -> None:
        """Let up to ``seconds`` of real time pass in a step, ending at once (:class:`ScenarioHalted`) when the
        scenario is halted: an invariant broken, or the abort guard breached (docs/SAFETY.md).  Never in a
        rollback, which must run to its end."""
        deadline = time.monotonic() + max(seconds, 0.0)
        while True:
            self.result.raise_if_halted()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            threading.Event().wait(min(left, PAUSE_SLICE))

    def live_details(self) -> dict[str, Any]:
        """What the drill has measured so far that its result's details hold only once it is done (a load drill's
        per-second series while the load runs), for the live view (``firedrill run --live``) to draw as the report
        will; never judged, never sealed. Called from another thread about once a second; {} when nothing new."""
        return {}

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        """Why a drill of this kind cannot run on such a target (the reference platform, or a real cluster with
        this profile), or None.  A scenario that uses it is INCONCLUSIVE with this reason before its first step,
        and ``firedrill run --dry-run`` flags it; the same reason as the drill itself would give later."""
        return None

    slurm_absent: ClassVar[str] = ""
    """Why the promise this kind drills does not exist on a Slurm cluster at all (no Services, no API server ...),
    or "" where it does: then :meth:`unsupported_on_slurm` says whether its Slurm side is written."""

    ray_absent: ClassVar[str] = ""
    """Why the promise this kind drills does not exist on a Ray cluster at all, or "" where it does (then
    :meth:`unsupported_on_ray` says whether its Ray side is written)."""

    @classmethod
    def on_target(cls, target: Any) -> type[Drill]:
        """The class that drills this kind on ``target``: the kind itself, or on a Slurm or Ray cluster the kind's
        side for it where one is written (:func:`slurm_side`, :func:`ray_side`)."""
        if target.profile.on_slurm:
            return SLURM_SIDES.get(cls, cls)
        return RAY_SIDES.get(cls, cls) if target.profile.on_ray else cls

    @classmethod
    def unsupported_on_ray(cls, profile: TargetProfile) -> str | None:
        """Why a drill of this kind cannot run on the Ray cluster of ``profile`` (``platform: ray``), or None.
        Asked instead of :meth:`unsupported`; a kind whose Ray side is written overrides it (docs/RAY.md has the
        table)."""
        if cls.ray_absent:
            return f"Ray has no such promise: {cls.ray_absent}"
        return (f"the {cls.kind} drill has no Ray side yet: Ray is drilled for gangs, node pulls and node-loss "
                "campaigns (issue 50, docs/RAY.md)")

    @classmethod
    def unsupported_here(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        """Why a drill of this kind cannot run on the target of ``profile``, whichever platform it is."""
        if profile.on_slurm:
            return cls.unsupported_on_slurm(profile)
        if profile.on_ray:
            return cls.unsupported_on_ray(profile)
        return cls.unsupported(profile, reference=reference)

    @classmethod
    def unsupported_on_slurm(cls, profile: TargetProfile) -> str | None:
        """Why a drill of this kind cannot run on the Slurm cluster of ``profile`` (``platform: slurm``), or None.
        Asked instead of :meth:`unsupported`, whose reasons are Kubernetes'; a kind whose Slurm side is written
        overrides it (docs/SLURM.md has the table)."""
        if cls.slurm_absent:
            return f"Slurm has no such promise: {cls.slurm_absent}"
        return (f"the {cls.kind} drill runs on Kubernetes only so far; its Slurm side is not written yet "
                "(issue 47, docs/SLURM.md)")

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        """The Kubernetes permissions a drill of this kind needs on a real cluster run with ``profile``
        (``firedrill rbac`` prints them as a Role; every run checks them before it starts)."""
        return []


D = TypeVar("D", bound=Drill)

KINDS: dict[str, type[Drill]] = {}
"""Registered drill kinds by name (:func:`register`)."""


def register(cls: type[D]) -> type[D]:
    """Class decorator: register a drill kind under its ``kind`` name (each name once)."""
    name = getattr(cls, "kind", "")
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__qualname__} names no kind: give it `kind: ClassVar[str] = \"...\"`")
    known = KINDS.get(name)
    if known is not None and known is not cls:
        raise ValueError(f"drill kind {name!r} is registered twice: {known.__module__}.{known.__qualname__} and "
                         f"{cls.__module__}.{cls.__qualname__}")
    KINDS[name] = cls
    return cls


SLURM_SIDES: dict[type[Drill], type[Drill]] = {}
"""Each kind whose Slurm side is written -> that side (:func:`slurm_side`)."""
RAY_SIDES: dict[type[Drill], type[Drill]] = {}
"""Each kind whose Ray side is written -> that side (:func:`ray_side`)."""


def ray_side(kind: type[Drill]) -> Callable[[type[D]], type[D]]:
    """Class decorator: the decorated subclass of ``kind`` drills it on a Ray cluster (:meth:`Drill.on_target`)."""
    def mark(cls: type[D]) -> type[D]:
        if not issubclass(cls, kind):
            raise TypeError(f"{cls.__qualname__} is not a {kind.__qualname__}, so it cannot drill it on Ray")
        RAY_SIDES[kind] = cls
        return cls
    return mark


def slurm_side(kind: type[Drill]) -> Callable[[type[D]], type[D]]:
    """Class decorator: the decorated subclass of ``kind`` drills it on a Slurm cluster (the scenario context
    starts it there in the kind's place, :meth:`Drill.on_target`)."""
    def mark(cls: type[D]) -> type[D]:
        if not issubclass(cls, kind):
            raise TypeError(f"{cls.__qualname__} is not a {kind.__qualname__}, so it cannot drill it on Slurm")
        SLURM_SIDES[kind] = cls
        return cls
    return mark


def discover() -> list[str]:
    """Import every drill kind's sentences (``drills.kinds.<kind>.steps``), in the order of the kinds' package
    names; importing a kind's steps registers its sentences and, through its ``drill.py``, the kind itself.
    Returns the modules' names (the pytest plugins ``firedrill run`` loads)."""
    package = importlib.import_module(KINDS_PACKAGE)
    names = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.ispkg:
            name = f"{KINDS_PACKAGE}.{info.name}.{STEPS_MODULE}"
            importlib.import_module(name)
            names.append(name)
    return names


@runtime_checkable
class Loaded(Protocol):
    """A drill that runs a load (users of a service, or of the control plane) until told how long it goes on."""

    def go_on(self, seconds: float) -> None:
        """Keep the load running ``seconds`` after the act, then stop it and read every request's fate."""


@runtime_checkable
class WatchesReturns(Protocol):
    """A drill that follows what its fault took out of service on its way back (a GPU's burn-in and return)."""

    def judge_returns(self) -> None:
        """After the back-in-service phase: every return so far was proven first, or the scenario FAILs, named."""
