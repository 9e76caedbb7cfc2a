"""A transaction over a session: tentative allocations and evictions, committed
whole or discarded whole (Volcano's ``framework/statement.go``).

The session is typed by :class:`StatementSession`, the few members a statement
uses, so this module does not import :mod:`refplatform.core.framework` (whose
``Session`` satisfies it).
"""

from __future__ import annotations

from typing import Protocol

from refplatform.core.decisions import Bind, Evict, EvictReason
from refplatform.core.jobs import Task, TaskStatus
from refplatform.core.state import ClusterState


class StatementSession(Protocol):
    """What a :class:`Statement` needs of its session (``framework.Session`` has it)."""

    state: ClusterState
    binds: list[Bind]
    evictions: list[Evict]

    def on_allocate(self, task: Task) -> None: ...

    def on_deallocate(self, task: Task) -> None: ...


class Statement:
    def __init__(self, ssn: StatementSession) -> None:
        self.ssn = ssn
        self.ops: list[tuple[str, Task, TaskStatus]] = []

    def allocate(self, task: Task, node: int, gpus: tuple[int, ...]) -> None:
        self.ssn.state.allocate(node, task.cpu, task.mem, gpus, task.gpu_milli, task.ext)
        prior = task.status
        task.status, task.node, task.gpus = TaskStatus.ALLOCATED, node, gpus
        self.ssn.on_allocate(task)
        self.ops.append(("allocate", task, prior))

    def evict(self, task: Task) -> None:
        """Tentatively free a bound or releasing task's resources (to test a placement)."""
        self.ssn.state.release(task.node, task.cpu, task.mem, task.gpus, task.gpu_milli, task.ext)
        prior = task.status
        if prior is TaskStatus.BOUND:
            self.ssn.on_deallocate(task)
        task.status = TaskStatus.RELEASING
        self.ops.append(("evict", task, prior))

    def allocated_nodes(self) -> list[int]:
        return [t.node for kind, t, _ in self.ops if kind == "allocate"]

    def discard(self) -> None:
        for kind, task, prior in reversed(self.ops):
            if kind == "allocate":
                self.ssn.state.release(task.node, task.cpu, task.mem, task.gpus, task.gpu_milli, task.ext)
                self.ssn.on_deallocate(task)
                task.status, task.node, task.gpus = prior, -1, ()
            else:
                self.ssn.state.allocate(task.node, task.cpu, task.mem, task.gpus, task.gpu_milli, task.ext)
                if prior is TaskStatus.BOUND:
                    self.ssn.on_allocate(task)
                task.status = prior
        self.ops.clear()

    def commit(self, reason: EvictReason = EvictReason.PREEMPTED, message: str = "",
               preemptor: str = "") -> None:
        """Allocations become binds; evictions become Evict decisions.  An evicted
        pod keeps holding its resources on the node until it is gone (RELEASING)."""
        ssn = self.ssn
        for kind, task, prior in self.ops:
            if kind == "allocate":
                task.status, task.fresh = TaskStatus.BOUND, True
                ssn.binds.append(Bind(task.pod.ref, ssn.state.names[task.node], task.gpus))
            else:
                ssn.state.allocate(task.node, task.cpu, task.mem, task.gpus, task.gpu_milli, task.ext)
                task.status = TaskStatus.RELEASING
                if prior is TaskStatus.BOUND:
                    ssn.evictions.append(Evict(task.pod.ref, ssn.state.names[task.node], reason,
                                               message, preemptor))
        self.ops.clear()
