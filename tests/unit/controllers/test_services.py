"""Serving controllers (issue 14 item 2): the pure cores, and the glue over the fake API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refplatform.api.openapi import OpenApi
from refplatform.api.protobuf import decode_object, message_for, message_table
from refplatform.api.validation import validate
from refplatform.controllers.deployment import (
    DeploymentController, PodView, ReplicaSetController, ReplicaSetView, build_pod, build_replicaset,
    plan_deployment, plan_replicaset, template_hash,
)
from refplatform.controllers.endpoints import SERVICE_NAME, desired_slice
from refplatform.controllers.loadbalancer import (
    Backend, LoadBalancerError, RoundRobin, listen_port, merged_backends, ready_backends,
)
from refplatform.resources import DEPLOYMENTS, PODS, REGISTRY, REPLICASETS, SERVICES, ResourceType

from ..api.test_protobuf import envelope, field
from .fakes import FakeApi, path_of

Obj = dict[str, Any]


def pv(name: str, phase: str = "Running", ready: bool = True, deleting: bool = False, created: str = "") -> PodView:
    return PodView(name, f"uid-{name}", phase, ready, deleting, created)


# ------------------------------------------------------------------ ReplicaSet
def test_replicaset_creates_the_missing_pods_and_counts_ready_ones() -> None:
    plan = plan_replicaset(3, 4, [pv("a"), pv("b", "Pending", ready=False)])
    assert plan.create == 1 and plan.delete == ()
    assert plan.status.as_dict() == {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1,
                                     "observedGeneration": 4}


def test_replicaset_replaces_failed_and_deleted_pods() -> None:
    plan = plan_replicaset(2, 1, [pv("a"), pv("b", "Failed", ready=False), pv("c", deleting=True)])
    assert plan.delete == ("b",)        # the failed pod goes; the deleting one is already going
    assert plan.create == 1             # one live pod of two
    assert plan.status.replicas == 1


def test_replicaset_counts_pods_it_created_but_has_not_seen() -> None:
    assert plan_replicaset(2, 1, [pv("a")], pending_creates=1).create == 0
    assert plan_replicaset(2, 1, [], pending_creates=1).create == 1


def test_replicaset_scales_down_not_ready_then_newest_first() -> None:
    pods = [pv("old", created="2026-01-01T00:00:00Z"), pv("new", created="2026-01-02T00:00:00Z"),
            pv("mid", created="2026-01-01T12:00:00Z"), pv("cold", ready=False, created="2025-01-01T00:00:00Z")]
    plan = plan_replicaset(2, 1, pods)
    assert plan.create == 0
    assert plan.delete == ("cold", "new")
    assert plan_replicaset(0, 1, pods).delete == ("cold", "new", "mid", "old")


# ------------------------------------------------------------------ Deployment
def test_deployment_creates_the_replicaset_of_its_template() -> None:
    plan = plan_deployment(2, 1, "abc", [])
    assert plan.create and plan.scale == ()


def test_deployment_scales_its_replicaset_and_sums_status() -> None:
    owned = [ReplicaSetView("d-abc", "abc", 2, replicas=2, ready_replicas=1, available_replicas=1)]
    plan = plan_deployment(3, 2, "abc", owned)
    assert not plan.create and plan.scale == (("d-abc", 3),)
    assert plan.status.as_dict() == {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 1,
                                     "availableReplicas": 1, "observedGeneration": 2}


def test_deployment_rollout_creates_the_new_and_scales_old_to_zero() -> None:
    owned = [ReplicaSetView("d-old", "old", 2, replicas=2, ready_replicas=2, available_replicas=2),
             ReplicaSetView("d-older", "older", 0)]
    plan = plan_deployment(2, 3, "new", owned)
    assert plan.create
    assert plan.scale == (("d-old", 0),)  # the one already at 0 is left alone
    assert plan.status.updated_replicas == 0 and plan.status.ready_replicas == 2


def deployment(replicas: int = 2, image: str = "python") -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "d-uid", "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


def test_template_hash_is_stable_and_follows_the_template() -> None:
    d = deployment()
    h = template_hash(d["spec"]["template"])
    assert h == template_hash(deployment(replicas=5)["spec"]["template"])
    assert h != template_hash(deployment(image="other")["spec"]["template"])
    assert len(h) == 10 and all(c in "0123456789abcdef" for c in h)


def test_built_replicaset_and_pod_carry_hash_and_owners() -> None:
    d = deployment()
    h = template_hash(d["spec"]["template"])
    rs = build_replicaset(d, h)
    assert rs["metadata"]["name"] == f"web-{h}"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": h}
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "d-uid"
    assert validate(DEPLOYMENTS, rs) == []  # a ReplicaSet validates like a Deployment
    rs["metadata"]["uid"] = "rs-uid"
    pod = build_pod(rs)
    assert pod["metadata"]["generateName"] == f"web-{h}-"
    assert pod["metadata"]["labels"] == {"app": "web", "pod-template-hash": h}
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"web-{h}",
                                                   "uid": "rs-uid", "controller": True, "blockOwnerDeletion": True}]


def test_validation_names_a_selector_that_misses_the_template() -> None:
    d = deployment()
    d["spec"]["selector"]["matchLabels"] = {"app": "other"}
    causes = validate(DEPLOYMENTS, d)
    assert [c.field for c in causes] == ["spec.template.metadata.labels"]
    d = deployment()
    del d["spec"]["replicas"]
    assert validate(DEPLOYMENTS, d) == [] and d["spec"]["replicas"] == 1


# ------------------------------------------------------------------ Services and EndpointSlices
def service(kind: str = "LoadBalancer", target: Any = 8000) -> Obj:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default", "uid": "s"},
            "spec": {"type": kind, "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": target}]}}


def pod(name: str, ip: str | None, ready: bool = True, ns: str = "default", app: str = "web",
        deleting: bool = False, phase: str = "Running") -> Obj:
    meta: Obj = {"name": name, "namespace": ns, "uid": f"u-{name}", "labels": {"app": app}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: Obj = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "spec": {"nodeName": "n1", "containers": [
        {"name": "c", "ports": [{"name": "serve", "containerPort": 8001}]}]}, "status": status}


def test_service_validation_defaults_and_names_bad_ports() -> None:
    svc = service()
    del svc["spec"]["ports"][0]["targetPort"]
    assert validate(SERVICES, svc) == []
    assert svc["spec"]["ports"][0]["targetPort"] == 80 and svc["spec"]["ports"][0]["protocol"] == "TCP"
    svc = service(kind="NodePort")
    svc["spec"]["ports"][0]["port"] = 70000
    assert sorted(c.field for c in validate(SERVICES, svc)) == ["spec.ports[0].port", "spec.type"]


def test_slice_lists_selected_pods_with_ips_and_their_readiness() -> None:
    pods = [pod("b", "127.10.0.3"), pod("a", "127.10.0.2", ready=False), pod("nip", None),
            pod("other", "127.10.0.4", app="x"), pod("elsewhere", "127.10.0.5", ns="kube-system"),
            pod("gone", "127.10.0.6", deleting=True), pod("done", "127.10.0.7", phase="Failed")]
    es = desired_slice(service(), pods)
    assert es is not None
    assert es["metadata"]["labels"][SERVICE_NAME] == "web" and es["addressType"] == "IPv4"
    assert [(e["addresses"], e["conditions"]["ready"]) for e in es["endpoints"]] == [
        (["127.10.0.2"], False), (["127.10.0.3"], True), (["127.10.0.6"], False)]
    assert es["endpoints"][2]["conditions"]["terminating"] is True
    assert es["ports"] == [{"name": "http", "port": 8000, "protocol": "TCP"}]
    assert desired_slice(service(target="serve"), pods)["ports"][0]["port"] == 8001  # type: ignore[index]
    no_selector = service()
    del no_selector["spec"]["selector"]
    assert desired_slice(no_selector, pods) is None


# ------------------------------------------------------------------ load balancer
def test_load_balancer_routes_round_robin_to_ready_endpoints_only() -> None:
    es = desired_slice(service(), [pod("a", "127.10.0.2"), pod("b", "127.10.0.3"), pod("c", "127.10.0.4", False)])
    assert es is not None
    backends = ready_backends(service(), [es])
    assert backends == {80: (Backend("127.10.0.2", 8000), Backend("127.10.0.3", 8000))}
    rr = RoundRobin()
    assert rr.order() == []
    rr.update(backends[80])
    firsts = [rr.order()[0].ip for _ in range(4)]
    assert firsts == ["127.10.0.2", "127.10.0.3", "127.10.0.2", "127.10.0.3"]
    assert rr.order() == [Backend("127.10.0.2", 8000), Backend("127.10.0.3", 8000)]  # the rest are fallbacks
    rr.update((Backend("127.10.0.3", 8000),))  # a.ip disappeared: new connections go elsewhere
    assert {rr.order()[0].ip for _ in range(3)} == {"127.10.0.3"}


def test_listen_port_reads_the_annotation_and_names_a_bad_one() -> None:
    svc = service()
    assert listen_port(svc, 80) is None
    svc["metadata"]["annotations"] = {"firedrill.dev/load-balancer-ports": '{"80": 41234}'}
    assert listen_port(svc, 80) == 41234 and listen_port(svc, 81) is None
    svc["metadata"]["annotations"] = {"firedrill.dev/load-balancer-ports": "80=41234"}
    with pytest.raises(LoadBalancerError, match="load-balancer-ports of service web"):
        listen_port(svc, 80)


# ------------------------------------------------------------------ served like the other built-in kinds
def test_new_kinds_have_upstream_schemas_and_protobuf_messages() -> None:
    for api_version, kind, message in (("apps/v1", "Deployment", "k8s.io.api.apps.v1.Deployment"),
                                       ("apps/v1", "ReplicaSet", "k8s.io.api.apps.v1.ReplicaSet"),
                                       ("v1", "Service", "k8s.io.api.core.v1.Service"),
                                       ("discovery.k8s.io/v1", "EndpointSlice",
                                        "k8s.io.api.discovery.v1.EndpointSlice")):
        assert message_for(api_version, kind) == message
        assert message in message_table()
    doc = OpenApi().document("apis/apps/v1")
    assert doc is not None
    body = json.loads(doc.body)
    assert "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/status" in body["paths"]
    kinds = {g["kind"] for s in body["components"]["schemas"].values()
             for g in s.get("x-kubernetes-group-version-kind") or []}
    assert {"Deployment", "DeploymentList", "ReplicaSet", "ReplicaSetList"} <= kinds
    assert REGISTRY.find("discovery.k8s.io", "v1", "endpointslices") is not None


# ------------------------------------------------------------------ the glue, over the fake API
class StaleCache:
    """A cache frozen at one instant: what an informer shows before it catches up with the controller's writes."""

    def __init__(self, api: FakeApi) -> None:
        fresh = api.cache()
        self.objects = {rt.key: fresh.list(rt) for rt in (DEPLOYMENTS, REPLICASETS, PODS)}

    def list(self, rt: ResourceType) -> list[Obj]:
        return [dict(o) for o in self.objects[rt.key]]

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return next((o for o in self.objects[rt.key] if o["metadata"]["name"] == name), None)


def test_replicaset_controller_never_doubles_pods_while_its_cache_lags() -> None:
    api, now = FakeApi(), [0.0]
    d = deployment()
    api.put(DEPLOYMENTS, d)
    rs = build_replicaset(api.find(DEPLOYMENTS, "default", "web"), "abc")  # type: ignore[arg-type]
    api.put(REPLICASETS, rs)
    ctrl = ReplicaSetController(api, clock=lambda: now[0])  # type: ignore[arg-type]
    stale = StaleCache(api)                       # no pods yet, and it stays that way
    ctrl.reconcile(stale)  # type: ignore[arg-type]
    assert len(api.cache().list(PODS)) == 2
    ctrl.reconcile(stale)  # type: ignore[arg-type]
    assert len(api.cache().list(PODS)) == 2       # the two it created and has not seen count as live
    now[0] = 31.0                                 # past the expectation timeout: they are given up on
    ctrl.reconcile(stale)  # type: ignore[arg-type]
    assert len(api.cache().list(PODS)) == 4
    status = api.find(REPLICASETS, "default", "web-abc")["status"]  # type: ignore[index]
    assert status == {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "observedGeneration": 1}


def test_controllers_create_owned_objects_and_collect_orphans() -> None:
    api = FakeApi()
    api.put(DEPLOYMENTS, deployment())
    DeploymentController(api).reconcile(api.cache())  # type: ignore[arg-type]
    sets = api.cache().list(REPLICASETS)
    assert len(sets) == 1 and sets[0]["spec"]["replicas"] == 2
    DeploymentController(api).reconcile(api.cache())  # type: ignore[arg-type]
    assert len(api.cache().list(REPLICASETS)) == 1
    rsc = ReplicaSetController(api)  # type: ignore[arg-type]
    rsc.reconcile(api.cache())  # type: ignore[arg-type]
    assert len(api.cache().list(PODS)) == 2
    del api.objects[path_of(DEPLOYMENTS, "default", "web")]
    DeploymentController(api).reconcile(api.cache())  # type: ignore[arg-type]
    assert api.cache().list(REPLICASETS) == []
    rsc.reconcile(api.cache())  # type: ignore[arg-type]
    assert api.cache().list(PODS) == []           # the fake deletes unbound pods at once


def test_a_protobuf_deployment_decodes_as_client_go_sends_it() -> None:
    labels = field(1, field(1, "app") + field(2, "web"))  # map entry: key, value
    pod_spec = field(2, field(1, "c") + field(2, "i"))  # PodSpec.containers: name, image
    template = field(1, field(11, field(1, "app") + field(2, "web"))) + field(2, pod_spec)
    spec = field(1, 3) + field(2, labels) + field(3, template)
    d = decode_object(envelope("apps/v1", "Deployment", field(1, field(1, "web")) + field(2, spec)))
    assert d["apiVersion"] == "apps/v1" and d["kind"] == "Deployment" and d["metadata"]["name"] == "web"
    assert d["spec"]["replicas"] == 3 and d["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    assert d["spec"]["template"]["metadata"]["labels"] == {"app": "web"}
    assert d["spec"]["template"]["spec"]["containers"][0]["name"] == "c"
    assert validate(DEPLOYMENTS, d) == []


def test_the_stale_backends_defect_never_drops_a_backend() -> None:
    a, b, c = Backend("127.0.0.2", 8000), Backend("127.0.0.3", 8000), Backend("127.0.0.4", 8000)
    assert merged_backends((a, b, c), (a, c)) == (a, b, c)  # b left the endpoints, the defect keeps it
    assert merged_backends((a, b), (b, c)) == (a, b, c)  # a new one is still added, after the old ones
    assert merged_backends((), (a,)) == (a,)
