"""Whole-GPU health as the NVIDIA device plugin judges it (pure).

The device plugin watches NVML's Xid events and marks a device Unhealthy on any Xid except the application
errors (13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive
cleanup, 68 video processor exception): those are the program's fault, the GPU stays in service. The kubelet
then drops an Unhealthy device from the node's allocatable and never hands it to another pod. Here a GPU is
unhealthy for as long as a non-application Xid for it stands in the Node's ``firedrill.dev/inject-xid``
annotation, so removing the entry (the drill's rollback) is what returns the GPU to service.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["APPLICATION_XIDS", "UNHEALTHY_ANNOTATION", "GpuHealth", "format_unhealthy", "marks_unhealthy",
           "parse_unhealthy"]

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})
"""Xids the device plugin skips: the application's error, not the GPU's (the GPU stays allocatable)."""
UNHEALTHY_ANNOTATION = "firedrill.dev/unhealthy-gpus"
"""On a Node, written by its agent: the indexes of the GPUs out of service (``"3"``, ``"0,5"``; empty: none).
The scheduler reads it to hand out only healthy GPUs, as the kubelet's device manager does."""


def marks_unhealthy(xid: int) -> bool:
    """Does this Xid take its GPU out of service?"""
    return xid not in APPLICATION_XIDS


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """Which of a node's whole GPUs are out of service, and the Xid that took each out."""

    unhealthy: Mapping[int, int]
    """GPU index -> the first Xid that took it out of service."""

    @classmethod
    def of(cls, entries: Iterable[tuple[int, int | None, int]], gpu_count: int) -> GpuHealth:
        """From ``(gpu, instance, xid)`` entries: each whole-GPU entry (no MIG instance) with a GPU-class Xid on a
        GPU the node has."""
        out: dict[int, int] = {}
        for gpu, instance, xid in entries:
            if instance is None and 0 <= gpu < gpu_count and marks_unhealthy(xid):
                out.setdefault(gpu, xid)
        return cls(out)

    def allocatable(self, gpu_count: int) -> int:
        return gpu_count - len([g for g in self.unhealthy if 0 <= g < gpu_count])


def format_unhealthy(indexes: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(set(indexes)))


def parse_unhealthy(raw: str | None) -> tuple[int, ...]:
    """The annotation's indexes; a malformed item is skipped (the agent writes it, nobody else)."""
    out = set()
    for item in (raw or "").split(","):
        item = item.strip()
        if item.isdigit():
            out.add(int(item))
    return tuple(sorted(out))
