"""The dashboard's routes in-process: a public page with a strict CSP, a JSON view behind the API's auth."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from refplatform.api.app import ApiServer
from refplatform.api.auth import Identity, Role, TokenAuthenticator
from refplatform.api.dashboard_http import STATIC_FILES, VIEW_PATH, static_file
from refplatform.api.service import ApiService
from refplatform.store import Store

NOW = datetime(2027, 1, 15, 8, 0, 0, tzinfo=timezone.utc)
SCRIPT = "<script>alert(1)</script>"
TOKENS = {"admin-token": Identity("admin", Role.CLUSTER_ADMIN),
          "tenant-token": Identity("team-a", Role.TENANT, frozenset({"team-a"}))}


class Client:
    """Requests straight into the ASGI app (no socket, no server process)."""

    def __init__(self, app: object) -> None:
        self.transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]

    def get(self, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
        async def call() -> httpx.Response:
            async with httpx.AsyncClient(transport=self.transport, base_url="https://testserver") as c:
                return await c.get(path, headers=headers)
        return asyncio.run(call())


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    store = Store(tmp_path)
    store.create("core/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-0"},
                                "status": {"allocatable": {"nvidia.com/gpu": "2"},
                                           "conditions": [{"type": "Ready", "status": "True"}]}}, now="x")
    store.create("core/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": SCRIPT, "namespace": "default"},
                               "spec": {"schedulerName": "none", "containers": [{"name": "c"}]},
                               "status": {"phase": "Pending"}}, now="2027-01-15T07:59:00Z")
    server = ApiServer(ApiService(store, clock=lambda: NOW), TokenAuthenticator(TOKENS))
    yield Client(server.app)
    store.close()


def test_the_page_is_public_static_and_locked_down(client: Client) -> None:
    r = client.get("/dashboard")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "alert" not in r.text  # the page carries no data
    for name in STATIC_FILES:
        asset = client.get(f"/dashboard/static/{name}")
        assert asset.status_code == 200, name
        assert asset.headers["content-type"] == STATIC_FILES[name]
    for probe in ("/dashboard/static/../app.py", "/dashboard/static/%2e%2e%2fapp.py", "/dashboard/static/app.py"):
        r = client.get(probe)
        assert r.status_code in (401, 404) and "ApiServer" not in r.text, probe
    assert client.get("/dashboard/static/other.js").status_code == 404


@pytest.mark.parametrize(("token", "code"), [(None, 401), ("wrong", 401), ("tenant-token", 403)])
def test_the_view_needs_a_token_that_may_list_everything(client: Client, token: str | None, code: int) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = client.get(VIEW_PATH, headers=headers)
    assert r.status_code == code
    assert r.json()["kind"] == "Status"


def test_the_view_serves_the_store(client: Client) -> None:
    r = client.get(VIEW_PATH, headers={"Authorization": "Bearer admin-token"})
    assert r.status_code == 200
    doc = r.json()
    assert doc["now"] == "2027-01-15T08:00:00Z"
    assert [c["state"] for c in doc["nodes"][0]["cells"]] == ["free", "free"]
    assert doc["pending"][0]["name"] == SCRIPT and doc["pending"][0]["reason"] == "NotOurScheduler"


def test_the_page_never_turns_data_into_markup() -> None:
    """Names are only set with textContent / attributes: no HTML-string sinks, no inline script or style."""
    js = static_file("dashboard.js").decode()
    code = "\n".join(line for line in js.splitlines() if not line.lstrip().startswith("//"))
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                 "setAttribute(\"style\"", "setAttribute('style'"):
        assert sink not in code, sink
    html = static_file("dashboard.html").decode()
    assert all('src="' in tag for tag in re.findall(r"<script\b[^>]*>", html)), "inline script in the page"
    assert " style=" not in html and "<style" not in html
    assert "textContent" in js
