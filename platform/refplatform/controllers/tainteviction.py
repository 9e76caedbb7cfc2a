"""The taint eviction controller: pods leave a ``NoExecute``-tainted node when their toleration runs out.

Upstream's ``TaintEvictionController`` (kube-controller-manager, component
``taint-eviction-controller``).  For each pod bound to a node with
``NoExecute`` taints, :func:`refplatform.core.healing.eviction_time` gives the
instant it must go: at once for an untolerated taint, else after the shortest
matching ``tolerationSeconds`` counted from the taint's ``timeAdded``.  Pods
that carry no toleration of their own for ``not-ready``/``unreachable`` get the
profile's default, as the ``DefaultTolerationSeconds`` admission plugin gives
them 300 s upstream.

An eviction is what upstream does: a ``TaintManagerEviction`` Event ("Marking
for deletion Pod NS/NAME"), the ``DisruptionTarget`` condition with reason
``DeletionByTaintManager``, then an ordinary (graceful) delete.  On a dead node
the pod then stays ``Terminating``; the Volcano job controller and the healer
take it from there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, STRATEGIC_MERGE_PATCH, RestClient, resource_path
from refplatform.controllers.events import EventRecorder
from refplatform.controllers.manager import Cache
from refplatform.controllers.nodeinfo import rfc3339, taints_of, tolerations_of
from refplatform.core.healing import eviction_time, with_default_tolerations
from refplatform.resources import NODES, PODS

log = logging.getLogger(__name__)
Obj = dict[str, Any]
_TERMINAL = ("Succeeded", "Failed")


class TaintEvictionController:
    name = "tainteviction"
    watches = (NODES, PODS)

    def __init__(self, client: RestClient, *, default_toleration_seconds: float, max_wait: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.default_toleration_seconds = default_toleration_seconds
        self.max_wait = max_wait
        self.clock = clock
        self.events = EventRecorder(client, "taint-eviction-controller",
                                    clock=lambda: datetime.fromtimestamp(self.clock(), timezone.utc))
        self.resync = max_wait
        self._evicted: set[str] = set()

    def reconcile(self, cache: Cache) -> None:
        now = self.clock()
        nodes = {n["metadata"]["name"]: n for n in cache.list(NODES)}
        next_at: float | None = None
        live: set[str] = set()
        evicted: list[tuple[Obj, float]] = []
        for pod in cache.list(PODS):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            live.add(meta.get("uid", ""))
            node = nodes.get(spec.get("nodeName") or "")
            if node is None or meta.get("deletionTimestamp") or meta.get("uid") in self._evicted or \
                    (pod.get("status") or {}).get("phase") in _TERMINAL:
                continue
            taints = taints_of(node)
            if not taints:
                continue
            at = eviction_time(taints, with_default_tolerations(tolerations_of(pod), self.default_toleration_seconds),
                               now)
            if at is None:
                continue
            if at <= now:
                issued = self.evict(pod, node["metadata"]["name"], now)
                if issued is not None:
                    evicted.append((pod, issued))
            else:
                next_at = at if next_at is None else min(next_at, at)
        # Each stamped when its pod's deletion was issued, all written after the pass's deletions (upstream's
        # recorder is asynchronous), so no Event's round trip delays the eviction of a node's next pod.
        for pod, issued in evicted:
            meta = pod["metadata"]
            ns, name = meta.get("namespace", "default"), meta["name"]
            self.events.record(pod, "Pod", "Normal", "TaintManagerEviction", f"Marking for deletion Pod {ns}/{name}",
                               action="Deleting", when=datetime.fromtimestamp(issued, timezone.utc))
        self._evicted &= live
        self.resync = self.max_wait if next_at is None else max(0.01, min(self.max_wait, next_at - now + 0.005))

    def evict(self, pod: Obj, node: str, now: float) -> float | None:
        """Mark ``pod`` a disruption target and delete it; the instant its deletion was issued, or None."""
        meta = pod["metadata"]
        ns, name, uid = meta.get("namespace", "default"), meta["name"], meta.get("uid", "")
        path = resource_path("", "v1", "pods", ns, name)
        try:
            self.client.patch(path + "/status", {"status": {"conditions": [{
                "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": rfc3339(now)}]}},
                STRATEGIC_MERGE_PATCH)
            at = self.clock()  # this pod's deletion is issued now (several pods of a node are evicted in turn)
            self.client.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}})
        except ApiStatusError as exc:
            if exc.not_found or exc.conflict:
                self._evicted.add(uid)
                return None
            log.info("could not evict %s/%s from %s: %s", ns, name, node, exc)
            return None
        except ApiUnreachable as exc:
            log.info("could not evict %s/%s from %s: %s", ns, name, node, exc)
            return None
        self._evicted.add(uid)
        log.info("evicted %s/%s from %s (NoExecute taint)", ns, name, node)
        return at
