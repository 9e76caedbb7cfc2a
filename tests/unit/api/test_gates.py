"""The authorizer (refplatform.api.gates) as a table: identity x request -> allowed or refused, and why."""

from __future__ import annotations

import pytest

from refplatform.api.auth import Identity, Role
from refplatform.api.errors import ApiError
from refplatform.api.gates import Attributes, check, decide
from refplatform.resources import (
    DEPLOYMENTS, EVENTS, LEASES, NAMESPACES, NODES, PODGROUPS, PODS, PRIORITYCLASSES, QUEUES, RESOURCEQUOTAS,
    SERVICES, VCJOBS,
)

ADMIN = Identity("firedrill-admin", Role.CLUSTER_ADMIN)
CONTROLLER = Identity("system:kube-controller-manager", Role.CONTROLLER)
SCHEDULER = Identity("system:kube-scheduler", Role.SCHEDULER)
NODE = Identity("system:node:n1", Role.NODE, node="n1")
TENANT = Identity("tenant-a", Role.TENANT, frozenset({"team-a"}))

A = Attributes
TABLE = [
    # who, request, allowed, a phrase of the reason
    (ADMIN, A("create", PODS, "team-a", "p", "binding"), True, "cluster-admin"),
    (CONTROLLER, A("delete", NODES, "", "n2"), True, "controller"),
    (SCHEDULER, A("create", PODS, "team-a", "p", "binding"), True, "pods/binding"),
    (SCHEDULER, A("create", PODS, "team-a", "p", "eviction"), True, "pods/eviction"),
    (SCHEDULER, A("patch", PODS, "team-a", "p", "status"), True, "pod status"),
    (SCHEDULER, A("delete", PODS, "team-a", "p"), True, "preemption"),
    (SCHEDULER, A("patch", PODGROUPS, "team-a", "g", "status"), True, "pod group status"),
    (SCHEDULER, A("create", EVENTS, "team-a"), True, "Events"),
    (SCHEDULER, A("list", NODES), True, "reads"),
    (SCHEDULER, A("patch", NODES, "", "n1"), False, "nothing else"),
    (SCHEDULER, A("create", PODS, "team-a"), False, "nothing else"),
    (NODE, A("watch", PODS), True, "reads"),
    (NODE, A("patch", NODES, "", "n1", "status"), True, "its own Node"),
    (NODE, A("create", NODES), True, "its own Node"),
    (NODE, A("patch", NODES, "", "n2"), False, 'only its own Node "n1"'),
    (NODE, A("patch", NODES, "", "n2", "status"), False, 'only its own Node "n1"'),
    (NODE, A("delete", NODES, "", "n1"), False, "not delete"),
    (NODE, A("update", LEASES, "kube-node-lease", "n1"), True, "its own Lease"),
    (NODE, A("update", LEASES, "kube-node-lease", "n2"), False, 'only its own Lease "n1"'),
    (NODE, A("create", LEASES, "team-a"), False, "kube-node-lease"),
    (NODE, A("patch", PODS, "team-a", "p", "status"), True, "bound to it"),
    (NODE, A("patch", PODS, "team-a", "p"), True, "firedrill.dev/*"),
    (NODE, A("delete", PODS, "team-a", "p"), True, "bound to it"),
    (NODE, A("create", PODS, "team-a", "p", "binding"), False, "may not create, bind or evict"),
    (NODE, A("create", PODS, "team-a"), False, "may not create, bind or evict"),
    (NODE, A("create", EVENTS, "team-a"), True, "Events"),
    (NODE, A("patch", VCJOBS, "team-a", "j"), True, "checkpoint"),
    (NODE, A("create", NAMESPACES), True, "kube-node-lease"),
    (NODE, A("create", SERVICES, "team-a"), False, "only its own Node and Lease"),
    (TENANT, A("create", PODS, "team-a"), True, "ordinary"),
    (TENANT, A("delete", PODS, "team-a", "p"), True, "ordinary"),
    (TENANT, A("patch", DEPLOYMENTS, "team-a", "d", "scale"), True, "ordinary"),
    (TENANT, A("get", PODS, "team-a", "p", "log"), True, "reads"),
    (TENANT, A("list", RESOURCEQUOTAS, "team-a"), True, "reads"),
    (TENANT, A("list", EVENTS, "team-a"), True, "reads"),
    (TENANT, A("create", PODS, "team-a", "p", "binding"), False, "only the scheduler"),
    (TENANT, A("create", PODS, "team-a", "p", "eviction"), False, "may not evict"),
    (TENANT, A("patch", PODS, "team-a", "p", "status"), False, "may not write status"),
    (TENANT, A("update", VCJOBS, "team-a", "j", "status"), False, "may not write status"),
    (TENANT, A("create", EVENTS, "team-a"), False, "may not write Events"),
    (TENANT, A("patch", EVENTS, "team-a", "e"), False, "may not write Events"),
    (TENANT, A("delete", EVENTS, "team-a", "e"), False, "may not write Events"),
    (TENANT, A("create", RESOURCEQUOTAS, "team-a"), False, "quota"),
    (TENANT, A("patch", RESOURCEQUOTAS, "team-a", "q"), False, "quota"),
    (TENANT, A("get", PODS, "team-b", "p"), False, '"team-b" is not one of'),
    (TENANT, A("list", PODS), False, "only inside its own namespaces"),
    (TENANT, A("list", NODES), True, "nodes"),
    (TENANT, A("get", QUEUES, "", "q"), True, "queues"),
    (TENANT, A("list", PRIORITYCLASSES), True, "priority classes"),
    (TENANT, A("get", NAMESPACES, "", "team-a"), True, "own Namespace"),
    (TENANT, A("get", NAMESPACES, "", "team-b"), False, "own Namespaces"),
    (TENANT, A("patch", NODES, "", "n1"), False, "only read"),
    (TENANT, A("create", PRIORITYCLASSES), False, "only read"),
]


@pytest.mark.parametrize(("who", "request_", "allowed", "why"), TABLE,
                         ids=[f"{w.role.value}-{r.verb}-{r.rt.plural}{'/' + r.subresource if r.subresource else ''}"
                              f"-{r.namespace or 'cluster'}-{r.name or 'all'}" for w, r, _, _ in TABLE])
def test_decision(who: Identity, request_: Attributes, allowed: bool, why: str) -> None:
    decision = decide(who, request_)
    assert decision.allowed is allowed
    assert why in decision.reason


def test_a_refusal_is_upstreams_message_with_the_reason() -> None:
    with pytest.raises(ApiError) as refused:
        check(TENANT, A("create", PODS, "team-a", "p", "binding"))
    err = refused.value
    assert (err.code, err.reason) == (403, "Forbidden")
    assert err.message == ('pods "p" is forbidden: User "tenant-a" cannot create resource "pods/binding" in API group '
                           '"" in the namespace "team-a": a tenant may not bind pods; only the scheduler may')
    assert err.why == "a tenant may not bind pods; only the scheduler may"
    assert err.to_status()["details"] == {"name": "p", "kind": "pods"}


def test_a_cluster_scoped_refusal_names_the_group_and_the_cluster_scope() -> None:
    with pytest.raises(ApiError) as refused:
        check(NODE, A("update", LEASES, "kube-node-lease", "n2"))
    assert refused.value.message.startswith(
        'leases.coordination.k8s.io "n2" is forbidden: User "system:node:n1" cannot update resource "leases" in API '
        'group "coordination.k8s.io" in the namespace "kube-node-lease": ')
    with pytest.raises(ApiError) as refused:
        check(TENANT, A("list", PODS))
    assert 'cannot list resource "pods" in API group "" at the cluster scope' in refused.value.message


def test_node_writes_any_defect_opens_other_nodes_and_leases() -> None:
    for request_ in (A("patch", NODES, "", "n2"), A("update", LEASES, "kube-node-lease", "n2"),
                     A("create", LEASES, "default")):
        assert not decide(NODE, request_).allowed
        assert decide(NODE, request_, node_writes_any=True).allowed
    assert not decide(NODE, A("create", PODS, "team-a", "p", "binding"), node_writes_any=True).allowed
