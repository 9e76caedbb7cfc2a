"""What the training canary said, as the harness heard it: the truth a drill judges a platform by.

The canary (``drills/canary``, ``docs/WORKLOAD.md``) logs one JSON object per
line.  The harness follows every rank's log through the API (``pods/log``,
:mod:`drills.kube.logs`) while a drill runs, because a real node takes its logs
with it.  Each line becomes a :class:`CanaryLine` stamped twice: with the
canary's own ``ts`` (when it happened, on the node's clock) and with the
harness's clocks at receipt (when the harness knew).

:class:`CanaryLog` answers the questions the drills ask, as pure functions of
the lines (no clock, no I/O), so unit tests feed it hand-written lines:

- the highest step any rank logged before an instant;
- the newest checkpoint completed before an instant, and the writes begun;
- where a replacement rank resumed from, and its first step beyond it;
- whether a rank of a replaced generation still trained after a given instant;
- each rank's own input / compute / communication seconds inside a window.

Nothing here reads the platform's annotations or Events.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from drills.canary.log import Event
from drills.kube.timeline import parse_time

__all__ = ["CanaryEvent", "CanaryLine", "CanaryLog", "Resumption", "StallTotals", "parse_line"]


CanaryEvent = Event
"""The ``event`` of a canary log line: the canary's own enum (the harness reads the format the canary writes)."""


@dataclass(frozen=True)
class CanaryLine:
    """One line of one rank's log."""

    pod: str
    uid: str
    node: str
    """The node the pod was bound to when the line arrived ("" when unknown)."""
    seq: int
    ts: float
    """The canary's own instant (epoch seconds, from its ``ts``)."""
    event: CanaryEvent
    rank: int
    generation: str
    fields: Mapping[str, Any]
    """The line's other fields."""
    mono: float
    """The harness's monotonic clock at receipt."""
    wall: float
    """The harness's wall clock at receipt."""

    @property
    def step(self) -> int | None:
        value = self.fields.get("step")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def number(self, key: str) -> float:
        value = self.fields.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def parse_line(text: str, *, pod: str, uid: str, node: str, mono: float, wall: float) -> CanaryLine | None:
    """A canary line, or None for anything else (a traceback, a line of another program, a bad field)."""
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
        event = CanaryEvent(obj["event"])
        seq, rank = obj["seq"], obj.get("rank", 0)
        ts = parse_time(obj["ts"])
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(seq, int) or not isinstance(rank, int) or ts is None:
        return None
    rest = {k: v for k, v in obj.items() if k not in ("seq", "ts", "event", "rank", "generation")}
    return CanaryLine(pod=pod, uid=uid, node=node, seq=seq, ts=ts, event=event, rank=rank,
                      generation=str(obj.get("generation", "0")), fields=MappingProxyType(rest), mono=mono, wall=wall)


@dataclass(frozen=True)
class Resumption:
    """A rank of a new incarnation resumed: from which step, and its first step beyond it."""

    pod: str
    uid: str
    rank: int
    from_step: int
    checkpoint: str | None
    skipped: tuple[str, ...]
    first_step: CanaryLine
    """The first ``step`` line beyond ``from_step`` (its ``mono`` is when the harness knew)."""


@dataclass(frozen=True)
class StallTotals:
    """Seconds one rank spent in each part of the steps it completed inside a window (its own measurements)."""

    steps: int = 0
    input_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    wall_s: float = 0.0


@dataclass
class CanaryLog:
    """Every canary line the harness received, deduplicated by (pod uid, seq).  Thread-safe."""

    lines: list[CanaryLine] = field(default_factory=list)
    _seen: set[tuple[str, int]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    listeners: list[Callable[[CanaryLine], None]] = field(default_factory=list)

    def add(self, line: CanaryLine) -> bool:
        """Keep ``line`` unless already seen (a re-followed log repeats itself); listeners hear new lines."""
        with self._lock:
            key = (line.uid, line.seq)
            if key in self._seen:
                return False
            self._seen.add(key)
            self.lines.append(line)
        for listener in list(self.listeners):
            listener(line)
        return True

    def snapshot(self) -> list[CanaryLine]:
        with self._lock:
            return list(self.lines)

    # ------------------------------------------------------------ questions
    def of(self, event: CanaryEvent, uids: Iterable[str] | None = None) -> list[CanaryLine]:
        wanted = None if uids is None else set(uids)
        return [ln for ln in self.snapshot() if ln.event is event and (wanted is None or ln.uid in wanted)]

    def uids(self) -> set[str]:
        """The pods that logged anything so far."""
        with self._lock:
            return {ln.uid for ln in self.lines}

    def last_step_before(self, instant: float) -> int:
        """The highest step any rank logged at or before ``instant`` (the canary's clock); 0 if none."""
        return max((ln.step or 0 for ln in self.of(CanaryEvent.STEP) if ln.ts <= instant), default=0)

    def last_checkpoint_before(self, instant: float) -> int:
        """The newest checkpoint completed (logged durable) at or before ``instant``; 0 if none."""
        return max((ln.step or 0 for ln in self.of(CanaryEvent.CHECKPOINT) if ln.ts <= instant), default=0)

    def checkpoint_begins(self, uids: Iterable[str] | None = None) -> list[CanaryLine]:
        """Rank 0's ``checkpoint-begin`` lines (of the pods ``uids``; None: every pod), in the order received: a
        write begun, durable only once a ``checkpoint`` line of the same step follows in the same pod's log."""
        return self.of(CanaryEvent.CHECKPOINT_BEGIN, uids)

    def checkpoints(self) -> set[int]:
        """Every checkpoint step any rank logged as durable."""
        return {ln.step for ln in self.of(CanaryEvent.CHECKPOINT) if ln.step is not None}

    def preemption(self) -> CanaryLine | None:
        """The first sign that SIGTERM stopped the job (a preemption's graceful delete), by rank 0's own log: its
        checkpoint written on SIGTERM or, where it wrote none, its exit on SIGTERM, whichever the harness received
        first.  Rank 0 writes none when its last completed step is already durable (a periodic checkpoint it had
        just written, or the one it resumed from).  Either line's ``step`` is the step the job must resume from.
        None: never stopped by SIGTERM."""
        stops = [ln for ln in self.snapshot() if ln.rank == 0 and (
            (ln.event is CanaryEvent.CHECKPOINT and ln.fields.get("trigger") == "sigterm") or
            (ln.event is CanaryEvent.EXIT and ln.fields.get("reason") == "sigterm"))]
        return min(stops, key=lambda ln: ln.mono, default=None)

    def stepping(self, uids: Iterable[str]) -> set[str]:
        """The uids among ``uids`` that have logged at least two steps (they are really training)."""
        count: dict[str, int] = {}
        for ln in self.of(CanaryEvent.STEP, uids):
            count[ln.uid] = count.get(ln.uid, 0) + 1
        return {uid for uid, n in count.items() if n >= 2}

    def resumptions(self, exclude: Iterable[str]) -> list[Resumption]:
        """Ranks of pods not in ``exclude`` that resumed and then stepped beyond their resume point, in the
        order the harness learned of their first such step."""
        skip = set(exclude)
        by_uid: dict[str, list[CanaryLine]] = {}
        for ln in self.snapshot():
            if ln.uid not in skip:
                by_uid.setdefault(ln.uid, []).append(ln)
        found: list[Resumption] = []
        for uid, lines in by_uid.items():
            lines.sort(key=lambda ln: ln.seq)
            resumed = next((ln for ln in lines if ln.event is CanaryEvent.RESUMED), None)
            if resumed is None:
                continue
            start = int(resumed.number("from_step"))
            first = next((ln for ln in lines if ln.event is CanaryEvent.STEP and ln.seq > resumed.seq
                          and (ln.step or 0) > start), None)
            if first is None:
                continue
            checkpoint = resumed.fields.get("checkpoint")
            skipped = resumed.fields.get("skipped") or ()
            found.append(Resumption(resumed.pod, uid, resumed.rank, start,
                                    str(checkpoint) if checkpoint else None,
                                    tuple(str(s) for s in skipped) if isinstance(skipped, list) else (), first))
        found.sort(key=lambda r: r.first_step.mono)
        return found

    def trained_after(self, uids: Iterable[str], after_mono: float) -> list[CanaryLine]:
        """Step lines of the pods ``uids`` that the harness received after ``after_mono``: a replaced rank
        still training."""
        return [ln for ln in self.of(CanaryEvent.STEP, uids) if ln.mono > after_mono]

    def totals(self, uids: Iterable[str], start: float, end: float) -> dict[str, StallTotals]:
        """Per pod uid: the steps completed inside [start, end) (the canary's clock) and their measured parts."""
        out: dict[str, StallTotals] = {}
        for ln in self.of(CanaryEvent.STEP, uids):
            if not start <= ln.ts < end:
                continue
            t = out.get(ln.uid, StallTotals())
            out[ln.uid] = StallTotals(t.steps + 1, t.input_s + ln.number("input_s"),
                                      t.compute_s + ln.number("compute_s"), t.comm_s + ln.number("comm_s"),
                                      t.wall_s + ln.number("wall_s"))
        return out

    def median_step_seconds(self, before: float | None = None) -> float | None:
        """The median ``wall_s`` of the steps logged (before ``before``, the canary's clock)."""
        walls = sorted(ln.number("wall_s") for ln in self.of(CanaryEvent.STEP)
                       if before is None or ln.ts <= before)
        if not walls:
            return None
        mid = len(walls) // 2
        return walls[mid] if len(walls) % 2 else (walls[mid - 1] + walls[mid]) / 2
