"""The platform's log pipeline: what the agent reads from a container's canary log lines (pure).

The canary (docs/WORKLOAD.md) writes one JSON object per line.  The agent
follows every real-process container's output and derives the claims the
reference platform has always published about training:

- ``firedrill.dev/step``: the ``step`` of the last ``step`` line (before any
  step: the ``from_step`` of the last ``resumed`` line);
- ``firedrill.dev/checkpoint-step``: the ``step`` of the last ``checkpoint``
  line (before any: the ``from_step`` of the last ``resumed`` line, the
  checkpoint training went on from);
- ``firedrill.dev/step-seconds``: the median ``wall_s`` of the last
  :data:`RECENT_STEPS` steps (published only when the pod does not set it);
- ``firedrill.dev/compute-seconds``: the median ``compute_s`` of the last
  :data:`RECENT_COMPUTE` steps: the per-rank timing the straggler detector
  compares between the ranks of a job (:mod:`refplatform.core.straggler`);
- ``firedrill.dev/activity``: ``checkpoint`` while the last
  ``checkpoint-begin`` line has no later ``checkpoint`` line (absent
  otherwise): a declared pause the progress watchdog waits out
  (:mod:`refplatform.core.progress`);
- ``firedrill.dev/stalled-on``: the ranks the last ``stalled`` line waits on
  (:func:`stalled_ranks`), until an ``unstalled`` or a later ``step`` line
  (absent otherwise): who waits on whom, from which the watchdog names the
  rank that stopped first;
- the ``Resumed`` Event (``Resumed training at step M beyond checkpoint N``),
  once per ``resumed`` line, at the ``ts`` of the first ``step`` line after it
  (``M`` its step, ``N`` the resumed line's ``from_step``).

These are the platform's claims about the workload, read from the workload's
own log; a drill judges from the canary's log itself, never from them.
Lines that are not JSON objects with an ``event`` (tracebacks, other
programs) are skipped.
"""

from __future__ import annotations

import json
import statistics
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from refplatform.core.progress import ACTIVITY_ANNOTATION, STALLED_ON_ANNOTATION, format_ranks
from refplatform.core.straggler import COMPUTE_SECONDS_ANNOTATION
from refplatform.agent.workload import (
    ANN_CHECKPOINT_STEP,
    ANN_STEP,
    ANN_STEP_SECONDS,
    RESUMED_REASON,
    WorkloadEvent,
)

__all__ = ["CHECKPOINT_ACTIVITY", "CanaryLine", "RECENT_COMPUTE", "RECENT_STEPS", "TrainingLog", "parse_line",
           "parse_ts", "stalled_ranks"]

RECENT_STEPS = 20
RECENT_COMPUTE = 5
"""Steps in the compute median: few, so a GPU that slows shows within a few steps."""
CHECKPOINT_ACTIVITY = "checkpoint"
"""The ``firedrill.dev/activity`` value while a checkpoint is being written."""


@dataclass(frozen=True)
class CanaryLine:
    """One parsed canary log line."""

    event: str
    ts: datetime | None
    fields: dict[str, Any]

    def int_field(self, key: str) -> int | None:
        value = self.fields.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def float_field(self, key: str) -> float | None:
        value = self.fields.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)


def parse_ts(raw: object) -> datetime | None:
    """A canary ``ts`` (``2026-11-30T10:00:00.123456Z``) as an aware datetime; ``None`` if malformed."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        t = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def parse_line(text: str) -> CanaryLine | None:
    """The canary line in ``text``, or ``None`` for anything else."""
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        return None
    return CanaryLine(obj["event"], parse_ts(obj.get("ts")), obj)


def _rank(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def stalled_ranks(line: CanaryLine) -> tuple[int, ...]:
    """The ranks a ``stalled`` line waits on, from its ``on``: a rank or a list of ranks as they are; ``"master"``
    is rank 0 (the hub every other rank waits on); ``"peers"`` (rank 0 waiting in its hub) is every other rank of
    the line's ``world_size``, as far as it can tell; a comma list of ranks as written.  ``()`` when it says none."""
    on = line.fields.get("on")
    single = _rank(on)
    if single is not None:
        return (single,)
    if isinstance(on, list):
        return tuple(sorted({r for r in map(_rank, on) if r is not None}))
    if on == "master":
        return (0,)
    own, world = _rank(line.fields.get("rank")), _rank(line.fields.get("world_size"))
    if on == "peers" and world is not None:
        return tuple(r for r in range(world) if r != own)
    if isinstance(on, str):
        return tuple(sorted({int(p) for p in on.split(",") if p.strip().isdigit()}))
    return ()


class TrainingLog:
    """What one container's canary log says so far.  Feed it lines in order; not thread-safe."""

    def __init__(self, recent: int = RECENT_STEPS) -> None:
        self.step: int | None = None
        self.checkpoint: int | None = None
        self.lines = 0
        """Canary lines read."""
        self._resumed_from: int | None = None  # a resumed line not yet followed by a step
        self._walls: deque[float] = deque(maxlen=recent)
        self._computes: deque[float] = deque(maxlen=RECENT_COMPUTE)
        self._events: list[WorkloadEvent] = []
        self.checkpointing = False
        """A ``checkpoint-begin`` line has no later ``checkpoint`` line yet."""
        self.stalled_on: tuple[int, ...] | None = None
        """The ranks the last ``stalled`` line waits on, until ``unstalled`` or a later ``step``; None: not stalled."""

    def feed(self, text: str, received: datetime) -> CanaryLine | None:
        """Read one output line (``received``: when the agent got it, for lines without a ``ts``)."""
        line = parse_line(text)
        if line is None:
            return None
        self.lines += 1
        if line.event == "resumed":
            start = line.int_field("from_step")
            if start is not None:
                self._resumed_from = start
                self.step = start
                self.checkpoint = start
        elif line.event == "step":
            step = line.int_field("step")
            if step is None:
                return line
            self.step = step
            self.stalled_on = None
            wall = line.float_field("wall_s")
            if wall is not None and wall >= 0:
                self._walls.append(wall)
            compute = line.float_field("compute_s")
            if compute is not None and compute >= 0:
                self._computes.append(compute)
            if self._resumed_from is not None:
                at = line.ts or received
                self._events.append(WorkloadEvent(at, "Normal", RESUMED_REASON,
                                                  f"Resumed training at step {step} beyond checkpoint "
                                                  f"{self._resumed_from}"))
                self._resumed_from = None
        elif line.event == "checkpoint":
            self.checkpointing = False
            step = line.int_field("step")
            if step is not None:
                self.checkpoint = step
        elif line.event == "checkpoint-begin":
            self.checkpointing = True
        elif line.event == "stalled":
            self.stalled_on = stalled_ranks(line)
        elif line.event == "unstalled":
            self.stalled_on = None
        return line

    @property
    def step_seconds(self) -> float | None:
        """The median wall time of the recent steps (``None`` before the first)."""
        return statistics.median(self._walls) if self._walls else None

    def take_events(self) -> list[WorkloadEvent]:
        out, self._events = self._events, []
        return out

    def annotations(self, *, with_step_seconds: bool) -> dict[str, str]:
        """The claims to publish (empty until the log said something)."""
        out: dict[str, str] = {}
        if self.step is not None:
            out[ANN_STEP] = str(self.step)
        if self.checkpoint is not None:
            out[ANN_CHECKPOINT_STEP] = str(self.checkpoint)
        if self._computes:
            out[COMPUTE_SECONDS_ANNOTATION] = f"{statistics.median(self._computes):.6g}"
        seconds = self.step_seconds
        if with_step_seconds and seconds is not None and seconds > 0:
            out[ANN_STEP_SECONDS] = f"{seconds:.6g}"
        if self.checkpointing:
            out[ACTIVITY_ANNOTATION] = CHECKPOINT_ACTIVITY
        if self.stalled_on is not None:
            out[STALLED_ON_ANNOTATION] = format_ranks(self.stalled_on)
        return out
