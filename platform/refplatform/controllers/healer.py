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
  passes, nor while its ``GpuFault`` condition is True.
- **GpuFault remediation, on a budget** (:mod:`refplatform.core.remediation`).
  A node whose agent posts ``GpuFault=True`` is cordoned and labelled
  ``firedrill.dev/quarantine=gpu-fault`` (annotation ``firedrill.dev/remediated-at``)
  and a spare released, at most the budget's count within its window.  It is
  then **drained** (:mod:`refplatform.core.drain`): its pods evicted through
  ``pods/eviction`` one every ``drain_interval`` seconds (the profile's, 1 s;
  ``DrainEviction`` Events), and only once none is left tainted out of service (``NodeDrained``).
  If its ``GpuFault`` clears before that, the drain stops: uncordoned, the
  label removed, its remaining pods left running (``DrainCancelled``).  One more trips the breaker: the ConfigMap
  ``kube-system/firedrill-remediation`` (``state: Tripped``, ``trippedAt``,
  ``reason``, ``nodesLeftAlone``), a ``RemediationHalted`` Warning Event and the
  condition ``RemediationHeld=True`` (reason ``BudgetExhausted``) on each node
  left alone, and no GpuFault quarantine until a person deletes the ConfigMap
  or sets ``data.state`` to ``Closed``; then ``RemediationHeld`` goes False and
  the healer acts again within a fresh budget.  The breaker is read from the
  ConfigMap (the informer's copy, or this controller's newer write) on every
  pass, so a restarted controller stays tripped; the window's quarantines are
  read back from the nodes' ``remediated-at`` annotations on its first pass.
  Conditions are written through the Node's ``/status`` as strategic merge
  patches of that one condition (merged by type, as the agent's own are), so
  neither side wipes the other's.

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
from refplatform.core.drain import DrainAction, DrainingNode, DrainStep, plan_drain
from refplatform.core.healing import (
    CONDITION_TAINT_KEYS, OUT_OF_SERVICE_TAINT, QUARANTINE_LABEL, SPARE_ENROLLED_ANNOTATION, SPARE_LABEL,
    SPARE_TAINT, HealAction, HealPlan, HealStep, PoolNode, Readiness, plan_healing,
)
from refplatform.core.remediation import (
    BUDGET_EXHAUSTED, GPU_FAULT_CONDITION, GPU_FAULT_QUARANTINE, REMEDIATION_HELD_CONDITION, Breaker, BreakerState,
    Remediation, RemediationBudget, RemediationPlan, plan_remediation, within_window,
)
from refplatform.resources import CONFIGMAPS, LEASES, NODES, PODS

log = logging.getLogger(__name__)
Obj = dict[str, Any]

SPARE = Taint(SPARE_TAINT, "true", TaintEffect.NO_SCHEDULE)
OUT_OF_SERVICE = Taint(OUT_OF_SERVICE_TAINT, "nodeshutdown", TaintEffect.NO_EXECUTE)
BREAKER_NAMESPACE = "kube-system"
BREAKER_NAME = "firedrill-remediation"
"""The remediation breaker's ConfigMap; deleting it (or ``data.state: Closed``) resets the breaker."""
REMEDIATED_AT_ANNOTATION = "firedrill.dev/remediated-at"
"""On a node quarantined for its GpuFault: when (RFC 3339, microseconds), so a restarted healer counts it."""
REMEDIATION_HALTED = "RemediationHalted"
RESET_HINT = (f"reset: kubectl -n {BREAKER_NAMESPACE} delete configmap {BREAKER_NAME} "
              f"(or set its data.state to Closed)")


class HealerController:
    name = "healer"
    watches = (NODES, LEASES, PODS, CONFIGMAPS)

    def __init__(self, client: RestClient, *, spares: Iterable[str], grace: float, prober: HealthProber,
                 quarantine: bool = True, quarantine_after: float = 0.0, resync: float = 0.25,
                 clock: Callable[[], float] = time.time, no_spare: bool = False,
                 return_cordoned: bool = False, budget: RemediationBudget = RemediationBudget(),
                 drain_interval: float = 1.0, drain_past_recovery: bool = False) -> None:
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
        self.budget = budget  # unlimited: the remediate-the-fleet defect (docs/DEFECTS.md), off when honest
        self._remediations: list[Remediation] | None = None  # the window's GpuFault quarantines; None: not read yet
        self._breaker_written: Obj | None = None  # our last write of the breaker's ConfigMap
        self._tripped = False  # the breaker as the last pass found it
        self.drain_interval = drain_interval
        self.drain_past_recovery = drain_past_recovery  # the drain-past-recovery defect (docs/DEFECTS.md)
        self._last_eviction: dict[str, float] = {}  # per draining node: when the healer last evicted a pod of it
        self._evictions: dict[str, int] = {}  # per draining node: how many pods its drain evicted

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
        due = [plan.next_check] if plan.next_check is not None else []
        if self.quarantine:
            self._remediate(cache, nodes, observed, plan, now)
            due += self._drain(cache, {n: newest(obj, self._written.get(n)) or obj for n, obj in nodes.items()}, now)
        self._collect_pods(cache, {n: newest(obj, self._written.get(n)) or obj for n, obj in nodes.items()}, now)
        wait = min([self.base_resync, *(at - now for at in due)])
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
                                              and t.taint.effect is TaintEffect.NO_EXECUTE for t in taints_of(node)),
                        gpu_fault=condition(node, GPU_FAULT_CONDITION).get("status") == "True",
                        remediation_held=condition(node, REMEDIATION_HELD_CONDITION).get("status") == "True",
                        draining=_draining(node))

    # ------------------------------------------------------------ remediation
    def _remediate(self, cache: Cache, nodes: dict[str, Obj], observed: list[PoolNode], healing: HealPlan,
                   now: float) -> None:
        """GpuFault quarantines within the budget; trip, hold and release as the breaker says."""
        record = self._breaker_record(cache)
        breaker = breaker_of(record)
        if self._tripped and not breaker.tripped:
            log.warning("remediation breaker reset (ConfigMap %s/%s %s): GpuFault remediation resumes with a fresh "
                        "budget", BREAKER_NAMESPACE, BREAKER_NAME, "deleted" if record is None else "Closed")
            self._remediations = []
        self._tripped = breaker.tripped
        if self._remediations is None:  # first pass: what the nodes say was done within the window
            self._remediations = [Remediation(n, at) for n, obj in nodes.items()
                                  if (at := parse_time(((obj["metadata"].get("annotations") or {})
                                                        .get(REMEDIATED_AT_ANNOTATION)))) is not None]
        self._remediations = within_window(self._remediations, now, self.budget.window)
        current = {name: newest(obj, self._written.get(name)) or obj for name, obj in nodes.items()}
        plan = plan_remediation(observed, now, self.budget, breaker, self._remediations,
                                busy={s.node for s in healing.steps})
        applied = True
        for step in plan.steps:
            if self.no_spare and step.action is HealAction.PROMOTE_SPARE:
                continue
            node = newest(current[step.node], self._written.get(step.node)) or current[step.node]
            if not self._apply(step, node, now):
                applied = applied and step.action is not HealAction.QUARANTINE
            elif step.action is HealAction.QUARANTINE:
                self._remediations.append(Remediation(step.node, now))
        if plan.breaker != breaker:
            if not applied:
                return  # a quarantine within the budget is not written yet: trip once it is (next pass)
            if not self._write_breaker(record, plan.breaker, now):
                return
            self._tripped = True
            if plan.tripped_now:
                log.warning("remediation breaker tripped: %s; nodes left alone: %s; %s", plan.breaker.reason,
                            ", ".join(plan.hold), RESET_HINT)
        for name in plan.hold:
            node = newest(current[name], self._written.get(name)) or current[name]
            if condition(node, REMEDIATION_HELD_CONDITION).get("status") != "True":
                self._hold(node, plan, now)
        for name in plan.release:
            node = newest(current[name], self._written.get(name)) or current[name]
            self._release(node, plan, now)

    def _breaker_record(self, cache: Cache) -> Obj | None:
        """The breaker's ConfigMap: the informer's copy, or our own write while the informer has not shown it yet;
        None once it is gone (the informer has seen past our write, and it is not there)."""
        cached = cache.get(CONFIGMAPS, BREAKER_NAMESPACE, BREAKER_NAME)
        mine = self._breaker_written
        if cached is None:
            if mine is not None and _rv(cache.resource_version(CONFIGMAPS)) < _rv(mine["metadata"].get(
                    "resourceVersion")):
                return mine
            self._breaker_written = None
            return None
        return newest(cached, mine)

    def _write_breaker(self, record: Obj | None, breaker: Breaker, now: float) -> bool:
        data = {"state": breaker.state.value,
                "trippedAt": _micro(breaker.tripped_at if breaker.tripped_at is not None else now),
                "reason": breaker.reason, "nodesLeftAlone": ",".join(breaker.left_alone)}
        path = resource_path("", "v1", "configmaps", BREAKER_NAMESPACE)
        try:
            if record is None:
                self._breaker_written = self.client.create(path, {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": BREAKER_NAME, "namespace": BREAKER_NAMESPACE,
                                 "labels": {"app.kubernetes.io/managed-by": "firedrill-healer"}},
                    "data": data})
            else:
                self._breaker_written = self.client.patch(
                    f"{path}/{BREAKER_NAME}", {"metadata": {"resourceVersion": record["metadata"]["resourceVersion"]},
                                               "data": data}, MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("the remediation breaker could not be written (%s); retrying", exc)
            return False
        return True

    def _hold(self, node: Obj, plan: RemediationPlan, now: float) -> None:
        name = node["metadata"]["name"]
        fault = condition(node, GPU_FAULT_CONDITION)
        message = (f"GpuFault remediation halted: {plan.breaker.reason}. Node {name} ({fault.get('reason', '')}: "
                   f"{fault.get('message', '')}) is left alone, not quarantined; {RESET_HINT}")
        if not self._set_held(node, "True", BUDGET_EXHAUSTED, message, now):
            return
        log.warning("node %s: RemediationHeld (%s)", name, plan.breaker.reason)
        self.events.record(self._written[name], "Node", "Warning", REMEDIATION_HALTED, message,
                           when=datetime.fromtimestamp(now, timezone.utc))

    def _release(self, node: Obj, plan: RemediationPlan, now: float) -> None:
        name = node["metadata"]["name"]
        if plan.breaker.tripped:
            reason, message = "FaultCleared", f"Node {name} no longer reports {GPU_FAULT_CONDITION}: nothing to hold"
        else:
            reason, message = "BreakerReset", "the remediation breaker was reset: GpuFault remediation acts again"
        if self._set_held(node, "False", reason, message, now):
            log.info("node %s: RemediationHeld False (%s)", name, reason)

    def _set_held(self, node: Obj, status: str, reason: str, message: str, now: float) -> bool:
        """``RemediationHeld`` alone, through ``/status``, merged by type: the agent's conditions stay as they are."""
        name = node["metadata"]["name"]
        stamp = rfc3339(now)
        try:
            self._written[name] = self.client.patch(
                resource_path("", "v1", "nodes", None, name, "status"),
                {"status": {"conditions": [{"type": REMEDIATION_HELD_CONDITION, "status": status, "reason": reason,
                                            "message": message, "lastTransitionTime": stamp,
                                            "lastHeartbeatTime": stamp}]}}, STRATEGIC_MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("node %s: RemediationHeld=%s not written (%s); retrying", name, status, exc)
            return False
        return True

    # ---------------------------------------------------------------- effects
    def _apply(self, step: HealStep, node: Obj, now: float) -> bool:
        """Write one step; True once written."""
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
            why = step.reason
            if step.reason == GPU_FAULT_QUARANTINE:  # drained first, pod by pod (_drain); out of service once empty
                fault = condition(node, GPU_FAULT_CONDITION)
                why = f"{GPU_FAULT_CONDITION} {fault.get('reason', '')}: {fault.get('message', '')}"
                annotations = {REMEDIATED_AT_ANNOTATION: _micro(now)}
                spec = {"unschedulable": True, "taints": taints_json(kept, node, now) or None}
                message = (f"Node {name} quarantined ({why}): cordoned, labelled {QUARANTINE_LABEL}={step.reason}, "
                           f"its pods evicted one every {self.drain_interval:g} s before it goes out of service")
            else:
                spec = {"unschedulable": True, "taints": taints_json([*kept, OUT_OF_SERVICE], node, now)}
                message = (f"Node {name} quarantined ({why}): cordoned, labelled {QUARANTINE_LABEL}={step.reason}, "
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
            return False
        log.info("%s", message)
        if step.action is HealAction.RETURN_TO_POOL:
            self.prober.forget(name)
        if step.action is not HealAction.ENROLL_SPARE:
            event_type = "Warning" if step.action is HealAction.QUARANTINE else "Normal"
            self.events.record(self._written[name], "Node", event_type, step.action.value, message,
                               when=datetime.fromtimestamp(now, timezone.utc))
        return True

    # ------------------------------------------------------------------ drain
    def _drain(self, cache: Cache, nodes: dict[str, Obj], now: float) -> list[float]:
        """One step of each GPU-fault drain (:func:`refplatform.core.drain.plan_drain`); when the next falls due."""
        draining = {name: node for name, node in nodes.items() if _draining(node)}
        for record in (self._last_eviction, self._evictions):  # drains that ended some other way
            for gone in [n for n in record if n not in draining]:
                del record[gone]
        if not draining:
            return []
        running: dict[str, list[str]] = {name: [] for name in draining}
        leaving: dict[str, int] = dict.fromkeys(draining, 0)
        for pod in cache.list(PODS):
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name not in draining or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                leaving[node_name] += 1
            else:
                running[node_name].append(f"{meta.get('namespace', 'default')}/{meta['name']}")
        due: list[float] = []
        for name, node in sorted(draining.items()):
            state = DrainingNode(name, condition(node, GPU_FAULT_CONDITION).get("status") == "True",
                                 tuple(sorted(running[name])), leaving[name], self._last_eviction.get(name),
                                 ready=readiness(node) is Readiness.TRUE)
            plan = plan_drain(state, now, self.drain_interval, ignore_recovery=self.drain_past_recovery)
            if plan.next_check is not None:
                due.append(plan.next_check)
            for step in plan.steps:
                self._drain_step(step, node, state, now)
        return due

    def _drain_step(self, step: DrainStep, node: Obj, state: DrainingNode, now: float) -> None:
        name = step.node
        done = self._evictions.get(name, 0)
        if step.action is DrainAction.EVICT:
            self._last_eviction[name] = now  # refused or not: the next try waits its interval
            namespace, pod = step.pod.split("/", 1)
            try:
                self.client.create(resource_path("", "v1", "pods", namespace, pod, "eviction"), {
                    "apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": pod, "namespace": namespace}})
            except (ApiStatusError, ApiUnreachable) as exc:
                log.info("node %s: drain could not evict %s (%s); trying again in %g s", name, step.pod, exc,
                         self.drain_interval)
                return
            self._evictions[name] = done + 1
            message = (f"Node {name} draining for its {GPU_FAULT_CONDITION}: evicted pod {step.pod} "
                       f"({done + 1} so far, {len(state.pods) - 1} left)")
            self._node_event(node, "Normal", step.action.value, message, now)
            return
        taints = [t.taint for t in taints_of(node)]
        if step.action is DrainAction.CANCEL:
            body: Obj = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                                      "labels": {QUARANTINE_LABEL: None}}, "spec": {"unschedulable": None}}
            message = (f"Node {name} no longer reports {GPU_FAULT_CONDITION}: drain stopped after {done} eviction(s), "
                       f"uncordoned; its {len(state.pods)} remaining pod(s) keep running")
            kind = "Normal"
        else:
            body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                    "spec": {"taints": taints_json([*(t for t in taints if t.key != OUT_OF_SERVICE_TAINT),
                                                    OUT_OF_SERVICE], node, now)}}
            message = (f"Node {name} drained ({done} pod(s) evicted"
                       f"{'' if state.ready else ', not Ready'}): tainted {OUT_OF_SERVICE_TAINT}:NoExecute")
            kind = "Warning"
        try:
            self._written[name] = self.client.patch(resource_path("", "v1", "nodes", None, name), body, MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("node %s: %s not applied (%s); retrying", name, step.action.value, exc)
            return
        self._last_eviction.pop(name, None)
        self._evictions.pop(name, None)
        log.info("%s", message)
        self._node_event(self._written[name], kind, step.action.value, message, now)

    def _node_event(self, node: Obj, kind: str, reason: str, message: str, now: float) -> None:
        self.events.record(node, "Node", kind, reason, message, when=datetime.fromtimestamp(now, timezone.utc))

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


def _draining(node: Obj) -> bool:
    """Quarantined for its GPU fault and not yet out of service: its drain goes on."""
    return ((node["metadata"].get("labels") or {}).get(QUARANTINE_LABEL) == GPU_FAULT_QUARANTINE
            and not any(t.taint.key == OUT_OF_SERVICE_TAINT for t in taints_of(node)))


def breaker_of(record: Obj | None) -> Breaker:
    """The breaker a ConfigMap says (None, or any state but ``Tripped``: closed)."""
    data = (record or {}).get("data") or {}
    if data.get("state") != BreakerState.TRIPPED.value:
        return Breaker()
    return Breaker(BreakerState.TRIPPED, parse_time(data.get("trippedAt")), str(data.get("reason") or ""),
                   tuple(n.strip() for n in str(data.get("nodesLeftAlone") or "").split(",") if n.strip()))


def _micro(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _rv(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
