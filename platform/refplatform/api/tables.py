"""Server-side printing: ``meta.k8s.io/v1`` Table answers for ``kubectl get``.

kubectl asks for ``as=Table`` and prints whatever columns the server defines,
so the useful columns for GPU work (GPUs allocatable and used per node, the
node a pod runs on, a PodGroup's minMember) are decided here.  Columns with
``priority`` 1 appear only with ``-o wide``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from refplatform.api.validation import GPU, pod_gpu_request
from refplatform.resources import (
    DEPLOYMENTS, ENDPOINTSLICES, EVENTS, LEASES, NAMESPACES, NODES, PODGROUPS, PODS, QUEUES, REPLICASETS, SERVICES,
    VCJOBS, ResourceType,
)
from refplatform.resources import HPAS
from refplatform.resources import PRIORITYCLASSES
from refplatform.resources import RESOURCEQUOTAS
from refplatform.resources import CONFIGMAPS, JOBS, PDBS, SECRETS, SERVICEACCOUNTS

Obj = dict[str, Any]


@dataclass(frozen=True)
class Column:
    name: str
    cell: Callable[[Obj, "TableContext"], Any]
    type: str = "string"
    priority: int = 0
    format: str = ""
    description: str = ""


@dataclass(frozen=True)
class TableContext:
    """What a cell may need beyond its own object."""

    now: datetime
    gpus_used: Mapping[str, int]


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """Durations as kubectl prints them: 45s, 3m12s, 17m, 5h3m, 2d."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d" if d < 365 * 2 else f"{d // 365}y"


def _age(obj: Obj, ctx: TableContext) -> str:
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return human_duration((ctx.now - created).total_seconds()) if created else "<unknown>"


def _job_status(job: Obj, ctx: TableContext) -> str:
    """STATUS of a Job, as upstream's printer: the last of Complete, Failed, FailureTarget, SuccessCriteriaMet,
    Suspended that holds, else Running."""
    held = {c.get("type") for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
    for kind, word in (("Failed", "Failed"), ("Complete", "Complete"), ("FailureTarget", "FailureTarget"),
                       ("SuccessCriteriaMet", "SuccessCriteriaMet"), ("Suspended", "Suspended")):
        if kind in held:
            return word
    return "Running"


def _job_completions(job: Obj, ctx: TableContext) -> str:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    done = status.get("succeeded") or 0
    if spec.get("completions") is not None:
        return f"{done}/{spec['completions']}"
    parallelism = spec.get("parallelism") or 1
    return f"{done}/1 of {parallelism}" if parallelism > 1 else f"{done}/1"


def _job_duration(job: Obj, ctx: TableContext) -> str:
    status = job.get("status") or {}
    start = parse_time(status.get("startTime"))
    if start is None:
        return ""
    end = parse_time(status.get("completionTime")) or ctx.now
    return human_duration((end - start).total_seconds())


def _name(obj: Obj, ctx: TableContext) -> str:
    return obj["metadata"]["name"]


def node_status(node: Obj) -> str:
    ready = "Unknown"
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = {"True": "Ready", "False": "NotReady"}.get(cond.get("status"), "Unknown")
    if ready == "Unknown":
        ready = "NotReady" if (node.get("status") or {}).get("conditions") else "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        ready += ",SchedulingDisabled"
    return ready


def pod_status(pod: Obj) -> str:
    """The STATUS column, as kubectl derives it."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            term = state["terminated"]
            reason = term.get("reason") or f"ExitCode:{term.get('exitCode')}"
    return reason


def _pod_ready(pod: Obj, ctx: TableContext) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    ready = sum(1 for cs in (pod.get("status") or {}).get("containerStatuses") or [] if cs.get("ready"))
    return f"{ready}/{len(containers)}"


def _restarts(pod: Obj, ctx: TableContext) -> int:
    return sum(cs.get("restartCount", 0) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def _node_internal_ip(node: Obj, ctx: TableContext) -> str:
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == "InternalIP":
            return addr.get("address", "<none>")
    return "<none>"


def _alloc_gpus(node: Obj, ctx: TableContext) -> str:
    return str(((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0"))


def _labels(key: str) -> Callable[[Obj, TableContext], str]:
    return lambda obj, ctx: ((obj.get("metadata") or {}).get("labels") or {}).get(key, "<none>")


def _path(*keys: str, default: Any = "<none>") -> Callable[[Obj, TableContext], Any]:
    def cell(obj: Obj, ctx: TableContext) -> Any:
        cur: Any = obj
        for k in keys:
            if not isinstance(cur, dict) or k not in cur:
                return default
            cur = cur[k]
        return cur
    return cell


def _event_object(ev: Obj, ctx: TableContext) -> str:
    inv = ev.get("involvedObject") or {}
    return f"{(inv.get('kind') or '').lower()}/{inv.get('name', '')}"


def _event_last_seen(ev: Obj, ctx: TableContext) -> str:
    when = parse_time(ev.get("lastTimestamp") or ev.get("eventTime")
                      or (ev.get("metadata") or {}).get("creationTimestamp"))
    return human_duration((ctx.now - when).total_seconds()) if when else "<unknown>"


NAME = Column("Name", _name, format="name", description="Name must be unique within a namespace.")


def _hpa_targets(hpa: Obj) -> str:
    """kubectl's TARGETS of an HPA: ``<current>/<target>`` per Pods metric, ``<unknown>`` before a reading."""
    current = {(m.get("pods") or {}).get("metric", {}).get("name"): (m.get("pods") or {}).get("current", {})
               for m in (hpa.get("status") or {}).get("currentMetrics") or [] if m.get("type") == "Pods"}
    out = []
    for m in (hpa.get("spec") or {}).get("metrics") or []:
        pods = m.get("pods") or {}
        name = (pods.get("metric") or {}).get("name")
        now = (current.get(name) or {}).get("averageValue", "<unknown>")
        out.append(f"{now}/{(pods.get('target') or {}).get('averageValue', '<unset>')}")
    return ", ".join(out) or "<none>"
AGE = Column("Age", _age, description="Time since the object was created.")

COLUMNS: dict[str, tuple[Column, ...]] = {
    NODES.key: (
        NAME, Column("Status", lambda o, c: node_status(o)),
        Column("GPUs", _alloc_gpus, description="nvidia.com/gpu allocatable"),
        Column("GPUs-Used", lambda o, c: str(c.gpus_used.get(o["metadata"]["name"], 0)),
               description="nvidia.com/gpu requested by non-terminal pods bound to the node"),
        AGE, Column("Version", _path("status", "nodeInfo", "kubeletVersion", default="")),
        Column("Internal-IP", _node_internal_ip, priority=1),
        Column("GPU-Product", _labels("nvidia.com/gpu.product"), priority=1),
        Column("Node-Group", _labels("firedrill.dev/node-group"), priority=1),
    ),
    PODS.key: (
        NAME, Column("Ready", _pod_ready), Column("Status", lambda o, c: pod_status(o)),
        Column("Restarts", _restarts, type="integer"),
        Column("Node", _path("spec", "nodeName")), AGE,
        Column("IP", _path("status", "podIP"), priority=1),
        Column("GPUs", lambda o, c: pod_gpu_request(o), type="integer", priority=1),
    ),
    PODGROUPS.key: (
        NAME, Column("Phase", _path("status", "phase", default="")),
        Column("MinMember", _path("spec", "minMember", default=0), type="integer"),
        Column("Running", _path("status", "running", default=0), type="integer"),
        Column("Queue", _path("spec", "queue", default="")), AGE,
    ),
    QUEUES.key: (
        NAME, Column("State", _path("status", "state", default="")),
        Column("Weight", _path("spec", "weight", default=1), type="integer"),
        Column("Reclaimable", _path("spec", "reclaimable", default=True)), AGE,
    ),
    VCJOBS.key: (
        NAME, Column("Status", _path("status", "state", "phase", default="Pending")),
        Column("MinAvailable", _path("spec", "minAvailable", default=0), type="integer"),
        Column("Running", _path("status", "running", default=0), type="integer"),
        Column("Retries", _path("status", "retryCount", default=0), type="integer"), AGE,
    ),
    DEPLOYMENTS.key: (
        NAME, Column("Ready", lambda o, c: f"{(o.get('status') or {}).get('readyReplicas', 0)}/"
                                        f"{(o.get('spec') or {}).get('replicas', 0)}"),
        Column("Up-To-Date", _path("status", "updatedReplicas", default=0), type="integer"),
        Column("Available", _path("status", "availableReplicas", default=0), type="integer"), AGE,
    ),
    REPLICASETS.key: (
        NAME, Column("Desired", _path("spec", "replicas", default=0), type="integer"),
        Column("Current", _path("status", "replicas", default=0), type="integer"),
        Column("Ready", _path("status", "readyReplicas", default=0), type="integer"), AGE,
    ),
    SERVICES.key: (
        NAME, Column("Type", _path("spec", "type", default="ClusterIP")),
        Column("External-IP", lambda o, c: ",".join(i.get("ip", "") for i in ((o.get("status") or {}).get(
            "loadBalancer") or {}).get("ingress") or []) or "<none>"),
        Column("Port(s)", lambda o, c: ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}"
                                                for p in (o.get("spec") or {}).get("ports") or [])), AGE,
    ),
    ENDPOINTSLICES.key: (
        NAME, Column("AddressType", _path("addressType", default="")),
        Column("Ports", lambda o, c: ",".join(str(p.get("port")) for p in o.get("ports") or []) or "<unset>"),
        Column("Endpoints", lambda o, c: ",".join(a for e in o.get("endpoints") or []
                                                  for a in e.get("addresses") or []) or "<unset>"), AGE,
    ),
    HPAS.key: (
        NAME, Column("Reference", lambda o, c: "{kind}/{name}".format(**{
            "kind": "", "name": "", **((o.get("spec") or {}).get("scaleTargetRef") or {})})),
        Column("Targets", lambda o, c: _hpa_targets(o)),
        Column("MinPods", _path("spec", "minReplicas", default=1), type="integer"),
        Column("MaxPods", _path("spec", "maxReplicas", default=0), type="integer"),
        Column("Replicas", _path("status", "currentReplicas", default=0), type="integer"), AGE,
    ),
    PRIORITYCLASSES.key: (
        NAME, Column("Value", _path("value", default=0), type="integer"),
        Column("Global-Default", _path("globalDefault", default=False), type="boolean"), AGE,
        Column("PreemptionPolicy", _path("preemptionPolicy", default=""), priority=1),
    ),
    RESOURCEQUOTAS.key: (
        NAME, AGE, Column("Request", lambda o, c: _quota_cells(o, limits=False)),
        Column("Limit", lambda o, c: _quota_cells(o, limits=True)),
    ),
    JOBS.key: (NAME, Column("Status", _job_status), Column("Completions", _job_completions),
               Column("Duration", _job_duration), AGE),
    PDBS.key: (NAME, Column("Min Available", _path("spec", "minAvailable", default="N/A")),
               Column("Max Unavailable", _path("spec", "maxUnavailable", default="N/A")),
               Column("Allowed Disruptions", _path("status", "disruptionsAllowed", default=0), type="integer"), AGE),
    CONFIGMAPS.key: (NAME, Column("Data", lambda o, c: len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                                  type="integer"), AGE),
    SECRETS.key: (NAME, Column("Type", _path("type", default="Opaque")),
                  Column("Data", lambda o, c: len(o.get("data") or {}), type="integer"), AGE),
    SERVICEACCOUNTS.key: (NAME, Column("Secrets", lambda o, c: len(o.get("secrets") or []), type="integer"), AGE),
    NAMESPACES.key: (NAME, Column("Status", _path("status", "phase", default="Active")), AGE),
    LEASES.key: (NAME, Column("Holder", _path("spec", "holderIdentity", default="")),
                 Column("Renewed", _path("spec", "renewTime", default="")), AGE),
    EVENTS.key: (
        Column("Last Seen", _event_last_seen), Column("Type", _path("type", default="")),
        Column("Reason", _path("reason", default="")), Column("Object", _event_object),
        Column("Message", _path("message", default="")),
        Column("Name", _name, priority=1, format="name"),
    ),
}


def _quota_cells(quota: Obj, limits: bool) -> str:
    """As kubectl prints a quota: ``requests.nvidia.com/gpu: 2/4, pods: 3/10`` (``limits.*`` in its own column)."""
    status = quota.get("status") or {}
    hard, used = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}, status.get("used") or {}
    return ", ".join(f"{k}: {used.get(k, '0')}/{v}" for k, v in sorted(hard.items())
                     if k.startswith("limits.") == limits)


def table(rt: ResourceType, items: list[Obj], ctx: TableContext, resource_version: str,
          include_columns: bool = True, continue_token: str = "") -> Obj:
    columns = COLUMNS.get(rt.key, (NAME, AGE))
    rows = []
    for obj in items:
        meta = obj.get("metadata") or {}
        rows.append({
            "cells": [col.cell(obj, ctx) for col in columns],
            "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                         "creationTimestamp", "labels") if k in meta}},
        })
    out: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": resource_version}, "rows": rows}
    if continue_token:
        out["metadata"]["continue"] = continue_token
    if include_columns:
        out["columnDefinitions"] = [
            {"name": c.name, "type": c.type, "format": c.format, "description": c.description,
             "priority": c.priority} for c in columns]
    return out


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
