"""Who may call a node agent's endpoints: the allow-list, the answers (401, 403, 200) over real HTTP, and the
audit record of every refusal (refplatform.agent.access behind refplatform.agent.logs.LogServer)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import urllib3
import yaml

from refplatform.agent.access import AuditLog, ClientList, ClientListError, EndpointGuard
from refplatform.agent.logs import LogServer, LogStore
from refplatform.agent.workload import LogLine
from refplatform.credentials import AgentEndpoint, token_digest

ADMIN, TENANT, NODE, KUBELET = "admin-token-1234567890", "tenant-token-1234567890", "node-token-1234", "kube-let-9"
NODE_NAME = "gpu-node-0"


def write_clients(path: Path, clients: list[tuple[str, str, list[str]]]) -> None:
    path.write_text(yaml.safe_dump({"clients": [{"user": u, "sha256": token_digest(t), "endpoints": e}
                                                for u, t, e in clients]}))


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    clients = tmp_path / "agent-clients.yaml"
    write_clients(clients, [("firedrill-admin", ADMIN, ["healthz", "logs", "metrics", "proxy"]),
                            ("tenant-a", TENANT, []),
                            (f"system:node:{NODE_NAME}", NODE, ["healthz"]),
                            ("system:kube-apiserver-kubelet-client", KUBELET, ["healthz", "logs"])])
    audit = tmp_path / "nodes" / NODE_NAME / "audit.log"
    store = LogStore(tmp_path / "logs")
    store.open("default", "p", "main", fresh=True).append([LogLine(datetime(2026, 11, 30, tzinfo=UTC), "hello")])
    log = AuditLog(audit)
    server = LogServer(store, guard=EndpointGuard(NODE_NAME, ClientList(clients), log))
    server.serve_metrics(lambda: b"DCGM_FI_DEV_GPU_UTIL 0\n")
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", clients, audit
    finally:
        server.stop()
        log.close()


def get(url: str, token: str | None = None, scheme: str = "Bearer") -> urllib3.BaseHTTPResponse:
    headers = {"Authorization": f"{scheme} {token}", "User-Agent": "test"} if token else {"User-Agent": "test"}
    return urllib3.request("GET", url, headers=headers, timeout=5.0, retries=False)


def records(audit: Path) -> list[dict]:
    return [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []


PATHS = {"/metrics": "metrics", "/healthz": "healthz", "/containerLogs/default/p/main": "log"}


@pytest.mark.parametrize("path", list(PATHS))
def test_no_credentials_is_401_and_recorded(agent: tuple[str, Path, Path], path: str) -> None:
    url, _, audit = agent
    answer = get(url + path)
    assert answer.status == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    [event] = records(audit)
    assert event["kind"] == "Event" and event["apiVersion"] == "audit.k8s.io/v1"
    assert event["level"] == "Metadata" and event["stage"] == "ResponseComplete" and event["verb"] == "get"
    assert event["user"] == {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
    assert event["requestURI"] == path and event["sourceIPs"] == ["127.0.0.1"] and event["userAgent"] == "test"
    assert event["objectRef"] == {"resource": "nodes", "subresource": PATHS[path], "name": NODE_NAME,
                                  "apiVersion": "v1"}
    assert event["responseStatus"]["code"] == 401 and event["responseStatus"]["status"] == "Failure"
    assert event["responseStatus"]["reason"] == "Unauthorized"
    assert event["annotations"]["authorization.k8s.io/decision"] == "forbid"
    assert event["requestReceivedTimestamp"].endswith("Z") and len(event["stageTimestamp"]) == 27
    assert os.stat(audit).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("path", list(PATHS))
def test_a_tenant_token_is_403_and_recorded_with_its_user(agent: tuple[str, Path, Path], path: str) -> None:
    url, _, audit = agent
    answer = get(url + path, TENANT)
    assert answer.status == 403
    assert f'User "tenant-a" cannot get resource "nodes/{PATHS[path]}" of node "{NODE_NAME}"' \
        in answer.data.decode()
    [event] = records(audit)
    assert event["user"]["username"] == "tenant-a"
    assert event["responseStatus"]["code"] == 403 and event["responseStatus"]["reason"] == "Forbidden"
    assert TENANT not in audit.read_text()


def test_who_may_call_what(agent: tuple[str, Path, Path]) -> None:
    url, _, audit = agent
    assert get(url + "/metrics", ADMIN).status == 200
    assert get(url + "/containerLogs/default/p/main", ADMIN).data == b"hello\n"
    assert get(url + "/healthz", NODE).status == 200  # a peer's self-fence asks
    assert get(url + "/metrics", NODE).status == 403  # but reads nothing else
    assert get(url + "/containerLogs/default/p/main", KUBELET).status == 200  # the API server's log proxy
    assert get(url + "/metrics", KUBELET).status == 403
    assert get(url + "/metrics", "not-a-known-token").status == 401
    assert get(url + "/metrics", ADMIN, scheme="Basic").status == 401
    assert get(url + "/nothing-here", ADMIN).status == 404
    assert get(url + "/nothing-here", NODE).status == 403
    assert [(e["user"]["username"], e["responseStatus"]["code"]) for e in records(audit)] == [
        (f"system:node:{NODE_NAME}", 403), ("system:kube-apiserver-kubelet-client", 403),
        ("system:anonymous", 401), ("system:anonymous", 401), (f"system:node:{NODE_NAME}", 403)]
    assert not any(t in audit.read_text() for t in (ADMIN, NODE, KUBELET, "not-a-known-token"))


def test_the_allow_list_is_reread_when_it_changes(agent: tuple[str, Path, Path]) -> None:
    url, clients, _ = agent
    assert get(url + "/metrics", "a-later-token").status == 401
    write_clients(clients, [("firedrill-admin", ADMIN, ["metrics"]), ("later", "a-later-token", ["metrics"])])
    assert get(url + "/metrics", "a-later-token").status == 200
    clients.write_text("clients: [{user: broken}]\n")  # a broken rewrite keeps the last good list
    assert get(url + "/metrics", "a-later-token").status == 200


def test_a_bad_allow_list_names_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"clients": [{"user": "x", "sha256": "ab", "endpoints": []}]}))
    with pytest.raises(ClientListError, match=r"clients\[0\]: 'sha256' must be 64 hex digits"):
        ClientList(path)
    path.write_text(yaml.safe_dump({"clients": [{"user": "x", "sha256": "0" * 64, "endpoints": ["everything"]}]}))
    with pytest.raises(ClientListError, match=r"endpoints must be among logs, metrics, healthz, proxy"):
        ClientList(path)
    path.write_text("tokens: []\n")
    with pytest.raises(ClientListError, match="expected a top-level 'clients:' list"):
        ClientList(path)


def test_endpoint_names_are_the_credentials_modules() -> None:
    assert {e.value for e in AgentEndpoint} == {"logs", "metrics", "healthz", "proxy"}
