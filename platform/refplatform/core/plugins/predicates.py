"""Node filters (kube-scheduler's NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit), vectorised over nodes; static results are cached per pod spec."""

from __future__ import annotations

import numpy as np

from refplatform.core.framework import ExtensionPoint, Plugin, Session, register_plugin
from refplatform.core.jobs import Task
from refplatform.core.node import Taint, TaintEffect
from refplatform.core.resources import CPU, GPU, GPU_MILLI, MEMORY, MILLI_PER_GPU
from refplatform.core.state import ClusterState

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE)


class NodeUnschedulable:
    name = "NodeUnschedulable"
    reason = "node(s) were unschedulable"

    def __init__(self) -> None:
        self._cache: dict[tuple, np.ndarray] = {}

    def mask(self, task: Task, state: ClusterState) -> np.ndarray:
        key = task.pod.tolerations
        hit = self._cache.get(key)
        if hit is None:
            tolerates = any(t.tolerates(UNSCHEDULABLE_TAINT) for t in key)
            hit = state.all_nodes if tolerates else state.schedulable
            self._cache[key] = hit
        return hit

    def explain(self, task: Task, state: ClusterState) -> list[tuple[str, np.ndarray]]:
        return [(self.reason, ~self.mask(task, state))]


class TaintToleration:
    name = "TaintToleration"

    def __init__(self) -> None:
        self._cache: dict[tuple, tuple[np.ndarray, list[tuple[str, np.ndarray]]]] = {}

    def _compute(self, task: Task, state: ClusterState) -> tuple[np.ndarray, list[tuple[str, np.ndarray]]]:
        key = task.pod.tolerations
        hit = self._cache.get(key)
        if hit is None:
            ok = np.ones(state.size, dtype=bool)
            by_reason: dict[str, np.ndarray] = {}
            for i, node in enumerate(state.nodes):
                if not node.taints:
                    continue
                taint = task.pod.untolerated_taint(node)
                if taint is not None:
                    ok[i] = False
                    reason = f"node(s) had untolerated taint {taint.describe()}"
                    by_reason.setdefault(reason, np.zeros(state.size, dtype=bool))[i] = True
            hit = (state.all_nodes if ok.all() else ok, list(by_reason.items()))
            self._cache[key] = hit
        return hit

    def mask(self, task: Task, state: ClusterState) -> np.ndarray:
        return self._compute(task, state)[0]

    def explain(self, task: Task, state: ClusterState) -> list[tuple[str, np.ndarray]]:
        return self._compute(task, state)[1]


class NodeAffinity:
    name = "NodeAffinity"
    reason = "node(s) didn't match Pod's node affinity/selector"

    def __init__(self) -> None:
        self._cache: dict[tuple, np.ndarray] = {}

    def mask(self, task: Task, state: ClusterState) -> np.ndarray:
        pod = task.pod
        if not pod.node_selector and not pod.affinity:
            return state.all_nodes
        key = task.placement_key[:2]
        hit = self._cache.get(key)
        if hit is None:
            hit = np.fromiter((pod.matches_node_labels(node) for node in state.nodes), dtype=bool,
                              count=state.size)
            self._cache[key] = hit
        return hit

    def explain(self, task: Task, state: ClusterState) -> list[tuple[str, np.ndarray]]:
        return [(self.reason, ~self.mask(task, state))]


class NodeResourcesFit:
    """CPU, memory, whole GPUs (enough idle GPUs), a GPU share (one GPU with room) and
    extended resources (enough of each free on the node, e.g. ``nvidia.com/mig-1g.18gb``)."""

    name = "NodeResourcesFit"

    def _parts(self, task: Task, state: ClusterState) -> list[tuple[str, np.ndarray]]:
        parts = []
        if task.cpu:
            parts.append((CPU, state.cpu_free >= task.cpu))
        if task.mem:
            parts.append((MEMORY, state.mem_free >= task.mem))
        if task.gpu_count:
            if task.gpu_milli >= MILLI_PER_GPU:
                parts.append((GPU, state.full_free >= task.gpu_count))
            else:
                parts.append((GPU_MILLI, (state.gpu_free >= task.gpu_milli).any(axis=1)))
        for name, amount in task.ext:
            parts.append((name, state.ext_fits(name, amount)))
        return parts

    def mask(self, task: Task, state: ClusterState) -> np.ndarray:
        mask = None
        if task.cpu:
            mask = state.cpu_free >= task.cpu
        if task.mem:
            m = state.mem_free >= task.mem
            mask = m if mask is None else mask & m
        if task.gpu_count:
            if task.gpu_milli >= MILLI_PER_GPU:
                m = state.full_free >= task.gpu_count
            else:
                m = (state.gpu_free >= task.gpu_milli).any(axis=1)
            mask = m if mask is None else mask & m
        for name, amount in task.ext:
            m = state.ext_fits(name, amount)
            mask = m if mask is None else mask & m
        return state.all_nodes if mask is None else mask

    def explain(self, task: Task, state: ClusterState) -> list[tuple[str, np.ndarray]]:
        return [(f"Insufficient {name}", ~ok) for name, ok in self._parts(task, state)]


@register_plugin
class PredicatesPlugin(Plugin):
    name = "predicates"

    def on_session_open(self, ssn: Session) -> None:
        for flt in (NodeUnschedulable(), TaintToleration(), NodeAffinity(), NodeResourcesFit()):
            ssn.add_fn(ExtensionPoint.FILTER, self.name, flt)
