"""A kube-state-metrics stand-in: the few KSM series a Prometheus-based leak report reads, for any API server.

Why this exists: a leak report computed from Prometheus (``prometheus.url`` in the target profile) needs DCGM's
per-GPU series and kube-state-metrics' node and pod series (``docs/LEAK_REPORT.md``).  The reference API server
serves the KSM series on its own ``/metrics``; an upstream control plane has no kube-state-metrics here (it is
not built), so this controller serves the same series, KSM's exact names and labels, from its informer caches
on a loopback port:

    python -m refplatform.controllers --api URL --token-file T --ca-file CA \
        --controllers kube-state-metrics --metrics-address 127.0.0.1:9400

It writes nothing.  :class:`KubeStateCollector` is the one collector both use.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from refplatform.controllers.manager import Cache
from refplatform.resources import NODES, PODS, ResourceType

__all__ = ["KSM_GPU", "KubeStateCollector", "KubeStateMetrics"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]

GPU_RESOURCE = "nvidia.com/gpu"
KSM_GPU = "nvidia_com_gpu"
"""kube-state-metrics writes a resource name with ``.`` and ``/`` as ``_``."""


def _gpus(raw: object) -> float | None:
    try:
        return float(str(raw))
    except ValueError:
        return None


class KubeStateCollector(Collector):
    """The kube-state-metrics series a Prometheus-based leak report needs (KSM's exact names and labels), read
    at the scrape from ``list_objects`` (the store, or a controller's informer cache): GPU allocatable and Ready
    of every node; unschedulable pods and the GPU requests of live pods.  Only GPU resources are listed (the
    rest of KSM is not needed here)."""

    def __init__(self, list_objects: Callable[[ResourceType], list[Obj]]) -> None:
        self.list_objects = list_objects

    def collect(self) -> Iterator[Metric]:
        allocatable = GaugeMetricFamily("kube_node_status_allocatable",
                                        "The allocatable for different resources of a node that are available "
                                        "for scheduling.", labels=["node", "resource", "unit"])
        condition = GaugeMetricFamily("kube_node_status_condition", "The condition of a cluster node.",
                                      labels=["node", "condition", "status"])
        nodes = self.list_objects(NODES)
        for node in nodes:
            name = str((node.get("metadata") or {}).get("name", ""))
            status = node.get("status") or {}
            gpus = _gpus((status.get("allocatable") or {}).get(GPU_RESOURCE, ""))
            if gpus is not None:
                allocatable.add_metric([name, KSM_GPU, "integer"], gpus)
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
            if ready is not None:
                for value in ("true", "false", "unknown"):
                    condition.add_metric([name, "Ready", value],
                                         1.0 if str(ready.get("status", "")).lower() == value else 0.0)
        unschedulable = GaugeMetricFamily("kube_pod_status_unschedulable",
                                          "Describes the unschedulable status for the pod.",
                                          labels=["namespace", "pod", "uid"])
        requests = GaugeMetricFamily("kube_pod_container_resource_requests",
                                     "The number of requested request resource by a container.",
                                     labels=["namespace", "pod", "uid", "container", "node", "resource", "unit"])
        pods = self.list_objects(PODS)
        for pod in pods:
            meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
            if status.get("phase") in ("Succeeded", "Failed"):
                continue
            ids = [str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))]
            scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
            if not spec.get("nodeName") and scheduled.get("status") == "False" \
                    and scheduled.get("reason") == "Unschedulable":
                unschedulable.add_metric(ids, 1.0)
            for c in spec.get("containers") or []:
                res = c.get("resources") or {}
                gpus = _gpus((res.get("requests") or {}).get(GPU_RESOURCE, (res.get("limits") or {}).get(
                    GPU_RESOURCE, "")))  # an extended resource's request defaults to its limit
                if gpus is not None:
                    requests.add_metric([*ids, str(c.get("name", "")), str(spec.get("nodeName") or ""), KSM_GPU,
                                         "integer"], gpus)
        yield from (allocatable, condition, unschedulable, requests)




class KubeStateMetrics:
    """The controller: keeps the latest nodes and pods its informers saw and serves them as KSM series."""

    name = "kube-state-metrics"
    watches = (NODES, PODS)
    resync = 5.0

    def __init__(self, address: str = "127.0.0.1:0") -> None:
        host, _, port = address.rpartition(":")
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"--metrics-address {address}: serve on loopback only (127.0.0.1)")
        self._lock = threading.Lock()
        self._objects: dict[str, list[Obj]] = {NODES.key: [], PODS.key: []}
        registry = CollectorRegistry(auto_describe=False)
        registry.register(KubeStateCollector(self._list))
        self._server, self._thread = start_http_server(int(port), addr=host, registry=registry)
        self.port = int(self._server.server_address[1])
        log.info("kube-state-metrics series on http://%s:%d/metrics", host, self.port)

    def _list(self, rt: ResourceType) -> list[Obj]:
        with self._lock:
            return list(self._objects.get(rt.key, []))

    def reconcile(self, cache: Cache) -> None:
        nodes, pods = cache.list(NODES), cache.list(PODS)
        with self._lock:
            self._objects = {NODES.key: nodes, PODS.key: pods}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
