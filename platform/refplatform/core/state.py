"""Mutable per-node free resources as numpy arrays: the working copy a cycle edits.

Every filter and score plugin reads these arrays, vectorised over nodes, both in
a full :func:`~refplatform.core.scheduler.schedule` cycle and in the replay's
one-pod-at-a-time :class:`~refplatform.core.placer.Placer`.  ``version[i]``
changes whenever node ``i`` changes, so plugins may cache per-node results.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from refplatform.core.errors import SnapshotError
from refplatform.core.node import Node
from refplatform.core.resources import GPU_MODEL_LABEL, MILLI_PER_GPU


class ClusterState:
    """Free CPU, memory and per-GPU milli of every node, plus static node facts."""

    def __init__(self, nodes: Sequence[Node], gpu_model_label: str = GPU_MODEL_LABEL,
                 topology_key: str | None = None) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        n = len(self.nodes)
        self.names: list[str] = [nd.name for nd in self.nodes]
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != n:
            raise SnapshotError("duplicate node names in snapshot")
        self.cpu_alloc = np.array([nd.allocatable.cpu_milli for nd in self.nodes], dtype=np.int64)
        self.mem_alloc = np.array([nd.allocatable.memory_bytes for nd in self.nodes], dtype=np.int64)
        self.gpu_count = np.array([nd.allocatable.gpus for nd in self.nodes], dtype=np.int64)
        self.cpu_free = self.cpu_alloc.copy()
        self.mem_free = self.mem_alloc.copy()
        width = max(1, int(self.gpu_count.max(initial=0)))
        self.gpu_free = np.zeros((n, width), dtype=np.int64)
        self.gpu_free[np.arange(width)[None, :] < self.gpu_count[:, None]] = MILLI_PER_GPU
        self.full_free = self.gpu_count.copy()
        """Number of completely idle GPUs per node."""
        self.gpu_free_total = self.gpu_count * MILLI_PER_GPU
        self.version = np.zeros(n, dtype=np.int64)
        self._tick = 0
        models = [nd.labels.get(gpu_model_label, "") for nd in self.nodes]
        self.model_names: list[str] = sorted(set(models))
        model_pos = {m: i for i, m in enumerate(self.model_names)}
        self.model_id = np.array([model_pos[m] for m in models], dtype=np.int64)
        self.schedulable = np.array([not nd.unschedulable for nd in self.nodes], dtype=bool)
        self.topology_key = topology_key
        domains = [nd.labels.get(topology_key) if topology_key else None for nd in self.nodes]
        self.domain_names: list[str] = sorted({d for d in domains if d is not None})
        dom_pos = {d: i for i, d in enumerate(self.domain_names)}
        self.domain_id = np.array([dom_pos.get(d, -1) if d is not None else -1 for d in domains],
                                  dtype=np.int64)
        self.all_nodes = np.ones(n, dtype=bool)

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def width(self) -> int:
        return self.gpu_free.shape[1]

    def _touch(self, i: int) -> None:
        self._tick += 1
        self.version[i] = self._tick

    def allocate(self, i: int, cpu: int, mem: int, gpus: tuple[int, ...], milli: int) -> None:
        """Take ``cpu``/``mem`` and ``milli`` on each GPU index in ``gpus`` from node ``i``."""
        self.cpu_free[i] -= cpu
        self.mem_free[i] -= mem
        row = self.gpu_free[i]
        for g in gpus:
            if row[g] == MILLI_PER_GPU:
                self.full_free[i] -= 1
            row[g] -= milli
        self.gpu_free_total[i] -= milli * len(gpus)
        self._touch(i)

    def release(self, i: int, cpu: int, mem: int, gpus: tuple[int, ...], milli: int) -> None:
        """Undo :meth:`allocate`."""
        self.cpu_free[i] += cpu
        self.mem_free[i] += mem
        row = self.gpu_free[i]
        for g in gpus:
            row[g] += milli
            if row[g] == MILLI_PER_GPU:
                self.full_free[i] += 1
        self.gpu_free_total[i] += milli * len(gpus)
        self._touch(i)

    def gpus_fit(self, i: int, gpus: tuple[int, ...], milli: int) -> bool:
        row = self.gpu_free[i]
        return all(0 <= g < self.gpu_count[i] and row[g] >= milli for g in gpus) and len(set(gpus)) == len(gpus)

    def best_fit_gpus(self, i: int, count: int, milli: int) -> tuple[int, ...] | None:
        """Deterministic GPU choice: whole GPUs = lowest idle indices; a share = the
        GPU with the least free milli that still fits (lowest index on ties)."""
        if count == 0:
            return ()
        row = self.gpu_free[i, : self.gpu_count[i]]
        if milli >= MILLI_PER_GPU:
            idle = np.flatnonzero(row == MILLI_PER_GPU)
            return tuple(int(g) for g in idle[:count]) if len(idle) >= count else None
        fitting = np.flatnonzero(row >= milli)
        if len(fitting) == 0:
            return None
        return (int(fitting[np.argmin(row[fitting])]),)

    def copy(self) -> ClusterState:
        other = object.__new__(ClusterState)
        other.__dict__.update(self.__dict__)
        for name in ("cpu_free", "mem_free", "gpu_free", "full_free", "gpu_free_total", "version"):
            setattr(other, name, getattr(self, name).copy())
        return other

    def emptied(self) -> ClusterState:
        """A copy with every node idle (for planning reservations by capacity)."""
        other = self.copy()
        other.cpu_free[:] = self.cpu_alloc
        other.mem_free[:] = self.mem_alloc
        width = self.width
        other.gpu_free[:] = 0
        other.gpu_free[np.arange(width)[None, :] < self.gpu_count[:, None]] = MILLI_PER_GPU
        other.full_free[:] = self.gpu_count
        other.gpu_free_total[:] = self.gpu_count * MILLI_PER_GPU
        other._tick = self._tick + 1
        other.version[:] = other._tick
        return other

    def gpu_used_milli(self) -> int:
        return int((self.gpu_count * MILLI_PER_GPU - self.gpu_free_total).sum())

    def gpu_capacity_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI_PER_GPU
