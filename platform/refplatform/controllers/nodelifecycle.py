"""The node lifecycle controller: Lease -> Ready condition -> ``unreachable``/``not-ready`` taints.

Like kube-controller-manager's ``NodeLifecycleController`` (with taint-based
eviction on): every monitor period it compares each node's Lease ``renewTime``
with the grace period, through the pure :func:`refplatform.core.healing.judge_node`.

- Lease stale: Ready and the pressure conditions become ``Unknown`` (reason
  ``NodeStatusUnknown``, "Kubelet stopped posting node status."), then the node
  is tainted ``node.kubernetes.io/unreachable`` ``NoExecute`` and
  ``NoSchedule``, and a ``NodeNotReady`` Event is written on the Node.
- Agent reports Ready=False: tainted ``node.kubernetes.io/not-ready`` instead.
- Either way the node's pods are marked ``Ready=False`` (upstream's ``MarkPodsNotReady``).
- Lease moving again: the agent's ``/healthz`` is probed (loopback only); the
  node gets Ready=True back and loses the taints only once the probe passes
  (``NodeReady`` Event); a failing probe is a ``NodeHealthCheckFailed`` Warning.

Disruption (:mod:`refplatform.core.disruption`, upstream's zone states): the
``NoExecute`` half of a condition taint, the one that evicts, is rated per zone
(``topology.kubernetes.io/zone``; nodes without it share one zone).  When more
than 2 nodes and at least 55 % of a small zone are quiet, nothing new is
tainted ``NoExecute``; when every node is quiet (the control plane itself was
away) the controller enters master disruption mode, lifts those taints, and on
leaving it gives every node a fresh grace period.  Ready=Unknown and the
``NoSchedule`` half always come at once.  A pass that comes more than a grace
period late (the controller itself could not look) also gives every node a
fresh grace period.

The decision reads an injected clock; the controller sleeps until the next
Lease expiry or one monitor period, whichever is sooner.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
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
from refplatform.core import Taint, TaintEffect
from refplatform.core.disruption import DisruptionPolicy, DisruptionVerdict, TaintBucket, ZoneCount, judge_disruption
from refplatform.core.healing import (
    CONDITION_TAINT_KEYS, UNREACHABLE_TAINT, NodeObservation, NodeState, NodeVerdict, Readiness, judge_node,
)
from refplatform.resources import LEASES, NODES, PODS

log = logging.getLogger(__name__)
Obj = dict[str, Any]

UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."
_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
SLOW_DETECT_FACTOR = 10
ZONE_LABEL = "topology.kubernetes.io/zone"
"""The ``slow-detect`` defect (docs/DEFECTS.md) waits this many grace periods before declaring a node lost."""


class NodeLifecycleController:
    name = "nodelifecycle"
    watches = (NODES, LEASES)
    reads = (PODS,)
    """The pods to mark not ready; their changes do not wake it (its timing is the Leases')."""

    def __init__(self, client: RestClient, *, grace: float, monitor_period: float, prober: HealthProber,
                 clock: Callable[[], float] = time.time, slow_detect: bool = False,
                 disruption: DisruptionPolicy = DisruptionPolicy(), keep_unreachable: bool = False) -> None:
        self.client = client
        self.keep_unreachable = keep_unreachable
        """The ``keep-unreachable`` defect (docs/DEFECTS.md): a node Ready again keeps its unreachable NoSchedule
        taint."""
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
        self.disruption = disruption
        self._bucket = TaintBucket()
        self._master = False  # in master disruption mode (every zone fully disrupted)
        self._fresh_from: float | None = None  # when master disruption mode last ended: every node's grace restarts
        self.last_disruption: DisruptionVerdict | None = None
        self._due: float | None = None  # when the next pass was due (the last pass's instant + its resync)

    def reconcile(self, cache: Cache) -> None:
        now = self.clock()
        self._after_blindness(now)
        nodes: dict[str, Obj] = {}
        for cached in cache.list(NODES):
            name = cached["metadata"]["name"]
            node = newest(cached, self._written.get(name))
            assert node is not None
            nodes[name] = node
        for gone in [n for n in self._written if n not in nodes]:
            del self._written[gone]
        verdicts = {name: self.judge(cache, node, now) for name, node in nodes.items()}
        disruption = self._disruption(nodes, verdicts, now)
        if self._fresh_from == now:  # just left master disruption mode: judge again with every grace restarted
            verdicts = {name: self.judge(cache, node, now) for name, node in nodes.items()}
        next_check: float | None = None
        # Oldest silence first: when the rate allows one taint, it goes to the node quiet the longest.
        heard = {n: heard_at(node, lease_of(cache, n)) for n, node in nodes.items()}
        for name in sorted(nodes, key=lambda n: (heard[n], n)):
            node = nodes[name]
            verdict = self._rated(node, verdicts[name], disruption, now, quiet_since=heard[name] + self.grace)
            if verdict.next_check is not None:
                next_check = verdict.next_check if next_check is None else min(next_check, verdict.next_check)
            if self.apply(node, verdict, now):
                self.mark_pods_not_ready(cache, name, now)
        wait = self.monitor_period if next_check is None else min(self.monitor_period, next_check - now + 0.005)
        self.resync = max(0.01, wait)
        self._due = now + self.resync

    def _after_blindness(self, now: float) -> None:
        """This pass comes more than a grace period after it was due: the controller itself could not look (its
        process was stopped or starved, a write hung on an API server that was away), so the silence it would
        now count against the nodes is its own.  Every node gets a grace period from now, as upstream's
        controller-manager gives one when it leads again after losing its leader lease in such a gap."""
        if self._due is not None and now - self._due > self.grace:
            self._fresh_from = now
            log.warning("this controller could not judge the nodes for %.1f s (due at %.3f): every node's grace "
                        "period restarts now", now - self._due, self._due)

    def _disruption(self, nodes: dict[str, Obj], verdicts: dict[str, NodeVerdict], now: float) -> DisruptionVerdict:
        counts: dict[str, list[int]] = {}
        for name, node in nodes.items():
            verdict = verdicts[name]
            ready = verdict.ready if verdict.ready is not None else readiness(node)
            tally = counts.setdefault(_zone(node), [0, 0])
            tally[0 if ready is Readiness.TRUE else 1] += 1
        disruption = judge_disruption((ZoneCount(z, r, n) for z, (r, n) in counts.items()), self.disruption)
        if disruption.master_disruption != self._master:
            self._master = disruption.master_disruption
            if self._master:
                log.warning("every node is not Ready: entering master disruption mode, no evictions (%s)",
                            disruption.describe())
            else:
                # Upstream resets every node's probe timestamp here: a node whose agent has not renewed yet
                # gets a whole grace period, counted from now, before it may be taken for dead.
                self._fresh_from = now
                log.warning("a node is Ready again: leaving master disruption mode; every node's grace period "
                            "restarts now (%s)", disruption.describe())
        elif self.last_disruption is not None and _states(disruption) != _states(self.last_disruption):
            log.info("zone states changed: %s", disruption.describe())
        self.last_disruption = disruption
        return disruption

    def _rated(self, node: Obj, verdict: NodeVerdict, disruption: DisruptionVerdict, now: float, *,
               quiet_since: float) -> NodeVerdict:
        """``verdict`` with the evicting (NoExecute) condition taints taken out that the zone's rate does not allow
        yet, or that would come before the node has been quiet for the settle time (``quiet_since``: when its
        grace period ended)."""
        settled = quiet_since + self.disruption.settle
        unsettled = verdict.state is NodeState.UNREACHABLE and now < settled and self.disruption.handled
        current = {t.taint for t in taints_of(node)}
        held = any(_evicting(t) for t in current)
        kept: list = []
        wait: float | None = None
        zone = _zone(node)
        for taint in verdict.taints:
            if not _evicting(taint):
                kept.append(taint)
            elif disruption.master_disruption:
                continue  # lifted: the control plane, not the nodes, was away
            elif taint in current or held:
                kept.append(taint)  # kept, or swapped from not-ready to unreachable
            elif unsettled:
                wait = settled if wait is None else min(wait, settled)  # the others quiet with it are not counted yet
            elif self._bucket.take(zone, disruption.rate(zone), now):
                kept.append(taint)  # this zone's turn
            else:
                at = self._bucket.next_allowed(zone, disruption.rate(zone))
                if at is not None:
                    wait = at if wait is None else min(wait, at)
        if len(kept) == len(verdict.taints):
            return verdict
        next_check = verdict.next_check if wait is None else min(wait, verdict.next_check or wait)
        return replace(verdict, taints=tuple(kept), next_check=next_check)

    def judge(self, cache: Cache, node: Obj, now: float) -> NodeVerdict:
        name = node["metadata"]["name"]
        taints = tuple(t.taint for t in taints_of(node))
        obs = NodeObservation(name, heard_at(node, lease_of(cache, name)), readiness(node), taints)
        verdict = judge_node(obs, now, self.grace, self._fresh_from)
        if verdict.probe:
            answer = self.prober.check(name, node)
            if answer is not None:
                if not answer.healthy and self._failing.get(name) != answer.detail:
                    self._failing[name] = answer.detail
                    self.events.record(node, "Node", "Warning", "NodeHealthCheckFailed",
                                       f"Node {name} heartbeats again but its health check failed: {answer.detail}")
                verdict = judge_node(NodeObservation(name, obs.heard_at, obs.ready, taints, answer.healthy),
                                     now, self.grace, self._fresh_from)
        if self.keep_unreachable and verdict.state is NodeState.RECOVERED:
            kept = tuple(t for t in taints if t.key == UNREACHABLE_TAINT and t.effect is TaintEffect.NO_SCHEDULE)
            verdict = replace(verdict, taints=(*verdict.taints, *(t for t in kept if t not in verdict.taints)))
        return verdict

    def apply(self, node: Obj, verdict: NodeVerdict, now: float) -> bool:
        """Write the verdict; True when the node has just become not Ready (its NodeNotReady Event)."""
        name = node["metadata"]["name"]
        path = resource_path("", "v1", "nodes", None, name)
        before = {t.taint for t in taints_of(node)}
        retaint = verdict.taints_changed(before)
        if verdict.ready is None and not retaint:
            return False
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
            return False
        when = datetime.fromtimestamp(now, timezone.utc)
        if verdict.state in (NodeState.UNREACHABLE, NodeState.NOT_READY) and not _quiet_marked(before, verdict):
            log.info("node %s: NodeNotReady (%s)", name, verdict.state.value)
            self.events.record(node, "Node", "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady",
                               when=when)
            return True
        if verdict.state is NodeState.RECOVERED:
            log.info("node %s: NodeReady (health check passed)", name)
            self._failing.pop(name, None)
            self.prober.forget(name)
            self.events.record(node, "Node", "Normal", "NodeReady", f"Node {name} status is now: NodeReady",
                               when=when)
        return False

    def mark_pods_not_ready(self, cache: Cache, node: str, now: float) -> None:
        """As upstream's ``MarkPodsNotReady``, once when the node becomes not Ready: each of its pods gets
        ``Ready=False`` (``lastTransitionTime`` now), so Services stop sending to it and the Job controller counts
        a lost pod's failure from that instant. A live agent sets its pods' own readiness back, as the kubelet's
        status manager does."""
        stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for pod in cache.list(PODS):
            if (pod.get("spec") or {}).get("nodeName") != node or \
                    (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            ready = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"),
                         None)
            if ready is None or ready.get("status") == "False":
                continue
            meta = pod["metadata"]
            try:
                self.client.patch(resource_path("", "v1", "pods", meta.get("namespace", "default"), meta["name"],
                                                "status"),
                                  {"status": {"conditions": [{"type": "Ready", "status": "False",
                                                              "lastTransitionTime": stamp}]}},
                                  STRATEGIC_MERGE_PATCH)
            except (ApiStatusError, ApiUnreachable) as exc:
                log.info("pod %s on node %s: could not mark it not ready: %s", meta["name"], node, exc)

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


def _zone(node: Obj) -> str:
    return ((node.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL, "")


def _evicting(taint: Taint) -> bool:
    return taint.key in CONDITION_TAINT_KEYS and taint.effect is TaintEffect.NO_EXECUTE


def _quiet_marked(before: set[Taint], verdict: NodeVerdict) -> bool:
    """The node already carried this verdict's NoSchedule condition taint: its NodeNotReady was recorded (a later
    write only adds or lifts the NoExecute half)."""
    return any(t.key in CONDITION_TAINT_KEYS and t.effect is TaintEffect.NO_SCHEDULE and t in before
               for t in verdict.taints)


def _states(verdict: DisruptionVerdict) -> dict[str, str]:
    return {z: v.state.value for z, v in verdict.zones.items()}
