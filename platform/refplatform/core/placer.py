"""The incremental fast path: pods arrive one at a time and are placed at once,
with no gang, through the same filter and score plugins as :func:`schedule`.

The trace replay drives it; a placed pod never leaves (as in the FGD method).
"""

from __future__ import annotations

from collections.abc import Sequence

import refplatform.core.actions  # noqa: F401
import refplatform.core.plugins  # noqa: F401
from refplatform.core.config import PluginSpec, SchedulerConfig
from refplatform.core.decisions import Bind, FailedScheduling
from refplatform.core.framework import Session
from refplatform.core.jobs import Job, Task, TaskStatus
from refplatform.core.node import Node
from refplatform.core.pod import Pod
from refplatform.core.podgroup import DEFAULT_QUEUE
from refplatform.core.snapshot import Snapshot
from refplatform.core.state import ClusterState
from refplatform.core.statement import Statement

PLACER_PLUGINS = (PluginSpec("predicates"), PluginSpec("placement"))


class Placer:
    """A long-lived session over fixed nodes; :meth:`place` decides and commits."""

    def __init__(self, nodes: Sequence[Node], config: SchedulerConfig) -> None:
        self.config = config
        self.session = Session(Snapshot(nodes=tuple(nodes)), config)

    @property
    def state(self) -> ClusterState:
        return self.session.state

    def place(self, pod: Pod) -> Bind | FailedScheduling:
        ssn = self.session
        job = Job(f"{pod.namespace}/podgroup-{pod.uid or pod.name}", pod.namespace, pod.name,
                  DEFAULT_QUEUE, pod.priority, 1, pod.created_at, enqueued=True)
        task = Task.of(pod, job)
        job.tasks.append(task)
        status = ssn.allocatable(task)
        choice = ssn.choose_node(task) if status.ok else None
        if choice is None:
            return FailedScheduling(pod.ref, status.message if not status.ok else ssn.explain(task))
        stmt = Statement(ssn)
        stmt.allocate(task, *choice)
        node, gpus = choice
        task.status = TaskStatus.BOUND
        return Bind(pod.ref, ssn.state.names[node], gpus)
