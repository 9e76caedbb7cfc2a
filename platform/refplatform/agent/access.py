"""Who may call the agent's HTTP endpoints, and the record of every call it refused.

The kubelet authenticates each request on its port (a bearer token or a client certificate) and authorizes it
as a subresource of its Node: ``nodes/log`` for container logs, ``nodes/metrics``, ``nodes/healthz``,
``nodes/proxy`` for anything else.  This agent does the same from an allow-list the cluster writes
(``--client-tokens-file``, refplatform.credentials ``agent-clients.yaml``)::

    clients:
      - {user: firedrill-admin, sha256: <hex SHA-256 of the token>, endpoints: [healthz, logs, metrics, proxy]}
      - {user: tenant-a, sha256: ..., endpoints: []}

The list holds digests, never tokens, so a node holds no one else's credential.  It is re-read when the file
changes (a node started later adds its identity).  A token's digest is looked up in a dict: no comparison
loop whose timing depends on the token.

- No ``Authorization`` header, or one that is not ``Bearer <token>``: 401.
- A bearer token whose digest is not listed: 401 (authentication failed, as the kubelet answers).
- A listed identity that may not call this endpoint: 403.
- A client certificate verified by ``--client-ca-file`` counts as the API server's kubelet client (logs and
  healthz), as kube-apiserver's ``--kubelet-client-certificate`` does.

Every 401 and 403 is appended to the agent's audit log (``--audit-log-path``, default
``DIR/nodes/<node>/audit.log``) as one ``audit.k8s.io/v1`` Event JSON line, flushed before the answer is sent.
Allowed calls are not recorded (Prometheus scrapes every second).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from refplatform.agent.errors import AgentError
from refplatform.credentials import KUBELET_CLIENT_ENDPOINTS, KUBELET_CLIENT_USER, AgentEndpoint, token_digest

__all__ = ["AccessDecision", "AuditLog", "ClientList", "EndpointGuard", "endpoint_of"]

log = logging.getLogger(__name__)


class ClientListError(AgentError):
    """The allow-list file cannot be read or is malformed; the message names the file and the entry."""


def endpoint_of(parts: list[str]) -> AgentEndpoint:
    """The endpoint a request path (split at ``/``) stands for."""
    if parts in (["healthz"], ["healthz", "api"]):
        return AgentEndpoint.HEALTHZ
    if parts == ["metrics"]:
        return AgentEndpoint.METRICS
    if parts[:1] == ["containerLogs"]:
        return AgentEndpoint.LOGS
    return AgentEndpoint.PROXY


@dataclass(frozen=True)
class Client:
    """One caller the allow-list names."""

    user: str
    endpoints: frozenset[AgentEndpoint]


def parse_clients(doc: Any, where: str) -> dict[str, Client]:
    """Clients by token digest from a parsed allow-list; :class:`ClientListError` naming the bad entry."""
    entries = doc.get("clients") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ClientListError(f"{where}: expected a top-level 'clients:' list of {{user, sha256, endpoints}}")
    out: dict[str, Client] = {}
    for i, entry in enumerate(entries):
        at = f"{where}: clients[{i}]"
        if not isinstance(entry, dict) or not entry.get("user") or not isinstance(entry.get("sha256"), str):
            raise ClientListError(f"{at}: needs 'user' and 'sha256' (the hex SHA-256 of the token)")
        digest = entry["sha256"].lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ClientListError(f"{at}: 'sha256' must be 64 hex digits")
        try:
            endpoints = frozenset(AgentEndpoint(e) for e in entry.get("endpoints") or [])
        except ValueError:
            raise ClientListError(f"{at}: endpoints must be among "
                                  f"{', '.join(e.value for e in AgentEndpoint)}") from None
        out[digest] = Client(str(entry["user"]), endpoints)
    return out


class ClientList:
    """The allow-list file, re-read when its size or modification time changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._clients: dict[str, Client] = {}
        self._load()  # a bad file at start is the operator's error: fail now, naming it

    def _load(self) -> None:
        stat = os.stat(self.path)
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        try:
            doc = yaml.safe_load(self.path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ClientListError(f"cannot read {self.path}: {exc}") from None
        self._clients = parse_clients(doc, str(self.path))
        self._stamp = stamp

    def lookup(self, token: str) -> Client | None:
        with self._lock:
            try:
                self._load()
            except (OSError, ClientListError) as exc:  # a broken rewrite keeps the last good list
                log.warning("keeping the previous allow-list: %s", exc)
        return self._clients.get(token_digest(token))


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class AuditLog:
    """Appends audit.k8s.io/v1 Event lines to one file; each line is flushed before :meth:`append` returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


@dataclass(frozen=True)
class AccessDecision:
    """The answer to one request: allowed, or refused with a code and a reason."""

    code: int
    """200 when allowed, else 401 or 403."""
    user: str
    reason: str

    @property
    def allowed(self) -> bool:
        return self.code == 200


@dataclass(frozen=True)
class Request:
    """What the guard needs of one HTTP request."""

    method: str
    uri: str
    """Path and query as sent (never carries a credential)."""
    endpoint: AgentEndpoint
    authorization: str | None
    source_ip: str
    user_agent: str
    client_certificate: bool = False
    """A client certificate the agent's client CA verified was presented."""


class EndpointGuard:
    """Decides each request and records the refusals.  ``clients`` None: only client certificates are accepted."""

    def __init__(self, node: str, clients: ClientList | None, audit: AuditLog) -> None:
        self.node = node
        self.clients = clients
        self.audit = audit

    def check(self, req: Request) -> AccessDecision:
        received = datetime.now(UTC)
        decision = self._decide(req)
        if not decision.allowed:
            self._record(req, decision, received)
        return decision

    def _decide(self, req: Request) -> AccessDecision:
        what = self._what(req.endpoint)
        if req.client_certificate:
            if req.endpoint in KUBELET_CLIENT_ENDPOINTS:
                return AccessDecision(200, KUBELET_CLIENT_USER, "client certificate")
            return AccessDecision(403, KUBELET_CLIENT_USER,
                                  f"the kubelet client may not {what} (it reads logs and health only)")
        if not req.authorization:
            return AccessDecision(401, "system:anonymous", "no credentials: send Authorization: Bearer <token>")
        scheme, _, token = req.authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return AccessDecision(401, "system:anonymous", "only bearer tokens are accepted")
        client = self.clients.lookup(token) if self.clients is not None else None
        if client is None:
            return AccessDecision(401, "system:anonymous", "unknown bearer token")
        if req.endpoint not in client.endpoints:
            return AccessDecision(403, client.user, f'User "{client.user}" cannot {what} of node "{self.node}"')
        return AccessDecision(200, client.user, "allowed")

    @staticmethod
    def _what(endpoint: AgentEndpoint) -> str:
        return {AgentEndpoint.LOGS: "get resource \"nodes/log\"", AgentEndpoint.METRICS: "get resource \"nodes/metrics\"",
                AgentEndpoint.HEALTHZ: "get resource \"nodes/healthz\""}.get(endpoint, "get resource \"nodes/proxy\"")

    def _record(self, req: Request, decision: AccessDecision, received: datetime) -> None:
        reason = "Unauthorized" if decision.code == 401 else "Forbidden"
        anonymous = decision.code == 401
        event = {
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": str(uuid.uuid4()),
            "stage": "ResponseComplete", "requestURI": req.uri, "verb": "get",
            "user": {"username": decision.user,
                     "groups": ["system:unauthenticated"] if anonymous else []},
            "sourceIPs": [req.source_ip], "userAgent": req.user_agent,
            "objectRef": {"resource": "nodes", "subresource": req.endpoint.value if req.endpoint is not AgentEndpoint.LOGS
                          else "log", "name": self.node, "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "status": "Failure", "code": decision.code, "reason": reason,
                               "message": decision.reason},
            "requestReceivedTimestamp": _stamp(received), "stageTimestamp": _stamp(datetime.now(UTC)),
            "annotations": {"authorization.k8s.io/decision": "forbid",
                            "authorization.k8s.io/reason": decision.reason},
        }
        try:
            self.audit.append(event)
        except OSError:  # the refusal stands; losing its record is logged loudly
            log.exception("could not record a refused %s call in %s", req.endpoint.value, self.audit.path)
