"""The queue objects a target needs for the features, and how big their GPU quota is (``firedrill queues``).

A Kueue, Volcano or KAI cluster admits a gang only through a queue, and the queue's GPU quota decides what the
gang scenarios can show (docs/QUEUES.md).  The quota is read from the features themselves:

- a sentence that states free capacity ("the cluster has at least 4 schedulable GPU nodes with 8 free GPUs
  each") sets it to that capacity, 4 x 8 = 32, the largest such capacity of any scenario.  A quota equal to
  the free GPUs is what makes the gang promise meaningful: of two gangs that each need more than half, Kueue
  admits one and the second waits holding nothing.  A quota above the free GPUs admits both, and the pods of
  both then race for the nodes;
- with no such sentence, the largest single workload a scenario submits through the queue (a gang, a canary
  training job: workers x GPUs each), so that each one can be admitted whole.

A workload larger than the quota can never be admitted; :class:`QuotaPlan` lists each one so the command can
warn.  Sizing (:func:`quota_for`) is pure: it reads the checked features (:mod:`drills.bdd.features`) and the
values their sentences hold (:func:`drills.scenario.vocabulary.check`), nothing else.  :func:`run_queues` is
the command: profile, features, manifests (:func:`drills.kube.flavors.queue_manifests`), and with ``--apply``
the objects created through the driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import yaml
from rich.console import Console

from drills.bdd.features import FeatureError, FeatureInfo, load_features
from drills.errors import FiredrillError
from drills.kube.driver import KubeDriver, KubeError, TargetUnreachable
from drills.kube.flavors import GangFlavor, queue_manifests
from drills.scenario.vocabulary import check, sentence_of
from drills.target.profile import TargetProfile, load_profile

__all__ = ["CAPACITY_SENTENCES", "WORKLOAD_SENTENCES", "Applied", "ApplyOutcome", "Demand", "DemandKind",
           "QueuesExit", "QueuesOptions", "QuotaError", "QuotaPlan", "apply_manifests", "demands_of",
           "quota_for", "render", "run_queues"]

CAPACITY_SENTENCES: Mapping[str, tuple[str, str]] = MappingProxyType({
    "enough_capacity": ("nodes", "gpus"),
})
"""Sentences (by step function name) that state free capacity: (the placeholder counting nodes, the one
counting free GPUs on each)."""

WORKLOAD_SENTENCES: Mapping[str, tuple[str, str]] = MappingProxyType({
    "submit_one_gang": ("workers", "gpus"),
    "submit_gangs": ("workers", "gpus"),
    "running_gang": ("workers", "gpus"),
    "canary_job": ("workers", "gpus"),
    "low_priority_training": ("workers", "gpus"),
})
"""Sentences that submit GPU work through the profile's queue, admitted whole: (the placeholder counting
workers, the one counting GPUs on each).  A ``count`` placeholder, where there is one, is how many such
workloads are submitted at once.  Inference services (a Deployment) and the governance drill's over-quota job
do not size the queue: the first does not go through it, the second is meant not to fit."""


class QuotaError(FiredrillError):
    """The features say nothing about how many GPUs the queue should admit."""


class DemandKind(Enum):
    """What a sentence says about the GPUs the queue must admit."""

    CAPACITY = "capacity"
    """Free capacity the scenario needs: nodes x free GPUs on each.  The quota equals the largest one."""
    WORKLOAD = "workload"
    """A workload submitted through the queue and admitted whole: workers x GPUs on each."""


@dataclass(frozen=True, slots=True)
class Demand:
    """One sentence of one scenario that asks the queue for GPUs."""

    kind: DemandKind
    feature: Path
    scenario: str
    step: str
    """The sentence as the feature file writes it (Background steps included, placeholders filled)."""
    units: int
    """Nodes (capacity) or workers (workload)."""
    per_unit: int
    """Free GPUs on each node, or GPUs on each worker."""
    count: int = 1
    """Workloads submitted at once (``I submit 2 gangs of ...``); 1 for a capacity."""

    @property
    def gpus(self) -> int:
        """The GPUs one admission needs: the capacity, or one workload whole (not ``count`` of them)."""
        return self.units * self.per_unit

    def describe(self) -> str:
        """``asks for 4 nodes x 8 free GPUs`` or ``submits 2 workloads of 3 workers x 8 GPUs``."""
        if self.kind is DemandKind.CAPACITY:
            return f"asks for {self.units} nodes x {self.per_unit} free GPUs"
        what = "a workload" if self.count == 1 else f"{self.count} workloads"
        return f"submits {what} of {self.units} workers x {self.per_unit} GPUs"

    def where(self) -> str:
        """``features/gang_submission.feature 'A gang that fits is placed whole'``."""
        return f"{self.feature} '{self.scenario}'"


@dataclass(frozen=True, slots=True)
class QuotaPlan:
    """The GPU quota of the queue objects, and what decided it."""

    gpus: int
    decided_by: Demand | None
    """The sentence that decided it; None when ``--gpus`` set it."""
    too_large: tuple[Demand, ...] = ()
    """Workloads that need more GPUs than ``gpus`` at once: a queue of this quota never admits them."""

    def explain(self) -> str:
        """One line saying how the quota was sized."""
        if self.decided_by is None:
            return f"{self.gpus} GPUs: set by --gpus"
        return f"{self.gpus} GPUs: {self.decided_by.where()} {self.decided_by.describe()}"

    def warnings(self) -> list[str]:
        """One line per workload the quota never admits."""
        return [f"{d.where()} {d.describe()} ({d.gpus} GPUs at once): more than the quota of {self.gpus}, so "
                f"the queue never admits it; raise --gpus or shrink the workload" for d in self.too_large]


# --- sizing (pure) -----------------------------------------------------------------------------------------


def demands_of(features: Sequence[FeatureInfo]) -> Iterator[Demand]:
    """Every sentence of every scenario (in file, then scenario, then step order) that asks for GPUs."""
    for feature in features:
        for scenario in feature.scenarios:
            for text in scenario.steps:
                sentence = sentence_of(text)
                if sentence is None:
                    continue  # load_features has refused unknown steps; nothing to size here
                if sentence.name in CAPACITY_SENTENCES:
                    kind, (units_name, per_name) = DemandKind.CAPACITY, CAPACITY_SENTENCES[sentence.name]
                elif sentence.name in WORKLOAD_SENTENCES:
                    kind, (units_name, per_name) = DemandKind.WORKLOAD, WORKLOAD_SENTENCES[sentence.name]
                else:
                    continue
                values: dict[str, Any] = check(text)
                yield Demand(kind, feature.path, scenario.name, text, int(values[units_name]),
                             int(values[per_name]), int(values.get("count", 1)))


def _largest(demands: Sequence[Demand]) -> Demand:
    """The demand with the most GPUs; the first one written among equals."""
    best = demands[0]
    for demand in demands[1:]:
        if demand.gpus > best.gpus:
            best = demand
    return best


def quota_for(features: Sequence[FeatureInfo]) -> QuotaPlan:
    """The queue's GPU quota for these features: the largest free capacity a scenario states, else the largest
    single workload; raises :class:`QuotaError` when no scenario states either."""
    demands = list(demands_of(features))
    capacities = [d for d in demands if d.kind is DemandKind.CAPACITY]
    workloads = [d for d in demands if d.kind is DemandKind.WORKLOAD]
    pool = capacities or workloads
    if not pool:
        where = ", ".join(sorted({str(f.path) for f in features})) or "the features"
        raise QuotaError(f"no scenario in {where} states free GPU capacity or submits GPU work through the queue, "
                         "so nothing sizes the quota; give --gpus N")
    decided = _largest(pool)
    return QuotaPlan(decided.gpus, decided, tuple(d for d in workloads if d.gpus > decided.gpus))


# --- the command -------------------------------------------------------------------------------------------


class QueuesExit(IntEnum):
    """``firedrill queues`` exit codes (the same numbers as ``firedrill run``'s)."""

    OK = 0
    """Printed (and, with --apply, every object created or already there)."""
    REFUSED = 1
    """The cluster refused an object (its API group not served, a missing namespace, a webhook's veto)."""
    USAGE = 2
    """A bad profile, feature or option."""
    UNREACHABLE = 4
    """The cluster did not answer (or the kubeconfig cannot be loaded)."""


class ApplyOutcome(Enum):
    """What ``--apply`` did with one object."""

    CREATED = "created"
    """The object did not exist and was created."""
    EXISTS = "unchanged (exists)"
    """An object of that kind and name was there already; it is left as it is (not compared, not updated)."""


@dataclass(frozen=True, slots=True)
class Applied:
    """One object ``--apply`` handled."""

    kind: str
    name: str
    namespace: str | None
    outcome: ApplyOutcome

    def line(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.kind} {self.name}{where}: {self.outcome.value}"


@dataclass(frozen=True, slots=True)
class QueuesOptions:
    profile: Path
    features: Path = Path("features")
    gpus: int | None = None
    """Overrides the quota read from the features."""
    apply: bool = False
    kubeconfig: Path | None = None
    context: str | None = None


class Creator(Protocol):
    """What :func:`apply_manifests` needs of a driver (:class:`drills.kube.driver.KubeDriver`)."""

    def create(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]: ...


def apply_manifests(driver: Creator, manifests: Sequence[dict[str, Any]]) -> list[Applied]:
    """Create each object in order; one that exists already (409 AlreadyExists) is reported, not replaced.
    Any other refusal raises :class:`~drills.kube.driver.KubeError` (after the objects before it were made)."""
    done: list[Applied] = []
    for obj in manifests:
        meta = obj.get("metadata") or {}
        try:
            driver.create(obj)
            outcome = ApplyOutcome.CREATED
        except KubeError as exc:
            if isinstance(exc, TargetUnreachable) or exc.code != 409:
                raise
            outcome = ApplyOutcome.EXISTS
        done.append(Applied(obj["kind"], meta["name"], meta.get("namespace"), outcome))
    return done


class _PlainDumper(yaml.SafeDumper):
    """Safe YAML that writes a value shared by two fields twice, never as an anchor and alias (``&id001``)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(profile: TargetProfile, plan: QuotaPlan | None, manifests: Sequence[dict[str, Any]]) -> str:
    """The YAML the command prints: comment lines (what, how the quota was sized, warnings), then one document
    per object in creation order."""
    if profile.flavor is GangFlavor.NATIVE:
        return (f"# profile {profile.name}: flavor native: Kubernetes' native gang scheduling (a Workload and its "
                "PodGroup, scheduled by kube-scheduler) needs no queue objects; nothing to create\n")
    head = [(f"# profile {profile.name}: {profile.flavor.value} queue objects for queue {profile.queue!r} "
             f"(namespace {profile.namespace}, {profile.gpu_resource})")]
    if plan is not None:
        head.append(f"# {plan.explain()}")
        head += [f"# warning: {w}" for w in plan.warnings()]
    body = yaml.dump_all(list(manifests), Dumper=_PlainDumper, sort_keys=False, explicit_start=True)
    return "\n".join(head) + "\n" + body


def _connect(options: QueuesOptions) -> KubeDriver:
    """The driver for ``--kubeconfig``; :class:`TargetUnreachable` naming the kubeconfig when it cannot be used."""
    ctx = f" (context {options.context})" if options.context else ""
    try:
        return KubeDriver.connect(options.kubeconfig, options.context, attempts=3)
    except TargetUnreachable as exc:
        raise TargetUnreachable(f"cannot reach the cluster of kubeconfig {options.kubeconfig}{ctx}: {exc}") from None
    except KubeError as exc:  # it answered, but not to us (401, 403 on /version)
        raise TargetUnreachable(f"the cluster of kubeconfig {options.kubeconfig}{ctx} refused the harness: "
                                f"{exc}") from None


def run_queues(options: QueuesOptions, console: Console, err: Console) -> int:
    """``firedrill queues``: print the queue objects (and with ``apply`` create them); a :class:`QueuesExit`."""
    try:
        profile = load_profile(options.profile)
    except FiredrillError as exc:
        err.print(f"error: {exc}")
        return QueuesExit.USAGE
    plan: QuotaPlan | None = None
    manifests: list[dict[str, Any]] = []
    if profile.flavor is not GangFlavor.NATIVE:
        try:
            plan = QuotaPlan(options.gpus, None) if options.gpus is not None else \
                quota_for(load_features(options.features))
        except FeatureError as exc:
            for line in exc.lines("the features cannot be read"):
                err.print(line)
            return QueuesExit.USAGE
        except FiredrillError as exc:
            err.print(f"error: {exc}")
            return QueuesExit.USAGE
        # run_id None: these objects outlive every drill run, so they carry no firedrill.dev/drill-run label
        manifests = queue_manifests(profile.flavor, queue=profile.queue, namespace=profile.namespace,
                                    gpus=plan.gpus, run_id=None, gpu_resource=profile.gpu_resource)
    console.print(render(profile, plan, manifests), end="", emoji=False)
    if not options.apply or not manifests:
        return QueuesExit.OK
    try:
        driver = _connect(options)
    except TargetUnreachable as exc:
        err.print(f"error: {exc}")
        return QueuesExit.UNREACHABLE
    try:
        done = apply_manifests(driver, manifests)
    except TargetUnreachable as exc:
        err.print(f"error: {exc} (kubeconfig {options.kubeconfig})")
        return QueuesExit.UNREACHABLE
    except KubeError as exc:
        err.print(f"error: {exc}\n  Does the cluster serve {profile.flavor.value}'s API (is it installed), and "
                  f"does namespace {profile.namespace} exist? Objects before this one were created.")
        return QueuesExit.REFUSED
    finally:
        driver.close()
    for item in done:
        err.print(item.line())
    if any(item.outcome is ApplyOutcome.EXISTS for item in done):
        err.print("note: an existing object is left as it is, its quota included; compare it with the YAML above "
                  "(kubectl diff -f) and edit it to change it")
    return QueuesExit.OK
