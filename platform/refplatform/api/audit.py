"""The audit log: one upstream ``audit.k8s.io/v1`` ``Event`` per audited request, as JSON lines in a file.

What is audited (``--audit-log-path``; DATA_DIR/audit.log by default):

- every mutating request (create, update, patch, delete), allowed or not;
- every refused request (401 Unauthorized, 403 Forbidden: the gates, quota, admission), reads included;
- every read (get, list, watch, and non-resource reads such as discovery) when ``--audit-reads`` is given.

Each line is a ``kind: Event``, ``apiVersion: audit.k8s.io/v1`` object at level ``Metadata``: ``auditID``,
``stage`` (``ResponseComplete``; ``ResponseStarted`` for a watch, whose record is written when its stream
starts), ``requestURI``, ``verb`` (the Kubernetes verb; a non-resource request's is the HTTP method, lower
case), ``user`` (``username``, ``groups``), ``sourceIPs``, ``userAgent``, ``objectRef`` (``resource``,
``subresource``, ``namespace``, ``name``, ``apiGroup``, ``apiVersion``; empty fields left out, as upstream
does), ``responseStatus`` (``metadata``, ``code``; on a failure also ``status: Failure``, ``reason`` and
``message``), ``requestReceivedTimestamp`` and ``stageTimestamp`` (RFC 3339, microseconds, UTC) and the
annotations ``authorization.k8s.io/decision`` (``allow`` or ``forbid``) and
``authorization.k8s.io/reason`` (why).  A request no token vouched for is ``system:anonymous`` in group
``system:unauthenticated``.

A line is written (one ``write`` to a file opened for appending, mode 0600) before the response is sent, so a
refusal the client saw is always on disk; nothing is buffered in the process.  The ``unrecorded-refusals``
defect (docs/DEFECTS.md) drops the lines of refused requests.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from refplatform import jsoncodec
from refplatform.api.auth import UNAUTHENTICATED, Identity
from refplatform.api.errors import ApiError
from refplatform.resources import ResourceType

Obj = dict[str, Any]
Clock = Callable[[], datetime]

MUTATING_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
REFUSAL_CODES = frozenset({401, 403})
DECISION = "authorization.k8s.io/decision"
REASON = "authorization.k8s.io/reason"
STATE_KEY = "audit"


def micro_time(when: datetime) -> str:
    """RFC 3339 in UTC with microseconds, as upstream stamps audit events."""
    if when.tzinfo is not timezone.utc:
        when = when.astimezone(timezone.utc)
    return when.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


@dataclass
class AuditNote:
    """What the request handler learned about a request, for its audit record."""

    verb: str = ""
    who: Identity | None = None
    rt: ResourceType | None = None
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    reason: str = ""
    """Why the authorizer allowed it (a refusal's why travels on :attr:`error`)."""
    error: ApiError | None = None
    skip: bool = False
    """A request that is not audited at all (health probes, the dashboard's static files)."""
    received: datetime | None = field(default=None, repr=False)


def note_of(request: Request) -> AuditNote:
    """The request's :class:`AuditNote` (created on first use)."""
    state = request.scope.setdefault("state", {})
    note = state.get(STATE_KEY)
    if not isinstance(note, AuditNote):
        note = state[STATE_KEY] = AuditNote()
    return note


class AuditLog:
    """Appends audit events to a file; ``include_reads`` is ``--audit-reads``; ``record_refusals=False`` is the
    ``unrecorded-refusals`` defect."""

    def __init__(self, path: Path, *, include_reads: bool = False, record_refusals: bool = True) -> None:
        self.path = Path(path)
        self.include_reads = include_reads
        self.record_refusals = record_refusals
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def wants(self, verb: str, code: int) -> bool:
        if code in REFUSAL_CODES:
            return self.record_refusals
        return verb in MUTATING_VERBS or self.include_reads

    def append(self, event: Obj) -> None:
        line = jsoncodec.dumps(event) + b"\n"
        view = memoryview(line)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def build_event(note: AuditNote, scope: Scope, code: int, stage: str, received: datetime, now: datetime) -> Obj:
    """The ``audit.k8s.io/v1`` Event of one request."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
    query = scope.get("query_string", b"").decode("latin-1")
    client = scope.get("client")
    who = note.who
    user: Obj = {"username": who.user, "groups": list(who.groups)} if who is not None else \
        {"username": UNAUTHENTICATED, "groups": ["system:unauthenticated"]}
    event: Obj = {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": str(uuid.uuid4()),
        "stage": stage, "requestURI": scope.get("path", "") + (f"?{query}" if query else ""),
        "verb": note.verb or str(scope.get("method", "")).lower(), "user": user,
        "sourceIPs": [client[0]] if client else [], "userAgent": headers.get("user-agent", ""),
    }
    if note.rt is not None:
        ref = {"resource": note.rt.plural, "subresource": note.subresource, "namespace": note.namespace,
               "name": note.name, "apiGroup": note.rt.group, "apiVersion": note.rt.version}
        event["objectRef"] = {k: v for k, v in ref.items() if v}
    status: Obj = {"metadata": {}, "code": code}
    refused = code in REFUSAL_CODES
    if code >= 400:
        err = note.error
        status.update(status="Failure", reason=err.reason if err else "", message=err.message if err else "")
    event["responseStatus"] = status
    event["requestReceivedTimestamp"] = micro_time(received)
    event["stageTimestamp"] = micro_time(now)
    if refused:
        why = (note.error.why or note.error.message) if note.error else ""
        event["annotations"] = {DECISION: "forbid", REASON: why}
    else:
        event["annotations"] = {DECISION: "allow", REASON: note.reason}
    return event


class AuditMiddleware:
    """ASGI middleware: writes each audited request's Event when its response starts, before a byte of it
    is sent (the handler's :class:`AuditNote` says who, what and why)."""

    def __init__(self, app: ASGIApp, log: AuditLog, clock: Clock) -> None:
        self.app = app
        self.log = log
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        received = self.clock()
        state = scope.setdefault("state", {})
        note = state[STATE_KEY] = AuditNote(received=received)

        async def send_audited(message: Message) -> None:
            if message["type"] == "http.response.start" and not note.skip:
                code = int(message["status"])
                verb = note.verb or str(scope.get("method", "")).lower()
                if self.log.wants(verb, code):
                    stage = "ResponseStarted" if verb == "watch" and code < 400 else "ResponseComplete"
                    self.log.append(build_event(note, scope, code, stage, received, self.clock()))
            await send(message)

        await self.app(scope, receive, send_audited)
