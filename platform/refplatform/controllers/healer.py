"""The healer: a pool of spare nodes, quarantine of lost nodes, and force-deletion on out-of-service nodes.

The decisions come from :func:`refplatform.core.healing.plan_healing`; this
controller observes, probes and writes.

- **Spare pool.** The nodes named by ``--spare-nodes`` are enrolled once:
  label ``firedrill.dev/spare=true`` and taint ``firedrill.dev/spare:NoSchedule``,
  so ordinary work does not land there (annotation
  ``firedrill.dev/spare-enrolled`` keeps a restart from enrolling them again).
- **Quarantine.** A node whose Ready condition is not True (the node
  lifecycle controller made it ``Unknown`` after the grace period, or the
  agent says ``False``) and that already carries the node lifecycle
  controller's ``unreachable``/``not-ready`` ``NoExecute`` taint (the one a
  disruption holds back: a node only quiet in a blip is never quarantined) is cordoned, labelled ``firedrill.dev/quarantine=<reason>``
  and tainted ``node.kubernetes.io/out-of-service:NoExecute`` (value
  ``nodeshutdown``), and leaves the pool if it was in it: a ``NodeQuarantined``
  Warning Event.  For each lost node that was working capacity one healthy spare
  is released (label and taint removed): a ``SparePromoted`` Event.
- **Pod GC.** Pods stuck ``Terminating`` on an out-of-service node are
  force-deleted (grace 0), as upstream's pod garbage collector does, after the
  ``DisruptionTarget`` condition (reason ``DeletionByPodGC``).
- **Return.** A quarantined node whose Lease moves again, that is Ready, and
  whose agent answers ``GET /healthz`` with 200 goes back to the spare pool
  (uncordoned, quarantine label and out-of-service taint removed, spare label
  and taint added): a ``NodeRecovered`` Event.  Never before the health check
  passes.

Every node write is a merge patch that names the resourceVersion it was
computed from, so a concurrent write (the node lifecycle controller's taints)
is a conflict and a retry, never a lost update.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from refplatform.client import (
    ApiStatusError, ApiUnreachable, MERGE_PATCH, STRATEGIC_MERGE_PATCH, RestClient, resource_path,
)
from refplatform.controllers.events import EventRecorder
from refplatform.controllers.health import HealthProber
from refplatform.controllers.manager import Cache
from refplatform.controllers.nodeinfo import (
    condition, heard_at, lease_of, newest, parse_time, readiness, rfc3339, taints_json, taints_of,
)
from refplatform.core import Taint, TaintEffect
from refplatform.core.healing import (
    CONDITION_TAINT_KEYS, OUT_OF_SERVICE_TAINT, QUARANTINE_LABEL, SPARE_ENROLLED_ANNOTATION, SPARE_LABEL,
    SPARE_TAINT, HealAction, HealStep, PoolNode, Readiness, plan_healing,
)
from refplatform.resources import LEASES, NODES, PODS

log = logging.getLogger(__name__)
Obj = dict[str, Any]

SPARE = Taint(SPARE_TAINT, "true", TaintEffect.NO_SCHEDULE)
OUT_OF_SERVICE = Taint(OUT_OF_SERVICE_TAINT, "nodeshutdown", TaintEffect.NO_EXECUTE)


class HealerController:
    name = "healer"
    watches = (NODES, LEASES, PODS)

    def __init__(self, client: RestClient, *, spares: Iterable[str], grace: float, prober: HealthProber,
                 quarantine: bool = True, quarantine_after: float = 0.0, resync: float = 0.25,
                 clock: Callable[[], float] = time.time, no_spare: bool = False,
                 return_cordoned: bool = False) -> None:
        self.client = client
        self.no_spare = no_spare  # the no-spare defect (docs/DEFECTS.md), off on an honest platform
        self.return_cordoned = return_cordoned  # the return-cordoned defect (docs/DEFECTS.md): off when honest
        self.spares = frozenset(spares)
        self.grace = grace
        self.prober = prober
        self.quarantine = quarantine
        self.quarantine_after = quarantine_after
        self.base_resync = resync
        self.resync = resync
        self.clock = clock
        self.events = EventRecorder(client, "firedrill-healer",
                                    clock=lambda: datetime.fromtimestamp(self.clock(), timezone.utc))
        self._written: dict[str, Obj] = {}
        self._forced: set[str] = set()

    # ------------------------------------------------------------------ cycle
    def reconcile(self, cache: Cache) -> None:
        now = self.clock()
        nodes = {}
        for cached in cache.list(NODES):
            name = cached["metadata"]["name"]
            node = newest(cached, self._written.get(name))
            assert node is not None
            nodes[name] = node
        for gone in [n for n in self._written if n not in nodes]:
            del self._written[gone]
        observed = [self._observe(cache, node, now, probe=False) for node in nodes.values()]
        plan = plan_healing(observed, now, quarantine=self.quarantine, quarantine_after=self.quarantine_after)
        if plan.probes:
            probed = {o.name: o for o in observed}
            for name in plan.probes:
                probed[name] = self._observe(cache, nodes[name], now, probe=True)
            plan = plan_healing(list(probed.values()), now, quarantine=self.quarantine,
                                quarantine_after=self.quarantine_after)
        for step in plan.steps:
            if self.no_spare and step.action is HealAction.PROMOTE_SPARE:
                continue  # the defect: the spare pool is never drawn on
            self._apply(step, newest(nodes[step.node], self._written.get(step.node)) or nodes[step.node], now)
        self._collect_pods(cache, {n: newest(obj, self._written.get(n)) or obj for n, obj in nodes.items()}, now)
        wait = self.base_resync if plan.next_check is None else min(self.base_resync, plan.next_check - now)
        self.resync = max(0.01, wait)

    def _observe(self, cache: Cache, node: Obj, now: float, *, probe: bool) -> PoolNode:
        meta = node["metadata"]
        name = meta["name"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        ready = readiness(node)
        since = parse_time(condition(node).get("lastTransitionTime")) if ready is not Readiness.TRUE else None
        healthy = None
        if probe:
            answer = self.prober.check(name, node)
            healthy = None if answer is None else answer.healthy
        return PoolNode(name, ready, since, lease_fresh=now - heard_at(node, lease_of(cache, name)) <= self.grace,
                        healthy=healthy, spare=labels.get(SPARE_LABEL) == "true",
                        quarantined=bool(labels.get(QUARANTINE_LABEL)),
                        enrolled=annotations.get(SPARE_ENROLLED_ANNOTATION) == "true",
                        configured_spare=name in self.spares,
                        condition_tainted=any(t.taint.key in CONDITION_TAINT_KEYS
                                              and t.taint.effect is TaintEffect.NO_EXECUTE for t in taints_of(node)))

    # ---------------------------------------------------------------- effects
    def _apply(self, step: HealStep, node: Obj, now: float) -> None:
        name = node["metadata"]["name"]
        taints = [t.taint for t in taints_of(node)]
        labels: Obj
        annotations: Obj = {}
        spec: Obj
        if step.action is HealAction.ENROLL_SPARE:
            labels, annotations = {SPARE_LABEL: "true"}, {SPARE_ENROLLED_ANNOTATION: "true"}
            spec = {"taints": taints_json([*(t for t in taints if t.key != SPARE_TAINT), SPARE], node, now)}
            message = f"Node {name} enrolled in the spare pool"
        elif step.action is HealAction.QUARANTINE:
            labels = {QUARANTINE_LABEL: step.reason, SPARE_LABEL: None}
            kept = [t for t in taints if t.key not in (SPARE_TAINT, OUT_OF_SERVICE_TAINT)]
            spec = {"unschedulable": True, "taints": taints_json([*kept, OUT_OF_SERVICE], node, now)}
            message = (f"Node {name} quarantined ({step.reason}): cordoned, labelled {QUARANTINE_LABEL}={step.reason}, "
                       f"tainted {OUT_OF_SERVICE_TAINT}:NoExecute")
        elif step.action is HealAction.PROMOTE_SPARE:
            labels = {SPARE_LABEL: None}
            spec = {"taints": taints_json([t for t in taints if t.key != SPARE_TAINT], node, now) or None}
            message = f"Spare node {name} released from the pool to replace lost node {step.reason}"
        else:
            labels, annotations = {QUARANTINE_LABEL: None, SPARE_LABEL: "true"}, {SPARE_ENROLLED_ANNOTATION: "true"}
            kept = [t for t in taints if t.key not in (SPARE_TAINT, OUT_OF_SERVICE_TAINT)]
            spec = {"unschedulable": True if self.return_cordoned else None,
                    "taints": taints_json([*kept, SPARE], node, now)}
            message = f"Node {name} heartbeats again and passed its health check: back in the spare pool"
        body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"], "labels": labels,
                             **({"annotations": annotations} if annotations else {})}, "spec": spec}
        try:
            self._written[name] = self.client.patch(resource_path("", "v1", "nodes", None, name), body, MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("node %s: %s not applied (%s); retrying", name, step.action.value, exc)
            return
        log.info("%s", message)
        if step.action is HealAction.RETURN_TO_POOL:
            self.prober.forget(name)
        if step.action is not HealAction.ENROLL_SPARE:
            event_type = "Warning" if step.action is HealAction.QUARANTINE else "Normal"
            self.events.record(self._written[name], "Node", event_type, step.action.value, message,
                               when=datetime.fromtimestamp(now, timezone.utc))

    def _collect_pods(self, cache: Cache, nodes: dict[str, Obj], now: float) -> None:
        """Force-delete pods stuck Terminating on an out-of-service node that is not Ready."""
        out_of_service = {name for name, n in nodes.items()
                          if readiness(n) is not Readiness.TRUE and any(t.taint.key == OUT_OF_SERVICE_TAINT
                                                                       for t in taints_of(n))}
        live = set()
        for pod in cache.list(PODS):
            meta = pod["metadata"]
            uid = meta.get("uid", "")
            live.add(uid)
            if not meta.get("deletionTimestamp") or uid in self._forced or \
                    (pod.get("spec") or {}).get("nodeName") not in out_of_service:
                continue
            ns, name = meta.get("namespace", "default"), meta["name"]
            path = resource_path("", "v1", "pods", ns, name)
            at = datetime.fromtimestamp(self.clock(), timezone.utc)  # the decision's instant, before the calls
            try:
                self.client.patch(path + "/status", {"status": {"conditions": [{
                    "type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                    "message": "PodGC: node is out of service", "lastTransitionTime": rfc3339(now)}]}},
                    STRATEGIC_MERGE_PATCH)
                self.client.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                          "preconditions": {"uid": uid}}, {"gracePeriodSeconds": 0})
            except ApiStatusError as exc:
                if exc.not_found or exc.conflict:  # already gone: someone else deleted it
                    self._forced.add(uid)
                else:
                    log.info("could not force-delete %s/%s: %s", ns, name, exc)
                continue
            except ApiUnreachable as exc:
                log.info("could not force-delete %s/%s: %s", ns, name, exc)
                continue
            self._forced.add(uid)
            node = pod["spec"]["nodeName"]
            log.info("force-deleted %s/%s (node %s is out of service)", ns, name, node)
            self.events.record(pod, "Pod", "Normal", "Evicted",
                               f"Force-deleted (grace 0): node {node} is out of service", action="Deleting", when=at)
        self._forced &= live
