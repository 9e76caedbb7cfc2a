"""Identities, agent endpoints and secrets on a live embedded platform, as `firedrill up` starts it (issue 15).

- Every component has its own identity: the API server's audit log names the node that renewed its Lease,
  the scheduler that bound a pod and the controllers that made a ReplicaSet.
- The node agents' endpoints (/metrics, /healthz, /containerLogs) answer 401 without credentials and 403 to an
  identity not allowed, and each refusal is an audit.k8s.io/v1 Event in that agent's own audit log; the API
  server's log proxy still reads a pod's log (it presents the kubelet client's token).
- No token appears in what `firedrill up` prints, in any process's log, or in any audit log.
- Tokens are kept across a restart, and a node started later gets its own identity and joins.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from refplatform.cluster import Cluster, ClusterSpec, wait_until
from refplatform.credentials import Credentials
from tests.integration.test_cli import down, start_up

pytestmark = pytest.mark.integration

NODES = ["gpu-node-0", "gpu-node-1"]
POD = "hello"
GREETING = "hello-from-the-pod"


@dataclass
class Up:
    """A `firedrill up` of this module: its data directory, its output so far, an admin client."""

    data: Path
    lines: list[str]
    url: str
    http: httpx.Client

    def token(self, user: str) -> str:
        entries = yaml.safe_load((self.data / "tokens.yaml").read_text())["tokens"]
        return next(str(e["token"]) for e in entries if e["user"] == user)

    def agent_url(self, node: str) -> str:
        return f"http://127.0.0.1:{json.loads((self.data / 'agents' / f'{node}.json').read_text())['logPort']}"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    data = tmp_path_factory.mktemp("security") / "cluster"
    proc, lines = start_up(data, "--nodes", "2", "--gpus-per-node", "2", "--spares", "0", "--heartbeat", "0.5")
    try:
        wait_until(lambda: any("Stop with Ctrl-C" in line for line in lines) or proc.poll() is not None,
                   90, "`firedrill up` to report the cluster up")
        assert proc.poll() is None, "".join(lines)
        url = json.loads((data / "apiserver.json").read_text())["url"]
        admin = (data / "admin-token").read_text().strip()
        ca = ssl.create_default_context(cafile=str(data / "pki" / "ca.crt"))
        with httpx.Client(base_url=url, verify=ca, timeout=10,
                          headers={"Authorization": f"Bearer {admin}"}) as http:
            yield Up(data, lines, url, http)
    finally:
        down(data, proc)


def audit_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_up_prints_no_token_and_says_where_it_is(up: Up) -> None:
    text = "".join(up.lines)
    assert f"Dashboard: {up.url}/dashboard\n" in text, text
    assert str(up.data / "admin-token") in text, "firedrill up must name the file that holds the token"
    secrets = Credentials(up.data).all_tokens()
    assert len(secrets) >= 8  # admin, controllers, scheduler, 2 tenants, 2 nodes, the kubelet client
    leaked = [s[:4] for s in secrets if s in text]
    assert not leaked, f"firedrill up printed token(s) starting {leaked}"


def test_each_identity_has_its_own_token_file_and_kubeconfig(up: Up) -> None:
    entries = yaml.safe_load((up.data / "tokens.yaml").read_text())["tokens"]
    roles = {e["user"]: e["role"] for e in entries}
    assert roles == {"firedrill-admin": "cluster-admin", "system:kube-controller-manager": "controller",
                     "system:kube-scheduler": "scheduler", "tenant-a": "tenant", "tenant-b": "tenant",
                     **{f"system:node:{n}": "node" for n in NODES}}
    assert len({e["token"] for e in entries}) == len(entries)
    private = ["tokens.yaml", "agent-clients.yaml", "admin-token", "controller-token", "scheduler-token",
               "kubelet-client-token", "kubeconfig", "tenant-a.kubeconfig", "tenant-b.kubeconfig",
               *(f"node-{n}.token" for n in NODES), *(f"node-{n}.kubeconfig" for n in NODES)]
    for name in private:
        assert os.stat(up.data / name).st_mode & 0o777 == 0o600, name
    tenant = yaml.safe_load((up.data / "tenant-a.kubeconfig").read_text())
    assert tenant["users"][0] == {"name": "tenant-a", "user": {"token": up.token("tenant-a")}}
    assert tenant["contexts"][0]["context"]["namespace"] == "firedrill-tenant"
    assert tenant["clusters"][0]["cluster"]["server"] == up.url
    node = yaml.safe_load((up.data / f"node-{NODES[0]}.kubeconfig").read_text())
    assert node["users"][0]["user"]["token"] == up.token(f"system:node:{NODES[0]}")
    # The bootstrap objects of the contract.
    names = {n["metadata"]["name"] for n in up.http.get("/api/v1/namespaces").json()["items"]}
    assert {"firedrill-tenant", "firedrill-neighbour", "kube-node-lease"} <= names
    classes = {c["metadata"]["name"]: c["value"]
               for c in up.http.get("/apis/scheduling.k8s.io/v1/priorityclasses").json()["items"]}
    assert classes["firedrill-critical"] == 1_000_000 and classes["firedrill-low"] == 10
    quota = up.http.get("/api/v1/namespaces/firedrill-tenant/resourcequotas/gpu-quota")
    assert quota.status_code == 200, quota.text
    assert quota.json()["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}


@pytest.fixture(scope="module")
def hello(up: Up) -> str:
    """A pod that prints GREETING and waits, created once for the tests that read it, whatever their order."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD},
           "spec": {"containers": [{"name": "main", "image": "firedrill/canary",
                                    "command": [sys.executable, "-c", f"print('{GREETING}', flush=True)\n"
                                                "import time; time.sleep(600)"],
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    up.http.post("/api/v1/namespaces/default/pods", json=pod).raise_for_status()
    return POD


def test_the_api_audit_log_names_each_component(up: Up, hello: str) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "idle"},
                  "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "idle"}},
                           "template": {"metadata": {"labels": {"app": "idle"}},
                                        "spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}
    up.http.post("/apis/apps/v1/namespaces/default/deployments", json=deployment).raise_for_status()
    audit = up.data / "audit.log"

    def seen(user: str, verb: str, resource: str, subresource: str = "", name: str = "") -> bool:
        return any(r["user"]["username"] == user and r["verb"] == verb
                   and r["objectRef"].get("resource") == resource
                   and (r["objectRef"].get("subresource") or "") == subresource
                   and (not name or r["objectRef"].get("name") == name)
                   and r["responseStatus"]["code"] < 300 for r in audit_records(audit))

    wait_until(lambda: seen("system:kube-scheduler", "create", "pods", "binding", POD), 30,
               "the scheduler's own identity binding the pod")
    wait_until(lambda: seen("system:kube-controller-manager", "create", "replicasets"), 30,
               "the controllers' own identity creating the Deployment's ReplicaSet")
    for node in NODES:
        wait_until(lambda: seen(f"system:node:{node}", "update", "leases", name=node), 30,
                   f"node {node} renewing its own Lease as system:node:{node}")
    assert not seen("firedrill-admin", "update", "leases"), "the admin token renewed a Lease"


def test_agent_endpoints_refuse_unknown_callers_and_record_it(up: Up) -> None:
    node = NODES[0]
    base = up.agent_url(node)
    tenant, other_node = up.token("tenant-a"), up.token(f"system:node:{NODES[1]}")
    paths = {"/metrics": "metrics", "/healthz": "healthz", "/containerLogs/default/x/main": "log"}
    audit = up.data / "nodes" / node / "audit.log"
    before = len(audit_records(audit))
    for path in paths:
        assert httpx.get(base + path).status_code == 401, path
        assert httpx.get(base + path, headers={"Authorization": f"Bearer {tenant}"}).status_code == 403, path
    assert httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {other_node}"}).status_code == 403
    assert httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {up.token('firedrill-admin')}"}) \
        .status_code == 200
    refusals = audit_records(audit)[before:]
    assert [(r["user"]["username"], r["objectRef"]["subresource"], r["responseStatus"]["code"]) for r in refusals] \
        == [u for path, sub in paths.items() for u in (("system:anonymous", sub, 401), ("tenant-a", sub, 403))] \
        + [(f"system:node:{NODES[1]}", "metrics", 403)]
    assert all(r["apiVersion"] == "audit.k8s.io/v1" and r["objectRef"]["name"] == node for r in refusals)


def test_the_api_servers_log_proxy_still_reads_a_pods_log(up: Up, hello: str) -> None:
    def logged() -> bool:
        answer = up.http.get(f"/api/v1/namespaces/default/pods/{hello}/log")
        return answer.status_code == 200 and GREETING in answer.text
    wait_until(logged, 60, "the pod's log through the API server's log proxy")
    pod = up.http.get(f"/api/v1/namespaces/default/pods/{hello}").json()
    node = pod["spec"]["nodeName"]
    # The direct call with no credentials was refused; the proxy presented the kubelet client's token.
    kubelet = (up.data / "kubelet-client-token").read_text().strip()
    direct = httpx.get(f"{up.agent_url(node)}/containerLogs/default/{POD}/main",
                       headers={"Authorization": f"Bearer {kubelet}"})
    assert direct.status_code == 200 and GREETING in direct.text


def test_no_token_in_any_log_or_audit_log(up: Up, hello: str) -> None:
    """After the calls the module's fixtures made (and whichever of the tests above ran before it), nothing any
    process wrote holds a token."""
    secrets = Credentials(up.data).all_tokens()
    files = [*(up.data / "logs").rglob("*.log"), up.data / "audit.log", *(up.data / "nodes").glob("*/audit.log")]
    assert len(files) >= 6
    for path in files:
        data = path.read_bytes()
        leaked = [s[:4] for s in secrets if s.encode() in data]
        assert not leaked, f"{path.relative_to(up.data)} holds token(s) starting {leaked}"


def test_tokens_survive_a_restart_and_a_node_added_later_joins(tmp_path: Path) -> None:
    data = tmp_path / "c"
    cluster = Cluster(ClusterSpec(data, nodes=1, gpus_per_node=1, heartbeat=0.5, spares=0))
    try:
        cluster.start()
        cluster.wait_ready(60)
        first = Credentials(data).all_tokens()
    finally:
        cluster.stop()
    cluster = Cluster(ClusterSpec(data, nodes=1, gpus_per_node=1, heartbeat=0.5, spares=0))
    try:
        cluster.start()
        cluster.wait_ready(60)
        assert Credentials(data).all_tokens() == first, "a restart changed a token"
        # A node the spec did not know (a partitioned node a drill starts): its identity is made now.
        cluster.start_agent("extra-node", gpus=1)
        with cluster.http_client() as http:
            def ready() -> bool:
                node = http.get("/api/v1/nodes/extra-node")
                return node.status_code == 200 and any(
                    c["type"] == "Ready" and c["status"] == "True" for c in node.json()["status"]["conditions"])
            wait_until(ready, 30, "the node added later to be Ready")
        added = set(Credentials(data).all_tokens()) - set(first)
        assert len(added) == 1 and (data / "node-extra-node.kubeconfig").exists()
    finally:
        cluster.stop()
