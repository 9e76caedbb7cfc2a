"""The audit log as the governance drill reads it: which line records which request (tables), its digest, and
reading a file that grows while it is read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from drills.kinds.governance.audit import (
    REFUSED, REFUSED_BY_ADMISSION, SUCCEEDED, AuditLog, AuditLogError, RecordQuery, find, parse_line,
)


def event(verb: str = "list", user: str = "tenant-a", resource: str = "pods", namespace: str = "team-b",
          name: str = "", subresource: str = "", group: str = "", code: int = 403, agent: str = "fd/1",
          stage: str = "ResponseComplete", **extra: Any) -> dict[str, Any]:
    ref = {"resource": resource, "subresource": subresource, "namespace": namespace, "name": name, "apiGroup": group}
    out = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": "a-1", "stage": stage,
           "requestURI": "/api/v1/...", "verb": verb, "user": {"username": user, "groups": []},
           "sourceIPs": ["127.0.0.1"], "userAgent": agent, "objectRef": {k: v for k, v in ref.items() if v},
           "responseStatus": {"metadata": {}, "code": code, **({"status": "Failure", "reason": "Forbidden"}
                                                               if code >= 400 else {})},
           "stageTimestamp": "2026-01-01T00:00:00.000001Z",
           "annotations": {"authorization.k8s.io/decision": "forbid" if code == 403 else "allow"}}
    out.update(extra)
    return out


def line(ev: dict[str, Any]) -> bytes:
    return json.dumps(ev, separators=(",", ":")).encode()


LIST_OTHER = RecordQuery(frozenset({"list"}), "pods", REFUSED, namespace="team-b", user="tenant-a", user_agent="fd/1")
BIND = RecordQuery(frozenset({"create"}), "pods", REFUSED, namespace="team-a", name="p", subresource="binding",
                   user="tenant-a", user_agent="fd/2")
LEASE = RecordQuery(frozenset({"patch"}), "leases", REFUSED, namespace="kube-node-lease", name="node-1",
                    api_group="coordination.k8s.io", user="system:node:node-0", user_agent="fd/3")
QUOTA = RecordQuery(frozenset({"create"}), "pods", REFUSED_BY_ADMISSION, namespace="team-a", name="q",
                    user="tenant-a", user_agent="fd/4")
CONTROLLER = RecordQuery(frozenset({"create"}), "pods", REFUSED_BY_ADMISSION, namespace="team-a", name_prefix="job-",
                         not_user_agent="fd/5")
HELD = RecordQuery(frozenset({"patch", "update"}), "pods", SUCCEEDED, namespace="team-a", name="low",
                   subresource="status", not_user_agent="fd/6")

MATCHES: list[tuple[str, RecordQuery, dict[str, Any], bool]] = [
    ("the refused list", LIST_OTHER, event(), True),
    ("another user", LIST_OTHER, event(user="tenant-b"), False),
    ("no user at all", LIST_OTHER, event(user=""), False),
    ("another verb", LIST_OTHER, event(verb="get"), False),
    ("another namespace", LIST_OTHER, event(namespace="team-a"), False),
    ("allowed, not refused", LIST_OTHER, event(code=200), False),
    ("another request of the same user (its own User-Agent)", LIST_OTHER, event(agent="fd/9"), False),
    ("a record without a User-Agent still matches on the rest", LIST_OTHER, event(agent=""), True),
    ("the refused binding", BIND, event(verb="create", namespace="team-a", name="p", subresource="binding",
                                        agent="fd/2"), True),
    ("a create of the pod, not its binding", BIND, event(verb="create", namespace="team-a", name="p", agent="fd/2"),
     False),
    ("binding of another pod", BIND, event(verb="create", namespace="team-a", name="x", subresource="binding",
                                           agent="fd/2"), False),
    ("another node's Lease", LEASE, event(verb="patch", user="system:node:node-0", resource="leases",
                                          namespace="kube-node-lease", name="node-1", group="coordination.k8s.io",
                                          agent="fd/3"), True),
    ("the Lease in another API group", LEASE, event(verb="patch", user="system:node:node-0", resource="leases",
                                                    namespace="kube-node-lease", name="node-1", agent="fd/3"), False),
    ("the Lease written as someone else", LEASE, event(verb="patch", user="system:admin", resource="leases",
                                                       namespace="kube-node-lease", name="node-1",
                                                       group="coordination.k8s.io", agent="fd/3"), False),
    ("quota refusal 403", QUOTA, event(verb="create", namespace="team-a", name="q", agent="fd/4"), True),
    ("quota refusal 422", QUOTA, event(verb="create", namespace="team-a", name="q", agent="fd/4", code=422), True),
    ("a create refused before its body was read names no object", QUOTA,
     event(verb="create", namespace="team-a", name="", agent="fd/4"), True),
    ("a delete without a name is not a create", RecordQuery(frozenset({"delete"}), "pods", REFUSED, name="q"),
     event(verb="delete", namespace="", name=""), False),
    ("the controller's refused create of the job's pod", CONTROLLER,
     event(verb="create", user="system:kube-controller-manager", namespace="team-a", name="job-worker-0",
           agent="vc-controller"), True),
    ("the tenant's own create is not the controller's", CONTROLLER,
     event(verb="create", namespace="team-a", name="job-worker-0", agent="fd/5"), False),
    ("a pod of another job", CONTROLLER,
     event(verb="create", user="system:kube-controller-manager", namespace="team-a", name="other-0", agent="c"),
     False),
    ("the scheduler's status write", HELD,
     event(verb="patch", user="system:kube-scheduler", namespace="team-a", name="low", subresource="status",
           code=200, agent="sched"), True),
    ("the tenant's own status write does not count", HELD,
     event(verb="patch", namespace="team-a", name="low", subresource="status", code=200, agent="fd/6"), False),
    ("a refused status write does not count", HELD,
     event(verb="patch", user="system:kube-scheduler", namespace="team-a", name="low", subresource="status",
           code=403, agent="sched"), False),
]


@pytest.mark.parametrize("query,ev,expected", [pytest.param(q, e, x, id=i) for i, q, e, x in MATCHES])
def test_which_record_answers_which_request(query: RecordQuery, ev: dict[str, Any], expected: bool) -> None:
    record = parse_line(line(ev))
    assert record is not None
    assert query.matches(record) is expected


NOT_EVENTS: list[tuple[str, bytes]] = [
    ("garbage", b"not json"),
    ("a JSON list", b"[1, 2]"),
    ("another kind", line({**event(), "kind": "EventList"})),
    ("another API", line({**event(), "apiVersion": "v1"})),
    ("the request stage has no answer", line(event(stage="RequestReceived"))),
]


@pytest.mark.parametrize("raw", [pytest.param(r, id=i) for i, r in NOT_EVENTS])
def test_lines_that_are_no_answered_audit_event_are_passed_over(raw: bytes) -> None:
    assert parse_line(raw) is None


def test_the_digest_is_the_sha256_of_the_line_without_its_newline() -> None:
    raw = line(event())
    record = parse_line(raw, offset=7)
    assert record is not None and record.offset == 7
    assert record.digest == hashlib.sha256(raw).hexdigest()
    summary = record.summary()
    assert summary["sha256"] == record.digest and summary["objectRef"] == {"resource": "pods", "namespace": "team-b"}
    assert summary["decision"] == "forbid" and summary["code"] == 403


def test_a_query_says_in_words_what_it_seeks() -> None:
    assert LEASE.describe() == ("user system:node:node-0, verb patch, leases (coordination.k8s.io) node-1 in "
                                "namespace kube-node-lease, code 403, User-Agent fd/3")
    assert "code 200-299" in HELD.describe() and "any user" in HELD.describe()
    assert "code 403 or 422" in QUOTA.describe()


def test_the_log_is_read_from_an_offset_and_a_half_written_line_waits(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    first, second = line(event(agent="fd/0")), line(event(agent="fd/1"))
    path.write_bytes(first + b"\n" + b"garbage\n")
    log = AuditLog(path)
    since = log.end()
    assert [r.user_agent for r in log.records()] == ["fd/0"] and log.skipped == 1
    assert log.records(since) == []
    with path.open("ab") as fh:
        fh.write(second[:20])  # the server is still writing this line
    assert log.records(since) == [] and find(log.records(since), LIST_OTHER) is None
    with path.open("ab") as fh:
        fh.write(second[20:] + b"\n")
    found = find(log.records(since), LIST_OTHER)
    assert found is not None and found.offset == since and found.digest == hashlib.sha256(second).hexdigest()


def test_a_truncated_log_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    path.write_bytes(line(event(agent="fd/0")) + b"\n" + line(event(agent="fd/2")) + b"\n")
    log = AuditLog(path)
    assert len(log.records()) == 2
    path.write_bytes(line(event(agent="fd/1")) + b"\n")
    assert [r.user_agent for r in log.records()] == ["fd/1"]


def test_waiting_for_a_record_ends_at_its_deadline_on_the_injected_clock(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    path.write_bytes(b"")
    log = AuditLog(path)
    now = [0.0]
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds
        if len(pauses) == 3:  # the record arrives while the drill waits
            with path.open("ab") as fh:
                fh.write(line(event()) + b"\n")

    found = log.wait_for(LIST_OTHER, 0, 10.0, lambda: now[0], pause, poll=0.5)
    assert found is not None and now[0] == pytest.approx(1.5)
    none = log.wait_for(BIND, 0, 2.0, lambda: now[0], pause, poll=0.5)
    assert none is None and now[0] == pytest.approx(3.5)


def test_a_missing_log_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(AuditLogError, match="cannot read the audit log .*nowhere.log"):
        AuditLog(tmp_path / "nowhere.log").end()
