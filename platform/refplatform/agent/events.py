"""core/v1 Events the node agent records on its pods, as the kubelet does.

The controllers record the healing loop's transitions (``refplatform.controllers.events``);
only the agent knows when a container started, when a training rank resumed or learned it
was replaced, and when it stopped a container, so it records those on the Pod itself:

=========  =======  ===============================================================
reason     type     message
=========  =======  ===============================================================
Started    Normal   ``Started container <name>``
Resumed    Normal   ``Resumed training at step M beyond checkpoint N``
Fenced     Warning  the fence (as the pod's ``status.message``)
Killing    Normal   ``Stopping container <name>``
XidError   Warning  an injected GPU Xid that failed the pod (also on the Node, with
                    the pods it failed); see docs/PARTITIONING.md
=========  =======  ===============================================================

On the Node, a whole GPU's way back (:mod:`refplatform.agent.gpuhealth`, docs/HEALING.md):
``GpuBurnInPassed`` and ``GpuReturned`` (Normal), ``GpuBurnInFailed`` and ``GpuHeld`` (Warning).

The shape is the controllers' (:func:`event_body`), from ``source.component: kubelet``,
``source.host: <node>``, ``reportingComponent: kubelet``, ``reportingInstance: <node>``;
``involvedObject`` is the Pod, with ``fieldPath: spec.containers{<name>}`` as the kubelet
sets it for container events.  ``eventTime`` is a ``MicroTime`` and is the instant of the
transition on the agent's injected clock (not the time of the write);
``firstTimestamp``/``lastTimestamp`` are that instant to the second.  The same
(object, reason, message) again bumps ``count``, ``lastTimestamp`` and ``series``.

Best effort: :meth:`PodEventRecorder.record` only queues (never blocks, never raises); one
thread writes the queue through the agent's (gated) client.  An Event that meets the
partition gate is dropped, so a partitioned agent emits nothing, not even later; one that
fails because the API server is unreachable or overloaded is retried a few times, then
dropped; a full queue drops the newest.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from refplatform.agent.clock import micro_time, rfc3339
from refplatform.agent.partition import PARTITIONED
from refplatform.client import MERGE_PATCH, ApiStatusError, ApiUnreachable, resource_path

__all__ = [
    "KILLING",
    "KUBELET",
    "PodEventRecorder",
    "STARTED",
    "container_field_path",
    "event_body",
    "pod_reference",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

KUBELET = "kubelet"
STARTED = "Started"
KILLING = "Killing"
MAX_QUEUED = 1024
REMEMBER = 4096
"""Events remembered for aggregation (the oldest are forgotten first)."""
RETRY_DELAYS = (0.5, 1.0, 2.0)
"""Seconds between attempts at a write that failed transiently (unreachable, 429, 5xx)."""


def pod_reference(pod: Obj) -> Obj:
    """``involvedObject`` for a pod, as the controllers write it (kind, namespace, name, uid, apiVersion, resourceVersion)."""
    meta = pod.get("metadata") or {}
    return {
        "kind": "Pod",
        "namespace": str(meta.get("namespace") or "default"),
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
        "apiVersion": str(pod.get("apiVersion") or "v1"),
        "resourceVersion": str(meta.get("resourceVersion") or ""),
    }


def container_field_path(container: str) -> str:
    """The kubelet's ``fieldPath`` for one container of a pod."""
    return f"spec.containers{{{container}}}"


def event_body(ref: Obj, node: str, event_type: str, reason: str, message: str, when: datetime,
               *, action: str | None = None, field_path: str | None = None) -> Obj:
    """A new core/v1 Event about ``ref`` (an ``involvedObject``), reported by this node's kubelet at ``when``."""
    involved = dict(ref)
    if field_path:
        involved["fieldPath"] = field_path
    seconds = rfc3339(when)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{ref.get('name') or 'object'}.", "namespace": ref.get("namespace") or "default"},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": event_type,
        "count": 1,
        "firstTimestamp": seconds,
        "lastTimestamp": seconds,
        "eventTime": micro_time(when),
        "action": action or reason,
        "source": {"component": KUBELET, "host": node},
        "reportingComponent": KUBELET,
        "reportingInstance": node,
    }


@dataclass(frozen=True)
class _Pending:
    key: tuple[str, str, str, str, str]
    body: Obj


class PodEventRecorder:
    """Queues Events about this node's pods and writes them on one thread.  ``start()``, then ``stop()``.

    Without ``start()`` nothing is written until :meth:`drain` (how unit tests drive it).
    """

    def __init__(self, client: Any, node: str, *, max_queued: int = MAX_QUEUED,
                 retry_delays: Sequence[float] = RETRY_DELAYS, remember: int = REMEMBER) -> None:
        """``client``: a RestClient behind the partition gate (the agent's :class:`~refplatform.agent.partition.GatedClient`)."""
        self.client = client
        self.node = node
        self.max_queued = max_queued
        self.retry_delays = tuple(retry_delays)
        self.remember = remember
        self.written = 0
        """Events created or bumped."""
        self.dropped = 0
        """Events given up on (partition, queue full, refused, retries spent)."""
        self._pending: deque[_Pending] = deque()
        self._cond = threading.Condition()
        self._seen: OrderedDict[tuple[str, str, str, str, str], tuple[str, str, int]] = OrderedDict()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the caller's side: never blocks, never raises -----------------------

    def record(self, ref: Obj, event_type: str, reason: str, message: str, when: datetime,
               *, action: str | None = None, field_path: str | None = None) -> None:
        """Queue an Event about ``ref`` stamped ``when`` (the instant of the transition)."""
        try:
            body = event_body(ref, self.node, event_type, reason, message, when, action=action, field_path=field_path)
            key = (str(ref.get("uid") or ""), field_path or "", reason, message, event_type)
            with self._cond:
                if len(self._pending) >= self.max_queued:
                    self.dropped += 1
                    log.warning("event queue full (%d): dropped %s for %s", self.max_queued, reason, ref.get("name"))
                    return
                self._pending.append(_Pending(key, body))
                self._cond.notify()
        except Exception:  # an Event is never worth breaking pod sync for
            log.exception("could not queue event %s for %s", reason, ref.get("name"))

    def queued(self) -> int:
        with self._cond:
            return len(self._pending)

    # -- the writer's side -----------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued (one attempt each), then end the thread."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def drain(self) -> int:
        """Write every queued Event now, in order; returns how many were written."""
        done = 0
        while (item := self._pop()) is not None:
            done += self._deliver(item)
        return done

    def _pop(self) -> _Pending | None:
        with self._cond:
            return self._pending.popleft() if self._pending else None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop.is_set():
                    self._cond.wait()
                if not self._pending and self._stop.is_set():
                    return
            try:
                self.drain()
            except Exception:  # the writer must survive anything; a bug shows in the log
                log.exception("event writer pass failed")

    def _deliver(self, item: _Pending) -> bool:
        name = item.body["involvedObject"].get("name")
        attempt = 0
        while True:
            try:
                self._write(item)
                self.written += 1
                return True
            except ApiUnreachable as err:
                if err.cause == PARTITIONED:
                    self.dropped += 1
                    log.debug("partitioned: dropped event %s for %s", item.body["reason"], name)
                    return False
                why: Exception = err
            except ApiStatusError as err:
                if not (err.code == 429 or err.code >= 500):
                    self.dropped += 1
                    log.warning("event %s for %s refused: %s", item.body["reason"], name, err)
                    return False
                why = err
            if attempt >= len(self.retry_delays) or self._stop.is_set():
                self.dropped += 1
                log.info("dropped event %s for %s after %d attempt(s): %s", item.body["reason"], name, attempt + 1, why)
                return False
            self._stop.wait(self.retry_delays[attempt])
            attempt += 1

    def _write(self, item: _Pending) -> None:
        body = item.body
        namespace = body["metadata"]["namespace"]
        previous = self._seen.get(item.key)
        if previous is not None:
            ev_ns, ev_name, count = previous
            try:
                self.client.patch(resource_path("", "v1", "events", ev_ns, ev_name), {
                    "count": count + 1, "lastTimestamp": body["lastTimestamp"],
                    "series": {"count": count + 1, "lastObservedTime": body["eventTime"]},
                }, MERGE_PATCH)
                self._remember(item.key, (ev_ns, ev_name, count + 1))
                return
            except ApiStatusError as err:
                if not err.not_found:
                    raise
                self._seen.pop(item.key, None)  # the Event expired: a new one
        created = self.client.create(resource_path("", "v1", "events", namespace), body)
        self._remember(item.key, (namespace, str(created["metadata"]["name"]), 1))

    def _remember(self, key: tuple[str, str, str, str, str], value: tuple[str, str, int]) -> None:
        self._seen[key] = value
        self._seen.move_to_end(key)
        while len(self._seen) > self.remember:
            self._seen.popitem(last=False)
