"""Issue 15's holes, tried against a real API server process (the API-server part; the agents' endpoints and
tokens in output: tests/integration/test_security_agents.py).

Each hostile request must be answered 403 (401 without credentials) AND leave a record in the audit log
(audit.k8s.io/v1 Events, one JSON line each) naming the user, the verb, the object and the reason.  Every
request carries its own User-Agent, so its record is found exactly.  The positive cases show the gates are not
simply "deny all": a node renews its own Lease, the scheduler binds, a tenant creates an ordinary pod.  Each of
the three governance defects is shown on a server started with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
TENANT_NS, NEIGHBOUR_NS, LEASE_NS = "firedrill-tenant", "firedrill-neighbour", "kube-node-lease"
CRITICAL, LOW = "firedrill-critical", "firedrill-low"
MERGE = "application/merge-patch+json"
TOKENS = {
    "admin": ("firedrill-admin", {"role": "cluster-admin"}),
    "controller": ("system:kube-controller-manager", {"role": "controller"}),
    "scheduler": ("system:kube-scheduler", {"role": "scheduler"}),
    "n1": ("system:node:n1", {"role": "node", "node": "n1"}),
    "n2": ("system:node:n2", {"role": "node", "node": "n2"}),
    "tenant-a": ("tenant-a", {"role": "tenant", "namespaces": [TENANT_NS]}),
    "tenant-b": ("tenant-b", {"role": "tenant", "namespaces": [NEIGHBOUR_NS]}),
}


@dataclass
class Server:
    """One API server process this test started, its tokens and its audit log."""

    data: Path
    url: str
    proc: subprocess.Popen[bytes]
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def audit_log(self) -> Path:
        return self.data / "audit.log"

    def call(self, who: str | None, method: str, path: str, body: Any = None, content_type: str = "") -> tuple[
            httpx.Response, str]:
        """One request as ``who`` (None: no credentials); returns the answer and the request's User-Agent."""
        agent = f"security-test/{uuid.uuid4().hex[:12]}"
        headers = {"User-Agent": agent}
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        if content_type:
            headers["Content-Type"] = content_type
        with httpx.Client(base_url=self.url, timeout=10) as http:
            resp = http.request(method, path, headers=headers,
                                content=json.dumps(body).encode() if body is not None else None)
        return resp, agent

    def ok(self, who: str, method: str, path: str, body: Any = None, content_type: str = "") -> Obj:
        resp, _ = self.call(who, method, path, body, content_type)
        assert resp.status_code < 300, f"{who} {method} {path}: {resp.status_code} {resp.text}"
        return resp.json()

    def records(self) -> list[Obj]:
        return [json.loads(line) for line in self.audit_log.read_bytes().splitlines()]

    def record_of(self, agent: str) -> Obj | None:
        found = [r for r in self.records() if r.get("userAgent") == agent]
        assert len(found) <= 1, found
        return found[0] if found else None


def start_server(data: Path, *extra: str) -> Server:
    data.mkdir(parents=True)
    tokens = {key: f"{key}-{uuid.uuid4().hex}" for key in TOKENS}
    path = data / "tokens.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump({"tokens": [{"token": tokens[k], "user": user, **rest} for k, (user, rest) in TOKENS.items()]},
                       fh)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform")])}
    log = open(data / "apiserver.log", "wb")  # noqa: SIM115 - the process writes it until stopped
    proc = subprocess.Popen([sys.executable, "-m", "refplatform.api", "--data-dir", str(data), "--tokens-file",
                             str(path), "--audit-log-path", str(data / "audit.log"),
                             "--limited-priority-class", CRITICAL, *extra],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    address = data / "apiserver.json"
    deadline = time.monotonic() + 30
    while not address.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the API server did not start: {(data / 'apiserver.log').read_text()[-2000:]}")
        time.sleep(0.05)
    return Server(data, json.loads(address.read_text())["url"], proc, tokens)


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


def pod(name: str, gpus: int = 0, priority_class: str = "", node: str = "", **annotations: str) -> Obj:
    res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    spec: Obj = {"containers": [{"name": "main", "image": "busybox", "resources": res}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node:
        spec["nodeName"] = node
    meta: Obj = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def lease(node: str) -> Obj:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": node, "namespace": LEASE_NS},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 40}}


def binding(name: str, node: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}}


def tenant_pods(ns: str = TENANT_NS) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def setup_cluster(s: Server) -> None:
    """What the embedded cluster's bootstrap sets up, plus two nodes with a pod bound to each."""
    for ns in (TENANT_NS, NEIGHBOUR_NS):  # kube-node-lease is there from the start
        s.ok("admin", "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    for name, value in ((CRITICAL, 1_000_000), (LOW, 10)):
        s.ok("admin", "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": name}, "value": value})
    s.ok("admin", "POST", f"/api/v1/namespaces/{TENANT_NS}/resourcequotas", {
        "metadata": {"name": "gpu-quota"}, "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}})
    for node in ("n1", "n2"):  # each node registers itself and takes its own Lease
        s.ok(node, "POST", "/api/v1/nodes", {"metadata": {"name": node}, "status": {
            "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}})
        s.ok(node, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases", lease(node))
    for name, node in (("on-n1", "n1"), ("on-n2", "n2")):
        s.ok("tenant-a", "POST", tenant_pods(), pod(name, gpus=1))
        s.ok("scheduler", "POST", f"{tenant_pods()}/{name}/binding", binding(name, node))
    s.ok("tenant-a", "POST", tenant_pods(), pod("pending"))
    s.ok("tenant-b", "POST", tenant_pods(NEIGHBOUR_NS), pod("neighbours-pod"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("security") / "data")
    try:
        setup_cluster(s)
        yield s
    finally:
        stop_server(s)


@dataclass(frozen=True)
class Hole:
    """A hostile request, the answer it must get and the record it must leave."""

    id: str
    who: str | None
    method: str
    path: str
    body: Any
    code: int
    user: str
    verb: str
    ref: dict[str, str]
    """objectRef fields the record must hold (resource, subresource, namespace, name)."""
    why: str
    """A phrase of the record's authorization.k8s.io/reason and of the answer's message."""
    content_type: str = ""


P = tenant_pods()
HOLES = [
    Hole("tenant-binds", "tenant-a", "POST", f"{P}/pending/binding", binding("pending", "n1"), 403, "tenant-a",
         "create", {"resource": "pods", "subresource": "binding", "namespace": TENANT_NS, "name": "pending"},
         "only the scheduler may"),
    Hole("tenant-evicts", "tenant-a", "POST", f"{P}/on-n1/eviction",
         {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "on-n1"}}, 403, "tenant-a", "create",
         {"resource": "pods", "subresource": "eviction", "name": "on-n1"}, "may not evict"),
    Hole("tenant-writes-pod-status", "tenant-a", "PATCH", f"{P}/on-n1/status", {"status": {"phase": "Succeeded"}},
         403, "tenant-a", "patch", {"resource": "pods", "subresource": "status", "name": "on-n1"},
         "may not write status", MERGE),
    Hole("tenant-creates-event", "tenant-a", "POST", f"/api/v1/namespaces/{TENANT_NS}/events", {
        "metadata": {"name": "forged"}, "involvedObject": {"kind": "Pod", "name": "on-n1", "namespace": TENANT_NS},
        "reason": "Started", "message": "forged", "type": "Normal"}, 403, "tenant-a", "create",
         {"resource": "events", "namespace": TENANT_NS}, "may not write Events"),
    Hole("tenant-creates-progress-annotation", "tenant-a", "POST", P,
         pod("forger", **{"firedrill.dev/step": "100000"}), 403, "tenant-a", "create",
         {"resource": "pods", "namespace": TENANT_NS, "name": "forger"}, '"firedrill.dev/step"'),
    Hole("tenant-patches-progress-annotation", "tenant-a", "PATCH", f"{P}/on-n1",
         {"metadata": {"annotations": {"firedrill.dev/stepped-seconds": "99999"}}}, 403, "tenant-a", "patch",
         {"resource": "pods", "name": "on-n1"}, "firedrill.dev/* annotations", MERGE),
    Hole("tenant-raises-its-quota", "tenant-a", "PATCH", f"/api/v1/namespaces/{TENANT_NS}/resourcequotas/gpu-quota",
         {"spec": {"hard": {"requests.nvidia.com/gpu": "400"}}}, 403, "tenant-a", "patch",
         {"resource": "resourcequotas", "name": "gpu-quota"}, "quota", MERGE),
    Hole("tenant-reads-neighbour", "tenant-a", "GET", tenant_pods(NEIGHBOUR_NS), None, 403, "tenant-a", "list",
         {"resource": "pods", "namespace": NEIGHBOUR_NS}, "not one of the tenant's namespaces"),
    Hole("tenant-reads-neighbours-pod", "tenant-a", "GET", f"{tenant_pods(NEIGHBOUR_NS)}/neighbours-pod", None, 403,
         "tenant-a", "get", {"resource": "pods", "namespace": NEIGHBOUR_NS, "name": "neighbours-pod"},
         "not one of the tenant's namespaces"),
    Hole("tenant-places-its-pod", "tenant-a", "POST", P, pod("placed", node="n1"), 403, "tenant-a", "create",
         {"resource": "pods", "name": "placed"}, "spec.nodeName"),
    Hole("tenant-over-gpu-quota", "tenant-a", "POST", P, pod("too-big", gpus=3), 403, "tenant-a", "create",
         {"resource": "pods", "name": "too-big"},
         "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=3, used: requests.nvidia.com/gpu=2, "
         "limited: requests.nvidia.com/gpu=4"),
    Hole("tenant-uses-limited-priority-class", "tenant-a", "POST", P, pod("vip", priority_class=CRITICAL), 403,
         "tenant-a", "create", {"resource": "pods", "name": "vip"},
         f"insufficient quota to match these scopes: [{{PriorityClass In [{CRITICAL}]}}]"),
    Hole("node-writes-another-node", "n1", "PATCH", "/api/v1/nodes/n2", {"metadata": {"labels": {"pwned": "yes"}}},
         403, "system:node:n1", "patch", {"resource": "nodes", "name": "n2"}, 'only its own Node "n1"', MERGE),
    Hole("node-writes-another-nodes-status", "n1", "PATCH", "/api/v1/nodes/n2/status",
         {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, 403, "system:node:n1", "patch",
         {"resource": "nodes", "subresource": "status", "name": "n2"}, 'only its own Node "n1"', MERGE),
    Hole("node-writes-another-nodes-lease", "n1", "PUT", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/n2",
         lease("n2"), 403, "system:node:n1", "update",
         {"resource": "leases", "namespace": LEASE_NS, "name": "n2", "apiGroup": "coordination.k8s.io"},
         'only its own Lease "n1"'),
    Hole("node-writes-status-of-a-pod-not-bound-to-it", "n1", "PATCH", f"{P}/on-n2/status",
         {"status": {"phase": "Failed"}}, 403, "system:node:n1", "patch",
         {"resource": "pods", "subresource": "status", "name": "on-n2"}, "spec.nodeName set to itself", MERGE),
    Hole("node-deletes-a-pod-not-bound-to-it", "n1", "DELETE", f"{P}/on-n2", None, 403, "system:node:n1", "delete",
         {"resource": "pods", "name": "on-n2"}, "can only delete pods"),
    Hole("node-binds", "n1", "POST", f"{P}/pending/binding", binding("pending", "n1"), 403, "system:node:n1",
         "create", {"resource": "pods", "subresource": "binding", "name": "pending"}, "may not create, bind or evict"),
    Hole("scheduler-writes-a-node", "scheduler", "PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": True}}, 403,
         "system:kube-scheduler", "patch", {"resource": "nodes", "name": "n1"}, "nothing else", MERGE),
    Hole("no-credentials-read", None, "GET", P, None, 401, "system:anonymous", "list",
         {"resource": "pods", "namespace": TENANT_NS}, "no bearer token"),
    Hole("no-credentials-write", None, "POST", P, pod("anonymous"), 401, "system:anonymous", "create",
         {"resource": "pods", "namespace": TENANT_NS}, "no bearer token"),
]


@pytest.mark.parametrize("hole", HOLES, ids=[h.id for h in HOLES])
def test_each_hole_is_refused_and_recorded(server: Server, hole: Hole) -> None:
    resp, agent = server.call(hole.who, hole.method, hole.path, hole.body, hole.content_type)
    assert resp.status_code == hole.code, resp.text
    status = resp.json()
    assert status["kind"] == "Status" and status["code"] == hole.code
    assert status["reason"] == ("Forbidden" if hole.code == 403 else "Unauthorized")
    assert hole.why in status["message"]
    if hole.code == 403 and "quota" not in hole.why:
        assert " is forbidden: " in status["message"]
    # the record is on disk by the time the answer arrived: no waiting
    record = server.record_of(agent)
    assert record is not None, f"no audit record of {hole.id}"
    assert record["kind"] == "Event" and record["apiVersion"] == "audit.k8s.io/v1"
    assert record["user"]["username"] == hole.user
    assert record["verb"] == hole.verb
    assert {k: record["objectRef"].get(k, "") for k in hole.ref} == hole.ref
    assert record["responseStatus"]["code"] == hole.code and record["responseStatus"]["status"] == "Failure"
    assert record["responseStatus"]["message"] == status["message"]
    assert record["annotations"]["authorization.k8s.io/decision"] == "forbid"
    assert hole.why.split(": [")[0] in record["annotations"]["authorization.k8s.io/reason"]
    for token in server.tokens.values():
        assert token not in server.audit_log.read_text()


def test_nothing_a_hole_tried_happened(server: Server) -> None:
    for hole in HOLES:
        server.call(hole.who, hole.method, hole.path, hole.body, hole.content_type)
    pods = {p["metadata"]["name"]: p for p in server.ok("admin", "GET", P)["items"]}
    assert set(pods) >= {"on-n1", "on-n2", "pending"}
    assert not {"forger", "placed", "too-big", "vip", "anonymous"} & set(pods)
    assert not pods["pending"]["spec"].get("nodeName")
    assert pods["on-n2"]["status"].get("phase") != "Failed"
    assert "firedrill.dev/stepped-seconds" not in (pods["on-n1"]["metadata"].get("annotations") or {})
    assert server.ok("admin", "GET", "/api/v1/nodes/n2")["metadata"].get("labels", {}).get("pwned") is None
    assert server.ok("admin", "GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/n2")["spec"][
        "holderIdentity"] == "n2"
    assert server.ok("admin", "GET", f"/api/v1/namespaces/{TENANT_NS}/resourcequotas/gpu-quota")["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "4"}


def test_what_each_identity_may_do_it_can(server: Server) -> None:
    """The gates are not "deny all": each identity does its job, and each write is recorded as allowed.  What it
    changed on the module's server is put back at the end: the quota holes judge the quota the module set up."""
    try:
        _each_identity_does_its_job(server)
    finally:
        server.call("admin", "DELETE", f"{P}/ordinary", {"gracePeriodSeconds": 0})  # no kubelet runs it
        server.call("admin", "PATCH", "/api/v1/nodes/n2", {"spec": {"unschedulable": None}}, MERGE)
        server.call("admin", "PATCH", f"{P}/on-n1", {"metadata": {"annotations": {"firedrill.dev/step": None}}},
                    MERGE)


def _each_identity_does_its_job(server: Server) -> None:
    writes: list[tuple[str, str]] = []

    def allowed(who: str, method: str, path: str, body: Any = None, content_type: str = "") -> Obj:
        resp, agent = server.call(who, method, path, body, content_type)
        assert resp.status_code < 300, f"{who} {method} {path}: {resp.status_code} {resp.text}"
        if method != "GET":  # reads are recorded only with --audit-reads
            writes.append((agent, TOKENS[who][0]))
        return resp.json()

    leases = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases"
    current = server.ok("n1", "GET", f"{leases}/n1")
    renewed = allowed("n1", "PUT", f"{leases}/n1", {**current, "spec": {**current["spec"], "renewTime":
                                                                        "2030-01-01T00:00:00.000000Z"}})
    assert renewed["spec"]["renewTime"] == "2030-01-01T00:00:00.000000Z"
    allowed("n1", "PATCH", "/api/v1/nodes/n1/status", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            MERGE)
    allowed("n1", "PATCH", f"{P}/on-n1/status", {"status": {"phase": "Running"}}, MERGE)
    allowed("n1", "PATCH", f"{P}/on-n1", {"metadata": {"annotations": {"firedrill.dev/step": "7"}}}, MERGE)
    allowed("n1", "POST", f"/api/v1/namespaces/{TENANT_NS}/events", {
        "metadata": {"name": "started"}, "involvedObject": {"kind": "Pod", "name": "on-n1", "namespace": TENANT_NS},
        "reason": "Started", "message": "Started container main", "type": "Normal"})
    made = allowed("tenant-a", "POST", P, pod("ordinary", gpus=1, priority_class=LOW))
    assert made["spec"]["priority"] == 10
    allowed("scheduler", "POST", f"{P}/ordinary/binding", binding("ordinary", "n1"))
    allowed("scheduler", "PATCH", f"{P}/pending/status", {"status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}, MERGE)
    allowed("tenant-a", "PATCH", f"{P}/ordinary", {"metadata": {"labels": {"team": "vision"}}}, MERGE)
    quota = allowed("tenant-a", "GET", f"/api/v1/namespaces/{TENANT_NS}/resourcequotas/gpu-quota")
    assert quota["status"]["used"] == {"requests.nvidia.com/gpu": "3"}
    allowed("controller", "PATCH", "/api/v1/nodes/n2", {"spec": {"unschedulable": True}}, MERGE)
    pods = {p["metadata"]["name"]: p for p in server.ok("admin", "GET", P)["items"]}
    assert pods["ordinary"]["spec"]["nodeName"] == "n1"
    assert pods["on-n1"]["metadata"]["annotations"]["firedrill.dev/step"] == "7"
    for agent, user in writes:
        record = server.record_of(agent)
        assert record is not None, f"no audit record of {user}'s write"
        assert record["user"]["username"] == user and record["annotations"]["authorization.k8s.io/decision"] == "allow"
        assert record["annotations"]["authorization.k8s.io/reason"]


def test_reads_are_recorded_when_the_server_audits_reads(tmp_path: Path) -> None:
    s = start_server(tmp_path / "reads", "--audit-reads")
    try:
        s.ok("admin", "POST", "/api/v1/namespaces", {"metadata": {"name": TENANT_NS}})
        resp, agent = s.call("tenant-a", "GET", P)
        assert resp.status_code == 200
        record = s.record_of(agent)
        assert record is not None and (record["verb"], record["user"]["username"]) == ("list", "tenant-a")
        assert record["annotations"]["authorization.k8s.io/decision"] == "allow"
    finally:
        stop_server(s)


# ------------------------------------------------------------------ the governance defects
def test_unrecorded_refusals_defect_loses_the_record(tmp_path: Path) -> None:
    s = start_server(tmp_path / "defect", "--defect", "unrecorded-refusals")
    try:
        setup_cluster(s)
        resp, agent = s.call("tenant-a", "POST", f"{P}/pending/binding", binding("pending", "n1"))
        assert resp.status_code == 403  # the gate still stops it
        assert s.record_of(agent) is None  # and nobody can show it ever happened
        resp, agent = s.call(None, "GET", P)
        assert resp.status_code == 401 and s.record_of(agent) is None
        resp, agent = s.call("tenant-a", "POST", P, pod("fine"))
        assert resp.status_code == 201 and s.record_of(agent) is not None  # allowed writes are still recorded
    finally:
        stop_server(s)


def test_no_gpu_quota_defect_admits_the_over_quota_pod(tmp_path: Path) -> None:
    s = start_server(tmp_path / "defect", "--defect", "no-gpu-quota")
    try:
        setup_cluster(s)
        resp, _ = s.call("tenant-a", "POST", P, pod("too-big", gpus=3))
        assert resp.status_code == 201, resp.text  # 5 GPUs of a quota of 4
        used = s.ok("admin", "GET", f"/api/v1/namespaces/{TENANT_NS}/resourcequotas/gpu-quota")["status"]["used"]
        assert used == {"requests.nvidia.com/gpu": "5"}
    finally:
        stop_server(s)


def test_node_writes_any_defect_lets_a_node_write_another_nodes_lease(tmp_path: Path) -> None:
    s = start_server(tmp_path / "defect", "--defect", "node-writes-any")
    try:
        setup_cluster(s)
        resp, _ = s.call("n1", "PUT", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/n2",
                         {**lease("n2"), "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}})
        assert resp.status_code == 200, resp.text
        resp, _ = s.call("n1", "PATCH", f"{P}/on-n2/status", {"status": {"phase": "Failed"}}, MERGE)
        assert resp.status_code == 200, resp.text
        resp, _ = s.call("tenant-a", "POST", f"{P}/pending/binding", binding("pending", "n1"))
        assert resp.status_code == 403  # only the node gates are broken
    finally:
        stop_server(s)
