"""The dashboard's live view, computed purely from stored objects: GPU grid, pending pods, incidents.

:func:`build_view` takes plain Kubernetes-shaped objects (nodes, pods, events, Volcano Jobs,
Leases) and the instant ``now`` and returns a :class:`DashboardView`; :meth:`DashboardView.to_dict`
is the JSON served at ``GET /apis/firedrill.dev/v1alpha1/dashboard`` (docs/DASHBOARD.md).  No
I/O and no clock here: :mod:`refplatform.api.dashboard_http` reads the store and serves it.

Names are data.  Every string taken from an object is passed through untouched (the page renders
it with ``textContent``); nothing here builds markup.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from refplatform.api.service import TERMINAL_PHASES
from refplatform.api.validation import pod_gpu_request
from refplatform.controllers.convert import SCHEDULER_NAMES
from refplatform.core.accounting import UNPLACED_CONDITION
from refplatform.core.healing import OUT_OF_SERVICE_TAINT, QUARANTINE_LABEL, SPARE_LABEL
from refplatform.core.resources import GPU, GPU_INDEX_ANNOTATION, GPU_MILLI
from refplatform.core.usage import parse_instant

Obj = Mapping[str, Any]
API_VERSION = "firedrill.dev/v1alpha1"
KIND = "DashboardView"
MAX_INCIDENTS = 20
EVICTED_NODE = re.compile(r"node (\S+) is (?:lost|out of service)")


class CellState(Enum):
    """What one GPU of one node is doing, as the grid colours it (most severe wins)."""

    FREE = "free"
    """Healthy and schedulable, nothing bound to it."""
    ALLOCATED = "allocated"
    """A running or starting pod holds the whole GPU (its name is in ``pods``)."""
    SHARED = "shared"
    """One or more pods hold a share of the GPU (``firedrill.dev/gpu-milli``)."""
    SPARE = "spare"
    """The node is in the healer's spare pool: kept free until a node is lost."""
    CORDONED = "cordoned"
    """The node is Ready but unschedulable (cordoned by an admin); bound pods keep running."""
    UNHEALTHY = "unhealthy"
    """The node's Ready condition is not True (lost heartbeat or agent says NotReady)."""
    QUARANTINED = "quarantined"
    """The healer quarantined the node (label ``firedrill.dev/quarantine``): never reused until healthy."""


@dataclass(frozen=True)
class PodRef:
    """A pod holding (part of) a GPU."""

    namespace: str
    name: str
    phase: str
    milli: int = 1000
    """Thousandths of the GPU it holds (1000 for a whole GPU)."""

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "phase": self.phase, "milli": self.milli}


@dataclass(frozen=True)
class GpuCell:
    """One GPU of one node."""

    index: int
    state: CellState
    pods: tuple[PodRef, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "state": self.state.value, "pods": [p.to_dict() for p in self.pods]}


@dataclass(frozen=True)
class NodeRow:
    """One node of the grid: its health and its GPUs."""

    name: str
    ready: str
    """The Ready condition's status: ``True``, ``False``, ``Unknown`` or ``""`` when absent."""
    state: CellState
    """The node-wide state (free when healthy and schedulable; spare, cordoned, unhealthy or quarantined)."""
    reason: str
    """Why, in words (the quarantine reason, the Ready condition's reason), or ``""``."""
    cells: tuple[GpuCell, ...]
    unplaced_pods: tuple[PodRef, ...] = ()
    """Pods bound here asking for GPUs whose indices are unknown or out of range (shown beside the row)."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ready": self.ready, "state": self.state.value, "reason": self.reason,
                "gpus": len(self.cells), "cells": [c.to_dict() for c in self.cells],
                "unindexedPods": [p.to_dict() for p in self.unplaced_pods]}


@dataclass(frozen=True)
class PendingPod:
    """A pod not bound to any node yet, and why (the scheduler's words when it gave any)."""

    namespace: str
    name: str
    gpus: int
    scheduler: str
    reason: str
    """``Fragmentation``, ``InsufficientCapacity``, ``Quota``, ``Other`` (the scheduler's
    ``firedrill.dev/Unplaced`` condition), ``Unschedulable``, ``Waiting`` or ``NotOurScheduler``."""
    message: str
    since: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "gpus": self.gpus, "scheduler": self.scheduler,
                "reason": self.reason, "message": self.message, "since": iso(self.since)}


@dataclass(frozen=True)
class Incident:
    """One node loss and, per affected job, the healing instants from the platform's own records.

    ``fault`` is the node's last heartbeat (its Lease ``renewTime``) while the Lease has not moved
    since; ``detect`` the ``NodeNotReady`` Event; ``evict`` the last ``Evicted`` Event naming the
    node; ``replace`` the latest container start of the job's current ranks; ``resume`` the first
    ``Resumed`` Event of a current rank.  A missing instant leaves its phase empty (``None``).
    """

    node: str
    job: str
    namespace: str
    fault: datetime | None
    detect: datetime
    evict: datetime | None
    replace: datetime | None
    resume: datetime | None

    @staticmethod
    def _span(a: datetime | None, b: datetime | None) -> float | None:
        return None if a is None or b is None else round((b - a).total_seconds(), 6)

    def durations(self) -> dict[str, float | None]:
        """Seconds of each phase (``../shared/DESIGN.md``): None when an instant is missing."""
        return {"detect": self._span(self.fault, self.detect), "evict": self._span(self.detect, self.evict),
                "replace": self._span(self.evict, self.replace), "resume": self._span(self.replace, self.resume),
                "total": self._span(self.fault, self.resume)}

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "job": self.job, "namespace": self.namespace,
                "instants": {"fault": iso(self.fault), "detect": iso(self.detect), "evict": iso(self.evict),
                             "replace": iso(self.replace), "resume": iso(self.resume)},
                "seconds": self.durations()}


@dataclass(frozen=True)
class DashboardView:
    """Everything the dashboard shows that is not the leak report."""

    now: datetime
    nodes: tuple[NodeRow, ...]
    pending: tuple[PendingPod, ...]
    incidents: tuple[Incident, ...]
    counts: Mapping[str, int] = field(default_factory=dict)
    """GPUs per :class:`CellState` value, every state present (0 when none)."""

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": KIND, "now": iso(self.now),
                "gpuStates": [{"state": s.value, "count": self.counts.get(s.value, 0)} for s in CellState],
                "nodes": [n.to_dict() for n in self.nodes], "pending": [p.to_dict() for p in self.pending],
                "incidents": [i.to_dict() for i in self.incidents]}


# ---------------------------------------------------------------- helpers
def iso(when: datetime | None) -> str | None:
    """RFC 3339 UTC with ``Z``, microseconds only when non-zero; None stays None."""
    if when is None:
        return None
    when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if when.microsecond else "%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 instant (seconds or MicroTime) as an aware UTC datetime; None when absent or malformed."""
    t = parse_instant(value)
    return None if t is None else datetime.fromtimestamp(t, timezone.utc)


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def _condition(obj: Obj, ctype: str) -> Mapping[str, Any]:
    for c in _list(_map(obj.get("status")).get("conditions")):
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c
    return {}


def event_time(event: Obj) -> datetime | None:
    """The Event's latest occurrence: ``series.lastObservedTime``, else ``eventTime``, else ``lastTimestamp``."""
    series = _map(event.get("series"))
    return (parse_time(series.get("lastObservedTime")) or parse_time(event.get("eventTime"))
            or parse_time(event.get("lastTimestamp")))


def gpu_indices(pod: Obj) -> tuple[int, ...] | None:
    """The GPU indices the scheduler chose (``firedrill.dev/gpu-index``), or None when absent or malformed."""
    raw = _map(_meta(pod).get("annotations")).get(GPU_INDEX_ANNOTATION)
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        return tuple(int(p) for p in raw.split(",") if p.strip())
    except ValueError:
        return None


def gpu_milli(pod: Obj) -> int:
    """Thousandths of one GPU asked for through ``firedrill.dev/gpu-milli`` (0 when none)."""
    total = 0
    for c in _list(_map(pod.get("spec")).get("containers")):
        res = _map(_map(c).get("resources"))
        raw = _map(res.get("limits")).get(GPU_MILLI, _map(res.get("requests")).get(GPU_MILLI))
        total += _int(raw)
    return total


def _gpus_requested(pod: Obj) -> int:
    try:
        return pod_gpu_request(dict(pod))
    except (AttributeError, TypeError):
        return 0


# ---------------------------------------------------------------- the grid
def _node_state(node: Obj) -> tuple[CellState, str, str]:
    labels = _map(_meta(node).get("labels"))
    ready = _condition(node, "Ready")
    status = _str(ready.get("status"))
    quarantine = labels.get(QUARANTINE_LABEL)
    taints = _list(_map(node.get("spec")).get("taints"))
    if quarantine or any(_map(t).get("key") == OUT_OF_SERVICE_TAINT for t in taints):
        return CellState.QUARANTINED, status, f"quarantined: {_str(quarantine) or 'out of service'}"
    if status != "True":
        why = _str(ready.get("reason")) or "no Ready condition"
        return CellState.UNHEALTHY, status, f"Ready={status or 'absent'} ({why})"
    if labels.get(SPARE_LABEL) == "true":
        return CellState.SPARE, status, "spare pool"
    if _map(node.get("spec")).get("unschedulable"):
        return CellState.CORDONED, status, "cordoned"
    return CellState.FREE, status, ""


def _holds_gpus(pod: Obj) -> bool:
    meta, spec = _meta(pod), _map(pod.get("spec"))
    return bool(spec.get("nodeName")) and _str(_map(pod.get("status")).get("phase")) not in TERMINAL_PHASES \
        and (_gpus_requested(pod) > 0 or gpu_milli(pod) > 0) and bool(meta.get("name"))


def build_grid(nodes: Iterable[Obj], pods: Iterable[Obj]) -> tuple[NodeRow, ...]:
    """Node x GPU, sorted by node name; a pod's GPUs from its ``firedrill.dev/gpu-index`` annotation.

    A node's own state (quarantined, unhealthy, cordoned, spare) colours every GPU that no pod holds,
    and overrides allocated/shared when it is quarantined or unhealthy (the pods are listed still).
    """
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        if _holds_gpus(pod):
            by_node.setdefault(_str(_map(pod.get("spec")).get("nodeName")), []).append(pod)
    rows = []
    for node in sorted(nodes, key=lambda n: _str(_meta(n).get("name"))):
        name = _str(_meta(node).get("name"))
        count = max(0, _int(_map(_map(node.get("status")).get("allocatable")).get(GPU)))
        state, ready, reason = _node_state(node)
        holders: list[list[PodRef]] = [[] for _ in range(count)]
        unindexed: list[PodRef] = []
        for pod in sorted(by_node.get(name, []), key=lambda p: (_str(_meta(p).get("namespace")),
                                                                 _str(_meta(p).get("name")))):
            milli = gpu_milli(pod)
            ref = PodRef(_str(_meta(pod).get("namespace")), _str(_meta(pod).get("name")),
                         _str(_map(pod.get("status")).get("phase")) or "Pending",
                         milli if milli and not _gpus_requested(pod) else 1000)
            indices = gpu_indices(pod)
            if indices is None or any(not 0 <= i < count for i in indices):
                unindexed.append(ref)
                continue
            for i in indices:
                holders[i].append(ref)
        cells = []
        for i, held in enumerate(holders):
            if state in (CellState.QUARANTINED, CellState.UNHEALTHY):
                cell_state = state
            elif held:
                cell_state = CellState.SHARED if all(p.milli < 1000 for p in held) else CellState.ALLOCATED
            else:
                cell_state = state
            cells.append(GpuCell(i, cell_state, tuple(held)))
        rows.append(NodeRow(name, ready, state, reason, tuple(cells), tuple(unindexed)))
    return tuple(rows)


# ---------------------------------------------------------------- pending
def build_pending(pods: Iterable[Obj], scheduler_names: frozenset[str] = SCHEDULER_NAMES) -> tuple[PendingPod, ...]:
    """Pods with no node that are not finished, oldest first, with the scheduler's reason when it gave one."""
    out = []
    for pod in pods:
        meta, spec, status = _meta(pod), _map(pod.get("spec")), _map(pod.get("status"))
        if spec.get("nodeName") or _str(status.get("phase")) in TERMINAL_PHASES or meta.get("deletionTimestamp"):
            continue
        scheduler = _str(spec.get("schedulerName")) or "default-scheduler"
        unplaced, scheduled = _condition(pod, UNPLACED_CONDITION), _condition(pod, "PodScheduled")
        if scheduler not in scheduler_names:
            reason, message = "NotOurScheduler", (f"schedulerName {scheduler!r} is not served by this platform "
                                                  f"({', '.join(sorted(scheduler_names))}); nothing will bind it")
        elif unplaced.get("status") == "True":
            reason, message = _str(unplaced.get("reason")) or "Other", _str(unplaced.get("message"))
        elif scheduled.get("status") == "False":
            reason, message = _str(scheduled.get("reason")) or "Unschedulable", _str(scheduled.get("message"))
        else:
            reason, message = "Waiting", "not yet considered by the scheduler"
        out.append(PendingPod(_str(meta.get("namespace")), _str(meta.get("name")),
                              _gpus_requested(pod) or 0, scheduler, reason, message,
                              parse_time(meta.get("creationTimestamp"))))
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    return tuple(sorted(out, key=lambda p: (p.since or epoch, p.namespace, p.name)))


# ---------------------------------------------------------------- incidents
def _job_of(pod_name: str, jobs: Iterable[tuple[str, str]], namespace: str) -> tuple[str, str] | None:
    """The Volcano Job whose rank ``pod_name`` was (``<job>-<task>-<index>``): the longest matching job name."""
    best = None
    for ns, job in jobs:
        if ns == namespace and pod_name.startswith(job + "-") and (best is None or len(job) > len(best[1])):
            best = (ns, job)
    return best


def _started(pod: Obj, started: Mapping[tuple[str, str], datetime]) -> datetime | None:
    """When the pod's container started: its ``Started`` Event (MicroTime), else ``startedAt`` (seconds)."""
    meta = _meta(pod)
    when = started.get((_str(meta.get("namespace")), _str(meta.get("name"))))
    if when is not None:
        return when
    for cs in _list(_map(pod.get("status")).get("containerStatuses")):
        at = parse_time(_map(_map(_map(cs).get("state")).get("running")).get("startedAt"))
        if at is not None:
            return at
    return None


def build_incidents(events: Iterable[Obj], pods: Iterable[Obj], jobs: Iterable[Obj], leases: Iterable[Obj],
                    limit: int = MAX_INCIDENTS) -> tuple[Incident, ...]:
    """One row per (node loss, affected job), newest first; a loss with no affected job gets one row.

    A node loss is the latest occurrence of its ``NodeNotReady`` Event.  Its evictions are the
    ``Evicted`` Events naming the node (``node X is lost`` / ``is out of service``) between the loss
    and the node's next ``NodeReady``; the jobs are those whose ranks were evicted.  A job is replaced
    when every current rank has started (the agent's ``Started`` Event, microseconds; else the
    container's ``startedAt``, seconds) after the loss.
    """
    events = list(events)
    pods = list(pods)
    job_keys = sorted({(_str(_meta(j).get("namespace")), _str(_meta(j).get("name"))) for j in jobs})
    lease_renew = {_str(_meta(lease).get("name")): parse_time(_map(lease.get("spec")).get("renewTime"))
                   for lease in leases}
    lost: dict[str, datetime] = {}
    back: dict[str, list[datetime]] = {}
    evicted: list[tuple[str, str, str, datetime]] = []  # node, namespace, pod, when
    resumed: list[tuple[str, str, datetime]] = []  # namespace, pod, when
    started: dict[tuple[str, str], datetime] = {}  # (namespace, pod) -> the agent's Started instant
    for ev in events:
        reason, obj, when = ev.get("reason"), _map(ev.get("involvedObject")), event_time(ev)
        if when is None:
            continue
        if reason == "NodeNotReady" and obj.get("kind") == "Node":
            node = _str(obj.get("name"))
            lost[node] = max(when, lost.get(node, when))
        elif reason == "NodeReady" and obj.get("kind") == "Node":
            back.setdefault(_str(obj.get("name")), []).append(when)
        elif reason == "Evicted" and obj.get("kind") == "Pod":
            match = EVICTED_NODE.search(_str(ev.get("message")))
            if match:
                evicted.append((match.group(1), _str(obj.get("namespace")), _str(obj.get("name")), when))
        elif reason == "Started" and obj.get("kind") == "Pod":
            key = (_str(obj.get("namespace")), _str(obj.get("name")))
            started[key] = max(when, started.get(key, when))
        elif reason == "Resumed" and obj.get("kind") == "Pod":
            first = parse_time(ev.get("eventTime")) or when
            resumed.append((_str(obj.get("namespace")), _str(obj.get("name")), first))
    out: list[Incident] = []
    for node, detect in lost.items():
        until = min((t for t in back.get(node, []) if t > detect), default=None)
        renew = lease_renew.get(node)
        fault = renew if renew is not None and renew <= detect else None
        hits = [(ns, pod, t) for n, ns, pod, t in evicted if n == node and t >= detect and (until is None or t < until)]
        per_job: dict[tuple[str, str], list[datetime]] = {}
        loose: list[datetime] = []
        for ns, pod, t in hits:
            key = _job_of(pod, job_keys, ns)
            (per_job.setdefault(key, []) if key else loose).append(t)
        if not per_job:
            out.append(Incident(node, "", "", fault, detect, max(loose, default=None), None, None))
            continue
        for (ns, job), times in sorted(per_job.items()):
            evict = max(times)
            current = [p for p in pods if _meta(p).get("namespace") == ns
                       and _map(_meta(p).get("labels")).get("volcano.sh/job-name") == job]
            starts = [_started(p, started) for p in current]
            known = [t for t in starts if t is not None]
            replace = max(known) if known and len(known) == len(starts) and min(known) >= detect else None
            names = {_str(_meta(p).get("name")) for p in current}
            resume = min((t for rns, pod, t in resumed if rns == ns and pod in names and t >= detect), default=None)
            out.append(Incident(node, job, ns, fault, detect, evict, replace, resume))
    out.sort(key=lambda i: (i.detect, i.node, i.job), reverse=True)
    return tuple(out[:limit])


# ---------------------------------------------------------------- all of it
def build_view(now: datetime, *, nodes: Iterable[Obj], pods: Iterable[Obj], events: Iterable[Obj] = (),
               jobs: Iterable[Obj] = (), leases: Iterable[Obj] = ()) -> DashboardView:
    """The dashboard's view of the cluster at ``now``."""
    pods = list(pods)
    grid = build_grid(nodes, pods)
    counts = {s.value: 0 for s in CellState}
    for row in grid:
        for cell in row.cells:
            counts[cell.state.value] += 1
    return DashboardView(now, grid, build_pending(pods), build_incidents(events, pods, jobs, leases), counts)
