"""The job's step time, from the canaries' own per-rank step lines (pure).

In synchronous data-parallel training a step ends for every rank when its all-reduce returns, so the **job's**
step time is the slowest rank's ``wall_s`` for that step.  Each rank's own work before the collective is its
*busy* time (``input_s + compute_s``); the rest of its step it waits for the slowest rank.  The GPU-seconds the
other ranks spent waiting for the slow one are therefore, over the steps of a window,
``sum over steps, over ranks r of (max busy - busy_r) x GPUs per rank``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from drills.workloads.canarylog import CanaryEvent, CanaryLine

__all__ = ["JobStep", "job_steps", "median_step", "rolling_median", "waiting_gpu_seconds"]


@dataclass(frozen=True)
class JobStep:
    """One step every rank of one generation of the job completed."""

    generation: str
    step: int
    mono: float
    """The harness's clock when the last rank's line for it arrived (the step is known complete then)."""
    wall_s: float
    """The job's step time: the slowest rank's ``wall_s``."""
    busy: dict[int, float]
    """Rank -> its ``input_s + compute_s`` for this step."""
    nodes: dict[int, str]
    """Rank -> the node its pod ran on."""


def job_steps(lines: Iterable[CanaryLine], world_size: int) -> list[JobStep]:
    """Every step all ``world_size`` ranks of one generation logged, in the order they completed."""
    groups: dict[tuple[str, int], dict[int, CanaryLine]] = {}
    for line in lines:
        if line.event is CanaryEvent.STEP and line.step is not None:
            groups.setdefault((line.generation, line.step), {})[line.rank] = line
    out = []
    for (generation, step), ranks in groups.items():
        if len(ranks) < world_size:
            continue
        out.append(JobStep(generation, step, max(ln.mono for ln in ranks.values()),
                           max(ln.number("wall_s") for ln in ranks.values()),
                           {r: ln.number("input_s") + ln.number("compute_s") for r, ln in ranks.items()},
                           {r: ln.node for r, ln in ranks.items()}))
    out.sort(key=lambda s: (s.mono, s.generation, s.step))
    return out


def median_step(steps: Sequence[JobStep]) -> float | None:
    return statistics.median(s.wall_s for s in steps) if steps else None


def rolling_median(steps: Sequence[JobStep], window: int) -> list[tuple[float, float]]:
    """(the instant each step completed, the median job step time of it and the ``window - 1`` before it), from
    the ``window``-th step on."""
    return [(steps[i].mono, statistics.median(s.wall_s for s in steps[i + 1 - window:i + 1]))
            for i in range(window - 1, len(steps))]


def waiting_gpu_seconds(steps: Iterable[JobStep], gpus_per_rank: int) -> float:
    """GPU-seconds the ranks spent waiting in their all-reduce for the slowest rank of each step."""
    total = 0.0
    for s in steps:
        slowest = max(s.busy.values(), default=0.0)
        total += sum(slowest - b for b in s.busy.values()) * gpus_per_rank
    return total
