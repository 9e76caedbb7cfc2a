"""Session-internal mutable views of pods (tasks) and gangs (jobs).

Snapshot objects are frozen; a cycle works on these wrappers, which carry the
tentative state (allocated, releasing) a :class:`~refplatform.core.statement.Statement`
changes and rolls back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from refplatform.core.pod import Pod, PreemptionPolicy
from refplatform.core.podgroup import PodGroup
from refplatform.core.resources import MILLI_PER_GPU, Extended, Usage
from refplatform.core.topology import TopologyRequest


class TaskStatus(Enum):
    """Where a task stands inside one cycle."""

    PENDING = "Pending"
    """Unbound and waiting for a node."""
    ALLOCATED = "Allocated"
    """Tentatively placed by an open statement; becomes BOUND on commit."""
    BOUND = "Bound"
    """Bound to a node (before this cycle or committed in it); holds resources."""
    RELEASING = "Releasing"
    """Terminating or evicted: still holds its resources, never a victim again."""
    SUCCEEDED = "Succeeded"
    """Finished with success; holds nothing, counts towards the gang."""
    FAILED = "Failed"
    """Finished with failure; holds nothing."""


class Hold(Enum):
    """Why a job's own queue or spec keeps it from being placed, whatever room the cluster has."""

    QUOTA = "Quota"
    """Its queue's capability or quota refused it (admission or allocation): a policy choice."""
    INVALID = "Invalid"
    """It cannot be placed as specified: its pod group or queue is missing, or the queue is closed."""


HOLDING = (TaskStatus.BOUND, TaskStatus.RELEASING, TaskStatus.ALLOCATED)
READY = (TaskStatus.BOUND, TaskStatus.ALLOCATED, TaskStatus.SUCCEEDED)


@dataclass(slots=True, eq=False)
class Task:
    pod: Pod
    job: Job
    status: TaskStatus = TaskStatus.PENDING
    node: int = -1
    gpus: tuple[int, ...] = ()
    cpu: int = 0
    mem: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0
    """Milli taken on each GPU in ``gpus`` (1000 for whole GPUs)."""
    ext: Extended = ()
    """Extended resources requested (plain per-node amounts); queues do not account them."""
    placement_key: tuple = ()
    fresh: bool = False
    """Bound by this cycle: never a victim in the same cycle."""

    @classmethod
    def of(cls, pod: Pod, job: Job) -> Task:
        req = pod.requests
        if req.gpus:
            count, milli = req.gpus, MILLI_PER_GPU
        elif req.gpu_milli:
            count, milli = 1, req.gpu_milli
        else:
            count, milli = 0, 0
        return cls(pod, job, cpu=req.cpu_milli, mem=req.memory_bytes, gpu_count=count,
                   gpu_milli=milli, ext=req.extended, placement_key=pod.placement_key())

    @property
    def key(self) -> str:
        return self.pod.key

    @property
    def gpu_total(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def shape_key(self) -> tuple[int, int, int]:
        return (self.cpu, self.gpu_count, self.gpu_milli)

    def usage(self) -> Usage:
        return Usage(self.cpu, self.mem, self.gpu_total)


@dataclass(slots=True, eq=False)
class Job:
    """A gang: the pods of one PodGroup, or a single pod without one."""

    key: str
    namespace: str
    name: str
    queue: str
    priority: int
    min_member: int
    created_at: float
    group: PodGroup | None = None
    min_resources: Usage | None = None
    index: int = 0
    tasks: list[Task] = field(default_factory=list)
    enqueued: bool = False
    attempted: bool = False
    deferred: bool = False
    failed_task: Task | None = None
    fit_error: str = ""
    gang_message: str = ""
    hold_reason: str = ""
    """Why the job was not tried (queue missing or closed, not enqueued, head-of-line)."""
    quota_blocked: bool = False
    reserved: bool = False
    hold: Hold | None = None
    """Set when its queue or spec refused it (the first such refusal wins); see :class:`Hold`."""
    hold_message: str = ""
    """The refusal in words (the plugin's message)."""
    topology: TopologyRequest | None = None
    """Its pods' request to stay inside one domain of a node label
    (:func:`~refplatform.core.topology.gang_request`)."""
    generation: int = 0
    """The newest incarnation among its pods (:attr:`~refplatform.core.pod.Pod.generation`): above 0, the job was
    restarted."""

    def held(self, hold: Hold, message: str) -> None:
        """Record a refusal by its queue or spec; the first one is kept."""
        if self.hold is None:
            self.hold, self.hold_message = hold, message

    def pending(self) -> list[Task]:
        return [t for t in self.tasks if t.status is TaskStatus.PENDING]

    def may_preempt(self) -> bool:
        """No pending pod of the gang says ``preemptionPolicy: Never``."""
        return all(t.pod.preemption_policy is not PreemptionPolicy.NEVER for t in self.pending())

    def ready_count(self) -> int:
        return sum(1 for t in self.tasks if t.status in READY)

    def active(self) -> list[Task]:
        """Tasks bound and not terminating: what eviction would free."""
        return [t for t in self.tasks if t.status is TaskStatus.BOUND]

    def evictable(self) -> bool:
        """Holds bound pods, none of them bound by this very cycle."""
        active = self.active()
        return bool(active) and not any(t.fresh for t in active)

    def gpu_held(self) -> int:
        return sum(t.gpu_total for t in self.tasks if t.status is TaskStatus.BOUND)

    def pending_usage(self) -> Usage:
        total = Usage()
        for t in self.tasks:
            if t.status is TaskStatus.PENDING:
                total = total + t.usage()
        return total
