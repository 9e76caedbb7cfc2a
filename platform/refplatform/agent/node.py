"""The Node and Lease objects a node agent writes, as plain JSON dicts.

Pure functions of the agent's configuration and a time: no I/O here, so the
shapes are unit-tested against the official client's strict models.
"""

from __future__ import annotations

import math
import platform
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from refplatform import KUBE_VERSION, __version__
from refplatform.agent.clock import micro_time, rfc3339
from refplatform.agent.gpus import GpuInventory
from refplatform.gpu.partition import PartitionConfig, advertise

__all__ = [
    "LEASE_NAMESPACE",
    "NODE_GROUP_LABEL",
    "NodeConfig",
    "build_lease",
    "build_node",
    "lease_duration_seconds",
    "node_conditions",
    "node_labels",
    "node_status",
    "system_info",
]

Obj = dict[str, Any]

LEASE_NAMESPACE = "kube-node-lease"
NODE_GROUP_LABEL = "firedrill.dev/node-group"
SIMULATED_GPUS_LABEL = "firedrill.dev/simulated-gpus"
GPU_RESOURCE = "nvidia.com/gpu"

# (type, status, reason, message) as the kubelet reports a healthy node, in its order.
_HEALTHY_CONDITIONS: tuple[tuple[str, str, str, str], ...] = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine or "amd64")


def _os_image() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "Linux"


@dataclass(frozen=True)
class NodeConfig:
    """What a simulated node is: its name, size, GPUs and endpoints."""

    name: str
    gpus: GpuInventory
    cpu: str = "64"
    memory: str = "512Gi"
    pods: str = "110"
    node_group: str | None = None
    log_port: int = 0
    """The port of the agent's log server (``daemonEndpoints.kubeletEndpoint.Port``)."""
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    """New for every agent process, like a boot."""
    partition: PartitionConfig | None = None
    """``--partition-config``: what the GPUs advertise (None: plain ``nvidia.com/gpu``, as without partitioning)."""
    gpu_model: str = ""
    """The model's short name (``--gpu-model``), for the MIG profile table."""
    pod_cidr: str | None = None
    """The node's pod range (``spec.podCIDR``): its pods' loopback addresses."""
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    """``--node-labels``: labels the node registers with besides its own facts, as the kubelet's flag of that
    name (a rack or NVLink domain: ``cloud.provider.com/topology-rack=rack-0``); the agent's own labels win."""

    def spec(self) -> Obj:
        """The Node's ``spec`` as the agent registers it."""
        return {"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]} if self.pod_cidr else {}

    def gpu_advertisement(self) -> tuple[dict[str, str], dict[str, str]] | None:
        """``(resources, labels)`` of the partition mode (docs/PARTITIONING.md), None without a partition config."""
        if self.partition is None:
            return None
        return advertise(self.partition, self.gpu_model or self.gpus.product, self.gpus.product, self.gpus.count,
                         self.gpus.memory_mib)


def system_info(config: NodeConfig) -> Obj:
    """``status.nodeInfo``: all ten NodeSystemInfo fields (the strict client needs every one)."""
    stable = uuid.uuid5(uuid.NAMESPACE_DNS, f"{config.name}.nodes.firedrill.dev")
    return {
        "machineID": stable.hex,
        "systemUUID": str(stable),
        "bootID": config.boot_id,
        "kernelVersion": platform.release() or "unknown",
        "osImage": _os_image(),
        "containerRuntimeVersion": f"firedrill-sim://{__version__}",
        "kubeletVersion": KUBE_VERSION,
        "kubeProxyVersion": KUBE_VERSION,
        "operatingSystem": "linux",
        "architecture": _arch(),
    }


def node_labels(config: NodeConfig) -> dict[str, str]:
    labels = {
        **config.extra_labels,
        "kubernetes.io/hostname": config.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": _arch(),
        **config.gpus.labels(),
    }
    if config.gpus.count > 0:
        labels[SIMULATED_GPUS_LABEL] = "true" if config.gpus.simulated else "false"
    if config.node_group:
        labels[NODE_GROUP_LABEL] = config.node_group
    advertised = config.gpu_advertisement()
    if advertised is not None:
        labels.update(advertised[1])
    return labels


def node_conditions(now: datetime, previous: list[Obj] | None = None, not_ready: str | None = None) -> list[Obj]:
    """The node's conditions, heartbeat ``now``: healthy (Ready=True, reason KubeletReady), or, with a
    ``not_ready`` message, Ready=False with reason KubeletNotReady (the agent is up but cannot run pods).

    ``lastTransitionTime`` is kept from ``previous`` where the status did not
    change (e.g. stays True), and is ``now`` where it did (e.g. the node
    lifecycle controller had set Ready=Unknown).
    """
    before = {c.get("type"): c for c in previous or [] if isinstance(c, dict)}
    stamp = rfc3339(now)
    out = []
    for ctype, status, reason, message in _HEALTHY_CONDITIONS:
        if ctype == "Ready" and not_ready:
            status, reason, message = "False", "KubeletNotReady", not_ready
        prev = before.get(ctype)
        transition = stamp
        if prev and prev.get("status") == status and prev.get("lastTransitionTime"):
            transition = str(prev["lastTransitionTime"])
        out.append(
            {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": transition,
            }
        )
    return out


def node_status(
    config: NodeConfig, now: datetime, previous_conditions: list[Obj] | None = None, not_ready: str | None = None,
    unhealthy_gpus: int = 0,
    withdrawn: Mapping[str, int] | None = None,
) -> Obj:
    """``unhealthy_gpus``: whole GPUs the device plugin reports out of service, taken off allocatable (the
    kubelet's rule); ``withdrawn``: on a partitioned node, what its slices out of service take off each advertised
    resource instead (:meth:`refplatform.gpu.device.DeviceSet.withdrawn`).  Capacity keeps them."""
    capacity = {"cpu": config.cpu, "memory": config.memory, "pods": config.pods}
    advertised = config.gpu_advertisement()
    if advertised is not None:
        capacity.update(advertised[0])
    elif config.gpus.count > 0:
        capacity[GPU_RESOURCE] = str(config.gpus.count)
    allocatable = dict(capacity)
    if advertised is None and config.gpus.count > 0:
        allocatable[GPU_RESOURCE] = str(max(0, config.gpus.count - unhealthy_gpus))
    elif advertised is not None:
        for name, amount in (withdrawn or {}).items():
            if name in advertised[0]:
                allocatable[name] = str(max(0, int(advertised[0][name]) - amount))
    return {
        "capacity": dict(capacity),
        "allocatable": allocatable,
        "conditions": node_conditions(now, previous_conditions, not_ready),
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": config.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": config.log_port}},
        "nodeInfo": system_info(config),
    }


def build_node(config: NodeConfig, now: datetime) -> Obj:
    """The Node to create at registration."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": config.name,
            "labels": node_labels(config),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "firedrill.dev/agent-boot-id": config.boot_id},
        },
        "spec": config.spec(),
        "status": node_status(config, now),
    }


def lease_duration_seconds(heartbeat_seconds: float) -> int:
    """4 x the heartbeat interval, rounded up, at least 1 (the kubelet: 40 s lease, 10 s renew)."""
    return max(1, math.ceil(4 * heartbeat_seconds - 1e-9))


def build_lease(node_name: str, node_uid: str | None, duration_seconds: int, now: datetime, previous: Obj | None = None) -> Obj:
    """The node's Lease in ``kube-node-lease``, renewed ``now``.

    From ``previous`` (the server's copy) it keeps metadata (resourceVersion for
    the optimistic-concurrency PUT); the owner is the Node when its uid is known.
    """
    metadata: Obj = dict((previous or {}).get("metadata") or {})
    metadata["name"] = node_name
    metadata["namespace"] = LEASE_NAMESPACE
    if node_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": node_name,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": micro_time(now),
        },
    }
