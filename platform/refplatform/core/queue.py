"""Volcano's Queue: a share of the cluster with a hard cap."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from refplatform.core.resources import Quota


class QueueState(Enum):
    """``status.state`` of a Queue."""

    OPEN = "Open"
    """Accepts and schedules new jobs."""
    CLOSED = "Closed"
    """Accepts nothing new; running jobs keep running."""
    CLOSING = "Closing"
    """On its way to Closed; treated as Closed for new jobs."""
    UNKNOWN = "Unknown"
    """State not reported; treated as Open."""


@dataclass(frozen=True, slots=True)
class Queue:
    """One Queue.

    ``capability`` is a hard cap on what the queue's jobs hold; ``deserved`` is its
    fair share (when ``None``, computed from ``weight`` by water-filling over the
    cluster); ``guarantee`` is kept free for it from every other queue; a queue
    holding more than its deserved share loses the excess to reclaim only when
    ``reclaimable``.
    """

    name: str
    weight: int = 1
    capability: Quota = Quota()
    deserved: Quota | None = None
    guarantee: Quota = Quota()
    reclaimable: bool = True
    state: QueueState = QueueState.OPEN
    priority: int = 0

    @property
    def is_open(self) -> bool:
        return self.state in (QueueState.OPEN, QueueState.UNKNOWN)
