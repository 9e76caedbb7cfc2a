"""Does every GPU node advertise the GPUs it was bought with (pure)?

A node that registers 7 of its 8 GPUs fails nothing: the scheduler places on 7, a job that needs the node whole
waits, and the customer pays for 8.  The inventory is what the node should have, from a source the node does not
write: the reference cluster's own shape (the harness started it), or the target profile's
``fabric.gpus_per_node``; on a real cluster without it, GPU Feature Discovery's ``nvidia.com/gpu.count`` label
(NVML's count on that node: it misses a GPU that fell off the bus, but not one the device plugin failed to
register).  What the node advertises is its ``status.allocatable`` (what the scheduler hands out), shown beside its
``capacity`` (what its device plugin registered).

A partitioned node (MIG, a sharing strategy) advertises slices or replicas, not GPUs: it is listed, not compared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GFD_COUNT", "NodeGpus", "gpu_nodes", "inventory"]

Obj = dict[str, Any]
GFD_COUNT = "nvidia.com/gpu.count"
GFD_PRESENT = "nvidia.com/gpu.present"
PARTITION_LABELS = ("nvidia.com/mig.strategy", "nvidia.com/gpu.sharing-strategy")
"""GPU Feature Discovery's labels of a node whose GPUs are advertised as slices or replicas."""


@dataclass(frozen=True)
class NodeGpus:
    """One GPU node: what its inventory says, and what it advertises."""

    node: str
    inventory: int | None
    """The GPUs it should have (None: no source says)."""
    source: str
    """Where :attr:`inventory` comes from, in words."""
    capacity: int | None
    allocatable: int | None
    partitioned: str = ""
    """The partitioning its labels name (``mig.strategy=single``), or "" for whole GPUs."""

    @property
    def missing(self) -> int:
        """GPUs of the inventory the node does not advertise (0 when it advertises them all, or is not compared)."""
        if self.inventory is None or self.partitioned:
            return 0
        return max(0, self.inventory - (self.allocatable or 0))

    def finding(self) -> str:
        return (f"{self.node} advertises {self.allocatable or 0} of the {self.inventory} GPUs its inventory states "
                f"({self.source}): capacity {_shown(self.capacity)}, allocatable {_shown(self.allocatable)}")


def _shown(value: int | None) -> str:
    return "none" if value is None else str(value)


def _count(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _labels(node: Obj) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def gpu_nodes(nodes: Iterable[Obj], gpu_resource: str, known: Iterable[str] = ()) -> list[Obj]:
    """The nodes that are GPU nodes: GPU Feature Discovery labelled them (``nvidia.com/gpu.present``, ``.count``),
    or they register the GPU resource, or they are among ``known`` (the reference cluster's own nodes)."""
    named = set(known)
    out = []
    for node in nodes:
        labels = _labels(node)
        status = node.get("status") or {}
        if (labels.get(GFD_PRESENT) == "true" or GFD_COUNT in labels or node["metadata"]["name"] in named
                or gpu_resource in (status.get("capacity") or {})):
            out.append(node)
    return sorted(out, key=lambda n: n["metadata"]["name"])


def inventory(nodes: Iterable[Obj], gpu_resource: str,
              stated: Callable[[str], tuple[int | None, str]]) -> list[NodeGpus]:
    """Each GPU node's inventory (``stated(name)``: the count and its source, or (None, "") where nothing states
    it; then the node's ``nvidia.com/gpu.count`` label) against what it advertises."""
    out = []
    for node in nodes:
        name = node["metadata"]["name"]
        labels = _labels(node)
        status = node.get("status") or {}
        count, source = stated(name)
        if count is None and _count(labels.get(GFD_COUNT)) is not None:
            count, source = _count(labels.get(GFD_COUNT)), f"GPU Feature Discovery's {GFD_COUNT} label"
        partitioned = next((f"{k.split('/')[-1]}={labels[k]}" for k in PARTITION_LABELS if labels.get(k)), "")
        out.append(NodeGpus(name, count, source, _count((status.get("capacity") or {}).get(gpu_resource)),
                            _count((status.get("allocatable") or {}).get(gpu_resource)), partitioned))
    return out
