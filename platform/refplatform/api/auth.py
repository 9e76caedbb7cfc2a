"""Authentication (bearer tokens from a file) and authorization (admins and tenants).

The tokens file is YAML::

    tokens:
      - {token: "s3cret", user: admin, role: cluster-admin}
      - {token: "c0ntr", user: "system:kube-controller-manager", role: controller}
      - {token: "sch3d", user: "system:kube-scheduler", role: scheduler}
      - {token: "n0de1", user: "system:node:node-1", role: node, node: node-1}
      - {token: "t0ken", user: team-a, role: tenant, namespaces: [team-a]}

A cluster-admin may do anything.  A tenant may do anything to namespaced
objects in its own namespaces, may read nodes and queues (to see capacity) and
its own Namespace object, and nothing else: another tenant's namespace, a list
across all namespaces, or a write to a cluster-scoped object is 403 Forbidden.
Without a tokens file the server runs open, every caller an admin, and says so
when it starts.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import yaml

from refplatform.api.errors import forbidden, unauthorized
from refplatform.errors import RefPlatformError
from refplatform.resources import NAMESPACES, NODES, QUEUES, ResourceType

READ_VERBS = frozenset({"get", "list", "watch"})


class Role(Enum):
    """What a token may do."""

    CLUSTER_ADMIN = "cluster-admin"
    """Everything, everywhere: the harness (drills) and the operator."""
    TENANT = "tenant"
    """A namespace user: ordinary objects in its own namespaces; no binding, eviction, status, Events,
    quota writes or ``firedrill.dev/*`` annotations; reads nodes, queues and priority classes."""
    NODE = "node"
    """One node agent (the kubelet), as upstream's Node authorizer and NodeRestriction admit it: its own
    Node and Lease, the status and progress annotations of the pods bound to it, Events, reads."""
    CONTROLLER = "controller"
    """The controller manager: broad, but a distinct identity so the audit log names it."""
    SCHEDULER = "scheduler"
    """The scheduler: reads, pods/binding, pod and podgroup status, Events, evictions for preemption."""


class TokensFileError(RefPlatformError):
    """The tokens file cannot be read or is malformed."""


@dataclass(frozen=True)
class Identity:
    """Who a bearer token stands for."""

    user: str
    role: Role
    namespaces: frozenset[str] = frozenset()
    """A tenant's namespaces; empty for every other role."""
    node: str = ""
    """A node identity's node name (``node:`` in the tokens file); empty for every other role."""


ANONYMOUS_ADMIN = Identity("system:anonymous", Role.CLUSTER_ADMIN)


@dataclass(frozen=True)
class TokenAuthenticator:
    tokens: dict[str, Identity]

    @classmethod
    def from_file(cls, path: Path) -> "TokenAuthenticator":
        try:
            doc = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise TokensFileError(f"cannot read tokens file {path}: {exc}") from exc
        entries = (doc or {}).get("tokens") if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise TokensFileError(f"{path}: expected a top-level 'tokens:' list")
        tokens: dict[str, Identity] = {}
        for i, entry in enumerate(entries):
            where = f"{path}: tokens[{i}]"
            if not isinstance(entry, dict) or not entry.get("token") or not entry.get("user"):
                raise TokensFileError(f"{where}: needs 'token' and 'user'")
            try:
                role = Role(entry.get("role", "tenant"))
            except ValueError:
                raise TokensFileError(f"{where}: role must be one of "
                                      f"{', '.join(r.value for r in Role)}") from None
            namespaces = entry.get("namespaces") or []
            if role is Role.TENANT and not namespaces:
                raise TokensFileError(f"{where}: a tenant needs 'namespaces'")
            node = str(entry.get("node") or "")
            if role is Role.NODE and not node:
                raise TokensFileError(f"{where}: a node identity needs 'node: <node name>'")
            if node and role is not Role.NODE:
                raise TokensFileError(f"{where}: 'node' is only for role node, not {role.value}")
            tokens[str(entry["token"])] = Identity(str(entry["user"]), role, frozenset(namespaces), node)
        return cls(tokens)

    def authenticate(self, authorization: str | None) -> Identity:
        if not authorization:
            raise unauthorized("no bearer token")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("only bearer tokens are accepted")
        for known, identity in self.tokens.items():
            if hmac.compare_digest(known, token.strip()):
                return identity
        raise unauthorized("unknown token")


def authorize(who: Identity, verb: str, rt: ResourceType, namespace: str, name: str = "") -> None:
    """Raise 403 unless ``who`` may ``verb`` the object; ``namespace`` is "" for cluster scope or all."""
    if who.role is not Role.TENANT:
        return  # interim (issue 15): node, controller and scheduler gates follow in refplatform.api.gates
    if rt.namespaced:
        if namespace and namespace in who.namespaces:
            return
        raise forbidden(who.user, verb, rt, namespace, name)
    if verb in READ_VERBS and rt in (NODES, QUEUES):
        return
    if rt is NAMESPACES and verb == "get" and name in who.namespaces:
        return
    raise forbidden(who.user, verb, rt, "", name)

