"""The hollow kubelet: one shared pod watch for the whole fleet, no process per pod.

A pod bound to one of the fleet's nodes (``spec.nodeName``) that is not yet ``Running`` is started at once:
its status (:func:`refplatform.agent.podstatus.pod_status`: phase ``Running``, containers running and
ready, a pod IP) is written through ``pods/<name>/status`` *as that node* (its own client and token), so
the API server checks the write as it checks an agent's.  A bound pod being deleted (``deletionTimestamp``)
has "stopped at once": the node finishes its deletion (grace 0, uid precondition), as the kubelet does once
a pod's containers are gone.  Nothing else of a pod is simulated: no process, no logs, no GPU devices.

The watch is a pod :class:`~refplatform.controllers.informer.Informer` (list, then watch from the list's
resourceVersion, resuming after a dropped stream and relisting after 410 Gone), whose every event goes to
:meth:`HollowKubelet.handle`; writes go out from a small thread pool so a slow answer never holds the watch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from refplatform.agent.clock import Clock, SystemClock
from refplatform.agent.podstatus import ContainerRun, pod_status
from refplatform.client import MERGE_PATCH, ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.controllers.informer import Informer
from refplatform.resources import PODS

__all__ = ["HollowKubelet"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
RETRIES = 3
"""Tries of a write that got no answer (a dropped keep-alive connection) before it waits for the pod's next
event."""
_TERMINAL = frozenset({"Running", "Succeeded", "Failed"})
"""Phases a hollow kubelet has nothing more to do for (it never ends a pod on its own)."""


def _meta(pod: Obj) -> Obj:
    return pod.get("metadata") or {}


class HollowKubelet:
    """Starts and finishes deleting the pods bound to the fleet's nodes."""

    def __init__(self, watch_client: RestClient, clients: Mapping[str, RestClient], *, workers: int = 4,
                 clock: Clock | None = None, stop_event: threading.Event | None = None,
                 watch_timeout: int = 300, retry_seconds: float = 0.5) -> None:
        """``watch_client``: the identity that watches every pod (any node may read pods);
        ``clients``: each node's own client, by node name: the only ones that write."""
        self.watch_client = watch_client
        self.clients = dict(clients)
        self.clock = clock or SystemClock()
        self.stop_event = stop_event or threading.Event()
        self.started = 0
        """Pods this kubelet reported Running."""
        self.deleted = 0
        """Pods whose deletion it finished."""
        self.failures = 0
        self._lock = threading.Lock()
        self._busy: set[str] = set()  # pod uids with a write in flight
        self._done: set[str] = set()  # pod uids reported Running (until deleted)
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="hollow-kubelet")
        self._informer = Informer(watch_client, PODS, watch_timeout=watch_timeout, retry_seconds=retry_seconds)
        self._informer.on_event(self.handle)

    # ----------------------------------------------------------------- decisions
    def handle(self, event: str, pod: Obj) -> str | None:
        """Decide what one pod needs and queue it: ``"start"``, ``"delete"`` or None (not ours, or nothing to
        do).  Called for every listed pod and every watch event."""
        meta = _meta(pod)
        uid = str(meta.get("uid") or "")
        if event == "DELETED":
            with self._lock:
                self._done.discard(uid)
            return None
        node = (pod.get("spec") or {}).get("nodeName")
        if not uid or node not in self.clients:
            return None
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp"):
            action = "delete"
        elif phase in _TERMINAL:
            with self._lock:
                self._done.add(uid)
            return None
        else:
            action = "start"
        with self._lock:
            if uid in self._busy or (action == "start" and uid in self._done):
                return None
            self._busy.add(uid)
        self._pool.submit(self._act, action, node, pod)
        return action

    def _act(self, action: str, node: str, pod: Obj) -> None:
        uid = str(_meta(pod)["uid"])
        for attempt in range(1, RETRIES + 1):
            if self._act_once(action, node, pod, attempt):
                break
            self.stop_event.wait(0.1 * attempt)
        with self._lock:
            self._busy.discard(uid)

    def _act_once(self, action: str, node: str, pod: Obj, attempt: int) -> bool:
        """One try; False when it should be tried again (no answer from the API server)."""
        meta = _meta(pod)
        uid = str(meta["uid"])
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        client = self.clients[node]
        path = resource_path("", "v1", "pods", ns, name)
        try:
            if action == "start":
                now = self.clock.now()
                client.patch(path + "/status", {"status": pod_status(pod, ContainerRun(started_at=now), now)},
                             MERGE_PATCH)
                with self._lock:
                    self._done.add(uid)
                    self.started += 1
            else:
                client.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                     "preconditions": {"uid": uid}})
                with self._lock:
                    self.deleted += 1
        except ApiStatusError as exc:
            if not (exc.not_found or exc.conflict):  # gone, or another pod by that name now: nothing to do
                self.failures += 1
                log.warning("%s of pod %s/%s on %s failed: %s", action, ns, name, node, exc)
        except ApiUnreachable as exc:
            if attempt < RETRIES and not self.stop_event.is_set():
                return False
            self.failures += 1
            log.warning("%s of pod %s/%s on %s failed %d times: %s", action, ns, name, node, attempt, exc)
        return True

    # --------------------------------------------------------------------- watch
    def start(self) -> None:
        self._informer.start()

    def stop(self) -> None:
        self.stop_event.set()
        self._informer.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
