"""The Volcano Job state machine as a pure function: (job, its pods) -> what to write.

:func:`plan_job` is what the live ``vcjob`` controller calls on every
reconcile, and what the unit tests drive with plain data.  It follows
Volcano's job controller (``pkg/controllers/job/state``):

- pods are created one per rank (task order, then index), named
  ``<job>-<task>-<index>``, each stamped with the job's restart *epoch*;
- a pod of the current epoch that is being deleted by someone else raises
  ``PodEvicted`` (Volcano's update handler treats a set ``deletionTimestamp``
  as a deletion), one that vanished raises ``PodEvicted`` too, a ``Failed`` one
  raises ``PodFailed`` (with its exit code), an ``Unknown`` one ``Unknown``;
- the first event that matches a policy (the task's policies first, then the
  job's; ``*`` matches every event; ``exitCode`` only a ``PodFailed`` with that
  code) decides the action;
- ``RestartJob`` bumps the epoch *first*, counts a retry, moves to
  ``Restarting`` and deletes every pod; once no pod of an older epoch is left,
  the job fails if ``retryCount >= maxRetry`` (Volcano's ``restartingState``),
  else goes back to ``Pending`` and every rank is created again with the new
  epoch, so the gang restarts together;
- ``AbortJob``/``TerminateJob``/``CompleteJob`` kill the running pods and end in
  ``Aborted``/``Terminated``/``Completed``; ``RestartTask``/``RestartPod`` delete
  those pods, which are then created again;
- with no action, missing ranks are created, the job is ``Running`` once
  ``minAvailable`` pods run or succeeded, and when every pod ended it is
  ``Completed`` if at least ``minAvailable`` succeeded, else ``Failed``.

A pod on a lost node is deleted with grace 0 (nobody is left there to finish a
graceful deletion); every other deletion is graceful.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

__all__ = [
    "DEFAULT_MAX_RETRY", "JobAction", "JobEvent", "JobPhase", "JobPlan", "JobSpec", "JobView", "Policy",
    "PodDeletion", "Rank", "RankPod", "TaskSpec", "plan_job", "ranks_of",
]

DEFAULT_MAX_RETRY = 3
"""Volcano's ``DefaultMaxRetry``: used when ``maxRetry`` is 0 or absent."""


class JobPhase(Enum):
    """``status.state.phase`` of a Volcano Job."""

    PENDING = "Pending"
    """Pods are being created or wait to be scheduled."""
    ABORTING = "Aborting"
    """An ``AbortJob`` action is killing the pods."""
    ABORTED = "Aborted"
    """Aborted: every pod is gone."""
    RUNNING = "Running"
    """At least ``minAvailable`` pods run (or succeeded)."""
    RESTARTING = "Restarting"
    """A ``RestartJob`` action is killing every pod of the old epoch."""
    COMPLETING = "Completing"
    """A ``CompleteJob`` action is killing the running pods."""
    COMPLETED = "Completed"
    """Every pod ended and at least ``minAvailable`` succeeded."""
    TERMINATING = "Terminating"
    """A ``TerminateJob`` action is killing the pods."""
    TERMINATED = "Terminated"
    """Terminated: every pod is gone."""
    FAILED = "Failed"
    """Restarted ``maxRetry`` times, or ended with fewer than ``minAvailable`` successes."""

    @property
    def finished(self) -> bool:
        return self in (JobPhase.ABORTED, JobPhase.COMPLETED, JobPhase.TERMINATED, JobPhase.FAILED)

    @classmethod
    def of(cls, value: str | None) -> JobPhase | None:
        for p in cls:
            if p.value == value:
                return p
        return None


class JobEvent(Enum):
    """What happened to a pod (Volcano's bus events that policies name)."""

    ANY = "*"
    """Matches every event in a policy."""
    POD_PENDING = "PodPending"
    """Not raised here."""
    POD_RUNNING = "PodRunning"
    """Not raised here."""
    POD_FAILED = "PodFailed"
    """A pod of the current epoch ended in phase Failed."""
    POD_EVICTED = "PodEvicted"
    """A pod of the current epoch is being deleted, or vanished, and this controller did not do it."""
    UNKNOWN = "Unknown"
    """A pod of the current epoch is in phase Unknown."""
    TASK_COMPLETED = "TaskCompleted"
    """Not raised here."""
    OUT_OF_SYNC = "OutOfSync"
    """Not raised here."""
    COMMAND_ISSUED = "CommandIssued"
    """Not raised here."""
    JOB_UPDATED = "JobUpdated"
    """Not raised here."""
    TASK_FAILED = "TaskFailed"
    """Not raised here."""


class JobAction(Enum):
    """What a policy does."""

    ABORT_JOB = "AbortJob"
    """Kill the pods; end in Aborted."""
    RESTART_JOB = "RestartJob"
    """Bump the epoch, kill every pod, create every rank again (bounded by maxRetry)."""
    RESTART_TASK = "RestartTask"
    """Delete the pods of the event's task; they are created again."""
    RESTART_POD = "RestartPod"
    """Delete the event's pod; it is created again."""
    RESTART_PARTITION = "RestartPartition"
    """Treated as RestartTask."""
    TERMINATE_JOB = "TerminateJob"
    """Kill the pods; end in Terminated."""
    COMPLETE_JOB = "CompleteJob"
    """Kill the running pods; end in Completed."""
    RESUME_JOB = "ResumeJob"
    """Treated as SyncJob."""
    SYNC_JOB = "SyncJob"
    """No action: create missing pods, update counts and phase."""

    @classmethod
    def of(cls, value: str | None) -> JobAction:
        for a in cls:
            if a.value == value:
                return a
        return cls.SYNC_JOB


@dataclass(frozen=True)
class Policy:
    events: tuple[str, ...]
    action: JobAction
    exit_code: int | None = None

    def matches(self, event: JobEvent, exit_code: int | None) -> bool:
        if self.exit_code is not None:
            return event is JobEvent.POD_FAILED and exit_code == self.exit_code
        return JobEvent.ANY.value in self.events or event.value in self.events


@dataclass(frozen=True)
class TaskSpec:
    name: str
    replicas: int
    policies: tuple[Policy, ...] = ()


@dataclass(frozen=True)
class JobSpec:
    name: str
    tasks: tuple[TaskSpec, ...]
    min_available: int | None = None
    """``None``: every replica."""
    max_retry: int = DEFAULT_MAX_RETRY
    policies: tuple[Policy, ...] = ()

    @property
    def replicas(self) -> int:
        return sum(t.replicas for t in self.tasks)

    @property
    def min_available_or_all(self) -> int:
        return self.replicas if self.min_available is None else self.min_available

    @property
    def retry_limit(self) -> int:
        return self.max_retry if self.max_retry > 0 else DEFAULT_MAX_RETRY


@dataclass(frozen=True)
class JobView:
    """The job's own state: its stored phase (``None`` before the first status), retries and epoch."""

    phase: JobPhase | None = None
    retry_count: int = 0
    epoch: int = 0


@dataclass(frozen=True)
class Rank:
    """One pod the job wants: task, index within the task, global rank, pod name."""

    task: str
    index: int
    rank: int
    name: str


@dataclass(frozen=True)
class RankPod:
    """One existing pod of the job."""

    name: str
    uid: str
    epoch: int
    phase: str = "Pending"
    terminating: bool = False
    node: str | None = None
    node_lost: bool = False
    exit_code: int | None = None
    task: str = ""


@dataclass(frozen=True)
class PodDeletion:
    name: str
    uid: str
    force: bool
    """Grace 0: the pod is on a lost node."""
    reason: str


@dataclass(frozen=True)
class Counts:
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    terminating: int = 0
    unknown: int = 0


@dataclass(frozen=True)
class JobPlan:
    """What to write, in this order: the epoch, the status, the deletions, the creations."""

    phase: JobPhase
    epoch: int
    retry_count: int
    bump_epoch: bool = False
    delete: tuple[PodDeletion, ...] = ()
    create: tuple[Rank, ...] = ()
    action: JobAction | None = None
    """The action a policy chose this time (for the job's Event), if any."""
    trigger: tuple[JobEvent, str] | None = None
    """The event and pod that chose it."""
    counts: Counts = field(default_factory=Counts)
    message: str = ""


def ranks_of(spec: JobSpec) -> list[Rank]:
    out: list[Rank] = []
    for task in spec.tasks:
        for index in range(task.replicas):
            out.append(Rank(task.name, index, len(out), f"{spec.name}-{task.name}-{index}"))
    return out


def _counts(pods: Iterable[RankPod]) -> Counts:
    c = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0, "terminating": 0, "unknown": 0}
    for p in pods:
        if p.terminating and p.phase not in ("Succeeded", "Failed"):
            c["terminating"] += 1
        elif p.phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            c[p.phase.lower()] += 1
    return Counts(**c)


def _kill(pods: Iterable[RankPod], reason: str, *, keep_ended: bool, deleting: frozenset[str],
          claim: bool = False) -> list[PodDeletion]:
    """Delete pods: a graceful deletion once, a forced one whenever the pod sits on a lost node.

    ``claim``: also "delete" pods someone else is already deleting, so that this
    controller owns their disappearance (it is not an event any more)."""
    out = []
    for p in pods:
        if keep_ended and p.phase in ("Succeeded", "Failed"):
            continue
        if p.node_lost and p.node:
            out.append(PodDeletion(p.name, p.uid, True, reason))
        elif (claim or not p.terminating) and p.uid not in deleting:
            out.append(PodDeletion(p.name, p.uid, False, reason))
    return out


def _action_for(spec: JobSpec, task: str, event: JobEvent, exit_code: int | None) -> JobAction | None:
    task_spec = next((t for t in spec.tasks if t.name == task), None)
    for policy in (*(task_spec.policies if task_spec else ()), *spec.policies):
        if policy.matches(event, exit_code):
            return policy.action
    return None


_KILLING = {JobAction.ABORT_JOB: (JobPhase.ABORTING, JobPhase.ABORTED),
            JobAction.TERMINATE_JOB: (JobPhase.TERMINATING, JobPhase.TERMINATED),
            JobAction.COMPLETE_JOB: (JobPhase.COMPLETING, JobPhase.COMPLETED)}
_KILLING_PHASES = {start: end for start, end in _KILLING.values()}


def plan_job(spec: JobSpec, view: JobView, pods: Sequence[RankPod], *,
             deleting: frozenset[str] = frozenset(), vanished: Sequence[str] = ()) -> JobPlan:
    """Decide one reconcile of a Volcano Job.

    ``pods`` are the job's pods as stored (any epoch); ``deleting`` the uids this
    controller itself deleted (not events); ``vanished`` the names of current-epoch
    pods this controller saw and that disappeared without it deleting them.
    """
    phase = view.phase or JobPhase.PENDING
    epoch, retries = view.epoch, view.retry_count
    current = [p for p in pods if p.epoch == epoch]
    stale = [p for p in pods if p.epoch != epoch]
    counts = _counts(current)
    wanted = ranks_of(spec)

    if phase.finished:
        return JobPlan(phase, epoch, retries, delete=tuple(_kill(pods, phase.value, keep_ended=True,
                                                                   deleting=deleting)), counts=counts)
    if phase in _KILLING_PHASES:
        kill = _kill(pods, phase.value, keep_ended=True, deleting=deleting)
        alive = [p for p in pods if p.phase not in ("Succeeded", "Failed")]
        return JobPlan(_KILLING_PHASES[phase] if not alive else phase, epoch, retries, delete=tuple(kill),
                       counts=counts)
    if stale or phase is JobPhase.RESTARTING:
        kill = _kill(stale, "RestartJob", keep_ended=False, deleting=deleting)
        if retries >= spec.retry_limit:
            return JobPlan(JobPhase.FAILED, epoch, retries, delete=tuple(kill), counts=counts,
                           message=f"job restarted {retries} times, maxRetry is {spec.retry_limit}")
        if stale:
            return JobPlan(JobPhase.RESTARTING, epoch, retries, delete=tuple(kill), counts=counts)
        have = {p.name for p in current}
        return JobPlan(JobPhase.PENDING, epoch, retries, create=tuple(r for r in wanted if r.name not in have),
                       counts=counts)

    # Pending or Running: look for events on the current epoch's pods, in rank order.
    by_name = {p.name: p for p in current}
    gone = set(vanished)
    for rank in wanted:
        pod = by_name.get(rank.name)
        exit_code = None
        if pod is None:
            if rank.name not in gone:
                continue
            event = JobEvent.POD_EVICTED
        elif pod.terminating and pod.uid not in deleting and pod.phase not in ("Succeeded", "Failed"):
            event = JobEvent.POD_EVICTED
        elif pod.phase == "Failed" and pod.uid not in deleting:
            event, exit_code = JobEvent.POD_FAILED, pod.exit_code
        elif pod.phase == "Unknown":
            event = JobEvent.UNKNOWN
        else:
            continue
        action = _action_for(spec, rank.task, event, exit_code)
        if action is None or action in (JobAction.SYNC_JOB, JobAction.RESUME_JOB):
            continue
        trigger = (event, rank.name)
        if action is JobAction.RESTART_JOB:
            # The epoch goes first; every pod (now stale) is killed.
            return JobPlan(JobPhase.RESTARTING, epoch + 1, retries + 1, bump_epoch=True,
                           delete=tuple(_kill(pods, "RestartJob", keep_ended=False, deleting=deleting)),
                           action=action, trigger=trigger, counts=counts,
                           message=f"{event.value} on pod {rank.name}")
        if action in _KILLING:
            start, _ = _KILLING[action]
            return JobPlan(start, epoch, retries, delete=tuple(_kill(pods, action.value, keep_ended=True,
                                                                     deleting=deleting)),
                           action=action, trigger=trigger, counts=counts, message=f"{event.value} on pod {rank.name}")
        # RestartTask / RestartPartition / RestartPod: delete and let the sync below create them again.
        victims = [p for p in current if p.name == rank.name] if action is JobAction.RESTART_POD else \
            [p for p in current if p.task == rank.task]
        return JobPlan(phase, epoch, retries, delete=tuple(_kill(victims, action.value, keep_ended=False,
                                                                  deleting=deleting, claim=True)),
                       action=action, trigger=trigger, counts=counts, message=f"{event.value} on pod {rank.name}")

    # No action: create what is missing, then the phase from the counts.
    create = tuple(r for r in wanted if r.name not in by_name)
    ended = counts.succeeded + counts.failed
    min_available = spec.min_available_or_all
    if wanted and ended == len(wanted) and not create:
        done = JobPhase.COMPLETED if counts.succeeded >= min_available else JobPhase.FAILED
        return JobPlan(done, epoch, retries, counts=counts)
    if counts.running + counts.succeeded >= min_available and min_available > 0:
        phase = JobPhase.RUNNING
    return JobPlan(phase, epoch, retries, create=create, counts=counts)
