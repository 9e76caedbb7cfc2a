"""Plugins at named extension points, cycle actions, and the per-cycle Session.

Shaped after Volcano's ``framework`` package and kube-scheduler's extension
points: a plugin registers functions at :class:`ExtensionPoint` s when a session
opens; actions (``enqueue``, ``allocate``, ...) call the session, which fans out
to the registered functions.  Filter and score functions are vectorised over
nodes (numpy masks and score arrays), so the same plugins serve a full cycle and
the replay's one-pod-at-a-time fast path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from enum import Enum
from typing import Any, ClassVar, Protocol

import numpy as np

from refplatform.core.config import PluginSpec, Profile, SchedulerConfig, TieBreak
from refplatform.core.decisions import (
    Bind,
    ConditionType,
    Decisions,
    Evict,
    FailedScheduling,
    GangCommit,
    Nomination,
    PodGroupCondition,
    PodGroupStatus,
    Reservation,
)
from refplatform.core.errors import ConfigError, SnapshotError
from refplatform.core.jobs import Hold, Job, Task, TaskStatus
from refplatform.core.node import Node
from refplatform.core.node_filter import NodeFilter
from refplatform.core.node_order import order_keys
from refplatform.core.pending import cluster_free_gpus, unplaced
from refplatform.core.pod import PodPhase
from refplatform.core.podgroup import DEFAULT_QUEUE, PodGroupPhase
from refplatform.core.queue import Queue
from refplatform.core.snapshot import Snapshot
from refplatform.core.state import ClusterState
from refplatform.core.statement import Statement
from refplatform.core.status import Status
from refplatform.core.topology import gang_request


class ExtensionPoint(Enum):
    """Where a plugin can hook into a cycle."""

    QUEUE_ORDER = "queueOrder"
    """``fn(queue_name) -> key``: queues with smaller keys are served first."""
    JOB_ORDER = "jobOrder"
    """``fn(job) -> key``: jobs with smaller keys are tried first."""
    TASK_ORDER = "taskOrder"
    """``fn(task) -> key``: order of a gang's pods."""
    JOB_ENQUEUEABLE = "jobEnqueueable"
    """``fn(job) -> Status``: may a Pending pod group be admitted (Inqueue)?"""
    ALLOCATABLE = "allocatable"
    """``fn(task) -> Status``: may the task's queue take this much more (capability)?"""
    FILTER = "filter"
    """A :class:`NodeFilter`: which nodes can host the task, and why not."""
    SCORE = "score"
    """``fn(task, state, idx) -> scores 0..100 | None`` for candidate nodes ``idx``; weighted."""
    RESERVE = "reserve"
    """``fn(task)``: a task was (tentatively) given resources."""
    UNRESERVE = "unreserve"
    """``fn(task)``: a task's resources were given back (discard, eviction)."""
    PERMIT = "permit"
    """``fn(job) -> Status``: SUCCESS when the job may be committed, WAIT otherwise (gang)."""
    PREEMPTABLE = "preemptable"
    """``fn(preemptor, victim) -> bool``: may this whole gang be preempted for that one?"""
    RECLAIMABLE = "reclaimable"
    """``fn(reclaimer, victims) -> bool``: may this ordered set of gangs be reclaimed?"""
    JOB_STARVING = "jobStarving"
    """``fn(job) -> bool``: has the job waited past the starvation bound?"""
    JOB_UNSCHEDULABLE = "jobUnschedulable"
    """``fn(job)``: the job failed to be placed this cycle (e.g. reserve nodes for it)."""
    NODE_GROUPS = "nodeGroups"
    """``fn(job) -> list of node masks``: groups to try, in preference order, before all nodes."""
    CONFINE = "confine"
    """``fn(job) -> str | None``: why the job may be placed only inside one of the ``NODE_GROUPS`` (a required
    topology), in words that name what no group could hold; None: it may go on to all nodes."""
    GPU_PICK = "gpuPick"
    """``fn(task, state, node) -> gpu indices``: which GPUs of the chosen node (first wins)."""


class Plugin:
    """Base of plugins: registered by ``name``, built once per session."""

    name: ClassVar[str] = ""

    def __init__(self, spec: PluginSpec, config: SchedulerConfig) -> None:
        self.spec = spec
        self.config = config

    def on_session_open(self, ssn: Session) -> None:
        """Register functions with ``ssn.add_fn``."""

    def on_session_close(self, ssn: Session) -> None:
        """Release per-session state."""


class Action(Protocol):
    name: str

    def execute(self, ssn: Session) -> None: ...


PLUGINS: dict[str, type[Plugin]] = {}
ACTIONS: dict[str, Action] = {}


def register_plugin(cls: type[Plugin]) -> type[Plugin]:
    PLUGINS[cls.name] = cls
    return cls


def register_action(action: Action) -> Action:
    ACTIONS[action.name] = action
    return action


def gang_not_ready(job: Job) -> str:
    """Volcano's gang FitError: ``pod group is not ready, 4 Pending, 4 minAvailable``."""
    hist: dict[str, int] = {}
    for t in job.tasks:
        name = "Running" if t.status in (TaskStatus.BOUND, TaskStatus.ALLOCATED) else t.status.value
        hist[name] = hist.get(name, 0) + 1
    hist["minAvailable"] = job.min_member
    return "pod group is not ready, " + ", ".join(sorted(f"{n} {k}" for k, n in hist.items()))


def _queue_of(group_queue: str | None) -> str:
    return group_queue or DEFAULT_QUEUE



def health_blind(node: Node) -> Node:
    """The ``gpu-health-blind`` defect: a node's withdrawn GPUs free again (its capacity's GPUs all in service)."""
    if not node.withdrawn_gpus or node.capacity is None:
        return node
    return replace(node, withdrawn_gpus=(), allocatable=replace(node.allocatable, gpus=node.capacity.gpus))

class Session:
    """One scheduling cycle over one snapshot (or the replay's long-lived session)."""

    def __init__(self, snapshot: Snapshot, config: SchedulerConfig) -> None:
        self.snapshot = snapshot
        self.config = config
        self.now = snapshot.now
        self.gang = config.profile is Profile.GANG
        nodes = [health_blind(nd) for nd in snapshot.nodes] if config.gpu_health_blind else snapshot.nodes
        self.state = ClusterState(nodes, config.gpu_model_label, config.topology_key)
        self.rng = np.random.default_rng(config.seed)
        self._order: np.ndarray | None = None
        """Per-node keys of ``TieBreak.ORDER``, computed at the first tie."""
        self.queues: dict[str, Queue] = {q.name: q for q in snapshot.queues}
        self.queues.setdefault(DEFAULT_QUEUE, Queue(DEFAULT_QUEUE))
        self.jobs: dict[str, Job] = {}
        self.job_list: list[Job] = []
        self.tasks: dict[str, Task] = {}
        self.binds: list[Bind] = []
        self.evictions: list[Evict] = []
        self.reservations: list[Reservation] = []
        self.nominations: list[Nomination] = []
        self.reserved_by = np.full(self.state.size, -1, dtype=np.int64)
        self.task_errors: dict[str, str] = {}
        self._fns: dict[ExtensionPoint, list[tuple[str, Any, float]]] = {p: [] for p in ExtensionPoint}
        self._build()
        self.plugins: list[Plugin] = []
        for spec in config.plugins:
            cls = PLUGINS.get(spec.name)
            if cls is None:
                raise ConfigError(f"unknown plugin {spec.name!r}; known: {', '.join(sorted(PLUGINS))}")
            self.plugins.append(cls(spec, config))
        for unknown in [a for a in config.actions if a not in ACTIONS]:
            raise ConfigError(f"unknown action {unknown!r}; known: {', '.join(sorted(ACTIONS))}")
        for plugin in self.plugins:
            plugin.on_session_open(self)
        self._filters: list[NodeFilter] = [fn for _, fn, _ in self._fns[ExtensionPoint.FILTER]]
        self._scores = [(fn, w) for _, fn, w in self._fns[ExtensionPoint.SCORE]]
        picks = self._fns[ExtensionPoint.GPU_PICK]
        self._pick = picks[0][1] if picks else (lambda task, state, node: state.best_fit_gpus(
            node, task.gpu_count, task.gpu_milli))
        self._job_keys = [fn for _, fn, _ in self._fns[ExtensionPoint.JOB_ORDER]]
        self._task_keys = [fn for _, fn, _ in self._fns[ExtensionPoint.TASK_ORDER]]
        self._queue_keys = [fn for _, fn, _ in self._fns[ExtensionPoint.QUEUE_ORDER]]
        if "enqueue" not in config.actions:
            for job in self.job_list:
                job.enqueued = True

    # ----------------------------------------------------------------- building
    def _build(self) -> None:
        for pg in self.snapshot.pod_groups:
            self._job(pg.key, pg.namespace, pg.name, pg.queue, pg.priority, pg.min_member,
                      pg.created_at, group=pg)
        explicit, implicit = [], []
        for pod in self.snapshot.pods:
            if pod.key in self.tasks:
                raise SnapshotError(f"duplicate pod {pod.key}")
            if pod.group is not None:
                key = f"{pod.namespace}/{pod.group}"
                job = self.jobs.get(key) or self._job(key, pod.namespace, pod.group, DEFAULT_QUEUE,
                                                       pod.priority, 1, pod.created_at, missing=True)
            else:
                ident = pod.uid or pod.name
                job = self._job(f"{pod.namespace}/podgroup-{ident}", pod.namespace, f"podgroup-{ident}",
                                DEFAULT_QUEUE, pod.priority, 1, pod.created_at)
            task = Task.of(pod, job)
            job.tasks.append(task)
            self.tasks[pod.key] = task
            if pod.phase is PodPhase.SUCCEEDED:
                task.status = TaskStatus.SUCCEEDED
            elif pod.phase is PodPhase.FAILED or (pod.terminating and not pod.is_bound):
                task.status = TaskStatus.FAILED
            elif pod.is_bound:
                task.status = TaskStatus.RELEASING if pod.terminating else TaskStatus.BOUND
                (explicit if pod.gpu_indices else implicit).append(task)
        for task in explicit + implicit:
            node = self.state.index.get(task.pod.node_name or "")
            if node is None:
                continue
            gpus = task.pod.gpu_indices
            if task.gpu_count == 0:
                gpus = ()
            elif len(gpus) != task.gpu_count or not self.state.gpus_fit(node, gpus, task.gpu_milli):
                gpus = self.state.best_fit_gpus(node, task.gpu_count, task.gpu_milli) or ()
            task.node, task.gpus = node, gpus
            self.state.allocate(node, task.cpu, task.mem, gpus, task.gpu_milli if gpus else 0, task.ext)
            if len(gpus) < task.gpu_count:
                task.gpu_count = len(gpus)
        for job in self.job_list:
            job.enqueued = job.group is None or job.group.phase is not PodGroupPhase.PENDING
            if job.group is not None:
                job.min_resources = job.group.min_resources
                # The gang's priority is its class's: its pods carry it as spec.priority (set at admission).
                # A PodGroup's own priorityClassName is never resolved (no admission for it), so when it names a
                # class its 0 says nothing: the pods' priority alone counts (a low class is negative).
                pods = [t.pod.priority for t in job.tasks]
                if job.group.priority_class_name and pods:
                    job.priority = max(pods)
                else:
                    job.priority = max([job.priority] + pods)
            job.tasks.sort(key=lambda t: (-t.pod.priority, t.pod.created_at, t.pod.name))
            job.topology = gang_request([t.pod.topology for t in job.tasks])
            job.generation = max((t.pod.generation for t in job.tasks), default=0)

    def _job(self, key: str, namespace: str, name: str, queue: str, priority: int, min_member: int,
             created_at: float, group=None, missing: bool = False) -> Job:
        job = Job(key, namespace, name, _queue_of(queue), priority, max(1, min_member), created_at,
                  group=group, index=len(self.job_list))
        if missing:
            job.hold_reason = f"pod group {name} not found"
            job.held(Hold.INVALID, job.hold_reason)
        self.jobs[key] = job
        self.job_list.append(job)
        return job

    # ----------------------------------------------------------- registration
    def add_fn(self, point: ExtensionPoint, plugin: str, fn: Any, weight: float = 1.0) -> None:
        self._fns[point].append((plugin, fn, weight))

    def fns(self, point: ExtensionPoint) -> list[Any]:
        return [fn for _, fn, _ in self._fns[point]]

    # --------------------------------------------------------------- ordering
    def job_key(self, job: Job) -> tuple:
        return tuple(fn(job) for fn in self._job_keys) + (job.created_at, job.key)

    def task_key(self, task: Task) -> tuple:
        return tuple(fn(task) for fn in self._task_keys) + (task.pod.created_at, task.pod.name)

    def queue_key(self, queue: str) -> tuple:
        return tuple(fn(queue) for fn in self._queue_keys) + (queue,)

    # ------------------------------------------------------------ plugin fans
    def enqueueable(self, job: Job) -> Status:
        for plugin, fn, _ in self._fns[ExtensionPoint.JOB_ENQUEUEABLE]:
            status = fn(job)
            if not status.ok:
                return status
        return Status.success()

    def allocatable(self, task: Task) -> Status:
        for plugin, fn, _ in self._fns[ExtensionPoint.ALLOCATABLE]:
            status = fn(task)
            if not status.ok:
                return status
        return Status.success()

    def job_ready(self, job: Job) -> bool:
        if not self.gang:
            return True
        return all(fn(job).ok for _, fn, _ in self._fns[ExtensionPoint.PERMIT])

    def preemptable(self, preemptor: Job, victim: Job) -> bool:
        return all(fn(preemptor, victim) for _, fn, _ in self._fns[ExtensionPoint.PREEMPTABLE])

    def reclaimable(self, reclaimer: Job, victims: list[Job]) -> bool:
        fns = self._fns[ExtensionPoint.RECLAIMABLE]
        return bool(fns) and all(fn(reclaimer, victims) for _, fn, _ in fns)

    def is_starving(self, job: Job) -> bool:
        return any(fn(job) for _, fn, _ in self._fns[ExtensionPoint.JOB_STARVING])

    def on_allocate(self, task: Task) -> None:
        for _, fn, _ in self._fns[ExtensionPoint.RESERVE]:
            fn(task)

    def on_deallocate(self, task: Task) -> None:
        for _, fn, _ in self._fns[ExtensionPoint.UNRESERVE]:
            fn(task)

    # -------------------------------------------------------------- placement
    def feasible(self, task: Task) -> np.ndarray:
        mask = None
        for flt in self._filters:
            m = flt.mask(task, self.state)
            mask = m if mask is None else mask & m
        return self.state.all_nodes if mask is None else mask

    def explain(self, task: Task) -> str:
        """kube-scheduler's FailedScheduling text: ``0/N nodes are available: ...``."""
        remaining = np.ones(self.state.size, dtype=bool)
        counts: dict[str, int] = {}
        for flt in self._filters:
            for reason, failing in flt.explain(task, self.state):
                hit = int((failing & remaining).sum())
                if hit:
                    counts[reason] = counts.get(reason, 0) + hit
            remaining &= flt.mask(task, self.state)
        available = int(remaining.sum())
        parts = sorted(f"{n} {reason}" for reason, n in counts.items())
        return f"{available}/{self.state.size} nodes are available: {', '.join(parts)}."

    def choose_node(self, task: Task, restrict: np.ndarray | None = None) -> tuple[int, tuple[int, ...]] | None:
        mask = self.feasible(task)
        if restrict is not None:
            mask = mask & restrict
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return None
        if len(idx) == 1:
            node = int(idx[0])
        else:
            total = None
            for fn, weight in self._scores:
                s = fn(task, self.state, idx)
                if s is None:
                    continue
                total = s * weight if total is None else total + s * weight
            best = idx if total is None else idx[total >= total.max() - 1e-9]
            node = self.break_tie(best)
        gpus = self._pick(task, self.state, node)
        if gpus is None:
            return None
        return node, tuple(gpus)

    def break_tie(self, best: np.ndarray) -> int:
        """The winner among nodes ``best`` (ascending indices) with the same best score, by ``tie_break``."""
        if len(best) == 1 or self.config.tie_break is TieBreak.FIRST:
            return int(best[0])
        if self.config.tie_break is TieBreak.ORDER:
            if self._order is None:
                self._order = order_keys(self.state.names, self.config.seed)
            return int(best[np.argmin(self._order[best])])
        return int(best[self.rng.integers(len(best))])

    def place_tasks(self, job: Job, stmt: Statement, restrict: np.ndarray | None = None,
                    record: bool = True) -> bool:
        """Place the job's pending tasks in order into ``stmt``; False at the first failure."""
        for task in sorted(job.pending(), key=self.task_key):
            status = self.allocatable(task)
            if not status.ok:
                if record:
                    job.failed_task, job.fit_error, job.quota_blocked = task, status.message, True
                return False
            choice = self.choose_node(task, restrict)
            if choice is None:
                if record:
                    job.failed_task, job.quota_blocked = task, False
                    job.fit_error = self.explain(task) if restrict is None else ""
                return False
            stmt.allocate(task, *choice)
        return True

    def confinement(self, job: Job) -> str | None:
        """Why the job may be placed only inside one of its node groups (``CONFINE``), or None."""
        for _, fn, _ in self._fns[ExtensionPoint.CONFINE]:
            why = fn(job)
            if why is not None:
                return str(why)
        return None

    def node_groups(self, job: Job) -> list[np.ndarray]:
        """The node groups the ``NODE_GROUPS`` plugins propose for the job, in preference order."""
        return [mask for _, fn, _ in self._fns[ExtensionPoint.NODE_GROUPS] for mask in fn(job)]

    def allocate_job(self, job: Job) -> bool:
        """Place a gang all-or-nothing (or as much as fits in the no-gang profile).

        Node groups proposed by ``NODE_GROUPS`` plugins (topology) are tried first;
        a group is kept only if the whole gang fits inside it.  A gang ``CONFINE``d
        to its groups (a required topology) that no group holds goes no further: it
        waits whole, its pods told why.
        """
        job.attempted = True
        if not job.pending():
            return True
        for group_mask in self.node_groups(job):
            stmt = Statement(self)
            if self.place_tasks(job, stmt, group_mask, record=False) and self.job_ready(job):
                stmt.commit()
                return True
            stmt.discard()
        confined = self.confinement(job)
        if confined is not None:
            if self.config.partial_gang_bind:
                self._keep_part_inside_a_group(job)
            job.failed_task, job.quota_blocked, job.fit_error = None, False, confined
            if self.gang and job.min_member > 1:
                job.gang_message = f"{gang_not_ready(job)}; {confined}"
            for _, fn, _ in self._fns[ExtensionPoint.JOB_UNSCHEDULABLE]:
                fn(job)
            return False
        stmt = Statement(self)
        self.place_tasks(job, stmt)
        if self.job_ready(job) and (self.gang or stmt.ops):
            stmt.commit()
            if not job.pending():
                job.fit_error, job.failed_task = "", None
            return True
        if self.config.partial_gang_bind and stmt.ops:
            stmt.commit()  # the defect: keep what fits of a gang that is not whole
        else:
            stmt.discard()
        if self.gang and job.min_member > 1:
            job.gang_message = gang_not_ready(job)
        for _, fn, _ in self._fns[ExtensionPoint.JOB_UNSCHEDULABLE]:
            fn(job)
        return False

    def _keep_part_inside_a_group(self, job: Job) -> None:
        """The ``partial-gang-bind`` defect on a gang confined to one group (a required topology): what fits of it
        inside the first group with room for any of its pods is committed, though no group holds it whole."""
        for group_mask in self.node_groups(job):
            stmt = Statement(self)
            self.place_tasks(job, stmt, group_mask, record=False)
            if stmt.ops:
                stmt.commit()
                return
            stmt.discard()

    def allocate_task(self, task: Task) -> bool:
        """No-gang profile: place and commit one pod on its own."""
        task.job.attempted = True
        status = self.allocatable(task)
        choice = self.choose_node(task) if status.ok else None
        if choice is None:
            self.task_errors[task.key] = status.message if not status.ok else self.explain(task)
            return False
        stmt = Statement(self)
        stmt.allocate(task, *choice)
        stmt.commit()
        self.task_errors.pop(task.key, None)
        return True

    def fits_after(self, job: Job, victims: Iterable[Job] = (), include_releasing: bool = True
                   ) -> list[int] | None:
        """Would the job become ready if the victims (and terminating pods) were gone?
        Returns the nodes it would use, leaving everything as it was."""
        placed = self.placement_after(job, victims, include_releasing)
        return None if placed is None else [node for _, node in placed]

    def placement_after(self, job: Job, victims: Iterable[Job] = (), include_releasing: bool = True
                        ) -> list[tuple[Task, int]] | None:
        """Like :meth:`fits_after`, but each pending task with the node it would take."""
        stmt = Statement(self)
        if include_releasing:
            for task in self.tasks.values():
                if task.status is TaskStatus.RELEASING and task.node >= 0:
                    stmt.evict(task)
        for victim in victims:
            for task in victim.active():
                stmt.evict(task)
        placed = None
        if self.confinement(job) is None:
            if self.place_tasks(job, stmt, record=False) and self.job_ready(job):
                placed = [(t, t.node) for kind, t, _ in stmt.ops if kind == "allocate"]
        else:  # only inside one of its groups, as they stand with the victims gone
            for group_mask in self.node_groups(job):
                inner = Statement(self)
                if self.place_tasks(job, inner, group_mask, record=False) and self.job_ready(job):
                    placed = [(t, t.node) for kind, t, _ in inner.ops if kind == "allocate"]
                inner.discard()
                if placed is not None:
                    break
        stmt.discard()
        return placed

    def reserve_nodes(self, job: Job, nodes: Iterable[int], reason: str) -> None:
        nodes = sorted(set(int(n) for n in nodes))
        free = [n for n in nodes if self.reserved_by[n] < 0 or self.reserved_by[n] == job.index]
        if not free:
            return
        self.reserved_by[free] = job.index
        job.reserved = True
        self.reservations.append(Reservation(job.key, tuple(self.state.names[n] for n in free), reason))

    # ------------------------------------------------------------------ close
    def close(self) -> Decisions:
        for plugin in self.plugins:
            plugin.on_session_close(self)
        failures: list[FailedScheduling] = []
        statuses: list[PodGroupStatus] = []
        cluster_free: int | None = None
        for job in self.job_list:
            pending = job.pending()
            message = self._job_message(job)
            if pending:
                if cluster_free is None:
                    cluster_free = cluster_free_gpus(self.state)
                why = unplaced(job, self.state, self._filters, cluster_free)
            for task in pending:
                text = self.task_errors.get(task.key) or (
                    job.fit_error if task is job.failed_task and job.fit_error else message)
                failures.append(FailedScheduling(task.pod.ref, text, pending_reason=why.reason.value,
                                                 pending_message=why.message))
            if job.group is not None:
                statuses.append(self._group_status(job, pending, message))
        return Decisions(tuple(self.binds), tuple(self.evictions), tuple(statuses), tuple(failures),
                         tuple(self.reservations), self.now, tuple(self.nominations), self._commits())

    def _commits(self) -> tuple[GangCommit, ...]:
        """This cycle's binds grouped by gang (see :class:`GangCommit`)."""
        by_job: dict[str, list[Bind]] = {}
        for bind in self.binds:
            by_job.setdefault(self.tasks[bind.pod.key].job.key, []).append(bind)
        commits = []
        for key, binds in by_job.items():
            job = self.jobs[key]
            before = sum(1 for t in job.tasks if (t.status is TaskStatus.BOUND and not t.fresh)
                         or t.status is TaskStatus.SUCCEEDED)
            commits.append(GangCommit(key, job.group.name if job.group is not None else "", job.min_member,
                                      before, tuple(binds)))
        return tuple(commits)


    def _job_message(self, job: Job) -> str:
        if job.hold_reason:
            return job.hold_reason
        if job.gang_message:
            return job.gang_message
        if job.fit_error:
            return job.fit_error
        if not job.attempted:
            return "not tried this cycle"
        return gang_not_ready(job)

    def _group_status(self, job: Job, pending: list[Task], message: str) -> PodGroupStatus:
        running = sum(1 for t in job.tasks if t.status is TaskStatus.BOUND)
        succeeded = sum(1 for t in job.tasks if t.status is TaskStatus.SUCCEEDED)
        failed = sum(1 for t in job.tasks if t.status is TaskStatus.FAILED)
        if job.tasks and succeeded == len(job.tasks) and succeeded >= job.min_member:
            phase = PodGroupPhase.COMPLETED
        elif running + succeeded >= job.min_member and running + succeeded > 0:
            phase = PodGroupPhase.RUNNING
        elif running > 0:
            phase = PodGroupPhase.UNKNOWN
        elif job.enqueued:
            phase = PodGroupPhase.INQUEUE
        else:
            phase = PodGroupPhase.PENDING
        conditions: list[PodGroupCondition] = []
        if pending and phase is not PodGroupPhase.RUNNING:
            detail = message
            if job.fit_error and job.fit_error != message:
                detail = f"{message}; {job.fit_error}"
            unready = len(job.tasks) - running - succeeded
            reason = "NotEnoughResources"
            if job.hold_reason and not job.enqueued:
                reason = "NotEnqueued"
            conditions.append(PodGroupCondition(
                ConditionType.UNSCHEDULABLE, True, reason,
                f"{unready}/{len(job.tasks)} tasks in gang unschedulable: {detail}", self.now))
        elif running + succeeded >= job.min_member:
            conditions.append(PodGroupCondition(
                ConditionType.SCHEDULED, True, "tasks in gang are ready to be scheduled",
                f"{running} running, {job.min_member} minAvailable", self.now))
        return PodGroupStatus(job.namespace, job.name, phase, tuple(conditions), running, succeeded, failed)

