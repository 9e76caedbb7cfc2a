"""Who is who on the embedded cluster: one identity per component, each with its own token.

:class:`Credentials` keeps, under one data directory (every file mode 0600)::

    DIR/tokens.yaml              the API server's --tokens-file: every identity below but the kubelet client
    DIR/admin-token              firedrill-admin (cluster-admin): the harness and the operator
    DIR/controller-token         system:kube-controller-manager (role controller)
    DIR/scheduler-token          system:kube-scheduler (role scheduler)
    DIR/node-<node>.token        system:node:<node> (role node), written when that node's agent is started
    DIR/kubelet-client-token     the API server's kubelet client (its log proxy); no API identity at all
    DIR/agent-clients.yaml       the node agents' allow-list: a SHA-256 digest per token (never a token)
                                 and the agent endpoints each identity may call
    DIR/kubeconfig, DIR/tenant-a.kubeconfig, DIR/tenant-b.kubeconfig, DIR/node-<node>.kubeconfig

Tokens are made once and kept across restarts; an entry missing from an older tokens file is added.
Each file is written whole to a temporary name and renamed into place, so a reader (the API server
re-reads the tokens file, agents re-read the allow-list) never sees half of one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from refplatform.errors import RefPlatformError

TOKENS_FILE = "tokens.yaml"
AGENT_CLIENTS_FILE = "agent-clients.yaml"
KUBECONFIG_FILE = "kubeconfig"
CONTEXT = "firedrill"

ADMIN_USER = "firedrill-admin"
CONTROLLER_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"
KUBELET_CLIENT_USER = "system:kube-apiserver-kubelet-client"
NODE_USER_PREFIX = "system:node:"


class CredentialsError(RefPlatformError):
    """A credentials file cannot be read or is malformed; the message names the file and the fix."""


class AgentEndpoint(Enum):
    """An HTTP endpoint of a node agent (the kubelet's subresource of ``nodes`` it stands for)."""

    LOGS = "logs"
    """``/containerLogs/...``: container logs (``nodes/log``), read by the API server's log proxy."""
    METRICS = "metrics"
    """``/metrics``: the node's DCGM-style GPU metrics (``nodes/metrics``), scraped by Prometheus or the harness."""
    HEALTHZ = "healthz"
    """``/healthz``: whether the agent is healthy (``nodes/healthz``), probed by the healer and the peer agents."""
    PROXY = "proxy"
    """Any other path (``nodes/proxy``): answered 404 after the check, but only a cluster-admin gets that far."""


ALL_ENDPOINTS = frozenset(AgentEndpoint)


@dataclass(frozen=True)
class Tenant:
    """A namespace user of the embedded cluster and its kubeconfig."""

    user: str
    namespace: str

    @property
    def kubeconfig_name(self) -> str:
        return f"{self.user}.kubeconfig"


TENANTS = (Tenant("tenant-a", "firedrill-tenant"), Tenant("tenant-b", "firedrill-neighbour"))
"""The contract's tenants (issue 15): tenant-a in firedrill-tenant, tenant-b in firedrill-neighbour."""


@dataclass(frozen=True)
class Component:
    """One identity in the tokens file that a process of the cluster uses, and the file its token goes in."""

    user: str
    role: str
    token_file: str
    endpoints: frozenset[AgentEndpoint]
    """The agent endpoints this identity may call."""


ADMIN = Component(ADMIN_USER, "cluster-admin", "admin-token", ALL_ENDPOINTS)
CONTROLLER = Component(CONTROLLER_USER, "controller", "controller-token", frozenset({AgentEndpoint.HEALTHZ}))
SCHEDULER = Component(SCHEDULER_USER, "scheduler", "scheduler-token", frozenset())
KUBELET_CLIENT_TOKEN_FILE = "kubelet-client-token"
KUBELET_CLIENT_ENDPOINTS = frozenset({AgentEndpoint.LOGS, AgentEndpoint.HEALTHZ})
NODE_ENDPOINTS = frozenset({AgentEndpoint.HEALTHZ})
"""A node identity may ask its peers' /healthz (the self-fence asks whether they reach the API)."""


def node_user(node: str) -> str:
    return NODE_USER_PREFIX + node


def token_digest(token: str) -> str:
    """The hex SHA-256 of a token: what the agents' allow-list holds instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600, atomically (a temporary file renamed into place)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


class Credentials:
    """The tokens of one data directory.  Thread-safe; every write rewrites the files it changes."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / TOKENS_FILE
        self._lock = threading.Lock()

    # ------------------------------------------------------------ tokens file
    def _entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        try:
            doc = yaml.safe_load(self.path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise CredentialsError(f"cannot read {self.path}: {exc}; fix it or delete it to start afresh") from None
        entries = (doc or {}).get("tokens") if isinstance(doc, dict) else None
        if entries is None:
            entries = []
        if not isinstance(entries, list) or not all(isinstance(e, dict) and e.get("token") and e.get("user")
                                                    for e in entries):
            raise CredentialsError(f"{self.path}: expected 'tokens:' as a list of {{token, user, role}} entries; "
                                   "fix it or delete it to start afresh")
        return entries

    def _save(self, entries: list[dict[str, Any]]) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.path, yaml.safe_dump({"tokens": entries}, sort_keys=False))

    def ensure(self, user: str, role: str, **extra: Any) -> str:
        """The token of ``user``, adding an entry ``{token, user, role, **extra}`` when there is none."""
        return self.ensure_many([(user, role, extra)])[user]

    def ensure_many(self, wanted: Iterable[tuple[str, str, dict[str, Any]]]) -> dict[str, str]:
        """Tokens by user for each ``(user, role, extra)``, adding the missing entries in one write."""
        with self._lock:
            entries = self._entries()
            by_user = {str(e["user"]): e for e in entries}
            out: dict[str, str] = {}
            changed = False
            for user, role, extra in wanted:
                entry = by_user.get(user)
                if entry is None:
                    entry = {"token": secrets.token_urlsafe(32), "user": user, "role": role, **extra}
                    entries.append(entry)
                    by_user[user] = entry
                    changed = True
                elif str(entry.get("role", "tenant")) != role:
                    raise CredentialsError(f"{self.path}: user {user!r} has role {entry.get('role')!r}, not {role!r}; "
                                           "fix the entry or delete the file to start afresh")
                out[user] = str(entry["token"])
            if changed:
                self._save(entries)
            return out

    def all_tokens(self) -> list[str]:
        """Every secret of this directory (tokens file and kubelet client): what must never be printed."""
        found = [str(e["token"]) for e in self._entries()]
        kubelet = self.data_dir / KUBELET_CLIENT_TOKEN_FILE
        if kubelet.exists():
            found.append(kubelet.read_text().strip())
        return [t for t in found if t]

    # ------------------------------------------------------------ token files
    def token_file(self, name: str, token: str) -> Path:
        """``DIR/<name>`` holding ``token`` (0600), rewritten only when it differs."""
        path = self.data_dir / name
        if not path.exists() or path.read_text() != token:
            write_private(path, token)
        return path

    def component(self, component: Component) -> tuple[str, Path]:
        """The token of a component and the file that holds it."""
        token = self.ensure(component.user, component.role)
        return token, self.token_file(component.token_file, token)

    def node(self, node: str) -> tuple[str, Path]:
        """The node identity of ``node`` (made on first use) and its token file ``DIR/node-<node>.token``."""
        token = self.ensure(node_user(node), "node", node=node)
        self.write_agent_clients()
        return token, self.token_file(f"node-{node}.token", token)

    def kubelet_client(self) -> Path:
        """``DIR/kubelet-client-token``: the API server's credential towards the agents (made on first use)."""
        path = self.data_dir / KUBELET_CLIENT_TOKEN_FILE
        if not path.exists() or not path.read_text().strip():
            write_private(path, secrets.token_urlsafe(32))
        return path

    def bootstrap(self, nodes: Iterable[str] = ()) -> dict[str, str]:
        """Every identity a cluster starts with (admin, controllers, scheduler, tenants, kubelet client, and
        the nodes it knows of already), made once; returns tokens by user and rewrites the agents' allow-list.
        A node started later gets its identity from :meth:`node`."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tokens = self.ensure_many([
            (ADMIN.user, ADMIN.role, {}), (CONTROLLER.user, CONTROLLER.role, {}),
            (SCHEDULER.user, SCHEDULER.role, {}),
            *((t.user, "tenant", {"namespaces": [t.namespace]}) for t in TENANTS),
            *((node_user(n), "node", {"node": n}) for n in nodes)])
        for component in (ADMIN, CONTROLLER, SCHEDULER):
            self.token_file(component.token_file, tokens[component.user])
        self.kubelet_client()
        self.write_agent_clients()
        return tokens

    # ------------------------------------------------------------ agents' allow-list
    def write_agent_clients(self) -> Path:
        """``DIR/agent-clients.yaml``: who may call which agent endpoint, by token digest.

        Every identity of the tokens file is listed (those allowed nothing too, so the agent tells 403,
        "known but not allowed", from 401, "unknown"), plus the kubelet client."""
        endpoints = {ADMIN.role: ADMIN.endpoints, CONTROLLER.role: CONTROLLER.endpoints, "node": NODE_ENDPOINTS}
        clients = [{"user": str(e["user"]), "sha256": token_digest(str(e["token"])),
                    "endpoints": sorted(p.value for p in endpoints.get(str(e.get("role", "tenant")), frozenset()))}
                   for e in self._entries()]
        kubelet = self.kubelet_client().read_text().strip()
        clients.append({"user": KUBELET_CLIENT_USER, "sha256": token_digest(kubelet),
                        "endpoints": sorted(p.value for p in KUBELET_CLIENT_ENDPOINTS)})
        path = self.data_dir / AGENT_CLIENTS_FILE
        text = ("# Who may call the node agents' HTTP endpoints (refplatform.agent.access): the SHA-256 of each\n"
                "# bearer token, never the token.  Written by refplatform.cluster from tokens.yaml.\n"
                + yaml.safe_dump({"clients": clients}, sort_keys=False))
        if not path.exists() or path.read_text() != text:
            write_private(path, text)
        return path

    # ------------------------------------------------------------ kubeconfigs
    def kubeconfig(self, name: str, url: str, user: str, token: str, ca_cert: Path,
                   namespace: str = "default") -> Path:
        """``DIR/<name>``: a kubeconfig for ``user`` (mode 0600), the cluster's server and CA."""
        ca_data = base64.b64encode(ca_cert.read_bytes()).decode()
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": CONTEXT, "preferences": {},
            "clusters": [{"name": CONTEXT, "cluster": {"server": url, "certificate-authority-data": ca_data}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user, "namespace": namespace}}],
        }
        path = self.data_dir / name
        write_private(path, yaml.safe_dump(doc))
        return path
