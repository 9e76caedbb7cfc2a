"""Volcano's PodGroup: a gang of pods that run together or not at all."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from refplatform.core.resources import Usage

DEFAULT_QUEUE = "default"


class PodGroupPhase(Enum):
    """``status.phase`` of a PodGroup, with Volcano's meanings."""

    PENDING = "Pending"
    """Not admitted yet: the enqueue action has not found room for minResources."""
    INQUEUE = "Inqueue"
    """Admitted; the scheduler tries to place minMember pods together."""
    RUNNING = "Running"
    """At least minMember pods are bound (or have succeeded)."""
    UNKNOWN = "Unknown"
    """Some pods are bound but fewer than minMember: a partial gang (evictions, or the no-gang profile)."""
    COMPLETED = "Completed"
    """All pods have succeeded."""


@dataclass(frozen=True, slots=True)
class PodGroup:
    """One PodGroup of the snapshot; ``created_at`` is on the snapshot's clock
    and measures how long the gang has waited (starvation bound)."""

    namespace: str
    name: str
    min_member: int = 1
    min_resources: Usage | None = None
    queue: str = DEFAULT_QUEUE
    priority_class_name: str = ""
    priority: int = 0
    phase: PodGroupPhase = PodGroupPhase.PENDING
    created_at: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
