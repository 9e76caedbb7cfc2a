"""The scheduler's view of a Node: what it offers, how it is labelled and tainted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from refplatform.core.resources import GPU_MODEL_LABEL, Resources


class TaintEffect(Enum):
    """What a taint does to pods that do not tolerate it."""

    NO_SCHEDULE = "NoSchedule"
    """New pods are not placed on the node; running pods stay."""
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    """A soft preference only; the scheduler's filters ignore it."""
    NO_EXECUTE = "NoExecute"
    """New pods are not placed and running pods are evicted (by the taint manager, not here)."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    def describe(self) -> str:
        return f"{{{self.key}: {self.value}}}" if self.value else f"{{{self.key}: }}"


@dataclass(frozen=True, slots=True)
class Node:
    """One node of the snapshot.

    Per-GPU used milli is *not* stored here: it is derived from the bound pods'
    :attr:`~refplatform.core.pod.Pod.gpu_indices`, so there is one source of truth.
    The object is immutable but not hashable (``labels`` is a mapping).
    """

    name: str
    allocatable: Resources
    capacity: Resources | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    withdrawn_gpus: tuple[int, ...] = ()
    """Whole GPUs out of service (an unhealthy device, by index): they keep their index but are never free."""

    @property
    def gpu_slots(self) -> int:
        """How many GPU indexes the node has: its allocatable GPUs, or with GPUs withdrawn its capacity (the
        indexes of the GPUs in service are not 0..allocatable-1 then)."""
        if self.withdrawn_gpus and self.capacity is not None:
            return max(self.capacity.gpus, self.allocatable.gpus)
        return self.allocatable.gpus

    def gpu_model(self, label: str = GPU_MODEL_LABEL) -> str:
        return self.labels.get(label, "")

    @property
    def gpus(self) -> int:
        return self.allocatable.gpus
