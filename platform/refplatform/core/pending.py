"""Why pending GPU demand is not placed: the reason the accounting's fragmentation hole reads.

At the close of a cycle every job (gang) that still has pending pods gets one
:class:`Unplaced`: a :class:`~refplatform.core.accounting.PendingReason` and a
message in words and numbers.  It is computed purely from the session state at
close (committed binds included, tentative placements discarded), in this order:

1. ``Quota``: its queue's capability or quota refused it (:attr:`Hold.QUOTA`).
2. ``Other``: it cannot be placed as specified (pod group or queue missing,
   queue closed), or its pending pods request no whole GPUs (``nvidia.com/gpu``).
3. ``InsufficientCapacity``: its pending GPU demand (the sum of the
   ``nvidia.com/gpu`` requests of its pending pods) exceeds the idle GPUs of all
   usable nodes (Ready and not cordoned).
4. ``Other``: the idle GPUs on the nodes its pods may use (node selector,
   affinity, taints, nodes reserved for another gang) do not cover the demand:
   those rules, not the cluster's shape, are what stops it.
5. ``Fragmentation``: enough idle GPUs on those nodes, but they cannot hold its
   pods' GPU requests node by node (best-fit decreasing packing fails): no node
   had room.
6. ``Other``: the GPUs would fit; something else held it (CPU or memory,
   head-of-line order, a gang that is not ready for other reasons).

Conservative by construction: ``Fragmentation`` is said only when idle GPUs
suffice and their packing fails, so no demand is counted as a leak that the
cluster could not have served.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from refplatform.core.accounting import PendingReason
from refplatform.core.jobs import Hold, Job, Task
from refplatform.core.node_filter import NodeFilter
from refplatform.core.resources import MILLI_PER_GPU
from refplatform.core.state import ClusterState

__all__ = ["RESOURCE_FILTERS", "Unplaced", "cluster_free_gpus", "unplaced"]

RESOURCE_FILTERS = frozenset({"NodeResourcesFit"})
"""Filters that test free resources; every other filter is a rule about which nodes a pod may use."""


@dataclass(frozen=True, slots=True)
class Unplaced:
    """Why one job's pending pods are not placed, for the accounting and for people."""

    reason: PendingReason
    """The accounting's reason (only ``Fragmentation`` counts in a hole)."""
    message: str
    """The reason in words and numbers, for people (the pod's ``firedrill.dev/Unplaced`` message)."""
    gpus: int = 0
    """The job's pending GPU demand (whole GPUs)."""


def cluster_free_gpus(state: ClusterState) -> int:
    """Idle GPUs (no pod holds any share of them) on usable nodes: Ready and not cordoned."""
    return int(state.full_free[state.schedulable].sum())


def _gpu_tasks(job: Job) -> list[Task]:
    return [t for t in job.pending() if t.gpu_count and t.gpu_milli >= MILLI_PER_GPU]


def _needs(job: Job, sizes: list[int]) -> str:
    who = f"pod group {job.name} " if job.group is not None else ""
    total = sum(sizes)
    if len(sizes) == 1:
        return f"{who}needs {total} GPUs"
    if len(set(sizes)) == 1:
        return f"{who}needs {total} GPUs for {len(sizes)} pods of {sizes[0]}"
    return f"{who}needs {total} GPUs for {len(sizes)} pods of up to {max(sizes)}"


def _may_use(tasks: list[Task], state: ClusterState, filters: list[NodeFilter]) -> np.ndarray:
    """Nodes every pending GPU pod of the job may use by the rules (not by free resources)."""
    rules = [f for f in filters if f.name not in RESOURCE_FILTERS]
    mask = state.all_nodes.copy()
    seen: set[tuple] = set()
    for task in tasks:
        if task.placement_key in seen:
            continue
        seen.add(task.placement_key)
        for flt in rules:
            mask &= flt.mask(task, state)
    return mask


def _packs(sizes: list[int], free: list[int]) -> bool:
    """Best-fit decreasing: can pods of ``sizes`` GPUs each go onto nodes with ``free`` idle GPUs?"""
    room = sorted(free)
    for size in sorted(sizes, reverse=True):
        i = bisect.bisect_left(room, size)
        if i == len(room):
            return False
        left = room.pop(i) - size
        if left:
            bisect.insort(room, left)
    return True


def unplaced(job: Job, state: ClusterState, filters: list[NodeFilter], cluster_free: int) -> Unplaced:
    """The reason and message for ``job``'s pending pods (see the module docstring for the order)."""
    if job.hold is Hold.QUOTA:
        return Unplaced(PendingReason.QUOTA, f"held by its queue: {job.hold_message}")
    if job.hold is Hold.INVALID:
        return Unplaced(PendingReason.OTHER, f"cannot be placed as specified: {job.hold_message}")
    tasks = _gpu_tasks(job)
    sizes = [t.gpu_count for t in tasks]
    demand = sum(sizes)
    if not demand:
        return Unplaced(PendingReason.OTHER, "requests no whole GPUs (nvidia.com/gpu); "
                                             "not placed for another reason (see PodScheduled)")
    needs = _needs(job, sizes)
    if demand > cluster_free:
        return Unplaced(PendingReason.INSUFFICIENT_CAPACITY, f"{needs}: only {cluster_free} free in the cluster",
                        demand)
    free = state.full_free[_may_use(tasks, state, filters)]
    usable = int(free.sum())
    if demand > usable:
        return Unplaced(PendingReason.OTHER, f"{needs}: {cluster_free} free in the cluster, only {usable} on "
                                             f"nodes it may use (selector, affinity, taints, reservations)", demand)
    most = int(free.max(initial=0))
    if most < max(sizes) or (len(sizes) > 1 and not _packs(sizes, [int(n) for n in free if n])):
        return Unplaced(PendingReason.FRAGMENTATION, f"{needs}: {cluster_free} free in the cluster, "
                                                     f"at most {most} on one node", demand)
    return Unplaced(PendingReason.OTHER, f"{needs}: {cluster_free} free in the cluster and room for them on "
                                         f"nodes it may use; not placed for another reason (see PodScheduled)",
                    demand)
