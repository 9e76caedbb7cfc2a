"""Mutable per-node free resources as numpy arrays: the working copy a cycle edits.

Every filter and score plugin reads these arrays, vectorised over nodes, both in
a full :func:`~refplatform.core.scheduler.schedule` cycle and in the replay's
one-pod-at-a-time :class:`~refplatform.core.placer.Placer`.  ``version[i]``
changes whenever node ``i`` changes, so plugins may cache per-node results.

Extended resources (``nvidia.com/mig-1g.18gb``, ``nvidia.com/gpu.shared``,
``nvidia.com/gpumem``, ...) are plain integer amounts per node: one free-amount
array per resource name that any node advertises (``ext_free[name][i]``), no
GPU indices.  A pod's request for a name no node advertises fits nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from refplatform.core.errors import SnapshotError
from refplatform.core.node import Node
from refplatform.core.resources import GPU_MODEL_LABEL, MILLI_PER_GPU, Extended
from refplatform.core.topology import DomainIndex


class ClusterState:
    """Free CPU, memory, per-GPU milli and extended resources of every node, plus static node facts."""

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
        self.gpu_count = np.array([nd.gpu_slots for nd in self.nodes], dtype=np.int64)
        self.cpu_free = self.cpu_alloc.copy()
        self.mem_free = self.mem_alloc.copy()
        width = max(1, int(self.gpu_count.max(initial=0)))
        self.gpu_free = np.zeros((n, width), dtype=np.int64)
        self.gpu_free[np.arange(width)[None, :] < self.gpu_count[:, None]] = MILLI_PER_GPU
        self.full_free = self.gpu_count.copy()
        """Number of completely idle GPUs per node."""
        self.gpu_free_total = self.gpu_count * MILLI_PER_GPU
        self._withdraw()
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
        self.no_nodes = np.zeros(n, dtype=bool)
        names = sorted({name for nd in self.nodes for name, _ in nd.allocatable.extended})
        self.ext_names: list[str] = names
        self.ext_alloc: dict[str, np.ndarray] = {name: np.zeros(n, dtype=np.int64) for name in names}
        for i, nd in enumerate(self.nodes):
            for name, amount in nd.allocatable.extended:
                self.ext_alloc[name][i] = amount
        self.ext_free: dict[str, np.ndarray] = {name: a.copy() for name, a in self.ext_alloc.items()}
        """Free amount of each extended resource per node."""
        self._domains: dict[str, DomainIndex] = {}

    def domains(self, key: str) -> DomainIndex:
        """The domains of node label ``key`` (a gang's topology request), built once per label: labels are
        static facts of the snapshot, shared by copies."""
        found = self._domains.get(key)
        if found is None:
            found = self._domains[key] = DomainIndex.of(self.nodes, key)
        return found

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def width(self) -> int:
        return self.gpu_free.shape[1]

    def _touch(self, i: int) -> None:
        self._tick += 1
        self.version[i] = self._tick

    def allocate(self, i: int, cpu: int, mem: int, gpus: tuple[int, ...], milli: int,
                 ext: Extended = ()) -> None:
        """Take ``cpu``/``mem``, ``milli`` on each GPU index in ``gpus`` and the extended
        amounts ``ext`` from node ``i`` (a name no node advertises is not tracked)."""
        self.cpu_free[i] -= cpu
        self.mem_free[i] -= mem
        for name, amount in ext:
            col = self.ext_free.get(name)
            if col is not None:
                col[i] -= amount
        row = self.gpu_free[i]
        for g in gpus:
            if row[g] == MILLI_PER_GPU:
                self.full_free[i] -= 1
            row[g] -= milli
        self.gpu_free_total[i] -= milli * len(gpus)
        self._touch(i)

    def release(self, i: int, cpu: int, mem: int, gpus: tuple[int, ...], milli: int,
                ext: Extended = ()) -> None:
        """Undo :meth:`allocate`."""
        self.cpu_free[i] += cpu
        self.mem_free[i] += mem
        for name, amount in ext:
            col = self.ext_free.get(name)
            if col is not None:
                col[i] += amount
        row = self.gpu_free[i]
        for g in gpus:
            row[g] += milli
            if row[g] == MILLI_PER_GPU:
                self.full_free[i] += 1
        self.gpu_free_total[i] += milli * len(gpus)
        self._touch(i)

    def ext_fits(self, name: str, amount: int) -> np.ndarray:
        """Nodes with at least ``amount`` of extended resource ``name`` free."""
        col = self.ext_free.get(name)
        return self.no_nodes if col is None else col >= amount

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

    def _withdraw(self) -> None:
        """Take the GPUs out of service off what is free (on an idle state: right after construction)."""
        for i, nd in enumerate(self.nodes):
            for g in nd.withdrawn_gpus:
                if 0 <= g < self.gpu_count[i] and self.gpu_free[i, g] == MILLI_PER_GPU:
                    self.gpu_free[i, g] = 0
                    self.full_free[i] -= 1
                    self.gpu_free_total[i] -= MILLI_PER_GPU

    def copy(self) -> ClusterState:
        other = object.__new__(ClusterState)
        other.__dict__.update(self.__dict__)
        for name in ("cpu_free", "mem_free", "gpu_free", "full_free", "gpu_free_total", "version"):
            setattr(other, name, getattr(self, name).copy())
        other.ext_free = {name: col.copy() for name, col in self.ext_free.items()}
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
        other._withdraw()
        other.ext_free = {name: col.copy() for name, col in self.ext_alloc.items()}
        other._tick = self._tick + 1
        other.version[:] = other._tick
        return other

    def gpu_used_milli(self) -> int:
        return int((self.gpu_count * MILLI_PER_GPU - self.gpu_free_total).sum())

    def gpu_capacity_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI_PER_GPU
