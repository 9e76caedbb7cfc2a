"""Object-level restrictions (refplatform.api.restrictions) as a table: who x write -> allowed or refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from refplatform.api.auth import Identity, Role
from refplatform.api.errors import ApiError
from refplatform.api.restrictions import Restrictions, Write, only_protected_changed, protected_changes
from refplatform.resources import DEPLOYMENTS, LEASES, NAMESPACES, NODES, PODS, SERVICES, VCJOBS

Obj = dict[str, Any]
NODE = Identity("system:node:n1", Role.NODE, node="n1")
TENANT = Identity("tenant-a", Role.TENANT, frozenset({"team-a"}))
ADMIN = Identity("admin", Role.CLUSTER_ADMIN)


def pod(name: str = "p", node: str | None = "n1", annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "team-a", "resourceVersion": "7"}
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    spec: Obj = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def changed(obj: Obj, **annotations: str) -> Obj:
    new = copy.deepcopy(obj)
    new["metadata"].setdefault("annotations", {}).update(annotations)
    new["metadata"]["resourceVersion"] = "8"
    return new


def named(rt_kind: str, name: str, namespace: str = "") -> Obj:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"kind": rt_kind, "metadata": meta}


JOB = {"kind": "Job", "metadata": {"name": "train", "namespace": "team-a"}, "spec": {"minAvailable": 1}}
STORED = [pod("rank-0", "n1", labels={"volcano.sh/job-name": "train"}),
          pod("other-0", "n2", labels={"volcano.sh/job-name": "other"})]
OTHER_JOB = {**JOB, "metadata": {"name": "other", "namespace": "team-a"}}
STEP = "firedrill.dev/step"

TABLE = [
    # who, write, allowed, a phrase of the refusal
    (NODE, Write("create", NODES, "", None, named("Node", "n1")), True, ""),
    (NODE, Write("create", NODES, "", None, named("Node", "n2")), False, 'not allowed to modify node "n2"'),
    (NODE, Write("patch", NODES, "status", named("Node", "n2"), named("Node", "n2")), False, "not allowed"),
    (NODE, Write("create", LEASES, "", None, named("Lease", "n1", "kube-node-lease")), True, ""),
    (NODE, Write("create", LEASES, "", None, named("Lease", "n2", "kube-node-lease")), False, "same name"),
    (NODE, Write("create", NAMESPACES, "", None, named("Namespace", "kube-node-lease")), True, ""),
    (NODE, Write("create", NAMESPACES, "", None, named("Namespace", "team-z")), False, "only the"),
    (NODE, Write("patch", PODS, "status", pod(), pod()), True, ""),
    (NODE, Write("patch", PODS, "status", pod(node="n2"), pod(node="n2")), False, "pod status for pods with"),
    (NODE, Write("patch", PODS, "status", pod(node=None), pod(node=None)), False, "pod status for pods with"),
    (NODE, Write("patch", PODS, "", pod(), changed(pod(), **{STEP: "5"})), True, ""),
    (NODE, Write("patch", PODS, "", pod(node="n2"), changed(pod(node="n2"), **{STEP: "5"})), False,
     "can only update pods"),
    (NODE, Write("patch", PODS, "", pod(), changed(pod(), team="x")), False, "only the firedrill.dev/*"),
    (NODE, Write("delete", PODS, "", pod(), None), True, ""),
    (NODE, Write("delete", PODS, "", pod(node="n2"), None), False, "can only delete pods"),
    (NODE, Write("patch", VCJOBS, "", JOB, changed(JOB, **{"firedrill.dev/checkpoint-step": "9"})), True, ""),
    (NODE, Write("patch", VCJOBS, "", JOB, {**changed(JOB), "spec": {"minAvailable": 2}}), False,
     "annotations of a job"),
    (NODE, Write("patch", VCJOBS, "", OTHER_JOB, changed(OTHER_JOB, **{"firedrill.dev/checkpoint-step": "9"})),
     False, "a job with a pod bound to it"),
    (TENANT, Write("create", PODS, "", None, pod(node=None)), True, ""),
    (TENANT, Write("create", PODS, "", None, pod(node=None, annotations={STEP: "1"})), False, '"firedrill.dev/step"'),
    (TENANT, Write("create", PODS, "", None, pod(node="n1")), False, "spec.nodeName"),
    (TENANT, Write("patch", PODS, "", pod(node=None), changed(pod(node=None), **{STEP: "1"})), False,
     "set, change or remove"),
    (TENANT, Write("update", PODS, "", pod(node=None, annotations={STEP: "1"}), pod(node=None)), False,
     "set, change or remove"),
    (TENANT, Write("update", PODS, "", pod(node=None, annotations={STEP: "1"}),
                   changed(pod(node=None, annotations={STEP: "1"}), team="x")), True, ""),
    (TENANT, Write("patch", SERVICES, "", named("Service", "s", "team-a"),
                   changed(named("Service", "s", "team-a"), **{"firedrill.dev/load-balancer-ports": "[]"})), False,
     "firedrill.dev/load-balancer-ports"),
    (TENANT, Write("delete", PODS, "", pod(node="n1", annotations={STEP: "1"}), None), True, ""),
    (ADMIN, Write("create", PODS, "", None, pod(node="n9", annotations={STEP: "1"})), True, ""),
]


@pytest.mark.parametrize(("who", "write", "allowed", "why"), TABLE,
                         ids=[f"{i:02d}-{w.role.value}-{wr.verb}-{wr.rt.plural}" for i, (w, wr, _, _) in enumerate(TABLE)])
def test_restriction(who: Identity, write: Write, allowed: bool, why: str) -> None:
    restrictions = Restrictions(lambda ns: [p for p in STORED if p["metadata"]["namespace"] == ns])
    if allowed:
        restrictions.check(who, write)
        return
    with pytest.raises(ApiError) as refused:
        restrictions.check(who, write)
    assert refused.value.code == 403 and refused.value.reason == "Forbidden"
    assert why in refused.value.message
    assert refused.value.message.startswith(f'{write.rt.group_resource} "{write.name}" is forbidden: ')


def test_in_process_callers_are_not_restricted() -> None:
    Restrictions(lambda ns: []).check(None, Write("create", PODS, "", None, pod(node="n9", annotations={STEP: "1"})))


def test_node_writes_any_defect() -> None:
    defective = Restrictions(lambda ns: [], node_writes_any=True)
    defective.check(NODE, Write("patch", PODS, "status", pod(node="n2"), pod(node="n2")))
    defective.check(NODE, Write("create", LEASES, "", None, named("Lease", "n2", "kube-node-lease")))
    defective.check(NODE, Write("create", NODES, "", None, named("Node", "n2")))
    with pytest.raises(ApiError):  # the defect opens status, not the pod itself
        defective.check(NODE, Write("delete", PODS, "", pod(node="n2"), None))


def test_protected_changes_name_added_changed_and_removed_keys() -> None:
    old = pod(annotations={STEP: "1", "firedrill.dev/epoch": "2", "team": "a"})
    new = pod(annotations={STEP: "2", "firedrill.dev/mfu": "0.4", "team": "b"})
    assert protected_changes(old, new) == ["firedrill.dev/epoch", "firedrill.dev/mfu", STEP]
    assert protected_changes(None, pod()) == []
    assert only_protected_changed(pod(), changed(pod(), **{STEP: "3"}))
    assert not only_protected_changed(pod(), changed(pod(), team="a"))


def test_an_object_stored_without_status_gains_no_change_from_an_empty_one() -> None:
    """An update gives a status-less object (a Job a client created, before its controller wrote a status) an
    empty status; that alone is no change, so a node's checkpoint annotation patch stays allowed."""
    stored = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
              "metadata": {"name": "j", "namespace": "team-a", "annotations": {"firedrill.dev/epoch": "0"}}}
    patched = changed(stored, **{STEP: "5"})
    patched["status"] = {}
    assert only_protected_changed(stored, patched)
    patched["status"] = {"state": {"phase": "Running"}}
    assert not only_protected_changed(stored, patched)


@pytest.mark.parametrize("rt, body", [
    (DEPLOYMENTS, {"spec": {"template": {"metadata": {"annotations": {STEP: "9000"}}}}}),
    (VCJOBS, {"spec": {"tasks": [{"name": "w", "template": {}}, {"name": "x", "template": {
        "metadata": {"annotations": {STEP: "9000"}}}}]}}),
], ids=["deployment", "vcjob"])
def test_a_tenant_cannot_smuggle_platform_annotations_through_a_pod_template(rt: Any, body: Obj) -> None:
    """The pods a controller makes from a template carry its annotations: a tenant's template may not hold any
    firedrill.dev/* annotation, or its pods would start with forged progress (what the leak report bills)."""
    new = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "w", "namespace": "team-a"}, **body}
    with pytest.raises(ApiError) as refused:
        Restrictions(lambda ns: []).check(TENANT, Write("create", rt, "", None, new))
    assert refused.value.code == 403 and "template" in refused.value.message and STEP in refused.value.message
    Restrictions(lambda ns: []).check(ADMIN, Write("create", rt, "", None, new))  # the harness may
    plain = copy.deepcopy(new)
    plain["spec"] = {"template": {"metadata": {"annotations": {"team": "a"}}}}
    Restrictions(lambda ns: []).check(TENANT, Write("create", rt, "", None, plain))
