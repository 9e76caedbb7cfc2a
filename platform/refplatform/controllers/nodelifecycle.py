"""The node lifecycle controller: Lease -> Ready condition -> ``unreachable``/``not-ready`` taints.

Like kube-controller-manager's ``NodeLifecycleController`` (with taint-based
eviction on): every monitor period it compares each node's Lease ``renewTime``
with the grace period, through the pure :func:`refplatform.core.healing.judge_node`.

- Lease stale: Ready and the pressure conditions become ``Unknown`` (reason
  ``NodeStatusUnknown``, "Kubelet stopped posting node status."), then the node
  is tainted ``node.kubernetes.io/unreachable`` ``NoExecute`` and
  ``NoSchedule``, and a ``NodeNotReady`` Event is written on the Node.
- Agent reports Ready=False: tainted ``node.kubernetes.io/not-ready`` instead.
- Lease moving again: the agent's ``/healthz`` is probed (loopback only); the
  node gets Ready=True back and loses the taints only once the probe passes
  (``NodeReady`` Event); a failing probe is a ``NodeHealthCheckFailed`` Warning.

The decision reads an injected clock; the controller sleeps until the next
Lease expiry or one monitor period, whichever is sooner.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from refplatform.client import (
    ApiStatusError, ApiUnreachable, MERGE_PATCH, STRATEGIC_MERGE_PATCH, RestClient, resource_path,
)
from refplatform.controllers.events import EventRecorder
from refplatform.controllers.health import HealthProber
from refplatform.controllers.manager import Cache
from refplatform.controllers.nodeinfo import (
    condition, heard_at, lease_of, newest, readiness, rfc3339, taints_json, taints_of,
)
from refplatform.core.healing import NodeObservation, NodeState, NodeVerdict, Readiness, judge_node
from refplatform.resources import LEASES, NODES

log = logging.getLogger(__name__)
Obj = dict[str, Any]

UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."
_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
SLOW_DETECT_FACTOR = 10
"""The ``slow-detect`` defect (docs/DEFECTS.md) waits this many grace periods before declaring a node lost."""


class NodeLifecycleController:
    name = "nodelifecycle"
    watches = (NODES, LEASES)

    def __init__(self, client: RestClient, *, grace: float, monitor_period: float, prober: HealthProber,
                 clock: Callable[[], float] = time.time, slow_detect: bool = False) -> None:
        self.client = client
        # slow_detect: the defect of that name (docs/DEFECTS.md), off on an honest platform.
        self.grace = grace * SLOW_DETECT_FACTOR if slow_detect else grace
        self.monitor_period = monitor_period
        self.prober = prober
        self.clock = clock
        self.events = EventRecorder(client, "node-controller",
                                    clock=lambda: datetime.fromtimestamp(self.clock(), timezone.utc))
        self.resync = monitor_period
        self._failing: dict[str, str] = {}  # node -> last health failure reported
        self._written: dict[str, Obj] = {}  # node -> the copy our last write returned

    def reconcile(self, cache: Cache) -> None:
        now = self.clock()
        next_check: float | None = None
        names = set()
        for cached in cache.list(NODES):
            name = cached["metadata"]["name"]
            names.add(name)
            node = newest(cached, self._written.get(name))
            assert node is not None
            verdict = self.judge(cache, node, now)
            if verdict.next_check is not None:
                next_check = verdict.next_check if next_check is None else min(next_check, verdict.next_check)
            self.apply(node, verdict, now)
        for gone in [n for n in self._written if n not in names]:
            del self._written[gone]
        wait = self.monitor_period if next_check is None else min(self.monitor_period, next_check - now + 0.005)
        self.resync = max(0.01, wait)

    def judge(self, cache: Cache, node: Obj, now: float) -> NodeVerdict:
        name = node["metadata"]["name"]
        taints = tuple(t.taint for t in taints_of(node))
        obs = NodeObservation(name, heard_at(node, lease_of(cache, name)), readiness(node), taints)
        verdict = judge_node(obs, now, self.grace)
        if verdict.probe:
            answer = self.prober.check(name, node)
            if answer is not None:
                if not answer.healthy and self._failing.get(name) != answer.detail:
                    self._failing[name] = answer.detail
                    self.events.record(node, "Node", "Warning", "NodeHealthCheckFailed",
                                       f"Node {name} heartbeats again but its health check failed: {answer.detail}")
                verdict = judge_node(NodeObservation(name, obs.heard_at, obs.ready, taints, answer.healthy),
                                     now, self.grace)
        return verdict

    def apply(self, node: Obj, verdict: NodeVerdict, now: float) -> None:
        name = node["metadata"]["name"]
        path = resource_path("", "v1", "nodes", None, name)
        retaint = verdict.taints_changed(t.taint for t in taints_of(node))
        if verdict.ready is None and not retaint:
            return
        try:
            if verdict.ready is not None:
                node = self.client.patch(path + "/status", {"status": {"conditions": self._conditions(
                    node, verdict.ready, now)}}, STRATEGIC_MERGE_PATCH)
                self._written[name] = node
            if retaint:
                node = self.client.patch(path, {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                                                "spec": {"taints": taints_json(verdict.taints, node, now)}},
                                         MERGE_PATCH)
                self._written[name] = node
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("node %s: could not apply %s: %s", name, verdict.state.value, exc)
            return
        when = datetime.fromtimestamp(now, timezone.utc)
        if verdict.state in (NodeState.UNREACHABLE, NodeState.NOT_READY):
            log.info("node %s: NodeNotReady (%s)", name, verdict.state.value)
            self.events.record(node, "Node", "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady",
                               when=when)
        elif verdict.state is NodeState.RECOVERED:
            log.info("node %s: NodeReady (health check passed)", name)
            self._failing.pop(name, None)
            self.prober.forget(name)
            self.events.record(node, "Node", "Normal", "NodeReady", f"Node {name} status is now: NodeReady",
                               when=when)

    @staticmethod
    def _conditions(node: Obj, ready: Readiness, now: float) -> list[Obj]:
        stamp = rfc3339(now)
        if ready is Readiness.TRUE:
            return [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "kubelet is posting ready status (health check passed)",
                     "lastTransitionTime": stamp, "lastHeartbeatTime": stamp}]
        out = []
        for ctype in _CONDITIONS:
            old = condition(node, ctype)
            out.append({"type": ctype, "status": "Unknown", "reason": UNKNOWN_REASON, "message": UNKNOWN_MESSAGE,
                        "lastHeartbeatTime": old.get("lastHeartbeatTime") or stamp,
                        "lastTransitionTime": stamp if old.get("status") != "Unknown" else
                        old.get("lastTransitionTime") or stamp})
        return out
