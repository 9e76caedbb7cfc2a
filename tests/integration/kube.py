"""Helpers for tests that drive the platform through the official kubernetes client."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from refplatform.cluster import Cluster


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
