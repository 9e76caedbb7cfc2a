"""Free capacity: how many GPUs each node a drill may use has free, as the drill's own pods would see it."""

from __future__ import annotations

from typing import Any

from drills.kube.driver import POD, resource_for
from drills.target.connect import Target

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")


def _repels(taint: Obj, gpu: str) -> bool:
    """Does ``taint`` keep the drill's GPU pods off its node?  NoSchedule and NoExecute do, except a NoSchedule
    taint whose key is the GPU resource the pods request (``nvidia.com/gpu:NoSchedule``, common on GPU nodes):
    Kubernetes' ExtendedResourceToleration admission plugin gives every pod that requests that resource a
    toleration for it (key, Exists, NoSchedule only), and the canary's ranks carry the same toleration themselves
    (``drills.workloads.canaryjob.gpu_taint_toleration``), so the count holds on a cluster without that plugin too.
    Without it such a node would count here while the ranks stayed Pending, and the gang drill would FAIL
    with "never ran whole", blaming the scheduler for the taint."""
    effect = taint.get("effect")
    if effect == "NoSchedule" and taint.get("key") == gpu:
        return False
    return effect in ("NoSchedule", "NoExecute")


def free_gpus_per_node(target: Target) -> dict[str, int]:
    """Free GPUs on each schedulable, Ready node the drill may use (taints as :func:`_repels` reads them)."""
    gpu = target.profile.gpu_resource
    nodes = target.driver.list(resource_for({"apiVersion": "v1", "kind": "Node"}))
    pods = target.driver.list(POD)
    used: dict[str, int] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and (p.get("status") or {}).get("phase") not in TERMINAL:
            for c in (p.get("spec") or {}).get("containers") or []:
                used[node] = used.get(node, 0) + int(((c.get("resources") or {}).get("limits") or {}).get(gpu, 0))
    free = {}
    for n in nodes:
        spec, status = n.get("spec") or {}, n.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        blocked = spec.get("unschedulable") or any(_repels(t, gpu) for t in spec.get("taints") or [])
        if ready and not blocked:
            name = n["metadata"]["name"]
            free[name] = int((status.get("allocatable") or {}).get(gpu, 0)) - used.get(name, 0)
    return free


def allocatable_gpus(node: Obj, gpu_resource: str) -> int | None:
    """The GPUs a Node offers the scheduler (``status.allocatable``): what a device plugin's health decides."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(gpu_resource)
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
