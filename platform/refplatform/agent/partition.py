"""The simulated network partition: one gate in front of every API call the agent makes.

``SIGUSR1`` closes the :class:`PartitionGate` (the node is cut off from the API
server), ``SIGUSR2`` opens it again.  Every client the agent uses is a
:class:`GatedClient`, so lease renewals, node and pod status, pod list/watch,
peer polls and checkpoint writes all fail the same way, with
:class:`~refplatform.client.ApiUnreachable`, as if the network had gone; open
watch streams are cut at once.  Nothing else in the agent knows about
partitions: each loop already handles an unreachable API server.  Workloads keep
running locally (they stall on their own, because their peer view goes stale).
Listeners hear each transition (the agent resyncs its pods when healed).

A :class:`GatedClient` also counts, per thread, the seconds spent waiting for
the API server's answers (:meth:`GatedClient.api_seconds`), so the agent's
health check can tell a pod sync loop stuck on this node from one waiting out
a control-plane outage.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from refplatform.client import MERGE_PATCH, ApiUnreachable, Body, Obj, Params, RestClient, WatchEvent, WatchStream

__all__ = ["GatedClient", "GatedWatch", "PartitionGate"]

log = logging.getLogger(__name__)

PARTITIONED = "simulated network partition (SIGUSR1; SIGUSR2 heals it)"


class PartitionGate:
    """Open (connected) or closed (partitioned).  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._since: float | None = None
        self._streams: set[GatedWatch] = set()
        self._listeners: list[Callable[[bool], None]] = []

    @property
    def partitioned(self) -> bool:
        return self._closed

    def partitioned_for(self) -> float:
        """Seconds since the partition began (0 when connected)."""
        since = self._since
        return 0.0 if since is None or not self._closed else time.monotonic() - since

    def on_change(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(partitioned)`` after each transition."""
        self._listeners.append(listener)

    def partition(self) -> bool:
        """Cut the node off; True if it was connected."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            self._since = time.monotonic()
            streams = list(self._streams)
        for stream in streams:
            stream.cut()
        self._notify(True)
        return True

    def heal(self) -> bool:
        """Reconnect; True if it was partitioned."""
        with self._lock:
            if not self._closed:
                return False
            self._closed = False
            self._since = None
        self._notify(False)
        return True

    def _notify(self, partitioned: bool) -> None:
        for listener in list(self._listeners):
            try:
                listener(partitioned)
            except Exception:  # a listener's bug must not break the transition
                log.exception("partition listener failed")

    def check(self, url: str) -> None:
        """Raise :class:`ApiUnreachable` while partitioned."""
        if self._closed:
            raise ApiUnreachable(url, PARTITIONED)

    def _register(self, stream: GatedWatch) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._streams.add(stream)
            return True

    def _unregister(self, stream: GatedWatch) -> None:
        with self._lock:
            self._streams.discard(stream)


class GatedWatch:
    """A :class:`~refplatform.client.WatchStream` that a partition cuts (its iteration then raises ApiUnreachable)."""

    def __init__(self, stream: WatchStream, gate: PartitionGate, url: str) -> None:
        self._stream = stream
        self._gate = gate
        self._url = url
        self._cut = False

    @property
    def resource_version(self) -> str | None:
        return self._stream.resource_version

    @property
    def stopped(self) -> bool:
        return self._stream.stopped

    def cut(self) -> None:
        self._cut = True
        self._stream.stop()

    def stop(self) -> None:
        self._stream.stop()

    def __enter__(self) -> GatedWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._gate._unregister(self)
        self._stream.__exit__(*exc)

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            for event in self._stream:
                if self._cut:
                    break
                yield event
        finally:
            self._gate._unregister(self)
        if self._cut:
            raise ApiUnreachable(self._url, PARTITIONED)


class GatedClient:
    """The verbs of :class:`~refplatform.client.RestClient`, each passing the :class:`PartitionGate` first, and
    each timed: :meth:`api_seconds` is how long a thread has waited for answers (a watch: until its stream
    opened)."""

    def __init__(self, client: RestClient, gate: PartitionGate) -> None:
        self.client = client
        self.gate = gate
        self._waited: dict[int, float] = {}
        self._since: dict[int, float] = {}

    def api_seconds(self, thread: int) -> float:
        """Seconds thread ``thread`` (``threading.get_ident()``) has waited for this client's calls, the call now in
        flight included. Each thread writes only its own entries, so any thread may read them."""
        since = self._since.get(thread)
        return self._waited.get(thread, 0.0) + (time.monotonic() - since if since is not None else 0.0)

    @contextmanager
    def _call(self, path: str) -> Iterator[None]:
        self.gate.check(self.client.base_url + path)
        thread = threading.get_ident()
        self._since[thread] = start = time.monotonic()
        try:
            yield
        finally:
            # Add the wait before clearing the start, so a reader in between counts it twice rather than never:
            # the health check then errs towards Ready, never towards a false NotReady.
            self._waited[thread] = self._waited.get(thread, 0.0) + time.monotonic() - start
            del self._since[thread]

    def get(self, path: str, params: Params | None = None) -> Obj:
        with self._call(path):
            return self.client.get(path, params)

    def reachable(self, timeout: float) -> tuple[bool, str]:
        """:meth:`RestClient.reachable <refplatform.client.RestClient.reachable>`, behind the gate."""
        if self.gate.partitioned:
            return False, PARTITIONED
        return self.client.reachable(timeout)

    def list(self, path: str, params: Params | None = None) -> Obj:
        with self._call(path):
            return self.client.list(path, params)

    def create(self, path: str, body: Obj, params: Params | None = None) -> Obj:
        with self._call(path):
            return self.client.create(path, body, params)

    def update(self, path: str, body: Obj, params: Params | None = None) -> Obj:
        with self._call(path):
            return self.client.update(path, body, params)

    def patch(self, path: str, body: Body, content_type: str = MERGE_PATCH, params: Params | None = None) -> Obj:
        with self._call(path):
            return self.client.patch(path, body, content_type, params)

    def delete(self, path: str, body: Obj | None = None, params: Params | None = None) -> Obj:
        with self._call(path):
            return self.client.delete(path, body, params)

    def get_raw(self, path: str, params: Params | None = None, *, timeout: float | None = None) -> bytes:
        with self._call(path):
            return self.client.get_raw(path, params, timeout=timeout)

    def watch(self, path: str, params: Params | None = None, **kwargs: Any) -> GatedWatch:
        with self._call(path):
            stream = self.client.watch(path, params, **kwargs)
        gated = GatedWatch(stream, self.gate, self.client.base_url + path)
        if not self.gate._register(gated):  # partitioned while the request was in flight
            gated.cut()
        return gated

    def close(self) -> None:
        self.client.close()
