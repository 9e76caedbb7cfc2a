"""The timeline: every observation a drill made, in order, stamped with three clocks.

Each :class:`Observation` carries the harness's monotonic clock (for
durations), its wall clock (for humans and for comparing with the platform),
and the server's own timestamp when the object has one (an Event's
``eventTime``), so a drill can report both the harness-observed and the
platform-stamped instant of each phase, and their difference as the
measurement error.  The timeline is what the evidence records.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

Obj = dict[str, Any]


class Clock(Protocol):
    """The harness's two clocks; tests inject a virtual one."""

    def mono(self) -> float: ...

    def wall(self) -> float: ...


class SystemClock:
    def mono(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


def wait_for(cond: threading.Condition, predicate: Callable[[], bool], timeout: float, clock: Clock,
             poll: float = 0.5, check: Callable[[], None] | None = None) -> bool:
    """Wait under ``cond`` until ``predicate()`` holds (True) or ``timeout`` seconds of ``clock`` pass (False).

    The drills' watches notify ``cond`` on every change; ``poll`` bounds each wait so a predicate that depends
    on the clock alone is looked at again.  ``check`` (optional) is called on every wake and may raise to end
    the wait at once (a halted scenario: nothing is worth waiting for)."""
    deadline = clock.mono() + timeout
    with cond:
        while not predicate():
            remaining = deadline - clock.mono()
            if check is not None:
                check()
            if remaining <= 0:
                return False
            cond.wait(min(remaining, poll))
        return True


@dataclass(frozen=True)
class Stamp:
    mono: float
    """time.monotonic() of the harness when it saw the change."""
    wall: float
    """time.time() of the harness at the same moment (epoch seconds)."""
    server: float | None = None
    """The platform's own time for the change (epoch seconds), when the object carries one."""

    @classmethod
    def now(cls, clock: Clock, server: float | None = None) -> "Stamp":
        return cls(clock.mono(), clock.wall(), server)


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (with or without fractional seconds) to epoch seconds."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def server_time(kind: str, obj: Obj) -> float | None:
    """The platform's stamp of a change: an Event's eventTime (microseconds) or lastTimestamp."""
    if kind == "Event":
        return parse_time(obj.get("eventTime")) or parse_time(obj.get("lastTimestamp"))
    return None


@dataclass(frozen=True)
class Observation:
    """One thing the harness saw (a watch event) or did (an action), with its stamp."""

    stamp: Stamp
    kind: str
    """Object kind (Pod, Node, Event, Job, ...) or ``Action`` for something the harness did."""
    event: str
    """ADDED, MODIFIED, DELETED for watch events; the action name for actions."""
    namespace: str
    name: str
    obj: Obj = field(default_factory=dict, compare=False)

    def to_json(self) -> Obj:
        return {"mono": round(self.stamp.mono, 6), "wall": round(self.stamp.wall, 6),
                "server": None if self.stamp.server is None else round(self.stamp.server, 6),
                "kind": self.kind, "event": self.event, "namespace": self.namespace, "name": self.name,
                "summary": summarize(self.kind, self.obj)}


def summarize(kind: str, obj: Obj) -> Obj:
    """The few fields of an object worth keeping in evidence (never whole objects: they may hold secrets)."""
    meta = obj.get("metadata") or {}
    out: Obj = {}
    if kind == "Pod":
        out = {"phase": (obj.get("status") or {}).get("phase"), "node": (obj.get("spec") or {}).get("nodeName"),
               "terminating": bool(meta.get("deletionTimestamp")),
               "step": (meta.get("annotations") or {}).get("firedrill.dev/step")}
    elif kind == "Node":
        ready = next((c.get("status") for c in (obj.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Ready"), None)
        out = {"ready": ready, "taints": [t.get("key") for t in (obj.get("spec") or {}).get("taints") or []],
               "unschedulable": bool((obj.get("spec") or {}).get("unschedulable"))}
    elif kind == "Event":
        inv = obj.get("involvedObject") or {}
        out = {"reason": obj.get("reason"), "object": f"{inv.get('kind')}/{inv.get('name')}",
               "message": obj.get("message"), "eventTime": obj.get("eventTime")}
    elif kind == "Action":
        out = dict(obj)
    return {k: v for k, v in out.items() if v is not None}


class Timeline:
    """Thread-safe, append-only record; watchers append, drills wait on conditions with deadlines."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self._items: list[Observation] = []
        self._cond = threading.Condition()

    def add(self, kind: str, event: str, obj: Obj, *, server: float | None = None) -> Observation:
        meta = obj.get("metadata") or {}
        stamp = Stamp.now(self.clock, server if server is not None else server_time(kind, obj))
        ob = Observation(stamp, kind, event, meta.get("namespace") or "", meta.get("name") or "", obj)
        with self._cond:
            self._items.append(ob)
            self._cond.notify_all()
        return ob

    def action(self, name: str, **details: Any) -> Observation:
        """Record something the harness did (submitted a job, pulled a node)."""
        stamp = Stamp.now(self.clock)
        ob = Observation(stamp, "Action", name, "", details.get("target", ""), details)
        with self._cond:
            self._items.append(ob)
            self._cond.notify_all()
        return ob

    def __iter__(self) -> Iterator[Observation]:
        with self._cond:
            return iter(list(self._items))

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def find(self, predicate: Callable[[Observation], bool], after: float | None = None) -> Observation | None:
        """The first observation (at or after monotonic ``after``) that matches."""
        with self._cond:
            for ob in self._items:
                if (after is None or ob.stamp.mono >= after) and predicate(ob):
                    return ob
        return None

    def wait_for(self, predicate: Callable[[Observation], bool], timeout: float,
                 after: float | None = None) -> Observation | None:
        """Block until an observation matches or ``timeout`` seconds pass (then None)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = 0
            while True:
                for ob in self._items[seen:]:
                    if (after is None or ob.stamp.mono >= after) and predicate(ob):
                        return ob
                seen = len(self._items)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def to_jsonl(self) -> str:
        return "".join(json.dumps(ob.to_json(), sort_keys=True) + "\n" for ob in self)
