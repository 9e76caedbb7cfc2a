"""Fleet fault injection: the Node annotation ``firedrill.dev/inject-health`` -> the Node condition ``GpuFault``.

A health system (NVSentinel, DCGM health checks) reports a node it finds
faulty as a Node condition; a fleet-wide alarm (a bad driver roll-out, a
monitoring bug) raises it on many nodes at once.  The drill injects it per
node with a JSON list::

    firedrill.dev/inject-health: '[{"id": "f1", "reason": "XidStorm", "message": "...", "until": 1800000060.0}]'

While an entry stands (``until`` null, or still in the future on the agent's
clock) the agent posts ``GpuFault`` ``True`` with the first standing entry's
reason and message; otherwise ``False``, reason ``NoFault``.  The condition is
absent until the node has had a fault (a node that never had one carries no
``GpuFault``).  ``until`` lets a fault end by itself: the agent wakes its
heartbeat at the expiry, so the condition drops then even if nobody removes
the entry (a dead harness's fault ends on its own).  Ready is never touched:
the node still runs pods; whether it should is the healer's call
(:mod:`refplatform.core.remediation`).  Malformed entries are skipped with a
log line, as ``inject-xid``'s are.

The parsing and the condition are pure functions of the annotation and a time;
:class:`InjectedHealth` holds what the heartbeat thread last read.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from refplatform.agent.clock import Clock, rfc3339
from refplatform.core.remediation import GPU_FAULT_CONDITION

__all__ = ["HEALTH_ANNOTATION", "NO_FAULT_REASON", "HealthEntry", "InjectedHealth", "gpu_fault_condition",
           "next_expiry", "parse_health_entries", "standing"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]

HEALTH_ANNOTATION = "firedrill.dev/inject-health"
NO_FAULT_REASON = "NoFault"
NO_FAULT_MESSAGE = "no GPU fault reported"


@dataclass(frozen=True)
class HealthEntry:
    """One injected fault: its id, the condition's reason (CamelCase) and message, and when it ends by itself."""

    id: str
    reason: str
    message: str
    until: float | None = None
    """Epoch seconds on the agent's clock; None: until the entry is removed."""

    def stands(self, now: float) -> bool:
        return self.until is None or now < self.until


def parse_health_entries(raw: str | None) -> tuple[list[HealthEntry], list[str]]:
    """The entries of ``firedrill.dev/inject-health``, and a problem per entry skipped."""
    if not raw:
        return [], []
    try:
        data = json.loads(raw)
    except ValueError as err:
        return [], [f"{HEALTH_ANNOTATION} is not JSON: {err}"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return [], [f"{HEALTH_ANNOTATION} must be a JSON list of entries"]
    out, problems = [], []
    for item in data:
        try:
            if not isinstance(item, dict):
                raise ValueError("not an object")
            ident, reason, message, until = item.get("id"), item.get("reason"), item.get("message", ""), \
                item.get("until")
            if not isinstance(ident, str) or not ident:
                raise ValueError("no id")
            if not isinstance(reason, str) or not reason.isidentifier() or not reason[:1].isupper():
                raise ValueError("reason must be a CamelCase word (e.g. XidStorm)")
            if not isinstance(message, str):
                raise ValueError("message must be a string")
            if until is not None and (isinstance(until, bool) or not isinstance(until, (int, float))):
                raise ValueError("until must be epoch seconds or null")
            out.append(HealthEntry(ident, reason, message, None if until is None else float(until)))
        except ValueError as err:
            problems.append(f"{HEALTH_ANNOTATION} entry {item!r} skipped: {err}")
    return out, problems


def standing(entries: Sequence[HealthEntry], now: float) -> HealthEntry | None:
    """The first entry still standing at ``now`` (the one the condition reports), None if none."""
    return next((e for e in entries if e.stands(now)), None)


def next_expiry(entries: Sequence[HealthEntry], now: float) -> float | None:
    """When the next standing entry ends by itself (None: none will)."""
    ends = [e.until for e in entries if e.until is not None and e.stands(now)]
    return min(ends) if ends else None


def _says(entry: HealthEntry | None) -> tuple[str, str, str]:
    """``(status, reason, message)`` of ``GpuFault`` with ``entry`` standing (None: none stands)."""
    if entry is None:
        return "False", NO_FAULT_REASON, NO_FAULT_MESSAGE
    return "True", entry.reason, entry.message or entry.reason


def gpu_fault_condition(entry: HealthEntry | None, now: datetime, previous: Sequence[Obj] | None = None) -> Obj:
    """The ``GpuFault`` condition at ``now``: True with ``entry``'s reason and message, else False/NoFault.
    ``lastTransitionTime`` is kept from ``previous`` (the Node's conditions) while the status is the same."""
    status, reason, message = _says(entry)
    stamp = rfc3339(now)
    before = next((c for c in previous or () if isinstance(c, dict) and c.get("type") == GPU_FAULT_CONDITION), None)
    transition = stamp
    if before is not None and before.get("status") == status and before.get("lastTransitionTime"):
        transition = str(before["lastTransitionTime"])
    return {"type": GPU_FAULT_CONDITION, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": stamp, "lastTransitionTime": transition}


class InjectedHealth:
    """What ``firedrill.dev/inject-health`` says, as the heartbeat thread last read it from the Node.

    :meth:`note_node` takes each Node read; :meth:`state` and :meth:`conditions` are what the heartbeat reports.
    ``on_change`` (the heartbeat's kick) is called when what the condition must say changed, and at each
    ``until`` (a timer), so the condition goes out at once rather than at the next status refresh.
    """

    def __init__(self, node: str, clock: Clock, on_change: Callable[[], None] | None = None) -> None:
        self.node = node
        self.clock = clock
        self.on_change = on_change
        self._lock = threading.Lock()
        self._entries: list[HealthEntry] = []
        self._reported = False  # a fault stood, or the Node carries GpuFault (this agent's or an earlier one's)
        self._problems: set[str] = set()
        self._timer: threading.Timer | None = None
        self._timer_at: float | None = None
        self._stopped = False

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def note_node(self, node: Obj) -> None:
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        entries, problems = parse_health_entries(annotations.get(HEALTH_ANNOTATION))
        for problem in problems:
            if problem not in self._problems:
                self._problems.add(problem)
                log.warning("node %s: %s", self.node, problem)
        carried = any(isinstance(c, dict) and c.get("type") == GPU_FAULT_CONDITION
                      for c in (node.get("status") or {}).get("conditions") or ())
        now = self._now()
        with self._lock:
            before = self._state(now)
            self._entries = entries
            self._reported = self._reported or carried or standing(entries, now) is not None
            after = self._state(now)
        if after != before:
            if after is not None and after[0] == "True":
                log.warning("node %s: GpuFault %s: %s (%s)", self.node, after[1], after[2], HEALTH_ANNOTATION)
            else:
                log.warning("node %s: no GPU fault stands any more", self.node)
            self._changed()
        self._arm(next_expiry(entries, now), now)

    def state(self) -> tuple[str, str, str] | None:
        """``(status, reason, message)`` of ``GpuFault`` now; None while the node never had a fault."""
        with self._lock:
            return self._state(self._now())

    def _state(self, now: float) -> tuple[str, str, str] | None:
        entry = standing(self._entries, now)
        if entry is None and not self._reported:
            return None
        return _says(entry)

    def conditions(self, now: datetime, previous: Sequence[Obj] | None) -> list[Obj]:
        """The conditions to post beside the kubelet's: ``GpuFault`` once the node has had a fault, else none."""
        with self._lock:
            entry = standing(self._entries, now.timestamp())
            carried = any(isinstance(c, dict) and c.get("type") == GPU_FAULT_CONDITION for c in previous or ())
            if entry is None and not (self._reported or carried):
                return []
            self._reported = True
        return [gpu_fault_condition(entry, now, previous)]

    def _arm(self, at: float | None, now: float) -> None:
        """A kick at ``at`` (the next ``until``), replacing any other; none when nothing expires."""
        with self._lock:
            if at == self._timer_at or self._stopped:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._timer_at = None, at
            if at is None:
                return
            timer = threading.Timer(max(0.0, at - now) + 0.001, self._expired)
            timer.daemon = True
            timer.name = f"inject-health-expiry-{self.node}"
            self._timer = timer
        timer.start()

    def _expired(self) -> None:
        with self._lock:
            self._timer, self._timer_at = None, None
            upcoming = next_expiry(self._entries, self._now())
        log.info("node %s: an injected GPU fault reached its until", self.node)
        self._changed()
        self._arm(upcoming, self._now())

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None
