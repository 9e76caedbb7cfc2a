"""The API server's audit log: reading its records and finding the one that records a request.

Upstream's log backend (``kube-apiserver --audit-log-path``) appends one JSON line per audit event, an
``audit.k8s.io/v1`` ``Event``: who (``user.username``, ``userAgent``), what (``verb``, ``objectRef``), the
answer (``responseStatus.code``) and when (``stageTimestamp``).  A refusal is judged only once its record is
found here; the record's digest, the SHA-256 of its line's bytes (without the newline), goes into the
evidence, so anyone holding the log can find the very line again and check it was not changed.

Only ``ResponseComplete`` (and ``Panic``) events carry an answer; ``RequestReceived`` events and lines that
are not audit events are passed over (and counted).  A create refused before the API server read its body
(by authorization) has no ``objectRef.name``: such a record matches a create of any name, the other fields
and the request's own ``User-Agent`` (which the drill makes unique per request) telling it apart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from drills.errors import FiredrillError

__all__ = ["AuditLog", "AuditLogError", "AuditRecord", "RecordQuery", "codes_between", "find", "parse_line",
           "file_end", "first_found", "read_lines"]

ANSWERED_STAGES = frozenset({"ResponseComplete", "Panic"})
REFUSED = frozenset({403})
"""What an authorization refusal answers (Forbidden)."""
REFUSED_BY_ADMISSION = frozenset({403, 422})
"""What an admission refusal (quota) answers: upstream 403 Forbidden; 422 is accepted too."""


def codes_between(low: int, high: int) -> frozenset[int]:
    """Every HTTP code from ``low`` to ``high`` (e.g. 200-299: a write that was done)."""
    return frozenset(range(low, high + 1))


SUCCEEDED = codes_between(200, 299)


class AuditLogError(FiredrillError):
    """The audit log cannot be read."""


@dataclass(frozen=True)
class AuditRecord:
    """One audit event of the log, as the drill matches and shows it."""

    digest: str
    """SHA-256 (hex) of the line's bytes, without its newline."""
    offset: int
    """Byte offset of the line in the file."""
    audit_id: str
    stage: str
    verb: str
    user: str
    user_agent: str
    resource: str
    subresource: str
    namespace: str
    name: str
    api_group: str
    code: int | None
    reason: str = ""
    message: str = ""
    decision: str = ""
    """``authorization.k8s.io/decision`` (allow, forbid), when the server says it."""
    request_uri: str = ""
    stage_timestamp: str = ""

    def summary(self) -> dict[str, Any]:
        """What the evidence keeps of the record: enough to find the line again, and its digest."""
        return {"auditID": self.audit_id, "sha256": self.digest, "user": self.user, "verb": self.verb,
                "objectRef": {k: v for k, v in (("resource", self.resource), ("subresource", self.subresource),
                                                 ("namespace", self.namespace), ("name", self.name),
                                                 ("apiGroup", self.api_group)) if v},
                "code": self.code, "reason": self.reason, "decision": self.decision,
                "stageTimestamp": self.stage_timestamp, "userAgent": self.user_agent}

    def describe(self) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f" in {self.namespace}" if self.namespace else ""
        return (f"{self.user or '(no user)'} {self.verb} {what}{f' {self.name}' if self.name else ''}{where} -> "
                f"{self.code} (audit event {self.audit_id}, sha256 {self.digest[:16]}...)")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def parse_line(line: bytes, offset: int = 0) -> AuditRecord | None:
    """The audit event of one line (without its newline), or None when the line is not an answered audit event."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("kind") != "Event" \
            or not _text(event.get("apiVersion")).startswith("audit.k8s.io/"):
        return None
    if event.get("stage") not in ANSWERED_STAGES:
        return None
    user = event.get("user") if isinstance(event.get("user"), dict) else {}
    ref = event.get("objectRef") if isinstance(event.get("objectRef"), dict) else {}
    status = event.get("responseStatus") if isinstance(event.get("responseStatus"), dict) else {}
    annotations = event.get("annotations") if isinstance(event.get("annotations"), dict) else {}
    code = status.get("code")
    return AuditRecord(
        digest=hashlib.sha256(line).hexdigest(), offset=offset, audit_id=_text(event.get("auditID")),
        stage=_text(event.get("stage")), verb=_text(event.get("verb")), user=_text(user.get("username")),
        user_agent=_text(event.get("userAgent")), resource=_text(ref.get("resource")),
        subresource=_text(ref.get("subresource")), namespace=_text(ref.get("namespace")), name=_text(ref.get("name")),
        api_group=_text(ref.get("apiGroup")), code=code if isinstance(code, int) and not isinstance(code, bool)
        else None, reason=_text(status.get("reason")), message=_text(status.get("message")),
        decision=_text(annotations.get("authorization.k8s.io/decision")), request_uri=_text(event.get("requestURI")),
        stage_timestamp=_text(event.get("stageTimestamp")))


@dataclass(frozen=True)
class RecordQuery:
    """The record a request must have left: who, what verb, which object, what answer.

    ``name`` is matched exactly, ``name_prefix`` by prefix; a create's record without a name matches either (a
    create refused before its body was read names no object).  ``user_agent`` (the request's own, unique) must
    equal the record's when the record has one; ``not_user_agent`` excludes records of that agent (the drill's
    own requests, when the record sought is a controller's)."""

    verbs: frozenset[str]
    resource: str
    codes: frozenset[int]
    namespace: str = ""
    name: str = ""
    name_prefix: str = ""
    subresource: str = ""
    api_group: str = ""
    user: str | None = None
    """The username the record must name (None: any non-empty one)."""
    user_agent: str | None = None
    not_user_agent: str | None = None

    def matches(self, record: AuditRecord) -> bool:
        if record.verb not in self.verbs or record.resource != self.resource or record.code not in self.codes:
            return False
        if record.subresource != self.subresource or record.api_group != self.api_group:
            return False
        if record.namespace != self.namespace:
            return False
        unnamed_create = record.name == "" and record.verb == "create"
        if self.name and record.name != self.name and not unnamed_create:
            return False
        if self.name_prefix and not record.name.startswith(self.name_prefix) and not unnamed_create:
            return False
        if not record.user or (self.user is not None and record.user != self.user):
            return False
        if self.user_agent is not None and record.user_agent and record.user_agent != self.user_agent:
            return False
        if self.not_user_agent is not None and record.user_agent == self.not_user_agent:
            return False
        return True

    def describe(self) -> str:
        """The record sought, in words (for a message saying it is missing)."""
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        group = f" ({self.api_group})" if self.api_group else ""
        obj = f" {self.name}" if self.name else (f" {self.name_prefix}*" if self.name_prefix else "")
        where = f" in namespace {self.namespace}" if self.namespace else ""
        who = f"user {self.user}" if self.user is not None else "any user"
        codes = sorted(self.codes)
        answer = f"{codes[0]}-{codes[-1]}" if len(codes) > 3 else " or ".join(str(c) for c in codes)
        agent = f", User-Agent {self.user_agent}" if self.user_agent else ""
        return f"{who}, verb {'/'.join(sorted(self.verbs))}, {what}{group}{obj}{where}, code {answer}{agent}"


def find(records: Iterable[AuditRecord], query: RecordQuery) -> AuditRecord | None:
    """The first record (in log order) that ``query`` matches."""
    return next((r for r in records if query.matches(r)), None)


T = TypeVar("T")


def first_found(look: Callable[[], T | None], timeout: float, mono: Callable[[], float],
                pause: Callable[[float], Any], poll: float = 0.1) -> T | None:
    """What ``look`` finds, asking again every ``poll`` seconds (``pause``) until ``timeout`` seconds of ``mono``
    have passed; None when it found nothing by then (it is asked at least once)."""
    deadline = mono() + timeout
    while True:
        found = look()
        if found is not None:
            return found
        remaining = deadline - mono()
        if remaining <= 0:
            return None
        pause(min(poll, remaining))


def file_end(path: Path, what: str) -> int:
    """The size of an append-only log: what is written after this call starts beyond it."""
    try:
        return path.stat().st_size
    except OSError as exc:
        raise AuditLogError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def read_lines(path: Path, read_to: int, what: str) -> tuple[list[tuple[int, bytes]], int, bool]:
    """(lines, new offset, restarted): each complete, non-blank line of an append-only file from byte ``read_to``
    on, with its offset (without its newline or a carriage return); restarted: the file shrank (truncated or
    rotated), so it was read from its start.  A line still being written waits for the next call."""
    size = file_end(path, what)
    restarted = size < read_to
    start = 0 if restarted else read_to
    if size == start:
        return [], start, restarted
    try:
        with path.open("rb") as fh:
            fh.seek(start)
            data = fh.read(size - start)
    except OSError as exc:
        raise AuditLogError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    out, offset = [], start
    for raw in data[:data.rfind(b"\n") + 1].split(b"\n")[:-1]:
        line = raw.rstrip(b"\r")
        if line.strip():
            out.append((offset, line))
        offset += len(raw) + 1
    return out, offset, restarted


@dataclass
class AuditLog:
    """An append-only audit log file, read from byte offsets (the drill notes the end before each request)."""

    path: Path
    skipped: int = 0
    """Lines passed over as not being answered audit events (RequestReceived, other JSON, garbage)."""
    _cache: list[AuditRecord] = field(default_factory=list, repr=False)
    _read_to: int = 0

    def end(self) -> int:
        """The file's current size: requests made after this call leave records beyond it."""
        return file_end(self.path, "the audit log")

    def records(self, since: int = 0) -> list[AuditRecord]:
        """Every answered audit event whose line starts at or after byte ``since`` (complete lines only)."""
        self._refresh()
        return [r for r in self._cache if r.offset >= since]

    def _refresh(self) -> None:
        lines, self._read_to, restarted = read_lines(self.path, self._read_to, "the audit log")
        if restarted:  # truncated or rotated: start over (a rotated file's lines are not followed)
            self._cache = []
        for offset, raw in lines:
            record = parse_line(raw, offset)
            if record is None:
                self.skipped += 1
            else:
                self._cache.append(record)

    def wait_for(self, query: RecordQuery, since: int, timeout: float, mono: Callable[[], float],
                 pause: Callable[[float], Any], poll: float = 0.1) -> AuditRecord | None:
        """The first record after ``since`` that ``query`` matches, waiting up to ``timeout`` seconds of ``mono``
        for it to be written (``pause`` waits between reads); None when none came."""
        return first_found(lambda: find(self.records(since), query), timeout, mono, pause, poll)
