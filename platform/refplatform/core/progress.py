"""The progress watchdog's decision (pure): which opted-in training job has hung, and which rank stopped first.

A hung collective fails nothing: one rank's GPU is stuck in a kernel, its peers wait for it in their all-reduce,
every process lives, every pod stays Running, and the job makes no progress until someone notices.  NCCL's own
watchdog notices after 10 minutes by default.  The platform's watchdog here judges what the workload says of
itself, through the annotations its node's agent publishes from the canary's log lines (docs/PROGRESS.md):

- a job's **progress** is the highest ``firedrill.dev/step`` over its running ranks;
- the job is **hung** when that value has not moved for its own threshold (the Job's
  :data:`PROGRESS_TIMEOUT_ANNOTATION`, seconds) while every one of its ranks runs (at least ``minAvailable``
  of them, none pending, none being deleted) and has published a step, and no rank declares an activity that
  legitimately takes long (:data:`ACTIVITY_ANNOTATION`: a checkpoint being written).  Whenever one of those
  conditions does not hold, the job's clock restarts: a declared pause restarts it when the pause ends, a
  restarted job when all its new ranks run again;
- the rank that **stopped first** is read from the ranks that wait (:data:`STALLED_ON_ANNOTATION`): a rank named
  by a waiting rank and not itself waiting; else, when some ranks wait, the one rank that does not; else unknown.
  In the canary's star all-reduce, rank 0 (the hub) waits on its peers and every other rank on rank 0, so a hung
  leaf is the one rank that waits on nobody, and a hung rank 0 is the one every leaf names.

A job is named once per hang; the value moving, the job's set of ranks changing, or the conditions above
lapsing, makes a later hang a new one.  The ``restart-on-pause`` defect ignores the declared activity, so a long
checkpoint (or a storage stall under one) reads as a hang.

No clock is read here: ``now`` (epoch seconds) is passed in and the state the decision carries from one call to
the next is returned, so the rule is unit-tested on a virtual clock (tests/unit/core/test_progress.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

__all__ = ["ACTIVITY_ANNOTATION", "PROGRESS_TIMEOUT_ANNOTATION", "STALLED_ON_ANNOTATION", "Hang", "JobProgress",
           "RankProgress", "WatchState", "first_stopped", "format_ranks", "parse_ranks", "parse_timeout", "renamable",
           "watch"]

PROGRESS_TIMEOUT_ANNOTATION = "firedrill.dev/progress-timeout-seconds"
"""On a Volcano Job, by its owner: opts the job in; the seconds without progress that make it hung (float > 0).
A Job without it is never watched."""
ACTIVITY_ANNOTATION = "firedrill.dev/activity"
"""On a training pod, by its node's agent: what the workload declares it is doing that legitimately takes long
(``checkpoint``: its last ``checkpoint-begin`` line has no later ``checkpoint`` line); absent otherwise."""
STALLED_ON_ANNOTATION = "firedrill.dev/stalled-on"
"""On a training pod, by its node's agent: the ranks its workload waits on in a stalled collective (comma-separated,
ascending), from its last ``stalled`` line until an ``unstalled`` or a later ``step`` line; absent otherwise."""


def parse_timeout(raw: object) -> float | None:
    """The threshold a Job's :data:`PROGRESS_TIMEOUT_ANNOTATION` states (seconds); None when absent or not a finite
    number above 0."""
    if raw is None or isinstance(raw, bool):
        return None
    try:
        value = float(str(raw).strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def parse_ranks(raw: object) -> tuple[int, ...] | None:
    """The ranks a :data:`STALLED_ON_ANNOTATION` value names (ascending, without repeats); None when absent, ``()``
    when present but naming no rank it can read."""
    if raw is None:
        return None
    out = set()
    for part in str(raw).split(","):
        part = part.strip()
        if part.isdigit():
            out.add(int(part))
    return tuple(sorted(out))


def format_ranks(ranks: Iterable[int]) -> str:
    """Ranks as the :data:`STALLED_ON_ANNOTATION` value: ``"1,2"``."""
    return ",".join(str(r) for r in sorted(set(ranks)))


@dataclass(frozen=True)
class RankProgress:
    """One pod of an opted-in job, as its node's agent published it."""

    pod: str
    """The pod's uid: the rank's identity across calls (a restarted rank is a new pod)."""
    name: str
    """``namespace/name`` of the pod, for messages."""
    rank: int | None
    """Its rank in the job (``volcano.sh/task-index``); None when the pod does not say."""
    running: bool
    """Running, bound to a node and not being deleted: the only state a watched rank may be in."""
    step: int | None
    """Its last published step (``firedrill.dev/step``); None before the first."""
    activity: str | None = None
    """What it declares it is doing (:data:`ACTIVITY_ANNOTATION`); None when nothing."""
    stalled_on: tuple[int, ...] | None = None
    """The ranks it waits on (:data:`STALLED_ON_ANNOTATION`); None when it does not wait."""


@dataclass(frozen=True)
class JobProgress:
    """One opted-in job and its non-terminal pods."""

    job: str
    """``namespace/name``."""
    uid: str
    """The Job's uid: its identity across calls."""
    timeout_s: float
    """Seconds without progress that make it hung (its :data:`PROGRESS_TIMEOUT_ANNOTATION`)."""
    min_available: int
    """Ranks that must run for the job to train at all (``spec.minAvailable``)."""
    ranks: tuple[RankProgress, ...]


@dataclass(frozen=True)
class Hang:
    """A job named hung, and what the watchdog knows of it."""

    job: str
    uid: str
    step: int
    """The highest step any rank published: where the job stopped."""
    timeout_s: float
    since: float
    """Epoch seconds since which that value has not moved while the job was watched."""
    stalled_s: float
    """Seconds from :attr:`since` to the decision."""
    first: int | None
    """The rank that stopped first (:func:`first_stopped`); None: unknown."""
    pods: tuple[str, ...]
    """The uids of the job's pods when it was named (the ones to restart)."""

    @property
    def first_text(self) -> str:
        return "unknown" if self.first is None else str(self.first)

    def message(self) -> str:
        """The Event's message (docs/PROGRESS.md): the job, the step, the threshold, the rank that stopped first."""
        return (f"Job {self.job} made no progress past step {self.step} for {self.stalled_s:.1f} s "
                f"(threshold {self.timeout_s:g} s) with all {len(self.pods)} of its ranks running; "
                f"rank that stopped first: {self.first_text}; restarting the job from its checkpoint")


@dataclass(frozen=True)
class _JobWatch:
    step: int | None
    """The job's progress when the clock last restarted."""
    pods: frozenset[str]
    """The uids of its pods then."""
    since: float | None
    """Epoch seconds the clock restarted; None while it does not run (a pause, a rank not running)."""
    named: bool = False
    """This hang has been named already."""


@dataclass(frozen=True)
class WatchState:
    """What one decision hands to the next."""

    jobs: Mapping[str, _JobWatch] = field(default_factory=dict)
    """Job uid -> its watch (jobs no longer given are forgotten)."""


def first_stopped(ranks: Iterable[RankProgress]) -> int | None:
    """The rank that stopped first, from who waits on whom; None when the ranks do not say."""
    waits: dict[int, tuple[int, ...] | None] = {r.rank: r.stalled_on for r in ranks if r.rank is not None}
    waiting = {rank for rank, on in waits.items() if on is not None}
    named = {n for on in waits.values() for n in (on or ())}
    candidates = named - waiting
    if len(candidates) == 1:
        return next(iter(candidates))
    quiet = set(waits) - waiting
    if waiting and len(quiet) == 1:
        return next(iter(quiet))
    return None


def _watched(job: JobProgress, ignore_activity: bool) -> bool:
    """Whether the job's clock runs: every rank running with a step, enough of them, no declared pause."""
    return (len(job.ranks) >= max(1, job.min_available)
            and all(r.running and r.step is not None for r in job.ranks)
            and (ignore_activity or not any(r.activity for r in job.ranks)))


def watch(jobs: Iterable[JobProgress], state: WatchState, now: float, *,
          ignore_activity: bool = False) -> tuple[list[Hang], WatchState]:
    """The jobs to name hung now (sorted by job) and the state for the next call.

    ``ignore_activity``: the ``restart-on-pause`` defect (a declared activity does not stop the clock)."""
    out: list[Hang] = []
    kept: dict[str, _JobWatch] = {}
    for job in jobs:
        steps = [r.step for r in job.ranks if r.step is not None]
        step = max(steps) if steps else None
        pods = frozenset(r.pod for r in job.ranks)
        prev = state.jobs.get(job.uid)
        if not _watched(job, ignore_activity):
            kept[job.uid] = _JobWatch(step, pods, None)
            continue
        if prev is None or prev.since is None or prev.step != step or prev.pods != pods:
            kept[job.uid] = _JobWatch(step, pods, now)
            continue
        kept[job.uid] = prev
        if prev.named or now - prev.since < job.timeout_s:
            continue
        assert step is not None
        kept[job.uid] = replace(prev, named=True)
        out.append(Hang(job.job, job.uid, step, job.timeout_s, prev.since, now - prev.since,
                        first_stopped(job.ranks), tuple(sorted(pods))))
    out.sort(key=lambda h: h.job)
    return out, WatchState(kept)


def renamable(state: WatchState, uid: str) -> WatchState:
    """The state with job ``uid``'s hang not named yet: nothing its naming should have started went through (the
    API refused or was unreachable), so the next decision names it again."""
    prev = state.jobs.get(uid)
    if prev is None or not prev.named:
        return state
    return WatchState({**state.jobs, uid: replace(prev, named=False)})
