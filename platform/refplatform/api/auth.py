"""Authentication: who a bearer token stands for, read from the tokens file.

The tokens file is YAML::

    tokens:
      - {token: "s3cret", user: admin, role: cluster-admin}
      - {token: "c0ntr", user: "system:kube-controller-manager", role: controller}
      - {token: "sch3d", user: "system:kube-scheduler", role: scheduler}
      - {token: "n0de1", user: "system:node:node-1", role: node, node: node-1}
      - {token: "t0ken", user: team-a, role: tenant, namespaces: [team-a]}

What each role may do is :mod:`refplatform.api.gates` (per request) and
:mod:`refplatform.api.restrictions` (per object).  The file is read again when a
token is presented that it did not hold and the file has changed since, so a
node's token can be added when its agent starts (write the whole file, then
rename it into place).  Without a tokens file the server runs open, every caller
an admin, and says so when it starts.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import yaml

from refplatform.api.errors import unauthorized
from refplatform.errors import RefPlatformError

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


#: The groups each role's user is in, as the audit log and a TokenReview name them (upstream's groups).
ROLE_GROUPS: dict[Role, tuple[str, ...]] = {
    Role.CLUSTER_ADMIN: ("system:masters", "system:authenticated"),
    Role.TENANT: ("system:authenticated",),
    Role.NODE: ("system:nodes", "system:authenticated"),
    Role.CONTROLLER: ("system:authenticated",),
    Role.SCHEDULER: ("system:authenticated",),
}


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

    @property
    def groups(self) -> tuple[str, ...]:
        return ROLE_GROUPS[self.role]


ANONYMOUS_ADMIN = Identity("system:anonymous", Role.CLUSTER_ADMIN)
"""Every caller of a server started without a tokens file."""
UNAUTHENTICATED = "system:anonymous"
"""The user name an audit record gives a request that no token vouched for."""


def parse_tokens(doc: object, where: str) -> dict[str, Identity]:
    """The identities of a parsed tokens file, by token; :class:`TokensFileError` naming the bad entry."""
    entries = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise TokensFileError(f"{where}: expected a top-level 'tokens:' list")
    tokens: dict[str, Identity] = {}
    for i, entry in enumerate(entries):
        at = f"{where}: tokens[{i}]"
        if not isinstance(entry, dict) or not entry.get("token") or not entry.get("user"):
            raise TokensFileError(f"{at}: needs 'token' and 'user'")
        try:
            role = Role(entry.get("role", "tenant"))
        except ValueError:
            raise TokensFileError(f"{at}: role must be one of {', '.join(r.value for r in Role)}") from None
        namespaces = entry.get("namespaces") or []
        if not isinstance(namespaces, list) or not all(isinstance(n, str) and n for n in namespaces):
            raise TokensFileError(f"{at}: 'namespaces' must be a list of namespace names")
        if role is Role.TENANT and not namespaces:
            raise TokensFileError(f"{at}: a tenant needs 'namespaces'")
        if namespaces and role is not Role.TENANT:
            raise TokensFileError(f"{at}: 'namespaces' is only for role tenant, not {role.value}")
        node = str(entry.get("node") or "")
        if role is Role.NODE and not node:
            raise TokensFileError(f"{at}: a node identity needs 'node: <node name>'")
        if node and role is not Role.NODE:
            raise TokensFileError(f"{at}: 'node' is only for role node, not {role.value}")
        token = str(entry["token"])
        if token in tokens:
            raise TokensFileError(f"{at}: the same token is given twice; each identity needs its own")
        tokens[token] = Identity(str(entry["user"]), role, frozenset(namespaces), node)
    return tokens


def _digests(tokens: dict[str, Identity]) -> dict[bytes, Identity]:
    return {hashlib.sha256(token.encode()).digest(): who for token, who in tokens.items()}


@dataclass
class TokenAuthenticator:
    """Bearer tokens to identities; ``path`` (when read from a file) is re-read when it changes."""

    tokens: dict[str, Identity]
    path: Path | None = None
    _stamp: tuple[int, int] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _by_digest: dict[bytes, Identity] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_digest = _digests(self.tokens)

    @classmethod
    def from_file(cls, path: Path) -> TokenAuthenticator:
        path = Path(path)
        stamp = _stamp(path)
        return cls(_read(path), path, stamp)

    def authenticate(self, authorization: str | None) -> Identity:
        if not authorization:
            raise unauthorized("no bearer token")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("only bearer tokens are accepted")
        who = self._find(token)
        if who is None and self._reload():
            who = self._find(token)
        if who is None:
            raise unauthorized("unknown token")
        return who

    def _find(self, token: str) -> Identity | None:
        """Looked up by the token's SHA-256: the time taken depends on a hash of the token, never on how much of
        it matches a known one, and stays flat with a thousand node identities (a loop of compare_digest took
        221 us a request at 1,000 tokens)."""
        return self._by_digest.get(hashlib.sha256(token.encode()).digest())

    def _reload(self) -> bool:
        """Read the file again if it changed since it was read; True when the tokens were replaced.  A file
        that became unreadable or malformed keeps the tokens read before (refusing a token is the safe side)."""
        if self.path is None:
            return False
        with self._lock:
            try:
                stamp = _stamp(self.path)
            except TokensFileError:
                return False
            if stamp == self._stamp:
                return False
            try:
                tokens = _read(self.path)
            except TokensFileError:
                return False
            self.tokens, self._by_digest, self._stamp = tokens, _digests(tokens), stamp
            return True


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise TokensFileError(f"cannot read tokens file {path}: {exc.strerror}") from exc
    return (st.st_mtime_ns, st.st_size)


def _read(path: Path) -> dict[str, Identity]:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TokensFileError(f"cannot read tokens file {path}: {exc}") from exc
    return parse_tokens(doc or {}, str(path))

