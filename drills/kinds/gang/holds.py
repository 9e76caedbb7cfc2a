"""Partial-hold GPU-seconds: the integral over time of GPUs bound to pods of gangs that are not whole.

A gang scheduler keeps it at zero, beyond the moment it takes to bind a
gang's pods one after another; a scheduler without gangs lets two jobs each
hold half their GPUs and wait for the other forever.  The computation is a
pure function of pod state changes, so it is tested on made-up timelines.

Definitions (DESIGN.md): a pod *holds* its GPUs while it is bound to a node
and not in a terminal phase (and not deleted).  A gang is *partial* while
some but fewer than ``min_member`` of its pods hold GPUs.  Episodes shorter
than ``tolerance`` (bind propagation) count zero.  Once a gang has been whole,
pods finishing one by one are the job ending, not a partial hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PodChange:
    """At ``t`` (seconds, one clock), pod ``pod`` of gang ``gang`` does or does not hold GPUs."""

    t: float
    gang: str
    pod: str
    holding: bool


@dataclass(frozen=True)
class Gang:
    name: str
    min_member: int
    gpus_per_pod: int


@dataclass
class GangHold:
    gang: str
    gpu_seconds: float = 0.0
    episodes: list[tuple[float, float, int, int]] = field(default_factory=list)
    """(start, end, pods holding at worst, GPUs held at worst) of each counted partial episode."""
    was_whole: bool = False
    whole_at: float | None = None


def partial_hold(changes: Iterable[PodChange], gangs: Iterable[Gang], end: float,
                 tolerance: float = 1.0) -> dict[str, GangHold]:
    """Partial-hold GPU-seconds per gang over [first change, ``end``]."""
    spec = {g.name: g for g in gangs}
    holding: dict[str, set[str]] = {name: set() for name in spec}
    result = {name: GangHold(name) for name in spec}
    open_since: dict[str, float] = {}
    area: dict[str, float] = {name: 0.0 for name in spec}
    worst: dict[str, tuple[int, int]] = {}
    last_t: float | None = None

    def accrue(until: float) -> None:
        if last_t is None:
            return
        for name, pods in holding.items():
            if name in open_since:
                area[name] += len(pods) * spec[name].gpus_per_pod * (until - last_t)

    def close(name: str, t: float) -> None:
        start = open_since.pop(name)
        if t - start >= tolerance:
            result[name].gpu_seconds += area[name]
            n, gpus = worst.pop(name, (0, 0))
            result[name].episodes.append((start, t, n, gpus))
        worst.pop(name, None)
        area[name] = 0.0

    for ch in sorted(changes, key=lambda c: c.t):
        if ch.gang not in spec:
            continue
        accrue(ch.t)
        last_t = ch.t
        pods = holding[ch.gang]
        (pods.add if ch.holding else pods.discard)(ch.pod)
        g, res = spec[ch.gang], result[ch.gang]
        if len(pods) >= g.min_member and not res.was_whole:
            res.was_whole, res.whole_at = True, ch.t
        partial = 0 < len(pods) < g.min_member and not res.was_whole
        if partial and ch.gang not in open_since:
            open_since[ch.gang] = ch.t
        if partial:
            n, _ = worst.get(ch.gang, (0, 0))
            if len(pods) > n:
                worst[ch.gang] = (len(pods), len(pods) * g.gpus_per_pod)
        elif ch.gang in open_since:
            close(ch.gang, ch.t)
    accrue(end)
    last_t = end
    for name in list(open_since):
        close(name, end)
    return result
