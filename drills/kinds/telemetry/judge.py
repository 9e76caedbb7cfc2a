"""Judge GPU telemetry against what the harness knows from elsewhere (pure: readings in, findings out).

What is expected comes from outside the telemetry: the GPUs each node offers (its Node's capacity), the GPU a
canary was given (its own start line), the instants the harness saw things happen.  A series is live when its
values move with the load; one that answers and never changes while its GPU computes is frozen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from drills.target.gpumetrics.model import ENGINE, FB_USED, UTIL, GpuSample, Reading

__all__ = ["Gap", "Peak", "Point", "changes", "first_above", "first_xid", "frozen_words", "inventory_gaps",
           "other_peaks", "utilization_series"]


@dataclass(frozen=True)
class Gap:
    """One node whose telemetry does not cover every GPU it has, with utilization and memory."""

    node: str
    gpus: int
    """The GPUs the node has (its capacity)."""
    missing: tuple[str, ...] = ()
    """GPUs (by index) with no series at all."""
    no_utilization: tuple[str, ...] = ()
    no_memory: tuple[str, ...] = ()
    reported: int = 0
    """Distinct GPUs the answer named."""
    problem: str = ""
    """Why nothing was read from the node ("": it answered)."""

    @property
    def unreported(self) -> int:
        """GPUs of the node without both utilization and memory in the telemetry."""
        if self.problem or not self.reported:
            return self.gpus
        partial = set(self.no_utilization) | set(self.no_memory)
        return max(len(self.missing), self.gpus - self.reported) + len(partial)

    @property
    def message(self) -> str:
        if self.problem:
            return f"node {self.node} ({self.gpus} GPUs): {self.problem}; none of its GPUs is reported"
        if not self.reported:
            return (f"node {self.node} ({self.gpus} GPUs) answered with no GPU sample at all: an empty answer, "
                    "none of its GPUs is reported")
        parts = []
        if self.reported < self.gpus:
            named = f": GPU {', '.join(self.missing)} {'has' if len(self.missing) == 1 else 'have'} no series" \
                if self.missing else ""
            parts.append(f"reports {self.reported} of its {self.gpus} GPUs{named}")
        if self.no_utilization:
            parts.append(f"{', '.join(self.no_utilization)} report{'s' if len(self.no_utilization) == 1 else ''} "
                         f"no utilization ({UTIL} or {ENGINE})")
        if self.no_memory:
            parts.append(f"{', '.join(self.no_memory)} report{'s' if len(self.no_memory) == 1 else ''} no memory "
                         f"({FB_USED})")
        return f"node {self.node}: " + "; ".join(parts)


def _whole_gpus(gpus: Sequence[GpuSample]) -> dict[str, list[GpuSample]]:
    """The series of an answer by GPU (its index, else its UUID): a MIG GPU's instances count as that GPU."""
    out: dict[str, list[GpuSample]] = {}
    for g in gpus:
        out.setdefault(g.gpu or g.uuid, []).append(g)
    return out


def inventory_gaps(expected: Mapping[str, int], reading: Reading) -> list[Gap]:
    """For each node that has GPUs (``expected``: node -> its GPU count), what its telemetry lacks; empty when
    every GPU of every node reports utilization and memory."""
    gaps = []
    for node, count in sorted(expected.items()):
        answer = reading.answers.get(node)
        if answer is None or answer.problem or answer.empty:
            gaps.append(Gap(node, count, problem=answer.problem if answer is not None else "it was not read"))
            continue
        by_gpu = _whole_gpus(answer.gpus)
        indexed = all(k.isdigit() for k in by_gpu)
        missing = tuple(str(i) for i in range(count) if str(i) not in by_gpu) if indexed else ()
        names = {k: series[0].name if not series[0].instance else f"GPU {k}" for k, series in by_gpu.items()}
        no_util = tuple(names[k] for k, s in by_gpu.items() if all(g.utilization is None for g in s))
        no_mem = tuple(names[k] for k, s in by_gpu.items() if all(g.memory_mib is None for g in s))
        if missing or len(by_gpu) < count or no_util or no_mem:
            gaps.append(Gap(node, count, missing, no_util, no_mem, reported=len(by_gpu)))
    return gaps


@dataclass(frozen=True)
class Point:
    """One reading of one GPU's utilization (None: the reading had no utilization for it)."""

    mono: float
    value: float | None


def utilization_series(readings: Sequence[Reading], node: str, uuid: str, since: float) -> list[Point]:
    """The utilization of GPU ``uuid`` of ``node`` in every reading at or after ``since``."""
    out = []
    for r in readings:
        if r.mono >= since:
            sample = r.gpu(node, uuid)
            out.append(Point(r.mono, None if sample is None else sample.utilization))
    return out


def first_above(points: Sequence[Point], percent: float) -> Point | None:
    """The first point whose utilization is above ``percent``."""
    return next((p for p in points if p.value is not None and p.value > percent), None)


def changes(points: Sequence[Point]) -> int:
    """How many times the value differs from the one before it (points without a value are skipped)."""
    values = [p.value for p in points if p.value is not None]
    return sum(1 for a, b in zip(values, values[1:]) if a != b)


def frozen_words(points: Sequence[Point]) -> str:
    """What a series that never changed looked like, in words ("" when it changed, or holds no value)."""
    values = [p.value for p in points if p.value is not None]
    if not values or changes(points):
        return ""
    span = points[-1].mono - points[0].mono
    return f"{len(values)} samples over {span:.1f} s, every one {values[0]:g} %: frozen telemetry"


@dataclass(frozen=True)
class Peak:
    """The highest utilization one GPU reached over some readings, and when."""

    name: str
    percent: float
    mono: float


def other_peaks(readings: Sequence[Reading], node: str, exclude: Collection[str], since: float,
                above: float) -> list[Peak]:
    """Whole GPUs of ``node`` other than ``exclude`` (UUIDs) whose utilization went above ``above`` at or after
    ``since``, each at its highest, highest first."""
    peaks: dict[str, Peak] = {}
    for r in readings:
        answer = r.answers.get(node)
        if r.mono < since or answer is None:
            continue
        for g in answer.gpus:
            value = g.utilization
            if g.instance or g.uuid in exclude or value is None or value <= above:
                continue
            if g.uuid not in peaks or value > peaks[g.uuid].percent:
                peaks[g.uuid] = Peak(g.name, value, r.mono)
    return sorted(peaks.values(), key=lambda p: (-p.percent, p.name))


def first_xid(readings: Sequence[Reading], node: str, uuid: str, xid: int, since: float) -> Reading | None:
    """The first reading at or after ``since`` in which GPU ``uuid`` of ``node`` reports ``xid`` as its last Xid."""
    for r in readings:
        sample = r.gpu(node, uuid)
        if r.mono >= since and sample is not None and sample.xid == xid:
            return r
    return None
