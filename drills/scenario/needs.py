"""What a scenario needs from its target, read from its sentences before anything runs.

Each sentence was registered by a drill kind's steps module, so a scenario's sentences name the kinds it drives;
the fault-method placeholders name the faults it injects.  From those, against a profile:

- :func:`problems`: why the scenario cannot run on this target (a kind the flavor has no workload for, a
  reference-platform fault with no stand-in on a real cluster, ...).  The run makes such a scenario INCONCLUSIVE
  before its first step, and ``--dry-run`` lists it, so no feature has to be edited to run elsewhere.
- :func:`permissions`: the Kubernetes permissions it needs on a real cluster (``firedrill rbac`` and the
  pre-flight access check).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from drills.scenario.drill import KINDS, Drill
from drills.scenario.vocabulary import check, sentence_of
from drills.target.access import Permission, merged
from drills.target.connect import run_permissions
from drills.target.faults import fault_permissions
from drills.target.profile import FaultMethod, FaultUnavailable, TargetProfile


@dataclass(frozen=True)
class ScenarioNeeds:
    """The drill kinds a scenario's sentences drive and the fault methods they name (None: the configured one)."""

    kinds: tuple[type[Drill], ...]
    methods: tuple[FaultMethod | None, ...]
    reference_only: tuple[str, ...] = ()
    """Why sentences of the scenario run on the embedded platform alone (:attr:`Sentence.reference_only`)."""


def _kinds_of(module: str) -> list[type[Drill]]:
    package = module.rsplit(".", 1)[0] + "."
    return [cls for cls in KINDS.values() if cls.__module__.startswith(package)]


def needs_of(steps: Iterable[str]) -> ScenarioNeeds:
    """The kinds and fault methods of a scenario whose sentences passed the feature check."""
    kinds: list[type[Drill]] = []
    methods: list[FaultMethod | None] = []
    reference_only: list[str] = []
    for text in steps:
        sentence = sentence_of(text)
        if sentence is None:
            continue
        if sentence.reference_only and sentence.reference_only not in reference_only:
            reference_only.append(sentence.reference_only)
        kinds += [k for k in _kinds_of(sentence.module) if k not in kinds]
        fault_fields = [name for name, kind in sentence.fields if kind == "FaultMethod"]
        if fault_fields:
            values = check(text)
            methods += [values[name] for name in fault_fields]
    return ScenarioNeeds(tuple(kinds), tuple(methods), tuple(reference_only))


def problems(needs: ScenarioNeeds, profile: TargetProfile, *, reference: bool) -> list[str]:
    """Why the scenario cannot run on this target, one reason per kind or fault; empty when it can."""
    found: list[str] = [] if reference else list(needs.reference_only)
    for kind in needs.kinds:
        reason = kind.unsupported_here(profile, reference=reference)
        if reason and reason not in found:
            found.append(reason)
    for method in needs.methods:
        try:
            profile.fault.method_for(method, reference=reference)
        except FaultUnavailable as exc:
            if str(exc) not in found:
                found.append(str(exc))
    return found


def permissions(scenarios: Sequence[ScenarioNeeds], profile: TargetProfile) -> list[Permission]:
    """Every permission the scenarios need on a real cluster run with ``profile``: what every run does (connect,
    pre-flight, the invariant watches), what each kind does, and what each fault method they use does.  A
    scenario that cannot run there needs nothing beyond the run's own."""
    if not profile.on_kubernetes:
        return []  # a Slurm or Ray cluster has no Kubernetes API: its rights are its own (docs/SLURM.md, docs/RAY.md)
    out = run_permissions(profile)
    for needs in scenarios:
        if problems(needs, profile, reference=False):
            continue
        for kind in needs.kinds:
            out += kind.permissions(profile)
        for method in needs.methods:
            out += fault_permissions(profile.fault.method_for(method, reference=False), profile)
    return merged(out)
