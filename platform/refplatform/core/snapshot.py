"""A snapshot: everything the scheduler decides from, plus the injected clock."""

from __future__ import annotations

from dataclasses import dataclass

from refplatform.core.node import Node
from refplatform.core.pod import Pod
from refplatform.core.podgroup import PodGroup
from refplatform.core.queue import Queue


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Nodes, pods, pod groups and queues at one instant.

    ``now`` is seconds on the same clock as the objects' ``created_at`` fields; the
    core never reads a clock of its own.  A missing ``default`` queue is implied
    (weight 1, no cap).
    """

    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    pod_groups: tuple[PodGroup, ...] = ()
    queues: tuple[Queue, ...] = ()
    now: float = 0.0
