"""Asking the server about oneself: ``kubectl auth can-i``, ``kubectl auth can-i --list`` and ``kubectl auth
whoami``, answered by the same authorizer that gates every request (:mod:`refplatform.api.gates`), so a tenant
who is told "yes" is let through and one told "no" is refused.

- ``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews``: ``spec.resourceAttributes`` (``verb``,
  ``group``, ``resource``, ``subresource``, ``namespace``, ``name``) or ``spec.nonResourceAttributes``
  (``path``, ``verb``); the answer is ``status.allowed`` with the gate's reason (``status.denied`` too
  when refused, as an authorizer that says no for certain does upstream).
- ``POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews``: every verb the caller may use on every
  served resource (and subresource) in ``spec.namespace``, from the gates asked one by one.
- ``POST /apis/authentication.k8s.io/v1/selfsubjectreviews``: the caller's user name and groups.

Anyone authenticated may ask about themselves, as upstream's ``system:basic-user`` role allows; nothing is
stored.  A resource the server does not serve is allowed only to the roles that may do everything
(cluster-admin, the controller manager), because nobody else could be let through for it.  Non-resource
paths (discovery, OpenAPI, ``/version``, health) are readable (``get``) by every authenticated identity.
"""

from __future__ import annotations

from typing import Any

from refplatform.api import errors as E
from refplatform.api.audit import AuditNote
from refplatform.api.auth import Identity, Role
from refplatform.api.discovery import SUBRESOURCE_VERBS
from refplatform.api.gates import Attributes, decide
from refplatform.resources import ALL_VERBS, REGISTRY, Registry, ResourceType, Scope

Obj = dict[str, Any]
AUTHORIZATION = "authorization.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
ACCESS = ResourceType(AUTHORIZATION, "v1", "selfsubjectaccessreviews", "selfsubjectaccessreview",
                      "SelfSubjectAccessReview", Scope.CLUSTER)
RULES = ResourceType(AUTHORIZATION, "v1", "selfsubjectrulesreviews", "selfsubjectrulesreview",
                     "SelfSubjectRulesReview", Scope.CLUSTER)
WHOAMI = ResourceType(AUTHENTICATION, "v1", "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview",
                      Scope.CLUSTER)
REVIEWS = {f"/apis/{rt.group}/{rt.version}/{rt.plural}": rt for rt in (ACCESS, RULES, WHOAMI)}
"""Served, not stored: listed in discovery, never in the registry."""
EVERYTHING = (Role.CLUSTER_ADMIN, Role.CONTROLLER)
PUBLIC_NON_RESOURCE = ("/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
                       "/readyz", "/version", "/version/")


def _find(registry: Registry, group: str, resource: str) -> ResourceType | None:
    for rt in registry.types:
        if rt.group == group and rt.plural == resource:
            return rt
    return None


def access(who: Identity, spec: Obj, registry: Registry = REGISTRY, *, node_writes_any: bool = False) -> Obj:
    """The ``status`` of a SelfSubjectAccessReview of ``spec``."""
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (res is None) == (non is None):
        raise E.invalid(ACCESS, "", [E.Cause("spec", "Invalid value: exactly one of nonResourceAttributes or "
                                                     "resourceAttributes must be specified")])
    if non is not None:
        path, verb = str(non.get("path") or ""), str(non.get("verb") or "")
        if who.role in EVERYTHING:
            return {"allowed": True, "reason": f"{who.role.value} may do everything"}
        public = any(path == p or (p.endswith("*") and path.startswith(p[:-1])) for p in PUBLIC_NON_RESOURCE)
        if public and verb == "get":
            return {"allowed": True, "reason": "every authenticated identity reads discovery, OpenAPI and health"}
        return {"allowed": False, "denied": True,
                "reason": f"only cluster-admin may {verb or 'use'} {path or 'that path'}"}
    verb, group = str(res.get("verb") or ""), str(res.get("group") or "")
    resource, subresource = str(res.get("resource") or ""), str(res.get("subresource") or "")
    rt = _find(registry, group, resource)
    if rt is None or verb not in ALL_VERBS:
        if who.role in EVERYTHING:
            return {"allowed": True, "reason": f"{who.role.value} may do everything"}
        what = f"{resource}.{group}" if group else resource
        why = (f"no resource {what!r} is served here" if rt is None
               else f"the verb {verb!r} is not one of {', '.join(ALL_VERBS)}")
        return {"allowed": False, "denied": True, "reason": why}
    if subresource and (subresource not in rt.subresources or verb not in SUBRESOURCE_VERBS[subresource]):
        why = (f"{rt.plural} has no subresource {subresource!r}" if subresource not in rt.subresources
               else f"{rt.plural}/{subresource} does not serve {verb}")
        return {"allowed": False, "denied": True, "reason": why}
    namespace = str(res.get("namespace") or "") if rt.namespaced else ""
    decision = decide(who, Attributes(verb, rt, namespace, str(res.get("name") or ""), subresource),
                      node_writes_any=node_writes_any)
    answer: Obj = {"allowed": decision.allowed, "reason": decision.reason}
    if not decision.allowed:
        answer["denied"] = True
    return answer


def rules(who: Identity, namespace: str, registry: Registry = REGISTRY, *, node_writes_any: bool = False) -> Obj:
    """The ``status`` of a SelfSubjectRulesReview in ``namespace``: one rule per set of allowed verbs and API
    group, naming the resources (``pods``, ``pods/status``...) it covers."""
    if who.role in EVERYTHING:
        return {"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}], "incomplete": False}
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for rt in registry.types:
        for sub in ("", *rt.subresources):
            ns = namespace if rt.namespaced else ""
            verbs = tuple(v for v in (SUBRESOURCE_VERBS[sub] if sub else ALL_VERBS)
                          if decide(who, Attributes(v, rt, ns, "", sub), node_writes_any=node_writes_any).allowed)
            if verbs:
                grouped.setdefault((rt.group, verbs), []).append(f"{rt.plural}/{sub}" if sub else rt.plural)
    resource_rules: list[Obj] = [{"verbs": ["create"], "apiGroups": [AUTHORIZATION],
                                  "resources": [ACCESS.plural, RULES.plural]},
                                 {"verbs": ["create"], "apiGroups": [AUTHENTICATION], "resources": [WHOAMI.plural]}]
    for (group, verbs), resources in sorted(grouped.items()):
        resource_rules.append({"verbs": list(verbs), "apiGroups": [group], "resources": sorted(resources)})
    return {"resourceRules": resource_rules,
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": list(PUBLIC_NON_RESOURCE)}],
            "incomplete": False}


def review(rt: ResourceType, who: Identity, body: Any, note: AuditNote, registry: Registry = REGISTRY, *,
           node_writes_any: bool = False) -> Obj:
    """Answer one self-review ``body`` (already decoded) of kind ``rt``: the object back with its status."""
    note.rt, note.verb = rt, "create"
    note.reason = "every authenticated identity may ask what it may do and who it is"
    if not isinstance(body, dict) or body.get("kind") not in (None, rt.kind):
        raise E.bad_request(f"the body must be a {rt.kind} ({rt.group}/{rt.version})")
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise E.invalid(rt, "", [E.Cause("spec", "Invalid value: must be an object")])
    if rt is ACCESS:
        status = access(who, spec, registry, node_writes_any=node_writes_any)
    elif rt is RULES:
        status = rules(who, str(spec.get("namespace") or ""), registry, node_writes_any=node_writes_any)
    else:
        spec, status = {}, {"userInfo": {"username": who.user, "groups": list(who.groups)}}
    return {"apiVersion": f"{rt.group}/{rt.version}", "kind": rt.kind, "metadata": {"creationTimestamp": None},
            "spec": spec, "status": status}
