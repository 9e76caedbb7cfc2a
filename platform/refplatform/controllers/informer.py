"""Shared informers: an in-memory copy of one resource type, kept current by list + watch.

An informer lists once, then watches from the list's resourceVersion,
resuming after a dropped stream and relisting after 410 Gone, so its cache
converges on the server's state whatever happens to the connection.  Every
change wakes the controllers that subscribed to it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.resources import ResourceType

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Key = tuple[str, str]


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class Informer:
    """A watched cache of one resource type across all namespaces.  Thread-safe reads."""

    def __init__(self, client: RestClient, rt: ResourceType, *, watch_timeout: int = 300,
                 retry_seconds: float = 0.5) -> None:
        self.client = client
        self.rt = rt
        self.path = resource_path(rt.group, rt.version, rt.plural)
        self.watch_timeout = watch_timeout
        self.retry_seconds = retry_seconds
        self._items: dict[Key, Obj] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._handlers: list[Callable[[str, Obj], None]] = []
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{rt.plural}", daemon=True)
        self.resource_version = ""

    # ------------------------------------------------------------------ reads
    def list(self) -> list[Obj]:
        with self._lock:
            return list(self._items.values())

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._items.get((namespace, name))

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    # -------------------------------------------------------------- lifecycle
    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def on_event(self, handler: Callable[[str, Obj], None]) -> None:
        """Call ``handler(type, obj)`` for each object a list brings (``ADDED``) and each watch event (``ADDED``,
        ``MODIFIED``, ``DELETED``), on the informer's thread, after the cache has it."""
        self._handlers.append(handler)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.stop()
        if self._thread.ident is not None:  # started (stopping one never started is a no-op)
            self._thread.join(timeout=5)

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()

    def _relist(self) -> None:
        answer = self.client.list(self.path)
        items = {key_of(o): o for o in answer.get("items") or []}
        with self._lock:
            self._items = items
        self.resource_version = (answer.get("metadata") or {}).get("resourceVersion", "")
        for handler in self._handlers:
            for obj in items.values():
                handler("ADDED", obj)
        self._synced.set()
        self._notify()

    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                self._watch_once()
            except ApiStatusError as exc:
                if exc.gone:
                    need_list = True
                    continue
                log.warning("%s watch failed: %s", self.rt.plural, exc)
                self._stop.wait(self.retry_seconds)
            except ApiUnreachable as exc:
                log.warning("%s: API unreachable (%s); retrying", self.rt.plural, exc)
                self._stop.wait(self.retry_seconds)

    def _watch_once(self) -> None:
        stream = self.client.watch(self.path, resource_version=self.resource_version,
                                   timeout_seconds=self.watch_timeout)
        self._stream = stream
        try:
            for event in stream:
                if self._stop.is_set():
                    return
                kind, obj = event.type, event.object
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise ApiStatusError(410, "Expired", obj.get("message", "gone"))
                    raise ApiStatusError(int(obj.get("code") or 500), obj.get("reason", ""), obj.get("message", ""))
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    with self._lock:
                        if kind == "DELETED":
                            self._items.pop(key_of(obj), None)
                        else:
                            self._items[key_of(obj)] = obj
                if rv:  # after the item: a reader that sees this version sees the change too
                    self.resource_version = rv
                if kind == "BOOKMARK":
                    continue
                for handler in self._handlers:
                    handler(kind, obj)
                self._notify()
        finally:
            self._stream = None
            stream.stop()
