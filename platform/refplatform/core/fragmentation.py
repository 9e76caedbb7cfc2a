"""GPU fragmentation as defined by FGD (Weng et al., USENIX ATC'23).

Given the workload's *typical pods* (the most frequent pod shapes, covering 95 %
of the pods, with their frequencies ``p_k``), the fragmentation of a node is the
expected amount of its idle GPU milli that a pod drawn from that distribution
could *not* use:

``F(node) = sum_k p_k * f_k(node)`` where ``f_k`` is

- the milli left on GPUs with less than the shape's per-GPU request, when the
  node can host shape ``k`` (enough CPU, enough GPUs with room, allowed model);
- all idle GPU milli of the node otherwise (and for CPU-only shapes, as in the
  authors' simulator).

FGD places each pod where ``F`` grows least.  The computation is vectorised:
with thresholds ``M`` (the distinct per-GPU requests), a node is summarised by
``cnt[m]`` (GPUs with at least ``m`` free) and ``S[m]`` (milli on those GPUs), so
``F = P * L - sum_k p_k * ok_k * S[m_k]`` where ``L`` is the node's idle milli.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from refplatform.core.errors import ConfigError
from refplatform.core.resources import MILLI_PER_GPU, Resources

DEFAULT_COVERAGE = 0.95


@dataclass(frozen=True, slots=True, order=True)
class PodShape:
    """The part of a pod that matters for fragmentation."""

    cpu_milli: int
    gpu_milli: int
    """Per GPU: 1000 for whole GPUs, 1..999 for a share, 0 for CPU-only."""
    gpus: int
    """How many GPUs (1 for a share, 0 for CPU-only)."""
    gpu_models: tuple[str, ...] = ()
    """Allowed GPU models; empty means any."""

    @classmethod
    def of(cls, requests: Resources, gpu_models: Iterable[str] = ()) -> PodShape:
        models = tuple(sorted(set(gpu_models)))
        if requests.gpus:
            return cls(requests.cpu_milli, MILLI_PER_GPU, requests.gpus, models)
        if requests.gpu_milli:
            return cls(requests.cpu_milli, requests.gpu_milli, 1, models)
        return cls(requests.cpu_milli, 0, 0, models)


@dataclass(frozen=True, slots=True)
class TypicalPods:
    """A distribution over pod shapes (weights sum to 1)."""

    shapes: tuple[PodShape, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.shapes) != len(self.weights) or not self.shapes:
            raise ConfigError("typical pods need one weight per shape and at least one shape")
        if any(w < 0 for w in self.weights) or abs(sum(self.weights) - 1.0) > 1e-6:
            raise ConfigError("typical pod weights must be >= 0 and sum to 1")

    @classmethod
    def from_shapes(cls, shapes: Iterable[PodShape], coverage: float = DEFAULT_COVERAGE) -> TypicalPods:
        """The most frequent shapes covering ``coverage`` of the pods, renormalised.

        Same rule as the FGD artifact (``GetTypicalPods`` with CPU pods included,
        threshold 95 %, step 1): shapes sorted by count, ties by larger shape first.
        """
        counts = Counter(shapes)
        if not counts:
            raise ConfigError("cannot derive typical pods from an empty workload")
        total = sum(counts.values())
        ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0].cpu_milli, kv[0].gpu_milli,
                                                        kv[0].gpus, kv[0].gpu_models), reverse=True)
        chosen: list[tuple[PodShape, int]] = []
        cum = 0
        for shape, count in ranked:
            if cum >= coverage * total:
                break
            chosen.append((shape, count))
            cum += count
        return cls(tuple(s for s, _ in chosen), tuple(c / cum for _, c in chosen))


class FragmentationModel:
    """Typical pods compiled against a cluster's GPU model table."""

    def __init__(self, typical: TypicalPods, model_names: Sequence[str]) -> None:
        self.typical = typical
        gpu = [(s, w) for s, w in zip(typical.shapes, typical.weights) if s.gpu_milli > 0]
        self.total_weight = float(sum(typical.weights))
        self.thresholds = np.array(sorted({s.gpu_milli for s, _ in gpu}) or [MILLI_PER_GPU], dtype=np.int64)
        pos = {int(m): i for i, m in enumerate(self.thresholds)}
        self.k_cpu = np.array([s.cpu_milli for s, _ in gpu], dtype=np.int64)
        self.k_count = np.array([s.gpus for s, _ in gpu], dtype=np.int64)
        self.k_thr = np.array([pos[s.gpu_milli] for s, _ in gpu], dtype=np.int64)
        self.k_weight = np.array([w for _, w in gpu], dtype=np.float64)
        self.access = np.array(
            [[(not s.gpu_models) or (model != "" and model in s.gpu_models) for s, _ in gpu]
             for model in model_names], dtype=bool).reshape(len(model_names), len(gpu))

    def summarise(self, free: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-state ``L`` (idle milli), ``cnt[m]`` and ``S[m]`` from per-GPU free milli ``(..., G)``."""
        ge = free[..., :, None] >= self.thresholds
        cnt = ge.sum(axis=-2)
        sums = (free[..., :, None] * ge).sum(axis=-2)
        return free.sum(axis=-1), cnt, sums

    def frag(self, cpu: np.ndarray, idle: np.ndarray, cnt: np.ndarray, sums: np.ndarray,
             model: np.ndarray) -> np.ndarray:
        """Fragmentation (milli) of states given by their summaries; any leading shape."""
        ok = self.access[model]
        ok = ok & (cpu[..., None] >= self.k_cpu)
        ok = ok & (cnt[..., self.k_thr] >= self.k_count)
        usable = (ok * sums[..., self.k_thr]) @ self.k_weight
        return idle * self.total_weight - usable

    def frag_of(self, cpu: np.ndarray, free: np.ndarray, model: np.ndarray) -> np.ndarray:
        idle, cnt, sums = self.summarise(free)
        return self.frag(cpu, idle, cnt, sums, model)


class FragmentationTracker:
    """Per-node fragmentation of a :class:`~refplatform.core.state.ClusterState`,
    refreshed lazily for the nodes whose version changed."""

    def __init__(self, model: FragmentationModel, state) -> None:  # state: ClusterState
        self.model = model
        self.state = state
        n = state.size
        self.seen = np.full(n, -1, dtype=np.int64)
        self.idle = np.zeros(n, dtype=np.int64)
        self.cnt = np.zeros((n, len(model.thresholds)), dtype=np.int64)
        self.sums = np.zeros((n, len(model.thresholds)), dtype=np.int64)
        self.frag = np.zeros(n, dtype=np.float64)

    def refresh(self, idx: np.ndarray | None = None) -> None:
        st = self.state
        if idx is None:
            stale = np.flatnonzero(self.seen != st.version)
        else:
            stale = idx[self.seen[idx] != st.version[idx]]
        if len(stale) == 0:
            return
        idle, cnt, sums = self.model.summarise(st.gpu_free[stale])
        self.idle[stale] = idle
        self.cnt[stale] = cnt
        self.sums[stale] = sums
        self.frag[stale] = self.model.frag(st.cpu_free[stale], idle, cnt, sums, st.model_id[stale])
        self.seen[stale] = st.version[stale]

    def totals(self) -> tuple[float, int]:
        """(fragmented milli, idle milli) over the whole cluster."""
        self.refresh()
        return float(self.frag.sum()), int(self.idle.sum())

    def deltas(self, idx: np.ndarray, cpu: int, count: int, milli: int) -> tuple[np.ndarray, np.ndarray]:
        """Growth of fragmentation if a pod (``cpu``, ``count`` x ``milli``) went to
        each node in ``idx``, and for a GPU share the best GPU index per node.

        Nodes where the pod does not fit get ``+inf``.
        """
        self.refresh(idx)
        st, m = self.state, self.model
        before = self.frag[idx]
        cpu_after = st.cpu_free[idx] - cpu
        model = st.model_id[idx]
        choice = np.full(len(idx), -1, dtype=np.int64)
        if count == 0:
            after = m.frag(cpu_after, self.idle[idx], self.cnt[idx], self.sums[idx], model)
        elif milli >= MILLI_PER_GPU:
            after = m.frag(cpu_after, self.idle[idx] - count * MILLI_PER_GPU, self.cnt[idx] - count,
                           self.sums[idx] - count * MILLI_PER_GPU, model)
            after = np.where(st.full_free[idx] >= count, after, np.inf)
        else:
            free = st.gpu_free[idx]                                   # (Y, G)
            rest = free - milli
            thr = m.thresholds
            cnt = (self.cnt[idx][:, None, :] - (free[:, :, None] >= thr) + (rest[:, :, None] >= thr))
            sums = (self.sums[idx][:, None, :] - free[:, :, None] * (free[:, :, None] >= thr)
                    + rest[:, :, None] * (rest[:, :, None] >= thr))
            idle = (self.idle[idx] - milli)[:, None]
            per_gpu = m.frag(np.broadcast_to(cpu_after[:, None], free.shape), idle, cnt, sums,
                             np.broadcast_to(model[:, None], free.shape))
            valid = (free >= milli) & (np.arange(free.shape[1])[None, :] < st.gpu_count[idx][:, None])
            per_gpu = np.where(valid, per_gpu, np.inf)
            choice = per_gpu.argmin(axis=1)
            after = per_gpu[np.arange(len(idx)), choice]
        after = np.where(cpu_after >= 0, after, np.inf)
        return after - before, choice
