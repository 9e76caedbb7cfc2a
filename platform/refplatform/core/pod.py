"""The scheduler's view of a Pod: what it asks for and where it may run."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from refplatform.core.node import Node, Taint, TaintEffect
from refplatform.core.resources import GPU_MODEL_LABEL, Resources
from refplatform.core.topology import TopologyRequest


class PodPhase(Enum):
    """Lifecycle phase of a pod, as Kubernetes reports it."""

    PENDING = "Pending"
    """Accepted, not (yet) running; unbound pods are candidates for scheduling."""
    RUNNING = "Running"
    """Bound and running; holds its resources."""
    SUCCEEDED = "Succeeded"
    """Terminated with success; holds nothing, counts towards a gang's minMember."""
    FAILED = "Failed"
    """Terminated with failure; holds nothing."""


class SelectorOperator(Enum):
    """Operators of a required node-affinity term."""

    IN = "In"
    """The label exists and its value is one of ``values``."""
    NOT_IN = "NotIn"
    """The label is absent or its value is none of ``values``."""
    EXISTS = "Exists"
    """The label exists, whatever its value."""
    DOES_NOT_EXIST = "DoesNotExist"
    """The label is absent."""


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One ``requiredDuringSchedulingIgnoredDuringExecution`` match expression."""

    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op is SelectorOperator.IN:
            return labels.get(self.key) in self.values
        if op is SelectorOperator.NOT_IN:
            return labels.get(self.key) not in self.values
        if op is SelectorOperator.EXISTS:
            return self.key in labels
        return self.key not in labels


def gpu_model_requirement(models: Iterable[str], label: str = GPU_MODEL_LABEL) -> NodeSelectorRequirement:
    """Required affinity on the GPU model, e.g. from the trace's ``gpu_spec`` "V100M16|V100M32"."""
    return NodeSelectorRequirement(label, SelectorOperator.IN, tuple(sorted(set(models))))


class TolerationOperator(Enum):
    """How a toleration matches a taint's value."""

    EQUAL = "Equal"
    """Key and value must both match."""
    EXISTS = "Exists"
    """Key must match (an empty key matches every taint)."""


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None
    """``None`` tolerates every effect."""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if self.operator is TolerationOperator.EXISTS:
            return self.key in ("", taint.key)
        return self.key == taint.key and self.value == taint.value


class PreemptionPolicy(Enum):
    """``spec.preemptionPolicy`` of a pod, set from its PriorityClass by the Priority admission."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    """When it does not fit, the scheduler may evict pods of strictly lower priority to make room (the default)."""
    NEVER = "Never"
    """It waits for room like any pod but never evicts another (it is still ordered by its priority)."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """Identity of a pod in decisions."""

    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod of the snapshot.

    ``created_at`` is on the snapshot's clock (seconds) and orders pods of equal
    priority; ``node_name`` set means bound; ``gpu_indices`` are the GPUs the pod
    holds on that node (read back from :data:`~refplatform.core.resources.GPU_INDEX_ANNOTATION`;
    when missing the core picks them deterministically).  ``terminating`` marks a
    pod being deleted or evicted: it still holds its resources, it is never a victim again.
    ``priority`` is ``spec.priority`` (resolved from the pod's PriorityClass at admission) and
    ``preemption_policy`` says whether the pod may evict lower-priority pods when it does not fit.
    ``topology`` is the gang's request to stay inside one domain of a node label (Kueue's pod-set annotations,
    :mod:`refplatform.core.topology`), carried by each of its pods.  ``generation`` is the incarnation of its job
    the pod belongs to (Volcano's ``volcano.sh/job-version``: 0 at the first placement, one more at each restart).
    """

    namespace: str
    name: str
    uid: str = ""
    requests: Resources = Resources()
    priority: int = 0
    node_name: str | None = None
    gpu_indices: tuple[int, ...] = ()
    group: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[NodeSelectorRequirement, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    created_at: float = 0.0
    phase: PodPhase = PodPhase.PENDING
    terminating: bool = False
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    topology: TopologyRequest | None = None
    generation: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> PodRef:
        return PodRef(self.namespace, self.name, self.uid)

    @property
    def is_bound(self) -> bool:
        return self.node_name is not None

    @property
    def is_terminal(self) -> bool:
        return self.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)

    def placement_key(self) -> tuple:
        """Hashable summary of everything but resources that decides which nodes fit."""
        return (tuple(sorted(self.node_selector.items())), self.affinity, self.tolerations)

    def matches_node_labels(self, node: Node) -> bool:
        labels = node.labels
        for key, value in self.node_selector.items():
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.affinity)

    def untolerated_taint(self, node: Node) -> Taint | None:
        for taint in node.taints:
            if taint.effect is TaintEffect.PREFER_NO_SCHEDULE:
                continue
            if not any(tol.tolerates(taint) for tol in self.tolerations):
                return taint
        return None
