"""The ``lose-acked-writes`` defect (docs/DEFECTS.md): every 10th pod create is acknowledged and never stored.

The API server is driven in-process through its ASGI app over a real SQLite store; the client sees what any
client would: 201 with a uid and a resourceVersion for every create, and a later GET or list tells the truth.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from refplatform.api.app import ApiServer, ServerSettings
from refplatform.api.auth import Identity, Role, TokenAuthenticator
from refplatform.api.service import ApiService
from refplatform.defects import Defect
from refplatform.store import Store

ADMIN = {"Authorization": "Bearer admin-token"}
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path)
    yield s
    s.close()


def _create_then_list(store: Store, defects: frozenset[Defect], count: int) -> tuple[list[httpx.Response], set[str]]:
    server = ApiServer(ApiService(store), TokenAuthenticator({"admin-token": Identity("admin", Role.CLUSTER_ADMIN)}),
                       ServerSettings(defects=defects))

    async def run() -> tuple[list[httpx.Response], httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app),  # type: ignore[arg-type]
                                     base_url="https://testserver") as c:
            made = [await c.post(PODS, headers=ADMIN, json={
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
                "spec": {"containers": [{"name": "main", "image": "img"}]}}) for i in range(count)]
            return made, await c.get(PODS, headers=ADMIN)
    made, listed = asyncio.run(run())
    assert listed.status_code == 200, listed.text
    return made, {p["metadata"]["name"] for p in listed.json()["items"]}


def test_an_honest_server_stores_every_pod_it_acknowledges(store: Store) -> None:
    made, found = _create_then_list(store, frozenset(), 20)
    assert [r.status_code for r in made] == [201] * 20
    assert found == {f"p{i}" for i in range(20)}


def test_the_defect_acknowledges_every_tenth_pod_create_and_never_stores_it(store: Store) -> None:
    made, found = _create_then_list(store, frozenset({Defect.LOSE_ACKED_WRITES}), 20)
    assert [r.status_code for r in made] == [201] * 20
    lost = [r.json() for r in made if r.json()["metadata"]["name"] not in found]
    assert [p["metadata"]["name"] for p in lost] == ["p9", "p19"]
    # the answer looks stored: a uid, a resourceVersion and a creation time
    assert all(p["metadata"]["uid"] and p["metadata"]["resourceVersion"] and p["metadata"]["creationTimestamp"]
               for p in lost)
