"""An observation's slices and the estimates made from them (pure).

A window ``[start, end)`` is cut into equal slices; each :class:`Slice` keeps what the leak report said for it:
healthy capacity, the three layers and the four holes in GPU-hours (a hole the source cannot measure is None,
never 0), and the SHA-256 of the report's canonical JSON.  :func:`layer_estimate` and :func:`hole_estimate`
turn the slices into a value with a standard error (:mod:`drills.kinds.baseline.stats`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drills.kinds.baseline.errors import BaselineUsageError
from drills.kinds.baseline.stats import Estimate, share_estimate, total_estimate
from drills.records.evidence.canonical import canonical_digest
from drills.target.leakreport.model import LAYERS, Hole, LeakReading

__all__ = ["HOLES", "LAYERS", "Slice", "hole_estimate", "layer_estimate", "slice_from_reading", "summary"]

HOLES = tuple(h.value for h in Hole)
"""The four holes by their contract names, in the contract's fixed order."""


@dataclass(frozen=True)
class Slice:
    """What the leak report said for one slice of the window."""

    start: str
    end: str
    capacity_gpu_hours: float
    layers: Mapping[str, float]
    """Layer name -> GPU-hours."""
    holes: Mapping[str, float | None]
    """Hole name -> GPU-hours; None when the source cannot measure it."""
    report_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "capacityGpuHours": self.capacity_gpu_hours,
                "layers": {k: self.layers[k] for k in LAYERS}, "holes": {k: self.holes[k] for k in HOLES},
                "report": {"sha256": self.report_sha256}}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> "Slice":
        def number(value: Any, field: str, nullable: bool = False) -> float | None:
            if value is None and nullable:
                return None
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise BaselineUsageError(f"{where}: {field} is {value!r}, not GPU-hours (a number of 0 or more)")
            return float(value)
        if not isinstance(d, Mapping):
            raise BaselineUsageError(f"{where}: not an object")
        layers, holes = d.get("layers"), d.get("holes")
        if not isinstance(layers, Mapping) or not isinstance(holes, Mapping):
            raise BaselineUsageError(f"{where}: needs layers and holes objects")
        report = d.get("report") if isinstance(d.get("report"), Mapping) else {}
        return cls(start=str(d.get("start", "")), end=str(d.get("end", "")),
                   capacity_gpu_hours=number(d.get("capacityGpuHours"), "capacityGpuHours") or 0.0,
                   layers={k: number(layers.get(k), f"layers.{k}") or 0.0 for k in LAYERS},
                   holes={k: number(holes.get(k), f"holes.{k}", nullable=True) for k in HOLES},
                   report_sha256=str(report.get("sha256", "")))


def slice_from_reading(reading: LeakReading) -> Slice:
    """A slice from one leak report (its window is the report's own)."""
    holes: dict[str, float | None] = {h: None if h in reading.unmeasured else reading.gpu_hours(Hole(h))
                                      for h in HOLES}
    return Slice(start=reading.start, end=reading.end, capacity_gpu_hours=reading.capacity_gpu_hours,
                 layers={k: reading.layers[k][0] for k in LAYERS}, holes=holes,
                 report_sha256=canonical_digest(dict(reading.raw)) if reading.raw else "")


def layer_estimate(slices: Sequence[Slice], layer: str) -> Estimate:
    """The layer as a share (0..1) of healthy capacity over the window, with its standard error."""
    if layer not in LAYERS:
        raise ValueError(f"unknown layer {layer!r}; one of {', '.join(LAYERS)}")
    return share_estimate([s.layers[layer] for s in slices], [s.capacity_gpu_hours for s in slices])


def hole_estimate(slices: Sequence[Slice], hole: str) -> Estimate | None:
    """The hole's GPU-hours over the window, with its standard error; None when any slice could not measure it."""
    if hole not in HOLES:
        raise ValueError(f"unknown hole {hole!r}; one of {', '.join(HOLES)}")
    values = [s.holes[hole] for s in slices]
    if any(v is None for v in values):
        return None
    return total_estimate([float(v) for v in values if v is not None])


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 9)


def summary(slices: Sequence[Slice]) -> dict[str, Any]:
    """The window's numbers, for people and the statement: each layer's share and GPU-hours, each hole's
    GPU-hours, each with its standard error (recomputed from the slices whenever a statement is read)."""
    layers = {}
    for name in LAYERS:
        est = layer_estimate(slices, name)
        layers[name] = {"share": _round(est.value), "standardError": _round(est.standard_error),
                        "gpuHours": _round(sum(s.layers[name] for s in slices))}
    holes: dict[str, Any] = {}
    for name in HOLES:
        h = hole_estimate(slices, name)
        holes[name] = {"gpuHours": None, "standardError": None} if h is None else \
            {"gpuHours": _round(h.value), "standardError": _round(h.standard_error)}
    return {"slices": len(slices), "capacityGpuHours": _round(sum(s.capacity_gpu_hours for s in slices)),
            "layers": layers, "holes": holes}
