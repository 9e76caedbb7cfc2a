"""Reservation: backfill without starvation.

Small pods may take idle GPUs while a large gang waits.  Once a gang has waited
longer than ``SchedulerConfig.starvation_seconds`` (snapshot clock), it is served
first, and if it still does not fit, nodes are reserved for it: the nodes where
its pods would go on an idle cluster, preferring those with the most free GPUs
now (all inside one domain for a gang whose topology requires one).  No other
job may use reserved nodes, so the gang runs as soon as the pods already there
finish.  The same filter keeps room for pipelined preemptors.
"""

from __future__ import annotations

import numpy as np

from refplatform.core.framework import ExtensionPoint, Plugin, Session, register_plugin
from refplatform.core.jobs import Job, Task
from refplatform.core.state import ClusterState


class ReservedNodes:
    name = "Reservation"
    reason = "node(s) reserved for another pod group"

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn

    def mask(self, task: Task, state: ClusterState) -> np.ndarray:
        owner = self.ssn.reserved_by
        if not self.ssn.reservations:
            return state.all_nodes
        return (owner < 0) | (owner == task.job.index)

    def explain(self, task: Task, state: ClusterState) -> list[tuple[str, np.ndarray]]:
        return [(self.reason, ~self.mask(task, state))]


@register_plugin
class ReservationPlugin(Plugin):
    name = "reservation"

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        ssn.add_fn(ExtensionPoint.JOB_STARVING, self.name, self.starving)
        ssn.add_fn(ExtensionPoint.JOB_ORDER, self.name,
                   lambda job: (0, job.created_at) if self.starving(job) else (1, 0.0))
        ssn.add_fn(ExtensionPoint.FILTER, self.name, ReservedNodes(ssn))
        ssn.add_fn(ExtensionPoint.JOB_UNSCHEDULABLE, self.name, self.on_unschedulable)

    def waited(self, job: Job) -> float:
        return self.ssn.now - job.created_at

    def starving(self, job: Job) -> bool:
        return (self.ssn.gang and job.enqueued and bool(job.pending())
                and job.ready_count() < job.min_member
                and self.waited(job) > self.config.starvation_seconds)

    def on_unschedulable(self, job: Job) -> None:
        if job.reserved or job.quota_blocked or not self.starving(job):
            return
        ssn = self.ssn
        now_free = ssn.state.gpu_free_total.astype(np.float64) * 1e6 + ssn.state.cpu_free
        for restrict in self._where(job, now_free):
            nodes = self._plan(job, now_free, restrict)
            if nodes is not None:
                ssn.reserve_nodes(job, nodes, f"pending {self.waited(job):.0f}s > starvation bound "
                                              f"{self.config.starvation_seconds:.0f}s")
                return

    def _where(self, job: Job, now_free: np.ndarray) -> list[np.ndarray | None]:
        """Where the gang's reservation may lie: anywhere, or, for a gang confined to one domain of a node label
        (a required topology), inside one domain, the domain with the most free now first."""
        if job.topology is None or self.ssn.confinement(job) is None:
            return [None]
        index = self.ssn.state.domains(job.topology.key)
        free = index.totals(now_free)
        return [index.mask(d) for d in sorted(range(len(index)), key=lambda d: (-free[d], index.names[d]))]

    def _plan(self, job: Job, now_free: np.ndarray, restrict: np.ndarray | None) -> list[int] | None:
        """The nodes its pods would take on an idle cluster (among ``restrict``), preferring those with the most
        free now; None when they do not fit there."""
        ssn = self.ssn
        plan = ssn.state.emptied()
        nodes: list[int] = []
        for task in sorted(job.pending(), key=lambda t: (-t.gpu_total, -t.cpu, t.pod.name)):
            mask = plan.all_nodes if restrict is None else restrict
            for flt in ssn.fns(ExtensionPoint.FILTER):
                mask = mask & flt.mask(task, plan)
            idx = np.flatnonzero(mask)
            if len(idx) == 0:
                return None
            node = int(idx[np.argmax(now_free[idx])])
            gpus = plan.best_fit_gpus(node, task.gpu_count, task.gpu_milli)
            if gpus is None:
                return None
            plan.allocate(node, task.cpu, task.mem, gpus, task.gpu_milli, task.ext)
            nodes.append(node)
        return nodes
