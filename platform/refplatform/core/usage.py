"""Build the accounting :class:`~refplatform.core.accounting.History` from observed API objects.

Pure: the caller folds :class:`Observation` s (a node, pod, Volcano Job, Event or
PodGroup as the API serves it, or its deletion, and the instant it was
observed, in seconds since the epoch) into a :class:`UsageTracker` and asks it
for the history up to ``now``.  No I/O, no clock.  ``docs/LEAK_REPORT.md``
("How the reference platform sources each input") is the user's view.

Sources, in the terms of the leak report's inputs:

- **node capacity**: ``status.allocatable["nvidia.com/gpu"]`` (whole GPUs), healthy
  while the ``Ready`` condition is ``"True"`` and the node carries no
  ``firedrill.dev/quarantine`` label.  A NotReady or quarantined node's GPUs
  leave capacity; a cordoned node and a spare in the spare pool stay healthy
  capacity (they could run work).  MIG instances and shared GPU slices are not
  in the layers yet: a node counts its whole GPUs.
- **pod interval**: from the observation that first shows ``spec.nodeName`` set
  to the first that shows the pod terminal (``Succeeded``/``Failed``),
  deleting (``deletionTimestamp``) or deleted.  GPUs = whole ``nvidia.com/gpu``
  of its containers (limits win).  Tenant: the namespace and the queue
  (annotation ``scheduling.volcano.sh/queue-name``, else ``volcano.sh/queue-name``,
  else its PodGroup's ``spec.queue``, else its Job's, else ``default``).  Job:
  label ``volcano.sh/job-name``, else ``batch.kubernetes.io/job-name``, else the
  PodGroup annotation, else the pod name.
- **activity sample**: between consecutive progress snapshots of a pod (the
  annotations the node agent publishes; the first snapshot pairs with the
  container start, ``state.running.startedAt``, where every counter is 0).
  Over a sample of wall ``Δprogress-at``: busy = ``Δstepped-seconds`` (a kernel
  runs: what ``nvidia-smi`` shows), active = busy − ``Δinput-stall-seconds``,
  compute = active − ``Δcomm-stall-seconds``, effective = compute x the pod's
  ``firedrill.dev/mfu`` (default 0.4), each as a share of the wall time,
  clamped to ``[0, 1]`` with effective <= active.  Malformed snapshots are skipped.
- **pending demand**: from the observation that shows the pod's
  ``firedrill.dev/Unplaced`` condition (status ``True``) until its reason
  changes, the pod binds or it goes away; GPUs = its request.
- **incident**: a Job whose ``firedrill.dev/epoch`` goes ``e -> e+1``.  Fault =
  the earliest last ``progress-at`` among its rank pods of epoch ``e`` (the lost
  rank stopped first), or the restart instant if none published; resume = the
  ``eventTime`` of the first ``Resumed`` Event of a rank of the new epoch, or
  the Job's deletion if it is deleted before it resumed (then nothing counts
  as recomputed; an open incident ends at ``now``); GPUs = the Job's (its tasks' replicas x
  GPUs); recomputed = max(0, step at the fault − checkpoint C of the Resumed
  message) x ``firedrill.dev/step-seconds`` x GPUs, where the step at the fault
  is the highest step any old rank had published by the fault instant.  A Job
  that restarts again before it resumed stays in the one open incident.  A
  ``batch/v1`` Indexed Job (the ``native`` and ``kueue`` shapes) has no epoch:
  a pod that replaces an earlier pod of its completion index (same Job uid)
  is the restart; fault = the lost pod's last ``progress-at`` (or its end),
  and the replacement and later pods carry the next epoch, so their
  ``Resumed`` ends the incident; GPUs = the Job's ranks, one pod per index.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any

from refplatform.core.accounting import (
    UNPLACED_CONDITION, ActivitySample, History, Incident, NodeCapacity, PendingDemand, PendingReason, PodInterval,
    Window,
)
from refplatform.core.resources import GPU

__all__ = [
    "ANN_COMM_STALL_SECONDS", "ANN_INPUT_STALL_SECONDS", "ANN_PROGRESS_AT", "ANN_STEP", "ANN_STEPPED_SECONDS",
    "DEFAULT_MFU", "DEFAULT_QUEUE", "DEFAULT_STEP_SECONDS", "QUARANTINE_LABEL", "UNPLACED", "Observation",
    "PROGRESS_ANNOTATIONS", "PendingNow", "Resource", "UsageTracker", "parse_instant", "project",
]

Obj = Mapping[str, Any]

ANN_STEP = "firedrill.dev/step"
ANN_CHECKPOINT_STEP = "firedrill.dev/checkpoint-step"
ANN_INPUT_STALL_SECONDS = "firedrill.dev/input-stall-seconds"
ANN_COMM_STALL_SECONDS = "firedrill.dev/comm-stall-seconds"
ANN_PROGRESS_AT = "firedrill.dev/progress-at"
ANN_STEPPED_SECONDS = "firedrill.dev/stepped-seconds"
ANN_MFU = "firedrill.dev/mfu"
ANN_EPOCH = "firedrill.dev/epoch"
ANN_RANK = "firedrill.dev/rank"
ANN_STEP_SECONDS = "firedrill.dev/step-seconds"
ANN_QUEUE = "scheduling.volcano.sh/queue-name"
VOLCANO_QUEUE = "volcano.sh/queue-name"
JOB_LABEL = "volcano.sh/job-name"
BATCH_JOB_LABEL = "batch.kubernetes.io/job-name"
BATCH_UID_LABEL = "batch.kubernetes.io/controller-uid"
BATCH_INDEX = "batch.kubernetes.io/job-completion-index"
"""A batch/v1 Indexed Job's pods: their Job, its uid, and the index each runs (an annotation)."""
GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
QUARANTINE_LABEL = "firedrill.dev/quarantine"
UNPLACED = UNPLACED_CONDITION
RESUMED = "Resumed"
DEFAULT_MFU = 0.4
DEFAULT_STEP_SECONDS = 0.5
DEFAULT_QUEUE = "default"
TERMINAL = ("Succeeded", "Failed")
RECENT_SNAPSHOTS = 16
"""Progress snapshots kept per pod to find the step a rank had reached at a fault."""

PROGRESS_ANNOTATIONS = (ANN_STEP, ANN_CHECKPOINT_STEP, ANN_INPUT_STALL_SECONDS, ANN_COMM_STALL_SECONDS,
                        ANN_PROGRESS_AT, ANN_STEPPED_SECONDS)
"""The annotations of one progress snapshot (cumulative: a later snapshot supersedes an earlier one)."""
_POD_ANNOTATIONS = (ANN_STEP, ANN_CHECKPOINT_STEP, ANN_INPUT_STALL_SECONDS, ANN_COMM_STALL_SECONDS,
                    ANN_PROGRESS_AT, ANN_STEPPED_SECONDS, ANN_MFU, ANN_EPOCH, ANN_RANK, ANN_STEP_SECONDS,
                    ANN_QUEUE, VOLCANO_QUEUE, BATCH_INDEX, *GROUP_ANNOTATIONS)
_CHECKPOINT = re.compile(r"beyond checkpoint (\d+)")


class Resource(Enum):
    """The kinds of object the tracker reads."""

    NODE = "nodes"
    """core/v1 Node: capacity and health."""
    POD = "pods"
    """core/v1 Pod: binding, release, pending condition, progress annotations."""
    JOB = "jobs"
    """batch.volcano.sh Job: the restart epoch, queue and GPUs of a training job."""
    EVENT = "events"
    """core/v1 Event: only ``Resumed`` Events of pods matter."""
    PODGROUP = "podgroups"
    """scheduling.volcano.sh PodGroup: the queue of its pods."""


@dataclass(frozen=True, slots=True)
class Observation:
    """An object as observed at ``at`` (seconds since the epoch); ``deleted``: its last state, now gone."""

    resource: Resource
    obj: Obj | None
    """The object (or its :func:`project` ion); ``None`` is ignored."""
    deleted: bool
    at: float


@dataclass(frozen=True, slots=True)
class PendingNow:
    """Pending demand that could not be placed, now: one row per (namespace, queue, reason)."""

    namespace: str
    queue: str
    reason: PendingReason
    pods: int
    gpus: int


# ------------------------------------------------------------------------------------------ parsing
def parse_instant(text: Any) -> float | None:
    """An RFC 3339 instant (``Z`` or an offset) as seconds since the epoch; None when malformed or naive."""
    if not isinstance(text, str):
        return None
    m = _RFC3339.fullmatch(text.strip())
    if m is None:
        return None
    year, month, day, hh, mm, ss = (int(m.group(i)) for i in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 61):
        return None
    frac = float(f"0.{m.group(7)}") if m.group(7) else 0.0
    zone = m.group(8)
    offset = 0 if zone in ("Z", "z") else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return _days_from_civil(year, month, day) * 86_400.0 + hh * 3600 + mm * 60 + ss + frac - offset


_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})")


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm; the core reads no clock)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _int(raw: Any) -> int | None:
    try:
        return int(str(raw).strip())
    except (TypeError, ValueError):
        return None


def _whole(raw: Any) -> int:
    """Whole units of a quantity (``"8"``, ``8``, ``"1k"`` is not a GPU count; suffixes are ignored -> 0)."""
    try:
        return max(0, int(Decimal(str(raw).strip())))
    except (InvalidOperation, ValueError):
        return 0


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _map(obj: Obj, *path: str) -> Obj:
    cur: Any = obj
    for part in path:
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    return cur if isinstance(cur, Mapping) else {}


def _gpus_of_containers(spec: Obj) -> int:
    total = 0
    for c in spec.get("containers") or []:
        if not isinstance(c, Mapping):
            continue
        res = c.get("resources") if isinstance(c.get("resources"), Mapping) else {}
        limits, requests = _map(res, "limits"), _map(res, "requests")
        raw = limits.get(GPU, requests.get(GPU))
        if raw is not None:
            total += _whole(raw)
    return total


def _started_at(pod: Obj) -> float | None:
    for cs in _map(pod, "status").get("containerStatuses") or []:
        if isinstance(cs, Mapping):
            t = parse_instant(_map(cs, "state", "running").get("startedAt"))
            if t is not None:
                return t
    return None


def _condition(obj: Obj, kind: str) -> Obj | None:
    for c in _map(obj, "status").get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind:
            return c
    return None


# --------------------------------------------------------------------------------------- projection
def project(resource: Resource, obj: Obj) -> dict[str, Any] | None:
    """The part of ``obj`` the tracker reads, in the object's own shape (so a projection observes the same
    as the object); None when nothing in it matters (an Event other than ``Resumed``)."""
    meta = _meta(obj)
    base: dict[str, Any] = {"name": meta.get("name") or ""}
    if meta.get("namespace"):
        base["namespace"] = meta["namespace"]
    if meta.get("uid"):
        base["uid"] = meta["uid"]
    if resource is Resource.NODE:
        ready = _condition(obj, "Ready")
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        if labels.get(QUARANTINE_LABEL):
            base["labels"] = {QUARANTINE_LABEL: labels[QUARANTINE_LABEL]}
        status: dict[str, Any] = {"allocatable": {GPU: str(_whole(_map(obj, "status", "allocatable").get(GPU, 0)))}}
        if ready is not None:
            status["conditions"] = [{"type": "Ready", "status": ready.get("status")}]
        return {"metadata": base, "status": status}
    if resource is Resource.POD:
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        anns = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
        kept = {k: anns[k] for k in _POD_ANNOTATIONS if k in anns}
        if kept:
            base["annotations"] = kept
        kept_labels = {k: labels[k] for k in (JOB_LABEL, VOLCANO_QUEUE, BATCH_JOB_LABEL, BATCH_UID_LABEL)
                       if k in labels}
        if kept_labels:
            base["labels"] = kept_labels
        if meta.get("deletionTimestamp"):
            base["deletionTimestamp"] = meta["deletionTimestamp"]
        spec = _map(obj, "spec")
        pspec: dict[str, Any] = {"containers": [{"resources": {"limits": {GPU: str(_gpus_of_containers(spec))}}}]}
        if spec.get("nodeName"):
            pspec["nodeName"] = spec["nodeName"]
        st = _map(obj, "status")
        pstatus: dict[str, Any] = {}
        if st.get("phase"):
            pstatus["phase"] = st["phase"]
        unplaced = _condition(obj, UNPLACED)
        if unplaced is not None:
            pstatus["conditions"] = [{"type": UNPLACED, "status": unplaced.get("status"),
                                      "reason": unplaced.get("reason")}]
        started = next((_map(cs, "state", "running").get("startedAt") for cs in st.get("containerStatuses") or []
                        if isinstance(cs, Mapping) and _map(cs, "state", "running").get("startedAt")), None)
        if started:
            pstatus["containerStatuses"] = [{"state": {"running": {"startedAt": started}}}]
        return {"metadata": base, "spec": pspec, "status": pstatus}
    if resource is Resource.JOB:
        anns = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
        if ANN_EPOCH in anns:
            base["annotations"] = {ANN_EPOCH: anns[ANN_EPOCH]}
        spec = _map(obj, "spec")
        gpus = sum(max(0, _int(t.get("replicas")) or 0) * _gpus_of_containers(_map(t, "template", "spec"))
                   for t in spec.get("tasks") or [] if isinstance(t, Mapping))
        jspec: dict[str, Any] = {"tasks": [{"replicas": 1, "template": {"spec": {"containers": [
            {"resources": {"limits": {GPU: str(gpus)}}}]}}}]}
        if spec.get("queue"):
            jspec["queue"] = spec["queue"]
        return {"metadata": base, "spec": jspec}
    if resource is Resource.EVENT:
        if obj.get("reason") != RESUMED:
            return None
        inv = _map(obj, "involvedObject")
        if inv.get("kind") not in (None, "Pod"):
            return None
        return {"metadata": base, "reason": RESUMED, "message": obj.get("message") or "",
                "eventTime": obj.get("eventTime") or obj.get("firstTimestamp"),
                "involvedObject": {k: inv[k] for k in ("kind", "namespace", "name", "uid") if inv.get(k)}}
    if resource is Resource.PODGROUP:
        queue = _map(obj, "spec").get("queue")
        return {"metadata": base, "spec": {"queue": queue}} if queue else {"metadata": base, "spec": {}}
    return None


# ------------------------------------------------------------------------------------------- state
@dataclass(slots=True)
class _Node:
    gpus: int
    healthy: bool
    since: float
    closed: list[NodeCapacity] = field(default_factory=list)


@dataclass(slots=True)
class _Snapshot:
    at: float
    stepped: float
    input: float
    comm: float
    step: int | None


@dataclass(slots=True)
class _Pod:
    key: str
    namespace: str
    name: str
    uid: str
    gpus: int = 0
    node: str = ""
    bound_at: float | None = None
    released_at: float | None = None
    job_label: str = ""
    batch: tuple[str, str] | None = None
    """A batch/v1 Indexed Job's rank: (the Job's uid, the completion index)."""
    group: str = ""
    queue_annotation: str = ""
    epoch: int | None = None
    step_seconds: float = DEFAULT_STEP_SECONDS
    mfu: float = DEFAULT_MFU
    started_at: float | None = None
    last: _Snapshot | None = None
    recent: deque[_Snapshot] = field(default_factory=lambda: deque(maxlen=RECENT_SNAPSHOTS))
    samples: list[ActivitySample] = field(default_factory=list)
    pending: tuple[PendingReason, float] | None = None
    pending_closed: list[tuple[PendingReason, float, float]] = field(default_factory=list)
    gone: bool = False

    @property
    def job(self) -> str:
        return self.job_label or self.group or self.name


@dataclass(slots=True)
class _Job:
    namespace: str
    name: str
    epoch: int | None = None
    queue: str = ""
    gpus: int = 0


@dataclass(slots=True)
class _BatchJob:
    """A batch/v1 Indexed Job as its pods show it (the Job object itself is not read)."""

    generation: int = 0
    """Its restarts so far: the epoch its ranks carry (a Job has none of its own)."""
    latest: dict[str, str] = field(default_factory=dict)
    """The newest pod (key) of each completion index."""
    pods: list[str] = field(default_factory=list)
    """Every pod (key) of the Job seen, in order."""


@dataclass(slots=True)
class _Incident:
    namespace: str
    job: str
    fault_at: float
    epoch: int
    """The epoch a Resumed rank must have (at least) to end the incident."""
    gpus: int
    step_at_fault: int | None
    step_seconds: float
    resume_at: float | None = None
    recomputed_gpu_seconds: float = 0.0
    queue: str | None = None
    """The Job's queue, kept when the Job is deleted (None: read it from the live Job)."""


class UsageTracker:
    """Folds observations into the accounting history.  Not thread-safe: one owner feeds and reads it."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[str, _Pod] = {}
        self._pod_by_name: dict[tuple[str, str], str] = {}
        self._jobs: dict[tuple[str, str], _Job] = {}
        self._groups: dict[tuple[str, str], str] = {}
        self._incidents: list[_Incident] = []
        self._resumed_seen: set[str] = set()
        self._batch_jobs: dict[tuple[str, str, str], _BatchJob] = {}
        """batch/v1 Indexed Jobs by (namespace, job, uid): their ranks' pods and restart count."""

    # ------------------------------------------------------------------ feeding
    def observe(self, obs: Observation) -> bool:
        """Fold one observation in; True when it only extended its pod's last activity sample (steady
        progress: a replay without this snapshot, but with a later one, builds the same history)."""
        if obs.obj is None:
            return False
        if obs.resource is Resource.POD:
            return self._pod(obs.obj, obs.deleted, obs.at)
        handler = {Resource.NODE: self._node, Resource.JOB: self._job,
                   Resource.EVENT: self._event, Resource.PODGROUP: self._podgroup}[obs.resource]
        handler(obs.obj, obs.deleted, obs.at)
        return False

    def observe_all(self, observations: Iterable[Observation]) -> None:
        for obs in observations:
            self.observe(obs)

    def _node(self, obj: Obj, deleted: bool, at: float) -> None:
        meta = _meta(obj)
        name = str(meta.get("name") or "")
        if not name:
            return
        cur = self._nodes.get(name)
        if deleted:
            if cur is not None and cur.since == cur.since:
                self._close_node(name, cur, at)
                cur.since = float("nan")  # gone: no open interval
            return
        ready = _condition(obj, "Ready")
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        healthy = bool(ready is not None and ready.get("status") == "True" and not labels.get(QUARANTINE_LABEL))
        gpus = _whole(_map(obj, "status", "allocatable").get(GPU, 0))
        if cur is None:
            self._nodes[name] = _Node(gpus, healthy, at)
            return
        if cur.since != cur.since:  # deleted earlier, back again
            cur.gpus, cur.healthy, cur.since = gpus, healthy, at
            return
        if (cur.gpus, cur.healthy) != (gpus, healthy):
            self._close_node(name, cur, at)
            cur.gpus, cur.healthy, cur.since = gpus, healthy, at

    @staticmethod
    def _close_node(name: str, cur: _Node, at: float) -> None:
        if at > cur.since:
            cur.closed.append(NodeCapacity(name, cur.gpus, cur.since, at, cur.healthy))

    def _pod(self, obj: Obj, deleted: bool, at: float) -> bool:
        meta = _meta(obj)
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        if not name:
            return
        uid = str(meta.get("uid") or "")
        key = f"{ns}/{name}/{uid}"
        p = self._pods.get(key)
        new = p is None
        if p is None:
            if deleted:
                return False
            p = _Pod(key, ns, name, uid)
            self._pods[key] = p
        self._pod_by_name[(ns, name)] = key
        if p.gone:
            return False
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        anns = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
        spec, status = _map(obj, "spec"), _map(obj, "status")
        p.gpus = _gpus_of_containers(spec)
        p.job_label = str(labels.get(JOB_LABEL) or labels.get(BATCH_JOB_LABEL) or "")
        if not labels.get(JOB_LABEL) and labels.get(BATCH_JOB_LABEL) and anns.get(BATCH_INDEX) is not None:
            p.batch = (str(labels.get(BATCH_UID_LABEL) or ""), str(anns[BATCH_INDEX]))
        p.group = str(next((anns[k] for k in GROUP_ANNOTATIONS if anns.get(k)), ""))
        p.queue_annotation = str(anns.get(ANN_QUEUE) or anns.get(VOLCANO_QUEUE) or labels.get(VOLCANO_QUEUE) or "")
        p.epoch = _int(anns[ANN_EPOCH]) if ANN_EPOCH in anns else p.epoch
        step_s = _number(anns.get(ANN_STEP_SECONDS))
        p.step_seconds = step_s if step_s is not None and step_s > 0 else DEFAULT_STEP_SECONDS
        mfu = _number(anns.get(ANN_MFU))
        p.mfu = mfu if mfu is not None and 0.0 <= mfu <= 1.0 else DEFAULT_MFU
        started = _started_at(obj)
        terminal = deleted or bool(meta.get("deletionTimestamp")) or status.get("phase") in TERMINAL
        node = str(spec.get("nodeName") or "")
        merged = self._progress(p, anns, started)
        if node and p.bound_at is None:
            p.node, p.bound_at = node, at
        unplaced = _condition(obj, UNPLACED)
        reason: PendingReason | None = None
        if unplaced is not None and unplaced.get("status") == "True" and not node and not terminal:
            try:
                reason = PendingReason(unplaced.get("reason"))
            except ValueError:
                reason = PendingReason.OTHER
        if p.pending is not None and p.pending[0] is not reason:
            if at > p.pending[1]:
                p.pending_closed.append((p.pending[0], p.pending[1], at))
            p.pending = None
        if reason is not None and p.pending is None:
            p.pending = (reason, at)
        if new and p.batch is not None and p.epoch is None:
            self._batch_rank(p, at)
        if terminal:
            if p.bound_at is not None and p.released_at is None:
                p.released_at = at
            p.gone = True
        return merged

    def _batch_rank(self, p: _Pod, at: float) -> None:
        """A batch/v1 Indexed Job's new pod.  A Job has no restart epoch, so a pod that replaces an earlier pod of
        its index is the restart: it opens the incident (fault = the lost rank's last progress, or its end), and
        its ranks from then on carry the next epoch, so their ``Resumed`` ends it, as a Volcano Job's do."""
        assert p.batch is not None
        job_uid, index = p.batch
        job = self._batch_jobs.setdefault((p.namespace, p.job_label, job_uid), _BatchJob())
        previous = job.latest.get(index)
        job.latest[index] = p.key
        job.pods.append(p.key)
        if previous is None:
            p.epoch = job.generation
            return
        job.generation += 1
        epoch = p.epoch = job.generation
        open_inc = next((i for i in self._incidents if i.namespace == p.namespace and i.job == p.job_label
                         and i.resume_at is None), None)
        if open_inc is not None:
            open_inc.epoch = epoch  # another rank replaced before the job resumed: still the one incident
            return
        gone = self._pods[previous]
        ends = [t for t in ((gone.recent[-1].at if gone.recent else None), gone.released_at) if t is not None]
        fault = min([*ends, at])
        ranks = [self._pods[k] for k in job.pods]
        steps = [s.step for q in ranks for s in q.recent if s.at <= fault and s.step is not None]
        # the job's world: every index seen (its newest pod's GPUs), whether that pod lives or also failed
        gpus = sum(self._pods[k].gpus for k in job.latest.values())
        self._incidents.append(_Incident(p.namespace, p.job_label, fault, epoch, gpus,
                                         max(steps) if steps else None, gone.step_seconds))

    def _progress(self, p: _Pod, anns: Obj, started: float | None) -> bool:
        at = parse_instant(anns.get(ANN_PROGRESS_AT))
        stepped = _number(anns.get(ANN_STEPPED_SECONDS))
        inp = _number(anns.get(ANN_INPUT_STALL_SECONDS))
        comm = _number(anns.get(ANN_COMM_STALL_SECONDS))
        if started is not None and (p.started_at is None or started > p.started_at):
            # A (re)started container: its counters start again from 0 at that instant.
            if p.last is None or started >= p.last.at:
                p.last = _Snapshot(started, 0.0, 0.0, 0.0, None)
            p.started_at = started
        if at is None or stepped is None or inp is None or comm is None or min(stepped, inp, comm) < 0:
            return False  # no snapshot, or a malformed one: skipped
        snap = _Snapshot(at, stepped, inp, comm, _int(anns.get(ANN_STEP)))
        last = p.last
        if last is not None and at <= last.at:
            return False  # an older or repeated snapshot
        p.recent.append(snap)
        p.last = snap
        if last is None:
            return False
        if stepped < last.stepped or inp < last.input or comm < last.comm:
            return False  # counters went back (a restart we did not see start): start over from here
        wall = at - last.at
        d_step, d_in, d_comm = stepped - last.stepped, inp - last.input, comm - last.comm
        busy = _clamp(d_step / wall)
        active = _clamp((d_step - d_in) / wall)
        effective = min(active, _clamp((d_step - d_in - d_comm) / wall * p.mfu))
        sample = ActivitySample(p.key, last.at, at, active, effective, min(d_in, wall), min(d_comm, wall),
                                busy_share=max(busy, active))
        prev = p.samples[-1] if p.samples else None
        if prev is not None and prev.end == sample.start and _same_rates(prev, sample):
            # Steady training: one longer sample instead of one a second (the accounting is the same).
            sample = ActivitySample(p.key, prev.start, at, prev.active_share, prev.effective_share,
                                    prev.input_stall_seconds + sample.input_stall_seconds,
                                    prev.comm_stall_seconds + sample.comm_stall_seconds, busy_share=prev.busy_share)
            p.samples[-1] = sample
            return True
        p.samples.append(sample)
        return False

    def _job(self, obj: Obj, deleted: bool, at: float) -> None:
        meta = _meta(obj)
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        if not name:
            return
        if deleted:
            gone = self._jobs.pop((ns, name), None)
            for inc in self._incidents:  # deleted while down: its downtime ends here, not at every later "now"
                if inc.namespace == ns and inc.job == name and inc.resume_at is None:
                    inc.resume_at = max(at, inc.fault_at)
                    inc.queue = gone.queue if gone is not None else ""
            return
        j = self._jobs.setdefault((ns, name), _Job(ns, name))
        j.queue = str(_map(obj, "spec").get("queue") or "")
        spec = _map(obj, "spec")
        j.gpus = sum(max(0, _int(t.get("replicas")) or 0) * _gpus_of_containers(_map(t, "template", "spec"))
                     for t in spec.get("tasks") or [] if isinstance(t, Mapping))
        anns = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
        epoch = _int(anns.get(ANN_EPOCH)) if ANN_EPOCH in anns else None
        if epoch is None:
            return
        old, j.epoch = j.epoch, epoch
        if old is None or epoch <= old:
            return
        open_inc = next((i for i in self._incidents if i.namespace == ns and i.job == name and i.resume_at is None),
                        None)
        if open_inc is not None:
            open_inc.epoch = epoch  # restarted again before it resumed: still the one incident
            return
        ranks = [p for p in self._pods.values() if p.namespace == ns and p.job_label == name and p.epoch == old]
        lasts = [p.recent[-1].at for p in ranks if p.recent]
        fault = min(lasts) if lasts else at
        fault = min(fault, at)
        steps = [s.step for p in ranks for s in p.recent if s.at <= fault and s.step is not None]
        gpus = j.gpus or sum(p.gpus for p in ranks)
        step_s = next((p.step_seconds for p in ranks), DEFAULT_STEP_SECONDS)
        self._incidents.append(_Incident(ns, name, fault, epoch, gpus, max(steps) if steps else None, step_s))

    def _event(self, obj: Obj, deleted: bool, at: float) -> None:
        if deleted or obj.get("reason") != RESUMED:
            return
        meta = _meta(obj)
        ident = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        if ident in self._resumed_seen:
            return
        inv = _map(obj, "involvedObject")
        ns, name, uid = str(inv.get("namespace") or meta.get("namespace") or "default"), \
            str(inv.get("name") or ""), str(inv.get("uid") or "")
        key = f"{ns}/{name}/{uid}" if uid and f"{ns}/{name}/{uid}" in self._pods else self._pod_by_name.get((ns, name))
        pod = self._pods.get(key or "")
        when = parse_instant(obj.get("eventTime")) or parse_instant(obj.get("firstTimestamp"))
        if pod is None or not pod.job_label or pod.epoch is None or when is None:
            return
        self._resumed_seen.add(ident)
        inc = next((i for i in self._incidents if i.namespace == ns and i.job == pod.job_label
                    and i.resume_at is None and pod.epoch >= i.epoch), None)
        if inc is None:
            return
        inc.resume_at = max(when, inc.fault_at)
        m = _CHECKPOINT.search(str(obj.get("message") or ""))
        if m is not None and inc.step_at_fault is not None:
            inc.recomputed_gpu_seconds = max(0, inc.step_at_fault - int(m.group(1))) * inc.step_seconds * inc.gpus

    def _podgroup(self, obj: Obj, deleted: bool, at: float) -> None:
        meta = _meta(obj)
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        queue = _map(obj, "spec").get("queue")
        if deleted or not queue:
            self._groups.pop(key, None)
        else:
            self._groups[key] = str(queue)

    # ------------------------------------------------------------------ reading
    def _queue(self, p: _Pod) -> str:
        if p.queue_annotation:
            return p.queue_annotation
        if p.group and (p.namespace, p.group) in self._groups:
            return self._groups[(p.namespace, p.group)]
        job = self._jobs.get((p.namespace, p.job_label)) if p.job_label else None
        return (job.queue if job else "") or DEFAULT_QUEUE

    def history(self, now: float, window: Window | None = None) -> History:
        """Everything observed up to ``now`` (open intervals end there); with ``window``, only what touches it."""

        def touches(start: float, end: float) -> bool:
            return window is None or (end > window.start and start < window.end)

        capacity: list[NodeCapacity] = []
        for name, n in sorted(self._nodes.items()):
            capacity.extend(c for c in n.closed if touches(c.start, c.end))
            if n.since == n.since and now > n.since and touches(n.since, now):
                capacity.append(NodeCapacity(name, n.gpus, n.since, now, n.healthy))
        pods: list[PodInterval] = []
        samples: list[ActivitySample] = []
        pending: list[PendingDemand] = []
        for p in self._pods.values():
            queue = self._queue(p)
            if p.bound_at is not None and p.bound_at < now:
                end = min(now, p.released_at) if p.released_at is not None else now
                pods.append(PodInterval(p.key, p.namespace, queue, p.job, p.node, p.gpus, p.bound_at, end))
                samples.extend(s for s in p.samples if s.start < now and touches(s.start, s.end))
            spans = list(p.pending_closed)
            if p.pending is not None and now > p.pending[1]:
                spans.append((p.pending[0], p.pending[1], now))
            pending.extend(PendingDemand(p.namespace, queue, p.job, p.gpus, a, min(b, now), r)
                           for r, a, b in spans if a < now and touches(a, b))
        samples = [s if s.end <= now else _cut(s, now) for s in samples]
        incidents: list[Incident] = []
        for i in self._incidents:
            if i.fault_at >= now:
                continue
            resume = min(now, i.resume_at) if i.resume_at is not None else now
            if not (touches(i.fault_at, resume) or (window and window.start <= i.fault_at < window.end)):
                continue
            job = self._jobs.get((i.namespace, i.job))
            queue = (i.queue if i.queue is not None else job.queue if job else "") or DEFAULT_QUEUE
            recomputed = i.recomputed_gpu_seconds if i.resume_at is not None and i.resume_at <= now else 0.0
            incidents.append(Incident(i.namespace, queue, i.job, i.fault_at, resume, i.gpus, recomputed))
        return History(tuple(capacity), tuple(pods), tuple(samples), tuple(pending), tuple(incidents))

    def pending_now(self) -> list[PendingNow]:
        """Current unplaced demand per (namespace, queue, reason), sorted."""
        rows: dict[tuple[str, str, PendingReason], list[int]] = {}
        for p in self._pods.values():
            if p.pending is not None and not p.gone:
                row = rows.setdefault((p.namespace, self._queue(p), p.pending[0]), [0, 0])
                row[0] += 1
                row[1] += p.gpus
        return [PendingNow(ns, q, r, pods, gpus) for (ns, q, r), (pods, gpus)
                in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2].value))]

    def gpus_now(self) -> tuple[int, int]:
        """(healthy GPUs, GPUs bound to live pods on healthy nodes), now."""
        healthy = {name for name, n in self._nodes.items() if n.healthy and n.since == n.since}
        cap = sum(self._nodes[name].gpus for name in healthy)
        held = sum(p.gpus for p in self._pods.values()
                   if p.bound_at is not None and p.released_at is None and p.node in healthy)
        return cap, held


MERGE_TOLERANCE = 1e-6
"""Consecutive samples whose shares and stall rates differ by less than this are merged into one."""


def _same_rates(a: ActivitySample, b: ActivitySample) -> bool:
    la, lb = a.end - a.start, b.end - b.start
    return (la > 0 and lb > 0
            and abs(a.active_share - b.active_share) < MERGE_TOLERANCE
            and abs(a.effective_share - b.effective_share) < MERGE_TOLERANCE
            and abs(a.busy - b.busy) < MERGE_TOLERANCE
            and abs(a.input_stall_seconds / la - b.input_stall_seconds / lb) < MERGE_TOLERANCE
            and abs(a.comm_stall_seconds / la - b.comm_stall_seconds / lb) < MERGE_TOLERANCE)


def _clamp(x: float) -> float:
    return 0.0 if x < 0 else 1.0 if x > 1 else x


def _cut(s: ActivitySample, now: float) -> ActivitySample:
    """A sample cannot end after ``now`` (snapshots stamped ahead of the server's clock)."""
    frac = (now - s.start) / (s.end - s.start)
    return ActivitySample(s.pod, s.start, now, s.active_share, s.effective_share, s.input_stall_seconds * frac,
                          s.comm_stall_seconds * frac, busy_share=s.busy_share)
