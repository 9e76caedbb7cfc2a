"""The audit log (refplatform.api.audit): upstream audit.k8s.io/v1 Events, one JSON line per audited request.

The API server runs in-process over a real SQLite store and a real audit file; requests go through its ASGI
app, and the file is read back as whoever checks it later would.
"""

from __future__ import annotations

import asyncio
import json
import re
import stat
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from refplatform.api.app import ApiServer, ServerSettings
from refplatform.api.audit import AuditLog
from refplatform.api.auth import Identity, Role, TokenAuthenticator
from refplatform.api.service import ApiService
from refplatform.defects import Defect
from refplatform.store import Store

Obj = dict[str, Any]
ADMIN = {"Authorization": "Bearer admin-token"}
TENANT = {"Authorization": "Bearer tenant-token"}
NODE = {"Authorization": "Bearer node-token"}
PODS = "/api/v1/namespaces/team-a/pods"
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Api:
    def __init__(self, tmp_path: Path, *, reads: bool = False, defects: frozenset[Defect] = frozenset()) -> None:
        self.path = tmp_path / "audit.log"
        self.store = Store(tmp_path)
        self.log = AuditLog(self.path, include_reads=reads)
        auth = TokenAuthenticator({"admin-token": Identity("firedrill-admin", Role.CLUSTER_ADMIN),
                                   "tenant-token": Identity("tenant-a", Role.TENANT, frozenset({"team-a"})),
                                   "node-token": Identity("system:node:n1", Role.NODE, node="n1")})
        self.server = ApiServer(ApiService(self.store), auth, ServerSettings(defects=defects), audit=self.log)

    def __call__(self, method: str, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.server.app),  # type: ignore[arg-type]
                                         base_url="https://testserver",
                                         headers={"User-Agent": "audit-test/1"}) as c:
                return await c.request(method, path, headers=ADMIN if headers is None else headers, **kw)
        return asyncio.run(go())

    def records(self) -> list[Obj]:
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def close(self) -> None:
        self.log.close()
        self.store.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    a = Api(tmp_path)
    a("POST", "/api/v1/namespaces", json={"metadata": {"name": "team-a"}}).raise_for_status()
    yield a
    a.close()


def pod(name: str, **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta},
            "spec": {"containers": [{"name": "c", "image": "img"}]}}


def test_a_write_is_an_upstream_audit_event(api: Api) -> None:
    before = datetime.now(timezone.utc)
    api("POST", PODS, TENANT, json=pod("p1")).raise_for_status()
    (event,) = [r for r in api.records() if r.get("objectRef", {}).get("resource") == "pods"]
    assert event["kind"] == "Event" and event["apiVersion"] == "audit.k8s.io/v1"
    assert event["level"] == "Metadata" and event["stage"] == "ResponseComplete"
    assert re.fullmatch(r"[0-9a-f-]{36}", event["auditID"])
    assert event["verb"] == "create" and event["requestURI"] == PODS
    assert event["user"] == {"username": "tenant-a", "groups": ["system:authenticated"]}
    assert event["sourceIPs"] == ["127.0.0.1"] and event["userAgent"] == "audit-test/1"
    assert event["objectRef"] == {"resource": "pods", "namespace": "team-a", "name": "p1", "apiVersion": "v1"}
    assert event["responseStatus"] == {"metadata": {}, "code": 201}
    assert event["annotations"] == {"authorization.k8s.io/decision": "allow",
                                    "authorization.k8s.io/reason": "a tenant writes ordinary objects in its own namespace"}
    for key in ("requestReceivedTimestamp", "stageTimestamp"):
        assert MICRO.match(event[key]), event[key]
        assert datetime.fromisoformat(event[key].replace("Z", "+00:00")) >= before.replace(microsecond=0)
    assert stat.S_IMODE(api.path.stat().st_mode) == 0o600


def test_every_refusal_is_recorded_with_who_what_and_why(api: Api) -> None:
    api("POST", PODS, json=pod("p1")).raise_for_status()
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}}
    refusals = [
        ("POST", f"{PODS}/p1/binding", TENANT, {"json": binding}, 403),
        ("GET", "/api/v1/namespaces/team-b/pods", TENANT, {}, 403),       # a read, refused
        ("GET", "/api/v1/pods", {}, {}, 401),                             # no token
        ("GET", "/api/v1/pods", {"Authorization": "Bearer nope"}, {}, 401),
        ("PATCH", f"{PODS}/p1/status", NODE, {"json": {"status": {"phase": "Running"}},
                                              "headers_extra": {"Content-Type": "application/merge-patch+json"}}, 403),
    ]
    for method, path, headers, kw, code in refusals:
        extra = kw.pop("headers_extra", {})
        resp = api(method, path, {**headers, **extra}, **kw)
        assert resp.status_code == code, resp.text
    records = [r for r in api.records() if r["responseStatus"]["code"] >= 400]
    assert [(r["user"]["username"], r["verb"], r["objectRef"].get("resource"), r["objectRef"].get("subresource"),
             r["responseStatus"]["code"]) for r in records] == [
        ("tenant-a", "create", "pods", "binding", 403),
        ("tenant-a", "list", "pods", None, 403),
        ("system:anonymous", "list", "pods", None, 401),
        ("system:anonymous", "list", "pods", None, 401),
        ("system:node:n1", "patch", "pods", "status", 403),
    ]
    bind, read, anonymous, unknown, status = records
    assert bind["responseStatus"]["status"] == "Failure" and bind["responseStatus"]["reason"] == "Forbidden"
    assert bind["responseStatus"]["message"].startswith('pods "p1" is forbidden: User "tenant-a" cannot create resource '
                                                        '"pods/binding"')
    assert bind["annotations"] == {"authorization.k8s.io/decision": "forbid",
                                   "authorization.k8s.io/reason": "a tenant may not bind pods; only the scheduler may"}
    assert read["objectRef"]["namespace"] == "team-b"
    assert anonymous["user"] == {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
    assert anonymous["annotations"]["authorization.k8s.io/reason"] == "no bearer token"
    assert unknown["annotations"]["authorization.k8s.io/reason"] == "unknown token"
    assert "spec.nodeName set to itself" in status["annotations"]["authorization.k8s.io/reason"]
    assert "nope" not in api.path.read_text()  # never a token


def test_reads_are_audited_only_when_asked(tmp_path: Path) -> None:
    quiet = Api(tmp_path / "quiet")
    quiet("GET", "/api/v1/namespaces").raise_for_status()
    quiet("GET", "/api").raise_for_status()
    assert quiet.records() == []
    quiet.close()
    loud = Api(tmp_path / "loud", reads=True)
    loud("GET", "/api/v1/namespaces").raise_for_status()
    loud("GET", "/api/v1/namespaces/default").raise_for_status()
    loud("GET", "/api").raise_for_status()
    loud("GET", "/healthz").raise_for_status()
    assert [(r["verb"], r["requestURI"], r.get("objectRef", {}).get("name"))
            for r in loud.records()] == [("list", "/api/v1/namespaces", None), ("get", "/api/v1/namespaces/default",
                                                                               "default"), ("get", "/api", None)]
    loud.close()


def test_a_watch_is_recorded_when_its_stream_starts(tmp_path: Path) -> None:
    api = Api(tmp_path, reads=True)
    api("GET", "/api/v1/namespaces", params={"watch": "true", "timeoutSeconds": "0"}).raise_for_status()
    (event,) = api.records()
    assert (event["verb"], event["stage"], event["responseStatus"]["code"]) == ("watch", "ResponseStarted", 200)
    api.close()


def test_a_create_with_generate_name_is_recorded_under_its_name(api: Api) -> None:
    made = api("POST", PODS, json=pod("", generateName="gen-")).json()
    (event,) = [r for r in api.records() if r.get("objectRef", {}).get("resource") == "pods"]
    assert event["objectRef"]["name"] == made["metadata"]["name"]


def test_unrecorded_refusals_defect_drops_refusals_only(tmp_path: Path) -> None:
    api = Api(tmp_path, defects=frozenset({Defect.UNRECORDED_REFUSALS}))
    api("POST", "/api/v1/namespaces", json={"metadata": {"name": "team-a"}}).raise_for_status()
    assert api("POST", f"{PODS}/x/eviction", TENANT, json={}).status_code == 403  # still refused
    assert api("GET", "/api/v1/pods", {}).status_code == 401
    assert api("POST", PODS, json=pod("p1")).status_code == 201
    assert [(r["verb"], r["responseStatus"]["code"]) for r in api.records()] == [("create", 201), ("create", 201)]
    api.close()
