"""scheduling.k8s.io/v1 PriorityClass and the Priority admission, through the ASGI app (no socket):
discovery, validation, the built-in system classes, one global default, pods resolved to spec.priority and
spec.preemptionPolicy, upstream's refusal for an unknown class, the kubectl table, the OpenAPI schema and
the protobuf message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refplatform.api.app import ApiServer
from refplatform.api.openapi import OpenApi
from refplatform.api.protobuf import decode_object
from refplatform.api.service import ApiService
from refplatform.store import Store
from tests.unit.api.test_openapi import Client, doc
from tests.unit.api.test_protobuf import envelope, field

PC = "/apis/scheduling.k8s.io/v1/priorityclasses"
PODS = "/api/v1/namespaces/default/pods"
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    store = Store(tmp_path)
    yield Client(ApiServer(ApiService(store)).app)
    store.close()


def pclass(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **extra}


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}


def test_discovery_serves_cluster_scoped_priorityclasses_with_short_name_pc(client: Client) -> None:
    groups = {g["name"]: g for g in client.request("GET", "/apis").json()["groups"]}
    assert groups["scheduling.k8s.io"]["preferredVersion"]["version"] == "v1"
    (res,) = [r for r in client.request("GET", "/apis/scheduling.k8s.io/v1").json()["resources"]
              if r["name"] == "priorityclasses"]
    assert res["kind"] == "PriorityClass" and res["namespaced"] is False and res["shortNames"] == ["pc"]


def test_the_system_classes_are_served_and_cannot_be_deleted(client: Client) -> None:
    items = {i["metadata"]["name"]: i for i in client.request("GET", PC).json()["items"]}
    assert items["system-cluster-critical"]["value"] == 2_000_000_000
    assert items["system-node-critical"]["value"] == 2_000_001_000
    assert not items["system-node-critical"]["globalDefault"]
    r = client.request("DELETE", f"{PC}/system-node-critical")
    assert r.status_code == 403
    assert r.json()["message"] == ('priorityclasses.scheduling.k8s.io "system-node-critical" is forbidden: '
                                   "this is a system priority class and cannot be deleted")


def test_validation_of_value_name_and_policy(client: Client) -> None:
    r = client.request("POST", PC, json=pclass("huge", 1_000_000_001))
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "value"
    assert "maximum allowed value of a user defined priority is 1000000000" in r.json()["message"]
    r = client.request("POST", PC, json=pclass("system-mine", 5))
    assert r.status_code == 422 and "reserved for system use only" in r.json()["message"]
    r = client.request("POST", PC, json=pclass("odd", 5, preemptionPolicy="Sometimes"))
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "preemptionPolicy"
    r = client.request("POST", PC, json={**pclass("none", 0), "value": None})
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["reason"] == "FieldValueRequired"
    created = client.request("POST", PC, json=pclass("top", 1_000_000_000, description="inference"))
    assert created.status_code == 201, created.text
    assert created.json()["preemptionPolicy"] == "PreemptLowerPriority"  # defaulted
    assert created.json()["globalDefault"] is False


def test_value_and_policy_are_immutable(client: Client) -> None:
    client.request("POST", PC, json=pclass("batch", 10))
    r = client.request("PATCH", f"{PC}/batch", content=b'{"value": 11}',
                       headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "value"
    r = client.request("PATCH", f"{PC}/batch", content=b'{"description": "training"}',
                       headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200 and r.json()["description"] == "training"


def test_at_most_one_global_default(client: Client) -> None:
    assert client.request("POST", PC, json=pclass("low", 100, globalDefault=True)).status_code == 201
    r = client.request("POST", PC, json=pclass("other", 200, globalDefault=True))
    assert r.status_code == 403
    assert r.json()["message"] == ('priorityclasses.scheduling.k8s.io "other" is forbidden: PriorityClass low is '
                                   "already marked as default. Only one default can exist")
    client.request("POST", PC, json=pclass("other", 200))
    r = client.request("PATCH", f"{PC}/other", content=b'{"globalDefault": true}',
                       headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 403


def test_a_pod_gets_its_class_value_and_policy(client: Client) -> None:
    client.request("POST", PC, json=pclass("serve", 1000))
    client.request("POST", PC, json=pclass("fill", 10, preemptionPolicy="Never"))
    r = client.request("POST", PODS, json=pod("infer", priorityClassName="serve"))
    assert r.status_code == 201, r.text
    assert (r.json()["spec"]["priority"], r.json()["spec"]["preemptionPolicy"]) == (1000, "PreemptLowerPriority")
    r = client.request("POST", PODS, json=pod("batch", priorityClassName="fill"))
    assert (r.json()["spec"]["priority"], r.json()["spec"]["preemptionPolicy"]) == (10, "Never")
    r = client.request("POST", PODS, json=pod("critical", priorityClassName="system-cluster-critical"))
    assert r.json()["spec"]["priority"] == 2_000_000_000
    # an update that leaves the admission's fields out keeps them (a pod's priority never changes)
    current = client.request("GET", f"{PODS}/infer").json()
    for key in ("priority", "preemptionPolicy"):
        current["spec"].pop(key)
    r = client.request("PUT", f"{PODS}/infer", json=current)
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["priority"] == 1000


def test_an_unknown_class_is_refused_as_upstream_does(client: Client) -> None:
    r = client.request("POST", PODS, json=pod("x", priorityClassName="foo"))
    assert r.status_code == 403
    body = r.json()
    assert body["reason"] == "Forbidden"
    assert body["message"] == 'pods "x" is forbidden: no PriorityClass with name foo was found'
    assert client.request("GET", f"{PODS}/x").status_code == 404


def test_a_pod_without_a_class_gets_the_global_default_or_zero(client: Client) -> None:
    r = client.request("POST", PODS, json=pod("plain"))
    assert (r.json()["spec"]["priority"], r.json()["spec"]["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    assert "priorityClassName" not in r.json()["spec"]
    client.request("POST", PC, json=pclass("standard", 50, globalDefault=True))
    r = client.request("POST", PODS, json=pod("defaulted"))
    assert (r.json()["spec"]["priority"], r.json()["spec"]["priorityClassName"]) == (50, "standard")


def test_a_stated_priority_must_match_the_class(client: Client) -> None:
    client.request("POST", PC, json=pclass("serve", 1000))
    r = client.request("POST", PODS, json=pod("p", priorityClassName="serve", priority=7))
    assert r.status_code == 403
    assert "the integer value of priority (7) must not be provided in pod spec; priority admission controller " \
           "computed 1000" in r.json()["message"]
    r = client.request("POST", PODS, json=pod("q", priorityClassName="serve", priority=1000))
    assert r.status_code == 201


def test_kubectl_get_pc_table(client: Client) -> None:
    client.request("POST", PC, json=pclass("serve", 1000, globalDefault=True))
    t = client.request("GET", PC, headers=TABLE).json()
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Value", "Global-Default", "Age",
                                                           "PreemptionPolicy"]
    rows = {r["cells"][0]: r["cells"] for r in t["rows"]}
    assert rows["serve"][1:3] == [1000, True] and rows["serve"][4] == "PreemptLowerPriority"
    assert rows["system-node-critical"][1:3] == [2_000_001_000, False]


def test_openapi_describes_priorityclass_from_the_upstream_types() -> None:
    d = doc(OpenApi(), "apis/scheduling.k8s.io/v1")
    schema = d["components"]["schemas"]["io.k8s.api.scheduling.v1.PriorityClass"]
    assert schema["properties"]["value"]["type"] == "integer"
    assert set(schema["properties"]) >= {"value", "globalDefault", "preemptionPolicy", "description"}
    assert "/apis/scheduling.k8s.io/v1/priorityclasses/{name}" in d["paths"]


def test_protobuf_priorityclass_as_client_go_sends_it() -> None:
    raw = field(1, field(1, "serve")) + field(2, 1000) + field(3, 1) + field(4, "inference") + field(5, "Never")
    obj = decode_object(envelope("scheduling.k8s.io/v1", "PriorityClass", raw))
    assert obj == {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "serve"},
                   "value": 1000, "globalDefault": True, "description": "inference", "preemptionPolicy": "Never"}
