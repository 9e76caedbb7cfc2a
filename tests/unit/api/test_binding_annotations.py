"""A Binding's annotations land on the pod with spec.nodeName, in one write (as upstream's BindingREST copies
them), and only for whoever may write those annotations anyway."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from refplatform.api.app import ApiServer, ServerSettings
from refplatform.api.auth import Identity, Role, TokenAuthenticator
from refplatform.api.service import ApiService
from refplatform.store import Store

ADMIN = {"Authorization": "Bearer admin-token"}
SCHEDULER = {"Authorization": "Bearer scheduler-token"}
PODS = "/api/v1/namespaces/default/pods"


class Api:
    def __init__(self, server: ApiServer) -> None:
        self.server = server

    def __call__(self, method: str, path: str, headers: dict[str, str] = ADMIN, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.server.app),  # type: ignore[arg-type]
                                         base_url="https://testserver") as c:
                return await c.request(method, path, headers=headers, **kw)
        return asyncio.run(go())


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    store = Store(tmp_path)
    auth = TokenAuthenticator({"admin-token": Identity("admin", Role.CLUSTER_ADMIN),
                               "scheduler-token": Identity("system:kube-scheduler", Role.SCHEDULER)})
    a = Api(ApiServer(ApiService(store), auth, ServerSettings()))
    assert a("POST", "/api/v1/namespaces", json={"metadata": {"name": "default"}}).status_code in (201, 409)
    assert a("POST", PODS, json={"metadata": {"name": "p", "annotations": {"keep": "me"}},
                                 "spec": {"containers": [{"name": "c", "image": "i"}]}}).status_code == 201
    yield a
    store.close()


def binding(annotations: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": "n1"}}


def test_the_bindings_annotations_are_merged_onto_the_pod_in_the_same_write(api: Api) -> None:
    before = int(api("GET", f"{PODS}/p").json()["metadata"]["resourceVersion"])
    answer = api("POST", f"{PODS}/p/binding", headers=SCHEDULER,
                 json=binding({"firedrill.dev/gpu-index": "0,3", "keep": "overwritten"}))
    assert answer.status_code == 201, answer.text
    pod = api("GET", f"{PODS}/p").json()
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"] == {"firedrill.dev/gpu-index": "0,3", "keep": "overwritten"}
    assert int(pod["metadata"]["resourceVersion"]) == before + 1  # one write: node and annotations together


def test_a_binding_without_annotations_leaves_the_pods_alone(api: Api) -> None:
    assert api("POST", f"{PODS}/p/binding", headers=SCHEDULER, json=binding()).status_code == 201
    assert api("GET", f"{PODS}/p").json()["metadata"]["annotations"] == {"keep": "me"}


def test_annotations_that_are_not_strings_are_invalid_and_nothing_is_bound(api: Api) -> None:
    answer = api("POST", f"{PODS}/p/binding", headers=SCHEDULER, json=binding({"firedrill.dev/gpu-index": 3}))
    assert answer.status_code == 422
    assert "metadata.annotations" in answer.text
    assert "nodeName" not in api("GET", f"{PODS}/p").json()["spec"]
