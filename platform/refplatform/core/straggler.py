"""The straggler detector's decision (pure): which rank of a synchronous job runs slow, from per-rank step timing.

Production straggler detectors (NVIDIA's in NeMo/Megatron, the ones in large training stacks) compare the
ranks of one job with each other, not each rank with its own past: in synchronous training every rank's
*wall* step time is the slowest rank's (the all-reduce waits for it), so wall time cannot say who is slow, and
a job that slows down as a whole (an input-bound job, a slow file system, a bigger batch) is no node's fault.
What differs between ranks is the time each spends in its own work before the collective: its **compute**
time.  The rule here:

- each rank's timing is the median ``compute_s`` of its last few steps, as its workload logged them (the
  agent's log pipeline publishes it on the pod, ``firedrill.dev/compute-seconds``);
- a rank is *slow* when its compute time is at least :attr:`Thresholds.slow_ratio` times the median of its
  peers' (the job's other ranks; a job needs :attr:`Thresholds.min_ranks` ranks with timing) and at least
  :attr:`Thresholds.min_excess_s` more;
- a rank that stays slow for :attr:`Thresholds.sustain_s` seconds is *named*: one noisy sample never is.

The ``accuse-the-healthy`` defect replaces the peer comparison with each rank's own history (its wall step time
against the first one seen): a uniform slowdown then names every node the job runs on.

No clock is read here: ``now`` (epoch seconds) is passed in and the state the decision carries from one call
to the next is returned, so the rule is unit-tested on a virtual clock (tests/unit/core/test_straggler.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["COMPUTE_SECONDS_ANNOTATION", "DetectorState", "RankTiming", "ReleaseState", "Suspect", "Thresholds", "detect",
           "release"]

COMPUTE_SECONDS_ANNOTATION = "firedrill.dev/compute-seconds"
"""On a training pod, by its node's agent: the median ``compute_s`` of its canary's last few steps."""


@dataclass(frozen=True)
class Thresholds:
    """The detector's documented thresholds (docs/STRAGGLER.md)."""

    slow_ratio: float = 1.5
    """A rank is slow when its compute time per step is at least this many times its peers' median.  1.5: a GPU
    throttled to two thirds of its speed or less; run-to-run noise between healthy ranks is a few percent."""
    min_excess_s: float = 0.05
    """...and at least this many seconds more per step than that median: scheduling jitter of a loaded machine
    on a short step is not a slow GPU."""
    sustain_s: float = 2.0
    """How long a rank must stay slow before it is named (one published median of a few steps is noise)."""
    min_ranks: int = 2
    """Ranks of one job with timing needed to compare at all (a job of one rank has no peers)."""


@dataclass(frozen=True)
class RankTiming:
    """One running rank's timing, as published for its pod."""

    job: str
    """The job's identity (``namespace/name``): ranks are compared only within one job."""
    pod: str
    """The pod's uid: the rank's identity across calls (a restarted rank is a new pod)."""
    name: str
    """``namespace/name`` of the pod, for messages."""
    node: str
    compute_s: float | None
    """Median compute seconds per step of its recent steps (None: no step yet)."""
    step_s: float | None = None
    """Median wall seconds per step of its recent steps (only the ``accuse-the-healthy`` defect reads it)."""


@dataclass(frozen=True)
class Suspect:
    """A rank named slow, and why."""

    job: str
    pod: str
    name: str
    node: str
    ratio: float
    """Its compute time over its peers' median (under the defect: its step time over its first one)."""
    slow_since: float
    """Epoch seconds since which it has been slow without a break."""

    def reason(self, thresholds: Thresholds) -> str:
        return (f"rank pod {self.name} of job {self.job} computes {self.ratio:.2f}x its peers' median step "
                f"(threshold {thresholds.slow_ratio:g}x) for {thresholds.sustain_s:g} s or more")


@dataclass(frozen=True)
class DetectorState:
    """What one decision hands to the next."""

    slow_since: Mapping[str, float] = field(default_factory=dict)
    """Pod uid -> epoch seconds since which the rank has been slow without a break."""
    baseline_step_s: Mapping[str, float] = field(default_factory=dict)
    """Pod uid -> the first step time seen (only the ``accuse-the-healthy`` defect keeps it)."""


def _ratios(ranks: list[RankTiming], thresholds: Thresholds) -> dict[str, float]:
    """Pod uid -> compute time over its peers' median, for every rank of one job that has timing (0 for a rank
    less than :attr:`Thresholds.min_excess_s` above it)."""
    timed = [r for r in ranks if r.compute_s is not None and r.compute_s > 0]
    if len(timed) < max(2, thresholds.min_ranks):
        return {}
    out = {}
    for r in timed:
        peers = statistics.median(p.compute_s for p in timed if p.pod != r.pod)  # type: ignore[misc]
        if peers > 0:
            excess = r.compute_s - peers  # type: ignore[operator]
            out[r.pod] = r.compute_s / peers if excess >= thresholds.min_excess_s else 0.0  # type: ignore[operator]
    return out


def detect(ranks: Iterable[RankTiming], state: DetectorState, now: float,
           thresholds: Thresholds = Thresholds(), *, accuse_by_history: bool = False
           ) -> tuple[list[Suspect], DetectorState]:
    """The ranks to name now (sorted by job and pod name) and the state for the next call.

    ``accuse_by_history``: the ``accuse-the-healthy`` defect (each rank against its own first step time)."""
    by_job: dict[str, list[RankTiming]] = {}
    for r in ranks:
        by_job.setdefault(r.job, []).append(r)
    live = {r.pod for rs in by_job.values() for r in rs}
    baseline = {k: v for k, v in state.baseline_step_s.items() if k in live}
    ratios: dict[str, float] = {}
    for job_ranks in by_job.values():
        if accuse_by_history:
            for r in job_ranks:
                if r.step_s is None or r.step_s <= 0:
                    continue
                first = baseline.setdefault(r.pod, r.step_s)
                ratios[r.pod] = r.step_s / first
        else:
            ratios.update(_ratios(job_ranks, thresholds))
    slow_since = {pod: state.slow_since.get(pod, now) for pod, ratio in ratios.items()
                  if ratio >= thresholds.slow_ratio}
    named = [Suspect(r.job, r.pod, r.name, r.node, ratios[r.pod], slow_since[r.pod])
             for rs in by_job.values() for r in rs
             if r.pod in slow_since and now - slow_since[r.pod] >= thresholds.sustain_s]
    named.sort(key=lambda s: (s.job, s.name))
    return named, DetectorState(slow_since, baseline)


@dataclass(frozen=True)
class ReleaseState:
    """What one give-back decision hands to the next."""

    held_down: frozenset[str] = frozenset()
    """Named nodes whose agent reported a GPU held below full clock while named: the slowness had a cause the node
    can show, so it can show its end too."""
    clear_since: Mapping[str, float] = field(default_factory=dict)
    """Of those, node -> epoch seconds since which it has reported every GPU at full clock without a break."""


def release(named: Mapping[str, bool], state: ReleaseState, now: float,
            thresholds: Thresholds = Thresholds()) -> tuple[list[str], ReleaseState]:
    """The named nodes to give back now (sorted) and the state for the next call.

    ``named``: each node carrying the naming taint -> whether its agent reports every GPU at full clock (no throttle
    reason).  A node is given back once its agent, having shown a GPU held down while named, has reported full
    clocks without a break for :attr:`Thresholds.sustain_s` (the same patience the naming took: one report between
    two throttles is no repair).  A node named for a slowness its clocks never showed keeps its taint until a person
    clears it: nothing here can tell that it is fixed."""
    held = frozenset(n for n in state.held_down if n in named) | {n for n, clear in named.items() if not clear}
    since = {n: state.clear_since.get(n, now) for n in held if named[n]}
    back = sorted(n for n, t in since.items() if now - t >= thresholds.sustain_s)
    return back, ReleaseState(held - set(back), {n: t for n, t in since.items() if n not in back})
