"""Goodput from the canary's own log: how much of a window's wall time turned into training progress, and where the
rest went (issue 27).  Pure: a function of canary lines, a window and the faults' instants; no clock, no I/O.

Read from rank 0's ``step`` and ``checkpoint`` lines (every incarnation of the job has a rank 0, and in
synchronous training every rank completes a step together), on the canary's own clock (``ts``, epoch seconds):

- a **step that counts** is the last completion of each step number inside the window: a step recomputed after a
  restart counts once, the completions it superseded are **recomputed** (lost) progress;
- **waiting on a straggler**: the part of a counted step's ``wall_s`` beyond 1.5 x the window's typical step (the
  lower quartile of counted steps, robust while fewer than three in four steps are slowed);
- **effective training time** = the counted steps' wall time minus that waiting, over the window;
- **checkpoint writing**: from a step's line to the checkpoint line of that step (rank 0 writes between steps);
- per fault, from the instants the harness stamped (same clock): **detection** (fault -> detect), **eviction and
  rescheduling** (detect -> replace) and **restart and rendezvous** (replace -> the start of the first step beyond
  the resume point: that step's own time is progress), each clipped to the window; for a hung rank
  (``rank-hang``) fault -> detect is **hung**: the job held every GPU and made no progress until the platform
  named it;
- **other**: what is left (a step cut short by the fault, start-up, idle): window - effective - every cause above.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from drills.workloads.canarylog import CanaryEvent, CanaryLine

__all__ = ["Badput", "FaultSpan", "Goodput", "STRAGGLER_FACTOR", "goodput"]

HUNG_KIND = "rank-hang"
"""The fault kind (:class:`drills.target.faultmix.FaultKind`) whose time to detection is badput "hung"."""
STRAGGLER_FACTOR = 1.5
"""A counted step longer than this many typical steps was waiting on a straggler for the excess."""


@dataclass(frozen=True)
class FaultSpan:
    """One fault's instants on the canary's clock (epoch seconds); None where it never came."""

    kind: str
    fault: float
    detect: float | None = None
    replace: float | None = None
    resume: float | None = None
    """The first step beyond the resume point."""


@dataclass(frozen=True)
class Badput:
    """Seconds of the window lost, by cause."""

    detection: float = 0.0
    rescheduling: float = 0.0
    restart: float = 0.0
    recomputed: float = 0.0
    checkpointing: float = 0.0
    straggler: float = 0.0
    other: float = 0.0
    hung: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"hung": self.hung, "detection": self.detection, "eviction and rescheduling": self.rescheduling,
                "restart and rendezvous": self.restart, "recomputed progress": self.recomputed,
                "checkpoint writing": self.checkpointing, "waiting on a straggler": self.straggler,
                "other": self.other}


@dataclass(frozen=True)
class Goodput:
    window_s: float
    effective_s: float
    steps_counted: int
    steps_recomputed: int
    badput: Badput

    @property
    def effective_fraction(self) -> float:
        return self.effective_s / self.window_s if self.window_s > 0 else 0.0

    @property
    def percent(self) -> float:
        return 100.0 * self.effective_fraction


def _rank0(lines: Iterable[CanaryLine], event: CanaryEvent, start: float, end: float) -> list[CanaryLine]:
    return sorted((ln for ln in lines if ln.event is event and ln.rank == 0 and start <= ln.ts <= end),
                  key=lambda ln: (ln.ts, ln.seq))


def _clip(a: float | None, b: float | None, start: float, end: float) -> float:
    if a is None or b is None:
        return 0.0
    return max(0.0, min(b, end) - max(a, start))


def _lower_quartile(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 4] if ordered else 0.0


def _began(steps: Sequence[CanaryLine], resume: float | None) -> float | None:
    """When the step logged at ``resume`` began (its line's ``ts`` less its own ``wall_s``)."""
    if resume is None:
        return None
    first = next((ln for ln in steps if ln.ts >= resume - 1e-6), None)
    return resume if first is None else min(resume, first.ts - first.number("wall_s"))


def goodput(lines: Iterable[CanaryLine], start: float, end: float, faults: Sequence[FaultSpan] = ()) -> Goodput:
    """The goodput of the window [``start``, ``end``] (the canary's clock) from the canary's lines."""
    window = max(0.0, end - start)
    all_lines = list(lines)
    steps = [ln for ln in _rank0(all_lines, CanaryEvent.STEP, start, end) if ln.step is not None]
    last: dict[int, CanaryLine] = {}
    for ln in steps:
        last[ln.step or 0] = ln  # the later completion of a step number supersedes the earlier
    counted = list(last.values())
    kept = {id(ln) for ln in counted}

    def inside(ln: CanaryLine) -> float:  # a step's wall time inside the window (the first may straddle it)
        return max(0.0, min(ln.number("wall_s"), ln.ts - start))
    recomputed = sum(inside(ln) for ln in steps if id(ln) not in kept)
    walls = [inside(ln) for ln in counted]
    typical = _lower_quartile(walls)
    straggler = sum(w - typical for w in walls if typical > 0 and w > STRAGGLER_FACTOR * typical)
    effective = sum(walls) - straggler

    step_ts = {(ln.uid, ln.step): ln.ts for ln in steps}
    checkpointing = 0.0
    for ck in _rank0(all_lines, CanaryEvent.CHECKPOINT, start, end):
        written = step_ts.get((ck.uid, ck.step))
        if written is not None:
            checkpointing += max(0.0, ck.ts - written)

    hung = sum(_clip(f.fault, f.detect, start, end) for f in faults if f.kind == HUNG_KIND)
    detection = sum(_clip(f.fault, f.detect, start, end) for f in faults if f.kind != HUNG_KIND)
    rescheduling = sum(_clip(f.detect, f.replace, start, end) for f in faults)
    restart = sum(_clip(f.replace, _began(steps, f.resume), start, end) for f in faults)
    known = effective + straggler + recomputed + checkpointing + hung + detection + rescheduling + restart
    badput = Badput(detection, rescheduling, restart, recomputed, checkpointing, straggler,
                    other=max(0.0, window - known), hung=hung)
    return Goodput(window, effective, len(counted), len(steps) - len(counted), badput)
