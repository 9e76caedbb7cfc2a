"""The FGD paper's baseline policies, each scored as the authors' plugin scores it.

- ``random``: one feasible node drawn uniformly; a share on a random GPU with room.
- ``best-fit``: least leftover, ``int(100 (1 - (0.5 (cpu_free - cpu)/max_cpu + 0.5 (gpu_free - gpu)/max_gpu)))``.
- ``dot-product`` (Tetris): smallest dot product of the node's free vector and the pod's request, both
  normalised by the largest node, ``int(100 (1 - dot/2))``.
- ``gpu-packing``: a share on an already shared GPU first (``100 - free%/10``, at least 50), then idle GPUs
  of a used node (``50 - idle GPUs taken``, at least 33), then an idle node (``33 - its GPUs``).
- ``gpu-clustering``: nodes holding only pods of the same GPU kind (share, or the same whole-GPU count)
  first, then mixed nodes holding that kind, then nodes with no GPU pod, then the rest; within each band of
  25 points, the more of the largest node's GPU milli is in use, the higher.

All but ``random`` place a share on the best-fit GPU; CPU-only pods score 0 everywhere in ``gpu-packing``
and ``gpu-clustering`` (the tie-break decides).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from refplatform.core.jobs import HOLDING, Task
from refplatform.core.policies.policy import MAX_NODE_SCORE, NodeSpec, best_fit_gpus, kube_int
from refplatform.core.resources import MILLI_PER_GPU
from refplatform.core.state import ClusterState


class RandomPolicy:
    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def score(self, task: Task, state: ClusterState, idx: np.ndarray) -> np.ndarray:
        return self.rng.random(len(idx)) * MAX_NODE_SCORE

    def pick_gpus(self, task: Task, state: ClusterState, node: int) -> tuple[int, ...] | None:
        if task.gpu_count and task.gpu_milli < MILLI_PER_GPU:
            fitting = np.flatnonzero(state.gpu_free[node, : state.gpu_count[node]] >= task.gpu_milli)
            if len(fitting) == 0:
                return None
            return (int(fitting[self.rng.integers(len(fitting))]),)
        return state.best_fit_gpus(node, task.gpu_count, task.gpu_milli)


class BestFitPolicy:
    name = "best-fit"

    def __init__(self, integer: bool = True) -> None:
        self.integer = integer
        self.spec = NodeSpec()

    def score(self, task: Task, state: ClusterState, idx: np.ndarray) -> np.ndarray:
        spec = self.spec.of(state)
        left = ((state.cpu_free[idx] - task.cpu) / spec.cpu * 0.5
                + (state.gpu_free_total[idx] - task.gpu_total) / spec.gpu * 0.5)
        score = (1.0 - left) * MAX_NODE_SCORE
        return kube_int(score) if self.integer else score

    pick_gpus = staticmethod(best_fit_gpus)


class DotProductPolicy:
    name = "dot-product"

    def __init__(self) -> None:
        self.spec = NodeSpec()

    def score(self, task: Task, state: ClusterState, idx: np.ndarray) -> np.ndarray:
        spec = self.spec.of(state)
        dot = ((state.cpu_free[idx] / spec.cpu) * (task.cpu / spec.cpu)
               + (state.gpu_free_total[idx] / spec.gpu) * (task.gpu_total / spec.gpu))
        return kube_int(MAX_NODE_SCORE * (1.0 - dot / 2))

    pick_gpus = staticmethod(best_fit_gpus)


class GpuPackingPolicy:
    name = "gpu-packing"

    def score(self, task: Task, state: ClusterState, idx: np.ndarray) -> np.ndarray:
        if task.gpu_total == 0:
            return np.zeros(len(idx))
        free_gpus = state.full_free[idx]
        idle_node = free_gpus == state.gpu_count[idx]
        idle_score = np.maximum(MAX_NODE_SCORE // 3 - free_gpus, free_gpus)
        if task.gpu_milli >= MILLI_PER_GPU:  # whole GPUs: only idle ones can serve
            used_score = np.full(len(idx), max(MAX_NODE_SCORE // 2 - task.gpu_count, MAX_NODE_SCORE // 3))
        else:  # a share goes on the GPU with the least room that fits
            free = state.gpu_free[idx]
            valid = (free >= task.gpu_milli) & (np.arange(free.shape[1])[None, :] < state.gpu_count[idx][:, None])
            tightest = np.where(valid, free, np.iinfo(np.int64).max).min(axis=1)
            shared = MAX_NODE_SCORE - (tightest * 100 // MILLI_PER_GPU) // 10
            used_score = np.where(tightest >= MILLI_PER_GPU, max(MAX_NODE_SCORE // 2 - 1, MAX_NODE_SCORE // 3),
                                  np.maximum(shared, MAX_NODE_SCORE // 2))
        return np.where(idle_node, idle_score, used_score).astype(np.float64)

    pick_gpus = staticmethod(best_fit_gpus)


SHARE = -1
"""The gpu-clustering kind of a GPU share; a whole-GPU pod's kind is its GPU count."""


def gpu_kind(task: Task) -> int:
    """0 for CPU-only, :data:`SHARE` for a share, else the number of whole GPUs."""
    if task.gpu_count == 0:
        return 0
    return SHARE if task.gpu_milli < MILLI_PER_GPU else task.gpu_count


class GpuClusteringPolicy:
    """Keeps per node how many pods of each GPU kind it holds (fed by the plugin's RESERVE/UNRESERVE)."""

    name = "gpu-clustering"

    def __init__(self) -> None:
        self.spec = NodeSpec()
        self.counts: dict[int, np.ndarray] = {}
        self.kinds: np.ndarray | None = None
        """Number of distinct GPU kinds held per node."""

    def start(self, state: ClusterState, held: Iterable[Task]) -> None:
        self.counts, self.kinds = {}, np.zeros(state.size, dtype=np.int64)
        for task in held:
            if task.status in HOLDING and task.node >= 0:
                self.add(task)

    def _change(self, task: Task, by: int) -> None:
        kind = gpu_kind(task)
        if kind == 0 or task.node < 0 or self.kinds is None:
            return
        col = self.counts.setdefault(kind, np.zeros(len(self.kinds), dtype=np.int64))
        before = col[task.node] > 0
        col[task.node] += by
        self.kinds[task.node] += int(col[task.node] > 0) - int(before)

    def add(self, task: Task) -> None:
        self._change(task, 1)

    def remove(self, task: Task) -> None:
        self._change(task, -1)

    def score(self, task: Task, state: ClusterState, idx: np.ndarray) -> np.ndarray:
        kind = gpu_kind(task)
        if kind == 0:
            return np.zeros(len(idx))
        if self.kinds is None:
            self.start(state, ())
        assert self.kinds is not None
        spec_gpu = int(self.spec.of(state).gpu)
        quarter = MAX_NODE_SCORE // 4
        base = quarter * (spec_gpu - state.gpu_free_total[idx]) // spec_gpu
        col = self.counts.get(kind)
        same = col[idx] > 0 if col is not None else np.zeros(len(idx), dtype=bool)
        kinds = self.kinds[idx]
        band = np.where(same, np.where(kinds == 1, 3, 2), np.where(kinds == 0, 1, 0))
        return (base + band * quarter).astype(np.float64)

    pick_gpus = staticmethod(best_fit_gpus)
