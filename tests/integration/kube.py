"""Helpers for tests that drive the platform through the official kubernetes client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client

from drills.target.connect import EmbeddedPlatform
from refplatform.cluster import Cluster, ClusterSpec


@contextmanager
def agents_only(data_dir: Path, nodes: int = 2) -> Iterator[Cluster]:
    """An API server and ``nodes`` Ready agents of the tuned profile, and no controllers: a node's Lease is the
    only thing that shows a fault on it (nothing marks it NotReady, nothing evicts)."""
    c = Cluster(ClusterSpec(data_dir, nodes=nodes, profile="tuned", controllers=()))
    try:
        c.start()
        c.wait_ready(60)
        yield c
    finally:
        c.stop()


@contextmanager
def reference_cluster() -> Iterator[EmbeddedPlatform]:
    """A reference cluster this test started (4 nodes and a spare, as `firedrill up` starts), drilled through its
    kubeconfig as a real cluster would be; stopped at the end."""
    started = EmbeddedPlatform(nodes=4, spares=1).start()
    try:
        yield started
    finally:
        started.stop()


def api_client(cluster: Cluster, token: str | None = None) -> client.ApiClient:
    cfg = client.Configuration(host=cluster.url)
    cfg.ssl_ca_cert = str(cluster.ca_file)
    cfg.api_key = {"authorization": token or cluster.token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


def pod_manifest(name: str, gpus: int = 0, labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "firedrill/canary:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"containers": [container]}}


def canary_job(name: str = "canary", max_retry: int = 3) -> dict[str, Any]:
    """A Volcano Job of 2 training ranks x 4 GPUs stepping every 0.1 s, a checkpoint every 5 steps,
    restarted whole when a rank is evicted or fails (docs/WORKLOAD.md, docs/HEALING.md)."""
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": name},
            "spec": {"minAvailable": 2, "maxRetry": max_retry, "queue": "default", "schedulerName": "volcano",
                     "policies": [{"event": "PodEvicted", "action": "RestartJob"},
                                  {"event": "PodFailed", "action": "RestartJob"}],
                     "tasks": [{"name": "worker", "replicas": 2, "template": {
                         "metadata": {"annotations": {"firedrill.dev/workload": "training",
                                                      "firedrill.dev/step-seconds": "0.1",
                                                      "firedrill.dev/checkpoint-every": "5"}},
                         "spec": {"restartPolicy": "Never", "containers": [{
                             "name": "main", "image": "firedrill/canary:1",
                             "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}]}}
