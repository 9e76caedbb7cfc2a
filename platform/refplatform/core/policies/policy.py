"""What a placement policy offers the ``placement`` plugin, and helpers they share."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from refplatform.core.jobs import Task
from refplatform.core.resources import MILLI_PER_GPU
from refplatform.core.state import ClusterState

MAX_NODE_SCORE = 100
"""kube-scheduler's ``framework.MaxNodeScore``."""


class PlacementPolicy(Protocol):
    name: str

    def score(self, task: Task, state: ClusterState, idx: np.ndarray) -> np.ndarray:
        """Scores 0..100 of the candidate nodes ``idx`` (all feasible); higher is better."""
        ...

    def pick_gpus(self, task: Task, state: ClusterState, node: int) -> tuple[int, ...] | None:
        """GPU indices on the chosen node (``()`` for a CPU-only pod, ``None`` if it does not fit)."""
        ...


def kube_int(scores: np.ndarray) -> np.ndarray:
    """Go's ``int64(score)`` for scores >= 0: the integer part."""
    return np.floor(scores)


class NodeSpec:
    """The largest node's CPU and GPU milli: the normaliser of best-fit, dot-product and gpu-clustering
    (the artifact's ``MaxSpecCpu`` 128 cores and ``MaxSpecGpu`` 8 GPUs, the largest openb node)."""

    def __init__(self) -> None:
        self._state: ClusterState | None = None
        self.cpu = 1.0
        self.gpu = float(MILLI_PER_GPU)

    def of(self, state: ClusterState) -> NodeSpec:
        if state is not self._state:
            self._state = state
            self.cpu = float(max(1, state.cpu_alloc.max(initial=1)))
            self.gpu = float(max(1, state.gpu_count.max(initial=1)) * MILLI_PER_GPU)
        return self


def best_fit_gpus(task: Task, state: ClusterState, node: int) -> tuple[int, ...] | None:
    """The artifact's ``best`` GPU choice: a share on the GPU with the least room that fits, whole GPUs on
    the lowest idle indices."""
    return state.best_fit_gpus(node, task.gpu_count, task.gpu_milli)
