"""The kube-state-metrics stand-in: KSM's series for the leak report, from an informer cache, over HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from refplatform.controllers.kubestate import KubeStateMetrics
from refplatform.resources import NODES, PODS, ResourceType


class FakeCache:
    """The manager's cache interface over fixed lists (the controller only lists)."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects

    def list(self, rt: ResourceType) -> list[dict[str, Any]]:
        return self.objects.get(rt.key, [])


NODE = {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"},
                                                  "conditions": [{"type": "Ready", "status": "True"}]}}
RUNNING = {"metadata": {"namespace": "ml", "name": "rank-0", "uid": "u0"},
           "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
           "status": {"phase": "Running"}}
STUCK = {"metadata": {"namespace": "ml", "name": "big", "uid": "u1"},
         "spec": {"containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "16"}}}]},
         "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                        "reason": "Unschedulable"}]}}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_it_serves_kube_state_metrics_series_from_its_cache_on_loopback() -> None:
    ksm = KubeStateMetrics("127.0.0.1:0")
    try:
        ksm.reconcile(FakeCache({NODES.key: [NODE], PODS.key: [RUNNING, STUCK]}))  # type: ignore[arg-type]
        got = samples(httpx.get(f"http://127.0.0.1:{ksm.port}/metrics", timeout=5).text)
    finally:
        ksm.close()
    assert got[("kube_node_status_allocatable", (("node", "gpu-1"), ("resource", "nvidia_com_gpu"),
                                                 ("unit", "integer")))] == 8
    assert got[("kube_node_status_condition", (("condition", "Ready"), ("node", "gpu-1"), ("status", "true")))] == 1
    assert got[("kube_pod_container_resource_requests", (
        ("container", "main"), ("namespace", "ml"), ("node", "gpu-1"), ("pod", "rank-0"), ("resource", "nvidia_com_gpu"),
        ("uid", "u0"), ("unit", "integer")))] == 4
    assert got[("kube_pod_status_unschedulable", (("namespace", "ml"), ("pod", "big"), ("uid", "u1")))] == 1


def test_it_refuses_to_serve_beyond_loopback() -> None:
    with pytest.raises(ValueError, match="loopback only"):
        KubeStateMetrics("10.0.0.1:9400")
