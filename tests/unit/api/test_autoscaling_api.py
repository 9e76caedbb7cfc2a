"""autoscaling/v2 HorizontalPodAutoscalers and the ``scale`` subresource of Deployments and ReplicaSets,
through the ASGI app (no socket)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refplatform.api.app import ApiServer
from refplatform.api.service import ApiService
from refplatform.store import Store
from tests.unit.api.test_openapi import Client

DEPLOY = "/apis/apps/v1/namespaces/default/deployments"
HPA = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    store = Store(tmp_path)
    yield Client(ApiServer(ApiService(store)).app)
    store.close()


def deployment(name: str = "infer") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name, "tier": "serve"}},
                     "template": {"metadata": {"labels": {"app": name, "tier": "serve"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}}


def hpa(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer"}, "maxReplicas": 3,
        "metrics": [{"type": "Pods", "pods": {"metric": {"name": "vllm:num_requests_waiting"},
                                              "target": {"type": "AverageValue", "averageValue": "2"}}}]}
    base.update(spec)
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "infer"},
            "spec": base}


def test_discovery_serves_hpas_and_the_scale_subresource_as_autoscaling_v1(client: Client) -> None:
    apps = {r["name"]: r for r in client.request("GET", "/apis/apps/v1").json()["resources"]}
    for plural in ("deployments", "replicasets"):
        scale = apps[f"{plural}/scale"]
        assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
        assert sorted(scale["verbs"]) == ["get", "patch", "update"]
    groups = {g["name"]: g for g in client.request("GET", "/apis").json()["groups"]}
    assert groups["autoscaling"]["preferredVersion"]["version"] == "v2"
    res = {r["name"]: r for r in client.request("GET", "/apis/autoscaling/v2").json()["resources"]}
    assert res["horizontalpodautoscalers"]["shortNames"] == ["hpa"]
    assert res["horizontalpodautoscalers/status"]["kind"] == "HorizontalPodAutoscaler"


def test_scale_reads_and_writes_the_deployments_replicas(client: Client) -> None:
    assert client.request("POST", DEPLOY, json=deployment()).status_code == 201
    scale = client.request("GET", f"{DEPLOY}/infer/scale").json()
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 1}
    assert scale["status"] == {"replicas": 0, "selector": "app=infer,tier=serve"}
    r = client.request("PATCH", f"{DEPLOY}/infer/scale", content=b'{"spec":{"replicas":3}}',
                       headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["replicas"] == 3
    d = client.request("GET", f"{DEPLOY}/infer").json()
    assert d["spec"]["replicas"] == 3 and d["metadata"]["generation"] == 2
    put = {**scale, "spec": {"replicas": 2}}
    stale = client.request("PUT", f"{DEPLOY}/infer/scale", json=put)
    assert stale.status_code == 409, "the Scale named an old resourceVersion"
    put["metadata"] = {**scale["metadata"], "resourceVersion": d["metadata"]["resourceVersion"]}
    assert client.request("PUT", f"{DEPLOY}/infer/scale", json=put).json()["spec"]["replicas"] == 2
    bad = client.request("PATCH", f"{DEPLOY}/infer/scale", content=b'{"spec":{"replicas":-1}}',
                         headers={"Content-Type": "application/merge-patch+json"})
    assert bad.status_code == 422 and "spec.replicas" in bad.text
    assert client.request("GET", f"{DEPLOY}/nope/scale").status_code == 404
    assert client.request("GET", "/api/v1/namespaces/default/pods/p/scale").status_code == 404


def test_hpa_admission_defaults_min_and_names_what_is_not_served(client: Client) -> None:
    created = client.request("POST", HPA, json=hpa())
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["minReplicas"] == 1
    cpu = hpa(metrics=[{"type": "Resource", "resource": {"name": "cpu"}}])
    cpu["metadata"]["name"] = "cpu"
    r = client.request("POST", HPA, json=cpu)
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "spec.metrics[0].type"
    inverted = hpa(minReplicas=4)
    inverted["metadata"]["name"] = "inverted"
    r = client.request("POST", HPA, json=inverted)
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "spec.maxReplicas"
    window = hpa(behavior={"scaleDown": {"stabilizationWindowSeconds": 4000}})
    window["metadata"]["name"] = "window"
    r = client.request("POST", HPA, json=window)
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "spec.behavior.scaleDown.stabilizationWindowSeconds"


def test_kubectl_get_hpa_table(client: Client) -> None:
    client.request("POST", HPA, json=hpa())
    status = {"currentReplicas": 1, "desiredReplicas": 2, "currentMetrics": [
        {"type": "Pods", "pods": {"metric": {"name": "vllm:num_requests_waiting"},
                                  "current": {"averageValue": "5"}}}]}
    r = client.request("PATCH", f"{HPA}/infer/status", content=b'{"status":' + str(status).replace("'", '"').encode()
                       + b"}", headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    t = client.request("GET", HPA, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
    names = [c["name"] for c in t["columnDefinitions"]]
    assert names == ["Name", "Reference", "Targets", "MinPods", "MaxPods", "Replicas", "Age"]
    assert t["rows"][0]["cells"][:6] == ["infer", "Deployment/infer", "5/2", 1, 3, 1]


def test_protobuf_bodies_of_scale_and_hpa_find_their_upstream_messages() -> None:
    from refplatform.api import protobuf

    assert protobuf.message_for("autoscaling/v1", "Scale") == "k8s.io.api.autoscaling.v1.Scale"
    assert protobuf.message_for("autoscaling/v2", "HorizontalPodAutoscaler") == \
        "k8s.io.api.autoscaling.v2.HorizontalPodAutoscaler"
    fields = {f["json"] for f in protobuf.message_table()["k8s.io.api.autoscaling.v2.HorizontalPodAutoscalerSpec"]
              .values()}
    assert {"scaleTargetRef", "minReplicas", "maxReplicas", "metrics", "behavior"} <= fields
