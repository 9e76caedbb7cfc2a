"""``pods/NAME/log`` before the container started is refused as the kubelet refuses it (400, waiting to start), so
a pod recreated under the name of one that ran on the node is never served that one's log (issue 26: a rank
restarted on the same node had its predecessor's resume line read as its own)."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from refplatform.api.app import ApiServer, ServerSettings
from refplatform.api.auth import Identity, Role, TokenAuthenticator
from refplatform.api.service import ApiService
from refplatform.store import Store

ADMIN = {"Authorization": "Bearer admin-token"}
POD = "/api/v1/namespaces/default/pods/w"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Any]:
    store = Store(tmp_path)
    server = ApiServer(ApiService(store), TokenAuthenticator({"admin-token": Identity("admin", Role.CLUSTER_ADMIN)}),
                       ServerSettings())

    def call(method: str, path: str, headers: dict[str, str] = ADMIN, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app),  # type: ignore[arg-type]
                                         base_url="https://testserver") as c:
                return await c.request(method, path, headers=headers, **kw)
        return asyncio.run(go())
    assert call("POST", "/api/v1/namespaces", json={"metadata": {"name": "default"}}).status_code in (201, 409)
    assert call("POST", "/api/v1/namespaces/default/pods", json={
        "metadata": {"name": "w"}, "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "i"}]}
    }).status_code == 201
    yield call
    store.close()


def test_no_log_is_served_before_the_container_started(api: Any) -> None:
    answer = api("GET", f"{POD}/log")
    assert answer.status_code == 400, answer.text
    assert 'container "main" in pod "w" is waiting to start: ContainerCreating' in answer.json()["message"]


def test_a_started_container_is_looked_up_on_its_node(api: Any) -> None:
    status = {"status": {"phase": "Running", "containerStatuses": [
        {"name": "main", "ready": True, "restartCount": 0, "image": "i", "imageID": "", "state": {
            "running": {"startedAt": "2026-12-02T06:00:00Z"}}}]}}
    assert api("PATCH", f"{POD}/status", json=status,
               headers={**ADMIN, "Content-Type": "application/merge-patch+json"}).status_code == 200
    answer = api("GET", f"{POD}/log")
    assert answer.status_code == 404 and "n1" in answer.json()["message"], answer.text  # past the gate: no node n1


class _Logs(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        body = f"log of {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_every_log_request_shares_one_tls_context_built_once(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = ThreadingHTTPServer(("127.0.0.1", 0), _Logs)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    try:
        node = {"metadata": {"name": "n1"}, "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                                                       "daemonEndpoints": {"kubeletEndpoint": {
                                                           "Port": agent.server_address[1]}}}}
        assert api("POST", "/api/v1/nodes", json=node).status_code == 201
        status = {"status": {"phase": "Running", "containerStatuses": [
            {"name": "main", "ready": True, "restartCount": 0, "image": "i", "imageID": "", "state": {
                "running": {"startedAt": "2026-12-02T06:00:00Z"}}}]}}
        assert api("PATCH", f"{POD}/status", json=status,
                   headers={**ADMIN, "Content-Type": "application/merge-patch+json"}).status_code == 200
        built = []
        real = ssl.create_default_context
        monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: built.append(1) or real(*a, **k))
        for _ in range(3):
            answer = api("GET", f"{POD}/log")
            assert answer.status_code == 200 and answer.text == "log of /containerLogs/default/w/main\n", answer.text
        assert len(built) <= 1, f"{len(built)} TLS contexts built for 3 log requests"
    finally:
        agent.shutdown()
        agent.server_close()
