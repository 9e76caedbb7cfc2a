"""The leak report computed from Prometheus metrics: the queries and the arithmetic (pure, no I/O, no clock).

Standard names only, so it works on any cluster running NVIDIA's dcgm-exporter (with its pod mapping) and
kube-state-metrics.  Each :class:`Series` is one PromQL expression evaluated by ``/api/v1/query_range`` at
the instants of :func:`grid` (the end of each of equal steps covering the window: Prometheus answers there
with the latest scrape, taken within that step when the scrape interval is at most the step); its integral
over the window is the sum of its values times the step.  docs/LEAK_REPORT.md "Computing it from Prometheus"
says what each number means and where it is only a bound.

communication and faultTolerance cannot be told from these metrics (DCGM has no "stalled on a collective"
signal, kube-state-metrics no fault-to-resume time): a reading carries them in
:attr:`~drills.target.leakreport.model.LeakReading.unmeasured` with the reason, never as zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from drills.target.leakreport.model import API_VERSION, KIND, LAYERS, Hole, LeakReading, ReportUnavailable

MAX_POINTS = 10_000
"""At most this many evaluation instants per query (Prometheus refuses more than 11,000)."""
ROUND = 6


class Series(Enum):
    """One PromQL expression, evaluated over the window; its value is GPUs (or GPU-equivalents) at an instant."""

    CAPACITY = ('sum(kube_node_status_allocatable{resource="nvidia_com_gpu"} and on(node) '
                '(kube_node_status_condition{condition="Ready",status="true"} == 1))')
    """Healthy GPUs: allocatable ``nvidia.com/gpu`` of nodes whose Ready condition is true (kube-state-metrics)."""
    GPUS_SEEN = "count(count by (Hostname, UUID) (DCGM_FI_DEV_FB_USED))"
    """GPUs the DCGM exporters report at all (only to tell "no exporter scraped" from "nothing allocated")."""
    ALLOCATED = 'count(count by (Hostname, UUID) (DCGM_FI_DEV_FB_USED{pod!=""}))'
    """GPUs whose DCGM series carry a pod (dcgm-exporter's pod mapping); a GPU with any MIG instance held counts
    once."""
    ACTIVE = 'sum(DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""})'
    """The active layer: graphics-engine-active ratio of allocated GPUs."""
    EFFECTIVE = 'sum(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{pod!=""})'
    """The effective layer: tensor-pipe-active ratio of allocated GPUs (the MFU proxy)."""
    NVIDIA_SMI = 'sum(DCGM_FI_DEV_GPU_UTIL{pod!=""}) / 100'
    """What nvidia-smi shows (any kernel running), as GPUs: never a layer."""
    STALLED = 'sum(1 - (DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""} > 0))'
    """The data pipeline hole: the idle share of allocated GPUs that are running kernels (a training job
    waiting for its input between steps).  Allocated GPUs with no kernel at all are :attr:`IDLE`."""
    PENDING = ('sum(kube_pod_container_resource_requests{resource="nvidia_com_gpu"} and on(namespace, pod) '
               '(kube_pod_status_unschedulable == 1))')
    """GPUs requested by pods the scheduler marked unschedulable (kube-state-metrics)."""

    @property
    def query(self) -> str:
        return str(self.value)


UNMEASURED: Mapping[Hole, str] = {
    Hole.COMMUNICATION: ("DCGM exporter metrics do not say whether an active GPU is computing or waiting on a "
                         "collective (no exposed-communication signal), so this hole cannot be computed from "
                         "Prometheus"),
    Hole.FAULT_TOLERANCE: ("kube-state-metrics and DCGM exporter metrics carry no fault-to-resume instants or "
                           "lost steps of a job, so this hole cannot be computed from Prometheus"),
}
"""The holes a Prometheus source cannot measure, and why (said in the INCONCLUSIVE verdict)."""


@dataclass(frozen=True)
class Grid:
    """The evaluation instants: ``points`` instants ``step`` seconds apart, the first at ``first``; each stands
    for the ``step`` seconds that end at it, so together they cover [start, end) exactly."""

    first: float
    step: float
    points: int

    @property
    def last(self) -> float:
        return self.first + (self.points - 1) * self.step

    def index(self, instant: float) -> int | None:
        """The point an instant of a query answer belongs to (None: not one of the grid's)."""
        k = round((instant - self.first) / self.step)
        return k if 0 <= k < self.points and abs(instant - (self.first + k * self.step)) < self.step / 4 else None


def grid(start: float, end: float, step: float) -> Grid:
    """The ends of equal steps of about ``step`` seconds (longer when the window needs over :data:`MAX_POINTS`)."""
    if not end > start:
        raise ValueError(f"the window must end after it starts (start {start}, end {end})")
    if not step > 0:
        raise ValueError(f"the step must be above 0 s, got {step}")
    points = max(1, min(MAX_POINTS, math.ceil((end - start) / step - 1e-9)))
    dt = (end - start) / points
    return Grid(start + dt, dt, points)


def parse_matrix(doc: Any, series: Series, where: str, g: Grid) -> list[float]:
    """The values of one ``query_range`` answer on the grid (an instant with no value reads 0: an empty sum or
    count).  Raises :class:`ReportUnavailable` naming ``where`` and the query when the answer is not one."""
    def bad(what: str) -> ReportUnavailable:
        return ReportUnavailable(f"{where} answered the query {series.query!r} with {what}, not a Prometheus "
                                 "query_range result; check that prometheus.url in the target profile is a "
                                 "Prometheus (or compatible) base URL")
    if not isinstance(doc, Mapping) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, Mapping) else None
        raise bad(f"an error ({error})" if error else "something else")
    data = doc.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise bad("data that is not a matrix")
    out = [0.0] * g.points
    for item in data["result"]:
        values = item.get("values") if isinstance(item, Mapping) else None
        if not isinstance(values, list):
            raise bad("a series without values")
        for pair in values:
            try:
                at, raw = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError):
                raise bad(f"the sample {pair!r}") from None
            k = g.index(at)
            if k is not None and math.isfinite(raw):
                out[k] += raw
    return out


def _integral(values: Sequence[float], g: Grid) -> float:
    return sum(values) * g.step


def _hours(seconds: float) -> float:
    return round(seconds / 3600.0, ROUND)


def _share(part: float, whole: float) -> float:
    return round(part / whole, ROUND) if whole > 0 else 0.0


def compute(start: float, end: float, g: Grid, values: Mapping[Series, Sequence[float]], where: str,
            window: Mapping[str, str]) -> LeakReading:
    """The reading of the window from every :class:`Series`' values on the grid.

    ``window``: the contract's ``start``/``end`` strings.  Raises :class:`ReportUnavailable` when the window
    has no healthy capacity or no DCGM series at all (the metrics are not scraped: no claim either way)."""
    missing = [s for s in Series if s not in values or len(values[s]) != g.points]
    if missing:
        raise ValueError(f"values missing or not on the grid for {', '.join(s.name for s in missing)}")
    if not any(v > 0 for v in values[Series.CAPACITY]):
        raise ReportUnavailable(f"{where} has no healthy GPU capacity in the window {window['start']} to "
                                f"{window['end']} (query {Series.CAPACITY.query!r} is empty): scrape "
                                "kube-state-metrics (it must list nvidia.com/gpu in node allocatable), or widen "
                                "the window")
    if not any(v > 0 for v in values[Series.GPUS_SEEN]):
        raise ReportUnavailable(f"{where} has no DCGM exporter series (DCGM_FI_DEV_FB_USED) in the window "
                                f"{window['start']} to {window['end']}: scrape NVIDIA's dcgm-exporter on every GPU "
                                "node, with its Kubernetes pod mapping on")
    cap, alloc = values[Series.CAPACITY], values[Series.ALLOCATED]
    free = [max(0.0, c - a) for c, a in zip(cap, alloc)]
    blocked = [min(f, p) for f, p in zip(free, values[Series.PENDING])]
    # Allocated GPUs running no kernel at all: allocated - active - the data pipeline's idle share.
    idle = [max(0.0, a - x - d) for a, x, d in zip(alloc, values[Series.ACTIVE], values[Series.STALLED])]
    seconds = {
        "capacity": _integral(cap, g), "allocated": _integral(alloc, g),
        "active": _integral(values[Series.ACTIVE], g), "effective": _integral(values[Series.EFFECTIVE], g),
        "nvidiaSmi": _integral(values[Series.NVIDIA_SMI], g), "idle": _integral(idle, g),
        Hole.DATA_PIPELINE.value: _integral(values[Series.STALLED], g),
        Hole.FRAGMENTATION.value: _integral(blocked, g),
    }
    capacity = seconds["capacity"]
    measured = [h for h in Hole if h not in UNMEASURED]
    ranked = sorted(measured, key=lambda h: (-round(seconds[h.value] / 3600.0, ROUND), list(Hole).index(h)))
    largest = ranked[0] if _hours(seconds[ranked[0].value]) > 0 else None
    unknown = ", ".join(h.words for h in UNMEASURED)
    if largest is None:
        summary = f"No measurable leak: every hole Prometheus can measure is zero ({unknown}: not measurable)."
    else:
        summary = (f"The largest measurable hole is {largest.words}: {_hours(seconds[largest.value]):g} GPU-hours, "
                   f"{_share(seconds[largest.value], capacity) * 100:g}% of healthy capacity ({unknown}: not "
                   "measurable from Prometheus).")
    raw: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": KIND,
        "window": {"start": window["start"], "end": window["end"], "seconds": round(end - start, ROUND)},
        "capacityGpuHours": _hours(capacity),
        "layers": {name: {"gpuHours": _hours(seconds[name]), "share": _share(seconds[name], capacity)}
                   for name in LAYERS},
        "nvidiaSmiUtilization": {"gpuHours": _hours(seconds["nvidiaSmi"]),
                                 "share": _share(seconds["nvidiaSmi"], capacity)},
        "holes": [{"rank": i + 1, "name": h.value, "words": h.words, "gpuHours": _hours(seconds[h.value]),
                   "share": _share(seconds[h.value], capacity)} for i, h in enumerate(ranked)]
        + [{"rank": None, "name": h.value, "words": h.words, "gpuHours": None, "share": None, "unmeasured": why}
           for h, why in UNMEASURED.items()],
        "largest": largest.value if largest else None,
        "summary": summary,
        "tenants": [],
        "computedFrom": {"source": "prometheus", "stepSeconds": round(g.step, ROUND), "points": g.points,
                         "idleAllocatedGpuHours": _hours(seconds["idle"]),
                         "queries": {s.name.lower(): s.query for s in Series}},
    }
    return LeakReading(
        start=window["start"], end=window["end"], capacity_gpu_hours=capacity / 3600.0,
        layers={name: (seconds[name] / 3600.0, _share(seconds[name], capacity)) for name in LAYERS},
        holes=tuple((h.value, seconds[h.value] / 3600.0, _share(seconds[h.value], capacity)) for h in ranked),
        largest=largest.value if largest else None, summary=summary, raw=raw,
        unmeasured={h.value: why for h, why in UNMEASURED.items()})


__all__ = ["Grid", "MAX_POINTS", "Series", "UNMEASURED", "compute", "grid", "parse_matrix"]
