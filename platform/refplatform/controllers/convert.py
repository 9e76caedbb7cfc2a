"""API objects (JSON dicts) to the pure core's snapshot types, and back to status documents.

The only place that knows both shapes: quantities are parsed here, Volcano's
group annotation is read here, and a node that is not Ready is made
unschedulable here, so the core stays a function of plain dataclasses.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from refplatform import core
from refplatform.controllers.vcjob import JOB_VERSION
from refplatform.core.topology import topology_request
from refplatform.gpu.health import UNHEALTHY_ANNOTATION, parse_unhealthy
from refplatform.quantity import parse_quantity
from refplatform.core import (
    GPU, GPU_INDEX_ANNOTATION, GPU_MILLI, NodeSelectorRequirement, PodGroupPhase, PodPhase, PreemptionPolicy,
    QueueState, SelectorOperator, TaintEffect, TolerationOperator,
)

Obj = dict[str, Any]
EXTENDED_PREFIXES = ("nvidia.com/", "firedrill.dev/")
"""Extended resources counted as plain per-node integers (MIG profiles, gpu.shared, HAMi's
gpumem/gpucores, and any other name under these domains); others (``pods``,
``ephemeral-storage``, ``hugepages-*``, other vendors) are ignored."""
GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
SCHEDULER_NAMES = frozenset({"volcano", "default-scheduler"})


def _qty(value: Any) -> Decimal:
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError):
        return Decimal(0)


def _epoch(value: str | None) -> float:
    if not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def extended_of(res: Mapping[str, Any]) -> dict[str, int]:
    """The extended resources of a requests / allocatable map (whole units, zero dropped)."""
    out: dict[str, int] = {}
    for name, value in res.items():
        if name in (GPU, GPU_MILLI) or not name.startswith(EXTENDED_PREFIXES):
            continue
        amount = int(_qty(value))
        if amount > 0:
            out[name] = amount
    return out


def resources_of(res: Mapping[str, Any] | None) -> core.Resources:
    res = res or {}
    gpu_milli = int(_qty(res.get(GPU_MILLI, 0)))
    return core.Resources(cpu_milli=int(_qty(res.get("cpu", 0)) * 1000),
                          memory_bytes=int(_qty(res.get("memory", 0))),
                          gpus=int(_qty(res.get(GPU, 0))), gpu_milli=gpu_milli if gpu_milli < 1000 else 0,
                          extended=tuple(extended_of(res).items()))


def usage_of(res: Mapping[str, Any] | None) -> core.Usage:
    res = res or {}
    return core.Usage(int(_qty(res.get("cpu", 0)) * 1000), int(_qty(res.get("memory", 0))),
                      int(_qty(res.get(GPU, 0)) * 1000))


def quota_of(res: Mapping[str, Any] | None) -> core.Quota:
    if not res:
        return core.Quota()
    return core.Quota(int(_qty(res["cpu"]) * 1000) if "cpu" in res else None,
                      int(_qty(res["memory"])) if "memory" in res else None,
                      int(_qty(res[GPU]) * 1000) if GPU in res else None)


def node_ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _effect(value: str | None) -> TaintEffect | None:
    for effect in TaintEffect:
        if effect.value == value:
            return effect
    return None


def node_of(obj: Obj) -> core.Node:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    taints = tuple(core.Taint(t["key"], t.get("value", ""), _effect(t.get("effect")) or TaintEffect.NO_SCHEDULE)
                   for t in spec.get("taints") or [] if t.get("key"))
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    withdrawn = parse_unhealthy((meta.get("annotations") or {}).get(UNHEALTHY_ANNOTATION))
    return core.Node(meta["name"], resources_of(allocatable),
                     capacity=resources_of(status["capacity"]) if status.get("capacity") else None,
                     labels=dict(meta.get("labels") or {}), taints=taints,
                     unschedulable=bool(spec.get("unschedulable")) or not node_ready(obj), withdrawn_gpus=withdrawn)


def pod_requests(spec: Mapping[str, Any]) -> core.Resources:
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        # A request defaults to its limit, as upstream defaults it.
        for name, value in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
            total[name] = total.get(name, Decimal(0)) + _qty(value)
    return resources_of({k: str(v) for k, v in total.items()})


def group_of(pod: Obj) -> str | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for key in GROUP_ANNOTATIONS:
        if annotations.get(key):
            return annotations[key]
    return None


def _affinity(spec: Mapping[str, Any]) -> tuple[NodeSelectorRequirement, ...]:
    """The first required node-selector term (terms are ORed upstream; the core takes one AND-list)."""
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return ()
    out = []
    for expr in terms[0].get("matchExpressions") or []:
        try:
            op = SelectorOperator(expr.get("operator"))
        except ValueError:
            continue
        out.append(NodeSelectorRequirement(expr.get("key", ""), op, tuple(expr.get("values") or ())))
    return tuple(out)


def _tolerations(spec: Mapping[str, Any]) -> tuple[core.Toleration, ...]:
    out = []
    for t in spec.get("tolerations") or []:
        op = TolerationOperator.EXISTS if t.get("operator") == "Exists" else TolerationOperator.EQUAL
        out.append(core.Toleration(t.get("key", ""), op, t.get("value", ""), _effect(t.get("effect"))))
    return tuple(out)


def pod_of(obj: Obj, arrival: float = 0.0) -> core.Pod:
    """``arrival`` (0..1) orders pods created within the same second, as a queue orders arrivals:
    creationTimestamp has one-second resolution, and FIFO within it is what the no-gang baseline needs."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    try:
        phase = PodPhase(status.get("phase", "Pending"))
    except ValueError:
        phase = PodPhase.PENDING
    indices = tuple(int(i) for i in ((meta.get("annotations") or {}).get(GPU_INDEX_ANNOTATION) or "").split(",")
                    if i.strip().isdigit())
    return core.Pod(meta.get("namespace", "default"), meta["name"], meta.get("uid", ""),
                    requests=pod_requests(spec), priority=int(spec.get("priority") or 0),
                    node_name=spec.get("nodeName") or None, gpu_indices=indices, group=group_of(obj),
                    node_selector=dict(spec.get("nodeSelector") or {}), affinity=_affinity(spec),
                    tolerations=_tolerations(spec), created_at=_epoch(meta.get("creationTimestamp")) + arrival,
                    phase=phase, terminating=bool(meta.get("deletionTimestamp")),
                    preemption_policy=_preemption_policy(spec.get("preemptionPolicy")),
                    topology=topology_request(meta.get("annotations") or {}), generation=_generation(meta))


def _generation(meta: Mapping[str, Any]) -> int:
    """The job incarnation a pod belongs to: Volcano's ``volcano.sh/job-version`` (0 when absent or not a
    number: a pod no job controller restarted)."""
    raw = str((meta.get("annotations") or {}).get(JOB_VERSION) or "").strip()
    return int(raw) if raw.isdigit() else 0


def _preemption_policy(value: Any) -> PreemptionPolicy:
    """``spec.preemptionPolicy`` (set by the Priority admission); absent or unknown: the default."""
    try:
        return PreemptionPolicy(value)
    except ValueError:
        return PreemptionPolicy.PREEMPT_LOWER_PRIORITY


def pod_group_of(obj: Obj) -> core.PodGroup:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    try:
        phase = PodGroupPhase(status.get("phase", "Pending"))
    except ValueError:
        phase = PodGroupPhase.PENDING
    return core.PodGroup(meta.get("namespace", "default"), meta["name"], min_member=int(spec.get("minMember") or 1),
                         min_resources=usage_of(spec["minResources"]) if spec.get("minResources") else None,
                         queue=spec.get("queue") or core.DEFAULT_QUEUE,
                         priority_class_name=spec.get("priorityClassName") or "",
                         phase=phase, created_at=_epoch(meta.get("creationTimestamp")))


def queue_of(obj: Obj) -> core.Queue:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    try:
        state = QueueState(status.get("state", "Open"))
    except ValueError:
        state = QueueState.OPEN
    return core.Queue(meta["name"], weight=int(spec.get("weight") or 1), capability=quota_of(spec.get("capability")),
                      deserved=quota_of(spec["deserved"]) if spec.get("deserved") else None,
                      guarantee=quota_of((spec.get("guarantee") or {}).get("resource")),
                      reclaimable=spec.get("reclaimable", True) is not False, state=state,
                      priority=int(spec.get("priority") or 0))


class Converter:
    """:func:`snapshot_of` with a memory: a pod or node whose stored version (``resourceVersion``; for a pod
    also the node and GPU indices, which the scheduler's own assumed binds overlay) is the one converted last
    cycle is not converted again.  The core's objects are frozen, so one snapshot may share them with the
    next.  Only what the last snapshot held is remembered.

    The very same pod object as last cycle (an informer replaces a changed object, never edits it) is
    recognised first by identity, which costs a dictionary lookup, not the version key's five."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[tuple[Any, ...], core.Pod]] = {}
        self._nodes: dict[str, tuple[Any, core.Node]] = {}
        # id(pod object) -> (the object, held so that ids stay unique; its pod; uid; version key)
        self._same: dict[int, tuple[Obj, core.Pod, str, tuple[Any, ...]]] = {}
        self._names: frozenset[str] | None = None

    def snapshot(self, nodes: list[Obj], pods: list[Obj], pod_groups: list[Obj], queues: list[Obj], now: float,
                 scheduler_names: frozenset[str] = SCHEDULER_NAMES,
                 arrival: Mapping[str, float] | None = None) -> core.Snapshot:
        arrival = arrival or {}
        old_pods, old_nodes, old_same = self._pods, self._nodes, self._same
        if scheduler_names != self._names:  # which pods count changed: nothing is the same
            old_same, self._names = {}, scheduler_names
        self._pods, self._nodes, self._same = {}, {}, {}
        same, by_uid = self._same, self._pods
        converted_nodes = []
        for obj in nodes:
            meta = obj.get("metadata") or {}
            name, version = str(meta.get("name") or ""), meta.get("resourceVersion")
            hit = old_nodes.get(name)
            node = hit[1] if hit is not None and version is not None and hit[0] == version else node_of(obj)
            self._nodes[name] = (version, node)
            converted_nodes.append(node)
        converted_pods = []
        for obj in pods:
            seen = old_same.get(id(obj))
            if seen is not None and seen[0] is obj and arrival.get(seen[2], 0.0) == seen[3][3]:
                same[id(obj)] = seen
                if seen[2]:
                    by_uid[seen[2]] = (seen[3], seen[1])
                converted_pods.append(seen[1])
                continue
            if not schedulable(obj, scheduler_names):
                continue
            meta = obj.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            when = arrival.get(uid, 0.0)
            key = (meta.get("resourceVersion"), (obj.get("spec") or {}).get("nodeName"),
                   (meta.get("annotations") or {}).get(GPU_INDEX_ANNOTATION), when)
            hit = old_pods.get(uid)
            pod = hit[1] if hit is not None and key[0] is not None and hit[0] == key else pod_of(obj, when)
            if uid:
                by_uid[uid] = (key, pod)
            same[id(obj)] = (obj, pod, uid, key)
            converted_pods.append(pod)
        return core.Snapshot(nodes=tuple(converted_nodes), pods=tuple(converted_pods),
                             pod_groups=tuple(pod_group_of(g) for g in pod_groups),
                             queues=tuple(queue_of(q) for q in queues), now=now)


def schedulable(pod: Obj, scheduler_names: frozenset[str] = SCHEDULER_NAMES) -> bool:
    """Is this pod this scheduler's to place (or already placed, and so holding room)?"""
    spec = pod.get("spec") or {}
    return bool(spec.get("nodeName")) or spec.get("schedulerName", "default-scheduler") in scheduler_names


def snapshot_of(nodes: list[Obj], pods: list[Obj], pod_groups: list[Obj], queues: list[Obj], now: float,
                scheduler_names: frozenset[str] = SCHEDULER_NAMES,
                arrival: Mapping[str, float] | None = None) -> core.Snapshot:
    arrival = arrival or {}
    return core.Snapshot(
        nodes=tuple(node_of(n) for n in nodes),
        pods=tuple(pod_of(p, arrival.get((p.get("metadata") or {}).get("uid", ""), 0.0))
                   for p in pods if schedulable(p, scheduler_names)),
        pod_groups=tuple(pod_group_of(g) for g in pod_groups),
        queues=tuple(queue_of(q) for q in queues), now=now)
