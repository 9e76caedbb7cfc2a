"""Discovery documents: what kubectl and the official client read before anything else.

kubectl fails outright when ``/api``, ``/apis`` or ``/api/v1`` is missing, so
these are served from the resource registry, never hand-listed.
"""

from __future__ import annotations

import platform as _platform
from typing import Any

from refplatform import KUBE_VERSION
from refplatform.resources import ALL_VERBS, REGISTRY, Registry, ResourceType

LEAK_REPORT_GROUPS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "firedrill.dev": {"v1alpha1": [{"name": "leakreport", "singularName": "leakreport", "namespaced": False,
                                    "kind": "LeakReport", "verbs": ["get"]}]},
}
"""The leak report (refplatform.api.leakreport), read-only; it has an OpenAPI document."""
REVIEW_GROUPS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "authorization.k8s.io": {"v1": [
        {"name": "selfsubjectaccessreviews", "singularName": "selfsubjectaccessreview", "namespaced": False,
         "kind": "SelfSubjectAccessReview", "verbs": ["create"]},
        {"name": "selfsubjectrulesreviews", "singularName": "selfsubjectrulesreview", "namespaced": False,
         "kind": "SelfSubjectRulesReview", "verbs": ["create"]}]},
    "authentication.k8s.io": {"v1": [
        {"name": "selfsubjectreviews", "singularName": "selfsubjectreview", "namespaced": False,
         "kind": "SelfSubjectReview", "verbs": ["create"]},
        {"name": "tokenreviews", "singularName": "tokenreview", "namespaced": False, "kind": "TokenReview",
         "verbs": ["create"]}]},
}
"""Reviews, created and answered, never stored (refplatform.api.accessreview, refplatform.api.tokenreview)."""
EXTRA_GROUPS = {**LEAK_REPORT_GROUPS, **REVIEW_GROUPS}
"""Groups served outside the resource registry."""

SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "log": ["get"],
                     "eviction": ["create"], "binding": ["create"], "scale": ["get", "patch", "update"]}


def version() -> dict[str, Any]:
    major, minor = KUBE_VERSION.lstrip("v").split(".")[:2]
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(_platform.machine(), _platform.machine())
    return {"major": major, "minor": minor, "gitVersion": KUBE_VERSION, "gitCommit": "",
            "gitTreeState": "clean", "buildDate": "2026-11-30T00:00:00Z", "goVersion": "n/a",
            "compiler": "n/a", "platform": f"linux/{machine}"}


def core_versions() -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def group_list(registry: Registry = REGISTRY) -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, vs) for g, vs in registry.groups().items()]
            + [_group(g, list(vs)) for g, vs in EXTRA_GROUPS.items()]}


def group(name: str, registry: Registry = REGISTRY) -> dict[str, Any] | None:
    versions = registry.groups().get(name) or list(EXTRA_GROUPS.get(name, {}))
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _entries(rt: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                             "kind": rt.kind, "verbs": list(ALL_VERBS)}
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    out = [entry]
    for sub in rt.subresources:
        kind = {"binding": "Binding", "eviction": "Eviction", "scale": "Scale"}.get(sub, rt.kind)
        sub_entry: dict[str, Any] = {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                                     "kind": kind, "verbs": SUBRESOURCE_VERBS[sub]}
        if sub == "scale":  # the Scale kind lives in autoscaling/v1, as upstream says in discovery
            sub_entry.update(group="autoscaling", version="v1")
        if sub == "eviction":  # kubectl drain evicts only when discovery names the Eviction's group and version
            sub_entry.update(group="policy", version="v1")
        out.append(sub_entry)
    return out


def resource_list(group_name: str, version_name: str, registry: Registry = REGISTRY) -> dict[str, Any] | None:
    types = registry.in_group_version(group_name, version_name)
    extra = EXTRA_GROUPS.get(group_name, {}).get(version_name)
    if extra is not None:
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group_name}/{version_name}",
                "resources": [dict(e) for e in extra]}
    if not types:
        return None
    gv = f"{group_name}/{version_name}" if group_name else version_name
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": [e for rt in types for e in _entries(rt)]}
