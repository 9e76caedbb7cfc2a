"""Observe a window: read the leak report for each of its equal slices as soon as the slice is over.

The clock and the wait are injected (:class:`Clock`, ``sleep``), so a test can run a day's window in no time
against a fake source; the command passes the system's.  ``progress`` receives one line per slice (its layers and
holes) and, while a long slice is still running, a line at most every ``heartbeat`` seconds saying how far the
window has come, so an operator watching a window of hours sees it is alive.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from drills.kinds.baseline.errors import ObservationError
from drills.kinds.baseline.method import leak_report_source, prometheus_source
from drills.kinds.baseline.slices import HOLES, LAYERS, Slice, slice_from_reading
from drills.target.leakreport import promql
from drills.target.leakreport.model import Hole, LeakReading, ReportMalformed, ReportUnavailable
from drills.target.leakreport.source import LeakSource, PrometheusSource, rfc3339

__all__ = ["Clock", "SystemClock", "Window", "observe", "slice_line", "source_method"]

HEARTBEAT = 60.0
"""Seconds between progress lines while waiting inside a long slice."""


class Clock(Protocol):
    def wall(self) -> float:
        """Seconds since the epoch (the window's instants are wall-clock instants)."""
        ...


class SystemClock:
    def wall(self) -> float:
        return time.time()


@dataclass(frozen=True)
class Window:
    """``[start, start + seconds)`` cut into ``slices`` equal slices."""

    start: float
    seconds: float
    slices: int

    def __post_init__(self) -> None:
        if not self.seconds > 0 or self.slices < 1:
            raise ValueError(f"a window needs seconds > 0 and at least one slice (got {self.seconds}, {self.slices})")

    @property
    def end(self) -> float:
        return self.start + self.seconds

    def bounds(self, i: int) -> tuple[float, float]:
        step = self.seconds / self.slices
        return self.start + i * step, self.start + (i + 1) * step if i + 1 < self.slices else self.end


def source_method(source: LeakSource) -> dict[str, Any]:
    """The method's ``source`` field for a source: a Prometheus computation (its queries and step), or a leak
    report that follows the contract (the API server path and a configured URL alike)."""
    if isinstance(source, PrometheusSource):
        return prometheus_source({s.name.lower(): s.query for s in promql.Series}, source.step,
                                 [h.value for h in promql.UNMEASURED])
    return leak_report_source()


def _pct(value: float, whole: float) -> str:
    return f"{100 * value / whole:.1f} %" if whole > 0 else "n/a"


def slice_line(i: int, n: int, s: Slice) -> str:
    """One progress line: the slice's layers as shares of its capacity and its holes in GPU-hours."""
    layers = ", ".join(f"{name} {_pct(s.layers[name], s.capacity_gpu_hours)}" for name in LAYERS)
    holes = ", ".join(f"{Hole(h).words} " + ("unmeasured" if s.holes[h] is None else f"{s.holes[h]:.4g} GPU-h")
                      for h in HOLES)
    return f"  slice {i + 1}/{n} [{s.start} .. {s.end}): {layers}; holes: {holes}"


def _wait_until(instant: float, clock: Clock, sleep: Callable[[float], None], progress: Callable[[str], None],
                window: Window, heartbeat: float) -> None:
    last = clock.wall()
    while (left := instant - clock.wall()) > 0:
        sleep(min(left, 1.0))
        now = clock.wall()
        if now - last >= heartbeat and left > 1.0:
            done = min(max(now - window.start, 0.0), window.seconds)
            progress(f"  window {100 * done / window.seconds:.0f} % ({done:.0f} s of {window.seconds:.0f} s); "
                     f"next slice read in {max(instant - now, 0):.0f} s")
            last = now


def observe(source: LeakSource, window: Window, *, clock: Clock, sleep: Callable[[float], None],
            progress: Callable[[str], None] = lambda line: None, heartbeat: float = HEARTBEAT,
            on_slice: Callable[[int, Slice], None] | None = None) -> tuple[list[Slice], dict[str, str]]:
    """Read every slice of ``window`` from ``source``, each once it ended and the source's settle time passed.

    Returns the slices and the holes the source cannot measure (name -> why).  Raises :class:`ObservationError`
    naming the slice and the source when a slice cannot be read, breaks the contract or has no healthy capacity.
    """
    out: list[Slice] = []
    unmeasured: dict[str, str] = {}
    for i in range(window.slices):
        start, end = window.bounds(i)
        _wait_until(end + source.settle, clock, sleep, progress, window, heartbeat)
        where = f"slice {i + 1} of {window.slices} ({rfc3339(start)} to {rfc3339(end)})"
        try:
            reading: LeakReading = source.read(start, end)
        except (ReportUnavailable, ReportMalformed) as exc:
            raise ObservationError(f"{where} could not be read from {source.description}: {exc}") from None
        if reading.capacity_gpu_hours <= 0:
            raise ObservationError(f"{where}: {source.description} reports no healthy GPU capacity; a utilization "
                                   "baseline needs GPUs to measure (check that the nodes are Ready)")
        unmeasured.update(reading.unmeasured)
        piece = slice_from_reading(reading)
        out.append(piece)
        progress(slice_line(i, window.slices, piece))
        if on_slice is not None:
            on_slice(i, piece)
    return out, unmeasured
