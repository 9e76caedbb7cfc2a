"""ResourceQuota (refplatform.api.quota): served, validated, and pods admitted against it, as upstream.

The API server runs in-process over a real SQLite store; requests go through its ASGI app.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from refplatform.api.app import ApiServer, ServerSettings
from refplatform.api.auth import Identity, Role, TokenAuthenticator
from refplatform.api.quota import ScopeRequirement, format_quantity, pod_usage
from refplatform.api.service import ApiService
from refplatform.defects import Defect
from refplatform.store import Store

Obj = dict[str, Any]
ADMIN = {"Authorization": "Bearer admin-token"}
TENANT = {"Authorization": "Bearer tenant-token"}
NS = "team-a"
PODS = f"/api/v1/namespaces/{NS}/pods"
QUOTAS = f"/api/v1/namespaces/{NS}/resourcequotas"


def gpu_pod(name: str, gpus: int = 1, priority_class: str = "", limits_only: bool = True) -> Obj:
    res = {"limits": {"nvidia.com/gpu": str(gpus)}} if limits_only else \
        {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    spec: Obj = {"containers": [{"name": "main", "image": "img", "resources": res}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def quota(name: str, hard: dict[str, str], classes: list[str] | None = None) -> Obj:
    spec: Obj = {"hard": hard}
    if classes is not None:
        spec["scopeSelector"] = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                                       "values": classes}]}
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name}, "spec": spec}


class Api:
    """Synchronous calls into the in-process server."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server

    def __call__(self, method: str, path: str, headers: dict[str, str] = ADMIN, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.server.app),  # type: ignore[arg-type]
                                         base_url="https://testserver") as c:
                return await c.request(method, path, headers=headers, **kw)
        return asyncio.run(go())


def make_api(tmp_path: Path, defects: frozenset[Defect] = frozenset(), limited: frozenset[str] = frozenset()) -> Api:
    store = Store(tmp_path)
    auth = TokenAuthenticator({"admin-token": Identity("admin", Role.CLUSTER_ADMIN),
                               "tenant-token": Identity("tenant-a", Role.TENANT, frozenset({NS}))})
    api = Api(ApiServer(ApiService(store), auth, ServerSettings(defects=defects, limited_priority_classes=limited)))
    assert api("POST", "/api/v1/namespaces", json={"metadata": {"name": NS}}).status_code == 201
    for name, value in (("critical", 1_000_000), ("low", 10)):
        assert api("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", json={
            "metadata": {"name": name}, "value": value}).status_code == 201
    return api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    a = make_api(tmp_path, limited=frozenset({"critical"}))
    yield a
    a.server.service.store.close()


def test_pod_usage_counts_requests_limits_and_pods() -> None:
    usage = pod_usage({"spec": {"containers": [
        {"resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}, "requests": {"cpu": "500m"}}},
        {"resources": {"requests": {"nvidia.com/gpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}})
    assert usage["requests.nvidia.com/gpu"] == usage["limits.nvidia.com/gpu"] == 3
    assert usage["requests.cpu"] == usage["cpu"] == 2  # the init container's larger request
    assert usage["limits.cpu"] == 1 and usage["requests.memory"] == 1024**3
    assert usage["pods"] == usage["count/pods"] == 1
    assert [format_quantity(Decimal(v)) for v in ("4", "0.5", "0.0001")] == ["4", "500m", "0.0001"]


def test_scope_requirements_match_as_upstream() -> None:
    critical, plain = {"spec": {"priorityClassName": "critical"}}, {"spec": {}}
    assert ScopeRequirement("PriorityClass", "In", ("critical",)).matches(critical)
    assert not ScopeRequirement("PriorityClass", "In", ("critical",)).matches(plain)
    assert ScopeRequirement("PriorityClass", "NotIn", ("critical",)).matches(plain)
    assert ScopeRequirement("PriorityClass", "Exists").matches(critical)
    assert ScopeRequirement("PriorityClass", "DoesNotExist").matches(plain)
    assert ScopeRequirement("BestEffort").matches(plain)
    assert str(ScopeRequirement("PriorityClass", "In", ("a", "b"))) == "{PriorityClass In [a b]}"


def test_quota_is_served_validated_and_printed(api: Api) -> None:
    assert api("POST", QUOTAS, json=quota("gpu-quota", {"requests.nvidia.com/gpu": "4"})).status_code == 201
    got = api("GET", f"{QUOTAS}/gpu-quota").json()
    assert got["status"] == {"hard": {"requests.nvidia.com/gpu": "4"}, "used": {"requests.nvidia.com/gpu": "0"}}
    bad = api("POST", QUOTAS, json={"metadata": {"name": "bad"}, "spec": {"hard": {"pods": "lots"}, "scopeSelector": {
        "matchExpressions": [{"scopeName": "Colour", "operator": "In"}]}}})
    assert bad.status_code == 422
    fields = {c["field"] for c in bad.json()["details"]["causes"]}
    assert fields == {"spec.hard[pods]", "spec.scopeSelector.matchExpressions[0].scopeName",
                      "spec.scopeSelector.matchExpressions[0].values"}
    table = api("GET", QUOTAS, headers={**ADMIN, "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age", "Request", "Limit"]
    assert table["rows"][0]["cells"][2] == "requests.nvidia.com/gpu: 0/4"
    assert "resourcequotas" in {r["name"] for r in api("GET", "/api/v1").json()["resources"]}


def test_pods_over_the_gpu_quota_are_refused_with_upstreams_message(api: Api) -> None:
    api("POST", QUOTAS, json=quota("gpu-quota", {"requests.nvidia.com/gpu": "4", "pods": "10"}))
    assert api("POST", PODS, TENANT, json=gpu_pod("a", 3)).status_code == 201
    refused = api("POST", PODS, TENANT, json=gpu_pod("b", 2, limits_only=False))
    assert refused.status_code == 403 and refused.json()["reason"] == "Forbidden"
    assert refused.json()["message"] == (
        'pods "b" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=2, '
        "used: requests.nvidia.com/gpu=3, limited: requests.nvidia.com/gpu=4")
    assert api("POST", PODS, TENANT, json=gpu_pod("c", 1)).status_code == 201  # exactly at the limit
    status = api("GET", f"{QUOTAS}/gpu-quota").json()["status"]
    assert status["used"] == {"pods": "2", "requests.nvidia.com/gpu": "4"}
    # a finished pod no longer counts; a deleted one neither
    api("PATCH", f"{PODS}/a/status", headers={**ADMIN, "Content-Type": "application/merge-patch+json"},
        json={"status": {"phase": "Succeeded"}}).raise_for_status()
    assert api("GET", f"{QUOTAS}/gpu-quota").json()["status"]["used"]["requests.nvidia.com/gpu"] == "1"
    api("DELETE", f"{PODS}/c").raise_for_status()
    assert api("GET", f"{QUOTAS}/gpu-quota").json()["status"]["used"] == {"pods": "0", "requests.nvidia.com/gpu": "0"}
    assert api("POST", PODS, TENANT, json=gpu_pod("d", 4)).status_code == 201


def test_quota_binds_everyone_and_limits_gpus_too(api: Api) -> None:
    api("POST", QUOTAS, json=quota("gpu-quota", {"limits.nvidia.com/gpu": "1"}))
    refused = api("POST", PODS, json=gpu_pod("big", 2))  # the admin (and the controllers) too
    assert refused.status_code == 403
    assert "exceeded quota: gpu-quota, requested: limits.nvidia.com/gpu=2, used: limits.nvidia.com/gpu=0" \
        in refused.json()["message"]
    assert api("POST", "/api/v1/namespaces/default/pods", json=gpu_pod("elsewhere", 2)).status_code == 201


def test_a_limited_class_needs_a_quota_that_selects_it(api: Api) -> None:
    refused = api("POST", PODS, TENANT, json=gpu_pod("vip", 1, "critical"))
    assert refused.status_code == 403
    assert refused.json()["message"] == ('pods "vip" is forbidden: insufficient quota to match these scopes: '
                                         "[{PriorityClass In [critical]}]")
    assert api("POST", PODS, TENANT, json=gpu_pod("plain", 1, "low")).status_code == 201
    api("POST", QUOTAS, json=quota("critical-quota", {"pods": "1", "requests.nvidia.com/gpu": "1"},
                                   ["critical"])).raise_for_status()
    assert api("POST", PODS, TENANT, json=gpu_pod("vip", 1, "critical")).status_code == 201
    # the scoped quota counts only pods of its class, and limits them
    assert api("GET", f"{QUOTAS}/critical-quota").json()["status"]["used"] == {"pods": "1",
                                                                              "requests.nvidia.com/gpu": "1"}
    again = api("POST", PODS, TENANT, json=gpu_pod("vip2", 1, "critical"))
    assert again.status_code == 403 and "exceeded quota: critical-quota, requested: pods=1,requests.nvidia.com/gpu=1" \
        in again.json()["message"]


def test_a_tenant_reads_but_never_writes_its_quota(api: Api) -> None:
    api("POST", QUOTAS, json=quota("gpu-quota", {"requests.nvidia.com/gpu": "4"})).raise_for_status()
    assert api("GET", QUOTAS, TENANT).status_code == 200
    raised = api("PATCH", f"{QUOTAS}/gpu-quota", headers={**TENANT, "Content-Type": "application/merge-patch+json"},
                 json={"spec": {"hard": {"requests.nvidia.com/gpu": "400"}}})
    assert raised.status_code == 403 and "may not change its namespace's quota" in raised.json()["message"]
    assert api("DELETE", f"{QUOTAS}/gpu-quota", TENANT).status_code == 403


def test_no_gpu_quota_defect_counts_but_never_refuses(tmp_path: Path) -> None:
    api = make_api(tmp_path, defects=frozenset({Defect.NO_GPU_QUOTA}))
    api("POST", QUOTAS, json=quota("gpu-quota", {"requests.nvidia.com/gpu": "4", "pods": "2"}))
    assert api("POST", PODS, TENANT, json=gpu_pod("a", 3)).status_code == 201
    assert api("POST", PODS, TENANT, json=gpu_pod("b", 3)).status_code == 201  # 6 of 4
    assert api("GET", f"{QUOTAS}/gpu-quota").json()["status"]["used"]["requests.nvidia.com/gpu"] == "6"
    assert api("POST", PODS, TENANT, json=gpu_pod("c", 0)).status_code == 403  # the pod count still holds
    api.server.service.store.close()


def test_quota_ignores_pending_defect_admits_pending_pods_over_the_quota(tmp_path: Path) -> None:
    """Honest admission charges the admitted pods still pending; the defect charges only the running ones, so
    requests that each fit, sent before any of them runs, are all admitted.  What runs is still charged."""
    honest = make_api(tmp_path / "honest")
    honest("POST", QUOTAS, json=quota("gpu-quota", {"requests.nvidia.com/gpu": "4"}))
    assert [honest("POST", PODS, TENANT, json=gpu_pod(n, 2)).status_code for n in "abc"] == [201, 201, 403]
    honest.server.service.store.close()

    api = make_api(tmp_path / "defect", defects=frozenset({Defect.QUOTA_IGNORES_PENDING}))
    api("POST", QUOTAS, json=quota("gpu-quota", {"requests.nvidia.com/gpu": "4"}))
    assert [api("POST", PODS, TENANT, json=gpu_pod(n, 2)).status_code for n in "abc"] == [201, 201, 201]
    assert api("GET", f"{QUOTAS}/gpu-quota").json()["status"]["used"]["requests.nvidia.com/gpu"] == "6"
    for name in "ab":
        running = api("GET", f"{PODS}/{name}").json()
        running["status"] = {"phase": "Running"}
        assert api("PUT", f"{PODS}/{name}/status", json=running).status_code == 200
    refused = api("POST", PODS, TENANT, json=gpu_pod("d", 1))  # 4 running: full, whatever is pending
    assert refused.status_code == 403 and "used: requests.nvidia.com/gpu=4" in refused.json()["message"]
    api.server.service.store.close()
