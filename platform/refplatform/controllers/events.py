"""Records core/v1 Events the way upstream recorders do: one object per (involved object, reason,
message), its ``count`` and ``lastTimestamp`` bumped when the same thing happens again.

Every Event carries ``eventTime``, a ``MicroTime`` (``2026-11-30T01:02:03.123456Z``), as the
``events.k8s.io`` recorders write it, so the healing loop's steps can be ordered and timed to
the microsecond; a repeat also updates ``series`` (``count``, ``lastObservedTime``, MicroTime).
``firstTimestamp``/``lastTimestamp`` keep their second precision for ``kubectl get events``.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, MERGE_PATCH, RestClient, resource_path

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def _rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(when: datetime) -> str:
    """Kubernetes ``MicroTime``: RFC 3339 with exactly six fractional digits, UTC, ``Z``."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    """Writes Events for one component (``source.component``, ``reportingComponent``)."""

    def __init__(self, client: RestClient, component: str,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 instance: str | None = None) -> None:
        self.client = client
        self.component = component
        self.clock = clock
        self.instance = instance or f"{component}-{socket.gethostname()}"
        self._seen: dict[tuple[str, str, str, str], tuple[str, int]] = {}
        self._lock = threading.Lock()

    def record(self, obj: Obj, kind: str, event_type: str, reason: str, message: str, *,
               action: str | None = None, when: datetime | None = None) -> None:
        """Best effort: an Event that cannot be written is logged, never raised.

        ``when`` is the instant of the transition (default: the recorder's clock now);
        ``action`` is what was done (events.k8s.io's ``action``; default the reason).
        """
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid", ""), reason, message, event_type)
        instant = when or self.clock()
        now, micro = _rfc3339(instant), micro_time(instant)
        try:
            with self._lock:
                previous = self._seen.get(key)
            if previous is not None:
                name, count = previous
                self.client.patch(resource_path("", "v1", "events", namespace, name),
                                  {"count": count + 1, "lastTimestamp": now,
                                   "series": {"count": count + 1, "lastObservedTime": micro}}, MERGE_PATCH)
                with self._lock:
                    self._seen[key] = (name, count + 1)
                return
            created = self.client.create(resource_path("", "v1", "events", namespace), {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
                "involvedObject": {"kind": kind, "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
                                   "uid": meta.get("uid", ""), "apiVersion": obj.get("apiVersion", "v1"),
                                   "resourceVersion": meta.get("resourceVersion", "")},
                "reason": reason, "message": message, "type": event_type, "count": 1,
                "firstTimestamp": now, "lastTimestamp": now, "eventTime": micro,
                "action": action or reason,
                "source": {"component": self.component}, "reportingComponent": self.component,
                "reportingInstance": self.instance,
            })
            with self._lock:
                self._seen[key] = (created["metadata"]["name"], 1)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.warning("could not record event %s for %s: %s", reason, meta.get("name"), exc)
            with self._lock:
                self._seen.pop(key, None)


class BackgroundEvents:
    """Writes a recorder's Events from worker threads, as upstream's event broadcaster does: the caller
    (a scheduler's bind, on its critical path) only queues the Event.  At most ``capacity`` Events wait;
    beyond that one is dropped with a warning (upstream drops them too), never blocking the caller."""

    def __init__(self, recorder: EventRecorder, *, workers: int = 4, capacity: int = 10_000) -> None:
        self.recorder = recorder
        self._queue: queue.Queue[tuple[tuple[Any, ...], dict[str, Any]] | None] = queue.Queue(capacity)
        self.dropped = 0
        self._threads = [threading.Thread(target=self._work, name=f"events-{recorder.component}-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    def record(self, obj: Obj, kind: str, event_type: str, reason: str, message: str, *,
               action: str | None = None, when: datetime | None = None) -> None:
        """Queue an Event; its instant is taken now (the transition's), not when it is written."""
        when = when or self.recorder.clock()
        try:
            self._queue.put_nowait(((obj, kind, event_type, reason, message), {"action": action, "when": when}))
        except queue.Full:
            self.dropped += 1
            log.warning("event queue full: dropped %s event for %s", reason, (obj.get("metadata") or {}).get("name"))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                args, kwargs = item
                self.recorder.record(*args, **kwargs)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def flush(self) -> None:
        """Return once every Event queued so far is written (or failed and logged)."""
        self._queue.join()

    def close(self) -> None:
        """Write what is queued, then stop the workers."""
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=5)
