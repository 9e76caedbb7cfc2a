"""Authorization: may this identity make this request?  Decided from the request alone (verb, resource,
subresource, namespace, name), as upstream's authorizers decide; what depends on the object itself (is the
pod bound to this node? which annotations change?) is :mod:`refplatform.api.restrictions`.

=============  ================================================================================================
role           may
=============  ================================================================================================
cluster-admin  everything
controller     everything (a distinct identity, so the audit log names the controller manager)
scheduler      read everything; create ``pods/binding`` and ``pods/eviction``; update/patch/delete pods
               (the GPU-index annotation, preemption); pod and pod group status; Events.  No Node writes
node           read everything; create/update/patch its own Node (and status); create/update/patch/delete its
               own Lease in ``kube-node-lease``; the status, ``firedrill.dev/*`` annotations and final delete
               of pods bound to it; ``firedrill.dev/*`` checkpoint annotations of a Volcano Job with a pod
               on it; Events; the ``kube-node-lease`` Namespace when missing (the object checks:
               :mod:`refplatform.api.restrictions`)
tenant         in its own namespaces: read everything, write ordinary objects.  Not ``pods/binding``,
               ``pods/eviction``, any ``*/status``, Event writes, ResourceQuota writes (nor ``firedrill.dev/*``
               annotations or ``spec.nodeName``: :mod:`refplatform.api.restrictions`).  Cluster scope:
               read nodes, queues and priority classes, get its own Namespaces
=============  ================================================================================================

Each decision carries a short reason: a refusal's goes after upstream's message (``pods "x" is forbidden:
User "u" cannot create resource "pods/binding" in API group "" in the namespace "ns": <reason>``) and both
go to the audit log (``authorization.k8s.io/reason``).
"""

from __future__ import annotations

from dataclasses import dataclass

from refplatform.api import errors as E
from refplatform.api.auth import Identity, Role
from refplatform.resources import (
    EVENTS, LEASES, NAMESPACES, NODES, PODGROUPS, PODS, PRIORITYCLASSES, QUEUES, RESOURCEQUOTAS, VCJOBS,
    ResourceType,
)

READ_VERBS = frozenset({"get", "list", "watch"})
WRITE_VERBS = frozenset({"update", "patch"})
LEASE_NAMESPACE = "kube-node-lease"


@dataclass(frozen=True)
class Attributes:
    """What a request asks for, as upstream's ``authorizer.Attributes`` (resource requests only)."""

    verb: str
    """get, list, watch, create, update, patch or delete."""
    rt: ResourceType
    namespace: str = ""
    """"" for a cluster-scoped object, or a list/watch across every namespace."""
    name: str = ""
    """"" for a collection (list, watch, create)."""
    subresource: str = ""


@dataclass(frozen=True)
class Decision:
    """An authorizer's answer, with the reason the audit log gives."""

    allowed: bool
    reason: str


def allow(reason: str) -> Decision:
    return Decision(True, reason)


def deny(reason: str) -> Decision:
    return Decision(False, reason)


def decide(who: Identity, a: Attributes, *, node_writes_any: bool = False) -> Decision:
    """May ``who`` make the request ``a``?  ``node_writes_any``: the ``node-writes-any`` defect (a node may
    write any Node and any Lease; docs/DEFECTS.md), off on an honest server."""
    if who.role is Role.CLUSTER_ADMIN:
        return allow("cluster-admin")
    if who.role is Role.CONTROLLER:
        return allow("controller manager")
    if who.role is Role.SCHEDULER:
        return _scheduler(a)
    if who.role is Role.NODE:
        return _node(who.node, a, node_writes_any)
    return _tenant(who, a)


def check(who: Identity, a: Attributes, *, node_writes_any: bool = False) -> Decision:
    """:func:`decide`, raising upstream's 403 Forbidden (with the reason) when refused."""
    decision = decide(who, a, node_writes_any=node_writes_any)
    if not decision.allowed:
        raise E.forbidden(who.user, a.verb, a.rt, a.namespace, a.name, a.subresource, decision.reason)
    return decision


def _scheduler(a: Attributes) -> Decision:
    if a.verb in READ_VERBS:
        return allow("the scheduler reads the cluster")
    if a.rt is PODS:
        if a.subresource in ("binding", "eviction") and a.verb == "create":
            return allow(f"the scheduler creates pods/{a.subresource}")
        if a.subresource == "status" and a.verb in WRITE_VERBS:
            return allow("the scheduler writes pod status (conditions, nominated node)")
        if a.subresource == "" and (a.verb in WRITE_VERBS or a.verb == "delete"):
            return allow("the scheduler annotates pods with their GPUs and deletes preemption victims")
    if a.rt is PODGROUPS and a.subresource == "status" and a.verb in WRITE_VERBS:
        return allow("the scheduler writes pod group status")
    if a.rt is EVENTS and a.verb in ("create", "update", "patch"):
        return allow("the scheduler records Events")
    return deny("the scheduler may bind, evict and delete pods and write pod and pod group status and Events, "
                "nothing else")


def _node(node: str, a: Attributes, writes_any: bool) -> Decision:
    if a.verb in READ_VERBS:
        return allow(f"node {node} reads what its pods need")
    if a.rt is NODES:
        if a.verb == "delete" or a.subresource not in ("", "status"):
            return deny(f"node {node} may create and update its own Node, not delete one")
        if a.verb == "create" or a.name == node or writes_any:
            return allow(f"node {node} writes its own Node")
        return deny(f'node {node} may write only its own Node "{node}"')
    if a.rt is LEASES:
        if writes_any:
            return allow(f"node {node} writes its own Lease")
        if a.namespace != LEASE_NAMESPACE:
            return deny(f'node {node} may write only its own Lease in namespace "{LEASE_NAMESPACE}"')
        if a.verb == "create" or a.name == node:
            return allow(f"node {node} writes its own Lease")
        return deny(f'node {node} may write only its own Lease "{node}" (can only access node lease with the '
                    "same name as the requesting node)")
    if a.rt is NAMESPACES and a.verb == "create":
        return allow(f'node {node} creates the "{LEASE_NAMESPACE}" Namespace when it is missing')
    if a.rt is PODS:
        if a.subresource == "status" and a.verb in WRITE_VERBS:
            return allow(f"node {node} reports the status of a pod bound to it")
        if a.subresource == "" and a.verb in WRITE_VERBS:
            return allow(f"node {node} writes firedrill.dev/* annotations of a pod bound to it")
        if a.subresource == "" and a.verb == "delete":
            return allow(f"node {node} deletes a pod bound to it once its containers stopped")
        return deny(f"node {node} may not create, bind or evict pods")
    if a.rt is EVENTS and a.verb in ("create", "update", "patch"):
        return allow(f"node {node} records Events")
    if a.rt is VCJOBS and a.subresource == "" and a.verb in WRITE_VERBS:
        return allow(f"node {node} records a checkpoint of a job with a rank on it")
    return deny(f"node {node} may write only its own Node and Lease, the status of pods bound to it, and Events")


def _tenant(who: Identity, a: Attributes) -> Decision:
    rt = a.rt
    if rt.namespaced:
        if not a.namespace:
            return deny(f"a tenant may {a.verb} only inside its own namespaces "
                        f"({', '.join(sorted(who.namespaces))})")
        if a.namespace not in who.namespaces:
            return deny(f'namespace "{a.namespace}" is not one of the tenant\'s namespaces '
                        f"({', '.join(sorted(who.namespaces))})")
        if a.verb in READ_VERBS:
            return allow("a tenant reads in its own namespace")
        if a.subresource == "binding":
            return deny("a tenant may not bind pods; only the scheduler may")
        if a.subresource == "eviction":
            return deny("a tenant may not evict pods; evictions are the scheduler's and the node lifecycle's "
                        "(delete your own pod instead)")
        if a.subresource == "status":
            return deny("a tenant may not write status; the platform's components report it")
        if rt is EVENTS:
            return deny("a tenant may not write Events; they are the platform's record of what happened")
        if rt is RESOURCEQUOTAS:
            return deny("a tenant may not change its namespace's quota; a cluster-admin sets it")
        return allow("a tenant writes ordinary objects in its own namespace")
    if a.verb in READ_VERBS and rt in (NODES, QUEUES, PRIORITYCLASSES):
        return allow("a tenant reads nodes, queues and priority classes")
    if rt is NAMESPACES and a.verb == "get" and a.name in who.namespaces:
        return allow("a tenant reads its own Namespace")
    return deny("a tenant may only read nodes, queues and priority classes and get its own Namespaces")
