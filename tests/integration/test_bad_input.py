"""Bad input is refused with a Status that names the problem, and nothing is stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from refplatform.cluster import Cluster, ClusterSpec
from tests.integration.kube import pod_manifest

pytestmark = pytest.mark.integration

ADMIN, TEAM_A, TEAM_B = "admin-token-0123456789", "team-a-token-0123456789", "team-b-token-0123456789"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data = tmp_path_factory.mktemp("bad-input")
    (data / "tokens.yaml").write_text(yaml.safe_dump({"tokens": [
        {"token": ADMIN, "user": "admin", "role": "cluster-admin"},
        {"token": TEAM_A, "user": "alice", "role": "tenant", "namespaces": ["team-a"]},
        {"token": TEAM_B, "user": "bob", "role": "tenant", "namespaces": ["team-b"]},
    ]}))
    c = Cluster(ClusterSpec(data, nodes=0))
    c.start_server()
    try:
        with c.http_client(ADMIN) as http:
            for ns in ("team-a", "team-b"):
                http.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).raise_for_status()
        yield c
    finally:
        c.stop()


@pytest.fixture
def admin(cluster: Cluster) -> Iterator[httpx.Client]:
    with cluster.http_client(ADMIN) as http:
        yield http


def status_of(resp: httpx.Response) -> dict[str, Any]:
    body = resp.json()
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == resp.status_code
    return body


def pod_count(admin: httpx.Client, ns: str = "default") -> int:
    return len(admin.get(f"/api/v1/namespaces/{ns}/pods").json()["items"])


PODS = "/api/v1/namespaces/default/pods"


def test_malformed_json(admin: httpx.Client) -> None:
    resp = admin.post(PODS, content=b'{"metadata": {"name": "x"', headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
    body = status_of(resp)
    assert body["reason"] == "BadRequest" and "json parse error" in body["message"]
    assert pod_count(admin) == 0


def test_wrong_kind_for_the_url(admin: httpx.Client) -> None:
    resp = admin.post(PODS, json={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}})
    body = status_of(resp)
    assert resp.status_code == 400 and '"Node"' in body["message"] and '"Pod"' in body["message"]
    assert pod_count(admin) == 0


@pytest.mark.parametrize("quantity, message", [
    ("-2", "must be greater than or equal to 0"),
    ("lots", "quantities must match the regular expression"),
    ("1.5", "must be an integer"),
])
def test_bad_gpu_quantity(admin: httpx.Client, quantity: str, message: str) -> None:
    manifest = pod_manifest("gpu-pod")
    manifest["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": quantity}}
    resp = admin.post(PODS, json=manifest)
    body = status_of(resp)
    assert resp.status_code == 422 and body["reason"] == "Invalid"
    field = "spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert any(c["field"] == field and message in c["message"] for c in body["details"]["causes"])
    assert pod_count(admin) == 0


def test_body_over_3_mib(admin: httpx.Client) -> None:
    manifest = pod_manifest("big", annotations={"blob": "x" * (3 * 1024 * 1024)})
    resp = admin.post(PODS, content=json.dumps(manifest).encode(), headers={"Content-Type": "application/json"})
    assert resp.status_code == 413 and status_of(resp)["reason"] == "RequestEntityTooLarge"
    assert pod_count(admin) == 0


def test_unknown_resource(admin: httpx.Client) -> None:
    resp = admin.post("/api/v1/namespaces/default/gizmos", json={"metadata": {"name": "x"}})
    assert resp.status_code == 404 and "gizmos" in status_of(resp)["message"]
    resp = admin.get("/apis/example.com/v1/widgets")
    assert resp.status_code == 404


def test_stale_resource_version(admin: httpx.Client) -> None:
    created = admin.post(PODS, json=pod_manifest("stale")).json()
    fresh = json.loads(json.dumps(created))
    fresh["metadata"]["labels"] = {"v": "1"}
    assert admin.put(f"{PODS}/stale", json=fresh).status_code == 200
    created["metadata"]["labels"] = {"v": "stale"}
    resp = admin.put(f"{PODS}/stale", json=created)
    assert resp.status_code == 409 and status_of(resp)["reason"] == "Conflict"
    assert admin.get(f"{PODS}/stale").json()["metadata"]["labels"] == {"v": "1"}
    admin.delete(f"{PODS}/stale")


def test_another_tenants_namespace(cluster: Cluster, admin: httpx.Client) -> None:
    with cluster.http_client(TEAM_A) as alice:
        assert alice.post("/api/v1/namespaces/team-a/pods", json=pod_manifest("mine")).status_code == 201
        resp = alice.post("/api/v1/namespaces/team-b/pods", json=pod_manifest("theirs"))
        body = status_of(resp)
        assert resp.status_code == 403 and body["reason"] == "Forbidden" and "team-b" in body["message"]
        assert alice.get("/api/v1/namespaces/team-b/pods").status_code == 403
        assert alice.get("/api/v1/pods").status_code == 403  # all namespaces
        assert alice.get("/api/v1/nodes").status_code == 200  # capacity is visible
        assert alice.post("/api/v1/nodes", json={"metadata": {"name": "n"}}).status_code == 403
    assert pod_count(admin, "team-b") == 0 and pod_count(admin, "team-a") == 1


def test_missing_or_unknown_token_is_unauthorized(cluster: Cluster) -> None:
    with cluster.http_client("") as anon:
        resp = anon.get("/api/v1/pods")
        assert resp.status_code == 401 and status_of(resp)["reason"] == "Unauthorized"
        resp = anon.get("/api/v1/pods", headers={"Authorization": "Bearer nope"})
        assert resp.status_code == 401
        assert anon.get("/healthz").text == "ok"


def test_audit_log_records_who_did_what_and_survives_restart(tmp_path: Path) -> None:
    c = Cluster(ClusterSpec(tmp_path / "c", nodes=0))
    c.start_server()
    with c.http_client() as http:
        http.post(PODS, json=pod_manifest("audited")).raise_for_status()
        assert http.post(PODS, json=pod_manifest("audited")).status_code == 409
    c.stop()
    c.start_server()  # the same data directory: the log is appended to, never replaced
    with c.http_client() as http:
        http.delete(f"{PODS}/audited").raise_for_status()
    c.stop()
    lines = (tmp_path / "c" / "audit.log").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    records = [r for r in records if r.get("objectRef", {}).get("resource") == "pods"]
    assert [(r["user"]["username"], r["verb"], r["objectRef"]["name"], r["responseStatus"]["code"],
             r["responseStatus"].get("reason", "")) for r in records] == [
        ("firedrill-admin", "create", "audited", 201, ""),
        ("firedrill-admin", "create", "audited", 409, "AlreadyExists"),
        ("firedrill-admin", "delete", "audited", 200, ""),
    ]
