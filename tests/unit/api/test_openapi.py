"""OpenAPI v3 documents, field validation and protobuf bodies through the ASGI app (no socket)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from refplatform.api import gendata
from refplatform.api.app import ApiServer
from refplatform.api.openapi import OpenApi, unknown_fields
from refplatform.api.service import ApiService
from refplatform.patching import SCHEMAS
from refplatform.resources import PODGROUPS, PODS
from refplatform.store import Store
from tests.unit.api.test_protobuf import KUBECTL_CREATE_NAMESPACE

REPO = Path(__file__).resolve().parents[3]
SHARED_CRDS = REPO.parent / "shared" / "crds"
GV_PATHS = {"api/v1", "apis/coordination.k8s.io/v1", "apis/scheduling.volcano.sh/v1beta1",
            "apis/batch.volcano.sh/v1alpha1", "apis/firedrill.dev/v1alpha1", "apis/apps/v1",
            "apis/discovery.k8s.io/v1", "apis/autoscaling/v2", "apis/scheduling.k8s.io/v1", "apis/batch/v1", "apis/policy/v1"}


class Client:
    def __init__(self, app: object) -> None:
        self.transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        async def call() -> httpx.Response:
            async with httpx.AsyncClient(transport=self.transport, base_url="http://testserver") as c:
                return await c.request(method, path, **kw)
        return asyncio.run(call())


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    store = Store(tmp_path)
    yield Client(ApiServer(ApiService(store)).app)
    store.close()


@pytest.fixture(scope="module")
def openapi() -> OpenApi:
    return OpenApi(extra_groups={"firedrill.dev": ["v1alpha1"]})


def doc(openapi: OpenApi, path: str) -> dict[str, Any]:
    found = openapi.document(path)
    assert found is not None, path
    return json.loads(found.body)


def test_index_names_every_group_version_with_its_hash(client: Client) -> None:
    index = client.request("GET", "/openapi/v3").json()
    assert set(index["paths"]) == GV_PATHS
    for entry in index["paths"].values():
        r = client.request("GET", entry["serverRelativeURL"])
        assert r.status_code == 200 and r.headers["cache-control"] == "public, immutable"
        assert entry["serverRelativeURL"].endswith("hash=" + hashlib.sha512(r.content).hexdigest().upper())
        assert r.json()["openapi"] == "3.0.0"
    assert client.request("GET", "/openapi/v3/apis/batch/v2").status_code == 404
    assert client.request("GET", "/openapi/v3/api/v1").headers["cache-control"] == "no-cache, private"


def test_pod_schema_carries_gvk_descriptions_and_the_servers_merge_keys(openapi: OpenApi) -> None:
    schemas = doc(openapi, "api/v1")["components"]["schemas"]
    pod = schemas["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "version": "v1", "kind": "Pod"}]
    assert pod["properties"]["spec"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}]
    assert pod["properties"]["metadata"]["description"].startswith("Standard object's metadata.")
    spec = schemas["io.k8s.api.core.v1.PodSpec"]
    assert spec["required"] == ["containers"]
    server = SCHEMAS["Pod"].lookup("spec").schema
    assert server is not None
    for name in ("containers", "volumes", "initContainers"):
        assert spec["properties"][name]["x-kubernetes-patch-merge-key"] == server.lookup(name).merge_key
    # tolerations carry no strategy upstream nor here: kubectl sends the whole list
    assert "x-kubernetes-patch-strategy" not in spec["properties"]["tolerations"]
    container = schemas["io.k8s.api.core.v1.Container"]["properties"]
    assert container["resources"]["allOf"][0]["$ref"].endswith("ResourceRequirements")
    limits = schemas["io.k8s.api.core.v1.ResourceRequirements"]["properties"]["limits"]
    assert limits["additionalProperties"]["$ref"].endswith("io.k8s.apimachinery.pkg.api.resource.Quantity")
    probe = schemas["io.k8s.api.core.v1.Probe"]["properties"]
    assert "httpGet" in probe and "handler" not in probe  # the embedded ProbeHandler is inlined
    lease = doc(openapi, "apis/coordination.k8s.io/v1")["components"]["schemas"]["io.k8s.api.coordination.v1.LeaseSpec"]
    assert lease["properties"]["renewTime"]["allOf"][0]["$ref"].endswith("meta.v1.MicroTime")


def test_patch_operations_tell_kubectl_about_field_validation_and_merge_types(openapi: OpenApi) -> None:
    core = doc(openapi, "api/v1")["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert core["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert {"fieldValidation", "fieldManager"} <= {p["name"] for p in core["parameters"]}
    assert "application/strategic-merge-patch+json" in core["requestBody"]["content"]
    assert "application/apply-patch+yaml" in core["requestBody"]["content"]  # server-side apply
    pg = doc(openapi, "apis/scheduling.volcano.sh/v1beta1")
    op = pg["paths"]["/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups/{name}"]["patch"]
    assert set(op["requestBody"]["content"]) == {"application/json-patch+json", "application/merge-patch+json",
                                                 "application/apply-patch+yaml"}
    schema = pg["components"]["schemas"]["sh.volcano.scheduling.v1beta1.PodGroup"]
    assert "minMember" in schema["properties"]["spec"]["properties"]
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in pg["components"]["schemas"]


def test_unknown_fields(openapi: OpenApi) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}, "nmae": "x"},
           "spec": {"containers": [{"name": "c", "image": "i", "imagee": "j",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}], "foo": 1}}
    assert openapi.unknown_fields(PODS, pod) == ["metadata.nmae", "spec.containers[0].imagee", "spec.foo"]
    patch = {"spec": {"$setElementOrder/containers": [{"name": "c"}], "containers": [{"name": "c", "image": "x"}]}}
    assert openapi.unknown_fields(PODS, patch) == []
    pg = {"spec": {"minMember": 2, "bogus": 1}, "status": {"phase": "Pending"}}
    assert openapi.unknown_fields(PODGROUPS, pg) == ["spec.bogus"]
    assert unknown_fields({"a": {"deep": 1}}, {"x-kubernetes-preserve-unknown-fields": True}, {}) == []


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"containers": [{"name": "c", "image": "i"}], "foo": 1}}


def test_field_validation_modes(client: Client) -> None:
    url = "/api/v1/namespaces/default/pods"
    r = client.request("POST", url + "?fieldValidation=Strict", json=POD)
    assert r.status_code == 400 and r.json()["message"] == \
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.foo"'
    r = client.request("POST", url, json=POD)  # Warn is the default, as upstream
    assert r.status_code == 201 and r.headers.get_list("warning") == ['299 - "unknown field \\"spec.foo\\""']
    r = client.request("PATCH", url + "/p?fieldValidation=Warn", content=json.dumps({"metadata": {"x": 1}}),
                       headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200 and r.headers.get_list("warning") == ['299 - "unknown field \\"metadata.x\\""']
    r = client.request("PATCH", url + "/p?fieldValidation=Ignore", content=json.dumps({"metadata": {"y": 1}}),
                       headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200 and "warning" not in r.headers
    assert client.request("POST", url + "?fieldValidation=Loose", json=POD).status_code == 400


def test_protobuf_bodies_for_built_ins_only(client: Client) -> None:
    pb = {"content-type": "application/vnd.kubernetes.protobuf"}
    r = client.request("POST", "/api/v1/namespaces", content=KUBECTL_CREATE_NAMESPACE, headers=pb)
    assert r.status_code == 201 and r.json()["metadata"]["name"] == "foo"
    assert client.request("GET", "/api/v1/namespaces/foo").json()["status"]["phase"] == "Active"
    r = client.request("POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups",
                       content=KUBECTL_CREATE_NAMESPACE, headers=pb)
    assert r.status_code == 415 and "accepted media types include: application/json" in r.json()["message"]
    r = client.request("POST", "/api/v1/namespaces", content=b"k8s\x00\x0a\x05", headers=pb)
    assert r.status_code == 400 and "protobuf body could not be decoded" in r.json()["message"]
    r = client.request("POST", "/api/v1/namespaces", content=b"{}", headers={"content-type": "application/cbor"})
    assert r.status_code == 415


@pytest.mark.skipif(not (SHARED_CRDS / "volcano").is_dir(), reason="shared/crds is not beside the repository")
def test_volcano_data_file_is_what_gendata_derives(tmp_path: Path) -> None:
    assert gendata.main(["--crds", str(SHARED_CRDS), "--out", str(tmp_path)]) == 0
    assert (tmp_path / gendata.VOLCANO_FILE).read_text() == (gendata.DATA_DIR / gendata.VOLCANO_FILE).read_text()


def _gomodcache() -> Path | None:
    go = shutil.which("go")
    path = os.environ.get("GOMODCACHE") or (subprocess.run([go, "env", "GOMODCACHE"], capture_output=True,
                                                             text=True).stdout.strip() if go else "")
    return Path(path) if path and (Path(path) / "k8s.io" / "api@v0.37.2").is_dir() else None


@pytest.mark.skipif(_gomodcache() is None, reason="k8s.io/api@v0.37.2 is not in the Go module cache")
def test_protobuf_table_is_what_gendata_derives(tmp_path: Path) -> None:
    cache = _gomodcache()
    assert cache is not None
    assert gendata.main(["--gomodcache", str(cache), "--out", str(tmp_path)]) == 0
    assert (tmp_path / gendata.PROTO_FILE).read_text() == (gendata.DATA_DIR / gendata.PROTO_FILE).read_text()
