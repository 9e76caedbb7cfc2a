"""Runs controllers over shared informers: one thread per controller, woken by the changes it watches.

A controller is level-triggered: ``reconcile()`` looks at the whole cached
state and converges it, so a missed or coalesced wake-up costs nothing but
latency.  Bursts of events are coalesced into one reconcile; ``resync``
bounds how long a controller sleeps when nothing changes (timers such as
lease expiry need that).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

from refplatform.client import RestClient
from refplatform.controllers.informer import Informer
from refplatform.resources import ResourceType

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class Cache:
    """Read access to the informers a manager runs, by resource type."""

    def __init__(self, informers: dict[str, Informer]) -> None:
        self._informers = informers

    def list(self, rt: ResourceType) -> list[Obj]:
        return self._informers[rt.key].list()

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._informers[rt.key].get(namespace, name)

    def resource_version(self, rt: ResourceType) -> str:
        """How far the cache of ``rt`` has caught up: the resourceVersion of the last list or event it took in."""
        return self._informers[rt.key].resource_version


class Controller(Protocol):
    """What the manager needs of a controller."""

    name: str
    watches: tuple[ResourceType, ...]
    """What wakes it: a change to any of these starts a reconcile. A controller may also set ``reads``, types it
    reads from the cache without being woken by their changes."""
    resync: float
    """Longest sleep between reconciles, in seconds, when nothing changes.  A controller may also set
    ``min_interval``, a longer pause than the manager's own after its reconcile."""

    def reconcile(self, cache: Cache) -> None: ...


class ControllerManager:
    """Owns the informers and one worker thread per controller."""

    def __init__(self, client: RestClient, controllers: Iterable[Controller], *,
                 min_interval: float = 0.02) -> None:
        self.client = client
        self.controllers = list(controllers)
        self.min_interval = min_interval
        types = {rt.key: rt for c in self.controllers for rt in (*c.watches, *getattr(c, "reads", ()))}
        self.informers = {k: Informer(client, rt) for k, rt in types.items()}
        self.cache = Cache(self.informers)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._wakes: list[threading.Event] = []

    def start(self, sync_timeout: float = 30.0) -> None:
        for inf in self.informers.values():
            inf.start()
        deadline = time.monotonic() + sync_timeout
        for inf in self.informers.values():
            if not inf.wait_synced(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"informer for {inf.rt.plural} did not sync within {sync_timeout:.0f}s")
        for controller in self.controllers:
            wake = threading.Event()
            self._wakes.append(wake)
            for rt in controller.watches:
                self.informers[rt.key].subscribe(wake.set)
            t = threading.Thread(target=self._work, args=(controller, wake), name=f"ctrl-{controller.name}",
                                 daemon=True)
            t.start()
            self._threads.append(t)
        log.info("controllers running: %s", ", ".join(c.name for c in self.controllers))

    def _work(self, controller: Controller, wake: threading.Event) -> None:
        while not self._stop.is_set():
            wake.clear()
            try:
                controller.reconcile(self.cache)
            except Exception:  # noqa: BLE001 - a controller bug must not stop the others
                log.exception("controller %s failed a reconcile; retrying", controller.name)
                self._stop.wait(0.5)
            self._stop.wait(max(self.min_interval, getattr(controller, "min_interval", 0.0)))
            wake.wait(controller.resync)

    def stop(self) -> None:
        self._stop.set()
        for wake in self._wakes:  # a controller idling until its next resync ends now, not a resync later
            wake.set()
        for inf in self.informers.values():
            inf.stop()
        for t in self._threads:
            t.join(timeout=5)

    def wait(self) -> None:
        self._stop.wait()
