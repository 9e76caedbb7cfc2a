"""What one scheduling cycle decides: binds, evictions, pod-group statuses, reasons."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from refplatform.core.pod import PodRef
from refplatform.core.podgroup import PodGroupPhase


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind ``pod`` to ``node``, holding GPUs ``gpu_indices`` (empty for CPU-only pods)."""

    pod: PodRef
    node: str
    gpu_indices: tuple[int, ...] = ()


class EvictReason(Enum):
    """Why a pod is evicted (the Kubernetes event reason)."""

    PREEMPTED = "Preempted"
    """A gang of strictly higher priority (any queue but a non-reclaimable one) needs the room."""
    RECLAIMED = "Reclaimed"
    """A queue below its deserved share takes back room from a queue above it."""


@dataclass(frozen=True, slots=True)
class Evict:
    pod: PodRef
    node: str
    reason: EvictReason
    message: str = ""
    preemptor: str = ""
    """Key (namespace/name) of the gang the room is made for."""


@dataclass(frozen=True, slots=True)
class Nomination:
    """A preemptor's pod will run on ``node`` once its victims are gone (``status.nominatedNodeName``)."""

    pod: PodRef
    node: str


class ConditionType(Enum):
    """Volcano PodGroup condition types."""

    UNSCHEDULABLE = "Unschedulable"
    """The gang could not be placed this cycle; reason and message say why."""
    SCHEDULED = "Scheduled"
    """minMember pods are placed."""


@dataclass(frozen=True, slots=True)
class PodGroupCondition:
    type: ConditionType
    status: bool
    reason: str
    message: str
    transition_time: float


@dataclass(frozen=True, slots=True)
class PodGroupStatus:
    namespace: str
    name: str
    phase: PodGroupPhase
    conditions: tuple[PodGroupCondition, ...] = ()
    running: int = 0
    """Pods bound and not terminating after this cycle (existing + new binds)."""
    succeeded: int = 0
    failed: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class FailedScheduling:
    """A pod stays pending; ``message`` is the kube-style FailedScheduling text."""

    pod: PodRef
    message: str
    reason: str = "Unschedulable"
    """The ``PodScheduled`` condition's reason (kube-compatible, always ``Unschedulable`` here)."""
    pending_reason: str = "Other"
    """Why its gang's pending GPU demand is not placed: a ``PendingReason`` value of
    :mod:`refplatform.core.accounting` (``Fragmentation``, ``InsufficientCapacity``, ``Quota``, ``Other``);
    see :mod:`refplatform.core.pending`."""
    pending_message: str = ""
    """That reason in words and numbers (``needs 4 GPUs: 8 free in the cluster, at most 2 on one node``)."""


@dataclass(frozen=True, slots=True)
class GangCommit:
    """The binds of one gang in this cycle: the unit the live controller binds whole or undoes whole.

    The core commits a gang's placement whole (:class:`~refplatform.core.statement.Statement`); this says which
    binds belong together, so that a bind the API server refuses (the pod deleted meanwhile, a conflict) does
    not leave the rest of the gang holding GPUs (docs/SCHEDULER.md, "Committing a gang through the API").
    """

    gang: str
    """The gang's key: ``namespace/podgroup`` (``namespace/podgroup-<uid>`` for a pod without a PodGroup)."""
    group: str
    """The PodGroup's name; empty for a pod without one (a gang of its own)."""
    min_member: int
    ready_before: int
    """Pods of the gang already bound (not terminating) or succeeded before this cycle's binds."""
    binds: tuple[Bind, ...]

    def whole_with(self, bound: int) -> bool:
        """Does the gang reach ``min_member`` when ``bound`` of this cycle's binds succeed?"""
        return self.ready_before + bound >= self.min_member


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held idle this cycle for one gang (starvation guard or pipelined preemptor)."""

    job: str
    nodes: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Decisions:
    """Output of :func:`refplatform.core.schedule`, in decision order."""

    binds: tuple[Bind, ...] = ()
    evictions: tuple[Evict, ...] = ()
    pod_groups: tuple[PodGroupStatus, ...] = ()
    failures: tuple[FailedScheduling, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    now: float = 0.0
    nominations: tuple[Nomination, ...] = ()
    """Pods of gangs that evicted victims this cycle, and the node each will take."""
    commits: tuple[GangCommit, ...] = ()
    """``binds`` grouped by gang, in the order of each gang's first bind: every bind is in exactly one."""

    def bind_map(self) -> dict[str, str]:
        """``namespace/name`` of each bound pod -> node name."""
        return {b.pod.key: b.node for b in self.binds}

    def nominated(self) -> dict[str, str]:
        """``namespace/name`` of each nominated preemptor pod -> its node."""
        return {n.pod.key: n.node for n in self.nominations}

    def evicted(self) -> set[str]:
        return {e.pod.key for e in self.evictions}

    def phases(self) -> dict[str, PodGroupPhase]:
        return {pg.key: pg.phase for pg in self.pod_groups}

    def failure_messages(self) -> dict[str, str]:
        return {f.pod.key: f.message for f in self.failures}

    def pending_reasons(self) -> dict[str, str]:
        """``namespace/name`` of each pending pod -> its pending reason."""
        return {f.pod.key: f.pending_reason for f in self.failures}

    def pod_group(self, key: str) -> PodGroupStatus:
        for pg in self.pod_groups:
            if pg.key == key:
                return pg
        raise KeyError(key)
