"""What the harness's identity may do on a cluster: the permissions the chosen scenarios need, as RBAC objects to
grant, and the pre-flight that asks the API server whether it has each one before anything is created.

A drill kind states its permissions (:meth:`drills.scenario.drill.Drill.permissions`) from the profile it runs
with (the flavor decides which gang objects it writes, the fault method whether it deletes Nodes or creates a
pod in ``kube-system``).  ``firedrill rbac`` prints the least-privilege Role and ClusterRole for them; every run on
a real cluster asks a ``SelfSubjectAccessReview`` for each (the check ``kubectl auth can-i`` makes) and refuses
to start while any is missing, naming each and the command that grants it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from drills.errors import FiredrillError
from drills.kube.driver import KubeError

CLUSTER = ""
"""``Permission.namespace`` of a cluster-scoped resource, or of a read across every namespace (a ClusterRole)."""


class AccessDenied(FiredrillError):
    """The harness's identity lacks permissions the chosen scenarios need; ``missing`` lists them."""

    def __init__(self, message: str, missing: Sequence[Permission]) -> None:
        super().__init__(message)
        self.missing = list(missing)


@dataclass(frozen=True, order=True)
class Permission:
    """One verb on one resource (``pods/log``: resource ``pods``, subresource ``log``) in one namespace, or
    cluster-wide (:data:`CLUSTER`); ``why`` says which drill needs it (for the refusal and the Role's comments)."""

    namespace: str
    group: str
    resource: str
    verb: str
    subresource: str = ""
    why: str = ""

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.namespace, self.group, self.resource, self.subresource, self.verb)

    @property
    def resource_name(self) -> str:
        """The resource as an RBAC rule and ``kubectl auth can-i`` write it (``pods/log``)."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def describe(self) -> str:
        group = f".{self.group}" if self.group else ""
        where = f" in namespace {self.namespace}" if self.namespace else " (cluster-wide)"
        return f"{self.verb} {self.resource_name}{group}{where}"

    def can_i(self) -> str:
        """The ``kubectl auth can-i`` line that checks it by hand."""
        group = f".{self.group}" if self.group else ""
        where = f" -n {self.namespace}" if self.namespace else " --all-namespaces"
        return f"kubectl auth can-i {self.verb} {self.resource_name}{group}{where}"


def grant(namespace: str, group: str, resource: str, verbs: Iterable[str], why: str,
          subresource: str = "") -> list[Permission]:
    """One permission per verb (the shape every kind writes its needs in)."""
    return [Permission(namespace, group, resource, verb, subresource, why) for verb in verbs]


READ = ("get", "list", "watch")
MANAGE = ("get", "list", "watch", "create", "delete")


def merged(permissions: Iterable[Permission]) -> list[Permission]:
    """Each (namespace, resource, verb) once, in a stable order, its reasons joined; a namespace's permission that
    the same cluster-wide one covers (a ClusterRoleBinding grants it in every namespace) is dropped."""
    seen: dict[tuple[str, str, str, str, str], Permission] = {}
    for p in permissions:
        known = seen.get(p.key)
        if known is None:
            seen[p.key] = p
        elif p.why and p.why not in known.why.split("; "):
            seen[p.key] = replace(known, why=f"{known.why}; {p.why}")
    cluster = {(g, r, s, v) for (ns, g, r, s, v) in seen if ns == CLUSTER}
    kept = [p for p in seen.values() if p.namespace == CLUSTER or (p.group, p.resource, p.subresource, p.verb)
            not in cluster]
    return sorted(kept, key=lambda p: p.key)


@dataclass(frozen=True)
class Subject:
    """Who is granted the Role: a ServiceAccount (``namespace`` set) or a user."""

    name: str
    namespace: str | None = None

    @classmethod
    def parse(cls, text: str) -> Subject:
        """``serviceaccount:NS:NAME`` or ``user:NAME``; a bare ``NS:NAME`` is a ServiceAccount."""
        parts = text.split(":")
        if len(parts) == 3 and parts[0] == "serviceaccount" and parts[1] and parts[2]:
            return cls(parts[2], parts[1])
        if len(parts) == 2 and parts[0] == "user" and parts[1]:
            return cls(parts[1])
        if len(parts) == 2 and all(parts):
            return cls(parts[1], parts[0])
        raise FiredrillError(f"subject {text!r}: write serviceaccount:NAMESPACE:NAME or user:NAME")

    def manifest(self) -> dict[str, Any]:
        if self.namespace is None:
            return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": self.name}
        return {"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}

    def describe(self) -> str:
        return f"serviceaccount:{self.namespace}:{self.name}" if self.namespace else f"user:{self.name}"


ROLE_NAME = "firedrill"


def _rules(permissions: Iterable[Permission]) -> list[dict[str, Any]]:
    """RBAC rules: one per (group, resource), its verbs sorted; groups and resources in a stable order."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for p in permissions:
        verbs.setdefault((p.group, p.resource_name), set()).add(p.verb)
    return [{"apiGroups": [group], "resources": [resource], "verbs": sorted(vs)}
            for (group, resource), vs in sorted(verbs.items())]


def role_manifests(permissions: Iterable[Permission], subject: Subject,
                   name: str = ROLE_NAME) -> list[dict[str, Any]]:
    """A ClusterRole and its binding for the cluster-wide permissions, and a Role and RoleBinding per namespace:
    exactly the permissions given, nothing more."""
    by_ns: dict[str, list[Permission]] = {}
    for p in merged(permissions):
        by_ns.setdefault(p.namespace, []).append(p)
    rbac = "rbac.authorization.k8s.io/v1"
    out: list[dict[str, Any]] = []
    for ns in sorted(by_ns):
        rules = _rules(by_ns[ns])
        if ns == CLUSTER:
            out.append({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
            out.append({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": name},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                        "subjects": [subject.manifest()]})
        else:
            out.append({"apiVersion": rbac, "kind": "Role", "metadata": {"name": name, "namespace": ns},
                        "rules": rules})
            out.append({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                        "subjects": [subject.manifest()]})
    return out


def access_review(p: Permission) -> dict[str, Any]:
    """The ``SelfSubjectAccessReview`` that asks whether the caller may do ``p``."""
    attrs = {"verb": p.verb, "group": p.group, "resource": p.resource}
    if p.subresource:
        attrs["subresource"] = p.subresource
    if p.namespace:
        attrs["namespace"] = p.namespace
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}}


SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


class AccessUnchecked(FiredrillError):
    """The API server does not serve SelfSubjectAccessReview (some older or trimmed API servers), so the
    permissions could not be asked about; the run goes on and says so."""


def missing_permissions(driver: Any, permissions: Iterable[Permission]) -> list[Permission]:
    """Ask the API server about each permission (one SelfSubjectAccessReview each); the ones it denies.  Raises
    :class:`AccessUnchecked` where the server does not serve the review (404)."""
    missing = []
    for p in merged(permissions):
        try:
            answer = driver.request("POST", SSAR_PATH, access_review(p))
        except KubeError as exc:
            if exc.code == 404:
                raise AccessUnchecked(f"the API server does not serve {SSAR_PATH} ({exc}), so the permissions the "
                                      "features need were not checked before the run") from None
            raise
        if not (answer.get("status") or {}).get("allowed", False):
            missing.append(p)
    return missing


def refusal(missing: Sequence[Permission], rbac_command: str) -> str:
    """What a run that lacks permissions says before it creates anything: each one, how to check it by hand,
    and how to grant them all."""
    lines = [f"the identity in the kubeconfig lacks {len(missing)} permission(s) the chosen scenarios need; "
             "nothing was created:"]
    for p in missing:
        lines.append(f"  - {p.describe()}: {p.why}  (check: {p.can_i()})")
    lines.append(f"grant them with: {rbac_command} | kubectl apply -f -   (docs/REAL_CLUSTERS.md, step 4)")
    return "\n".join(lines)
