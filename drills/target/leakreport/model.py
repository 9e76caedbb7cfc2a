"""The four holes and the leak report as the harness reads it (the contract: docs/LEAK_REPORT.md).

Pure: parsing and checking a report's JSON, no I/O.  Readers ignore unknown fields, as the contract says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from drills.errors import FiredrillError

API_VERSION = "firedrill.dev/v1alpha1"
KIND = "LeakReport"
PATH = "/apis/firedrill.dev/v1alpha1/leakreport"
"""The contract's endpoint on a platform's API server."""
LAYERS = ("allocated", "active", "effective")


class LeakError(FiredrillError):
    """Root of the leak drill's errors."""


class ReportUnavailable(LeakError):
    """The leak report could not be read at all (unreachable, 404, no source configured): no claim either way."""


class ReportMalformed(LeakError):
    """The platform answered, but not with a leak report that follows the contract."""


class Hole(Enum):
    """The four holes of ../shared/DESIGN.md, by their contract names."""

    DATA_PIPELINE = "dataPipeline"
    """Allocated GPUs idle waiting for input."""
    COMMUNICATION = "communication"
    """Active GPUs stalled on non-overlapped collectives."""
    FRAGMENTATION = "fragmentation"
    """Free GPUs that pending work could not use because no node had room."""
    FAULT_TOLERANCE = "faultTolerance"
    """Fault-to-resume time of affected jobs plus recomputed work since the last checkpoint."""

    @property
    def words(self) -> str:
        """The name in words, as the contract's ``words`` field and the feature files write it."""
        return {"dataPipeline": "data pipeline", "communication": "communication",
                "fragmentation": "fragmentation", "faultTolerance": "fault tolerance"}[self.value]

    @classmethod
    def parse(cls, text: str) -> "Hole":
        """A hole from its words (``data pipeline``) or its contract name (``dataPipeline``)."""
        key = " ".join(text.strip().split()).lower()
        for hole in cls:
            if key in (hole.words, hole.value.lower()):
                return hole
        allowed = ", ".join(h.words for h in cls)
        raise ValueError(f"unknown hole {text!r}; write one of {allowed}")


def gpu_hours_text(value: float) -> str:
    """GPU-hours for people: 4 significant digits (0.01333 GPU-h)."""
    return f"{value:.4g} GPU-h"


@dataclass(frozen=True)
class LeakReading:
    """One leak report, checked against the contract's shape, with the raw JSON kept for the evidence."""

    start: str
    end: str
    capacity_gpu_hours: float
    layers: Mapping[str, tuple[float, float]]
    """Layer name -> (GPU-hours, share of capacity)."""
    holes: tuple[tuple[str, float, float], ...]
    """(name, GPU-hours, share) in the report's rank order."""
    largest: str | None
    summary: str
    raw: Mapping[str, Any] = field(default_factory=dict)
    unmeasured: Mapping[str, str] = field(default_factory=dict)
    """Hole name -> why the source cannot measure it (a Prometheus source: communication, fault tolerance).
    Such a hole is unknown, not zero: it is not in :attr:`holes`, and :attr:`largest` ranks only the others.
    Empty for a report that follows the contract (every hole measured)."""

    def gpu_hours(self, hole: Hole) -> float:
        return next((h for n, h, _ in self.holes if n == hole.value), 0.0)

    def largest_words(self) -> str:
        if self.largest is None:
            return "no hole (every hole is zero)"
        try:
            return Hole(self.largest).words
        except ValueError:
            return self.largest

    @classmethod
    def parse(cls, doc: Any, where: str) -> "LeakReading":
        """Check ``doc`` against the contract; :class:`ReportMalformed` names ``where`` and each problem."""
        problems: list[str] = []
        if not isinstance(doc, Mapping):
            raise ReportMalformed(f"the leak report from {where} is not a JSON object; the contract is "
                                  "docs/LEAK_REPORT.md")
        if doc.get("apiVersion") != API_VERSION:
            problems.append(f"apiVersion is {doc.get('apiVersion')!r}, expected {API_VERSION!r}")
        if doc.get("kind") != KIND:
            problems.append(f"kind is {doc.get('kind')!r}, expected {KIND!r}")
        window = doc.get("window") if isinstance(doc.get("window"), Mapping) else {}
        layers: dict[str, tuple[float, float]] = {}
        raw_layers = doc.get("layers") if isinstance(doc.get("layers"), Mapping) else {}
        for name in LAYERS:
            layer = raw_layers.get(name)
            if not isinstance(layer, Mapping) or not _number(layer.get("gpuHours")) or not _number(layer.get("share")):
                problems.append(f"layers.{name} needs numbers gpuHours and share")
                continue
            layers[name] = (float(layer["gpuHours"]), float(layer["share"]))
        holes: list[tuple[str, float, float]] = []
        raw_holes = doc.get("holes")
        if not isinstance(raw_holes, list):
            problems.append("holes is not a list")
            raw_holes = []
        known = {h.value for h in Hole}
        for i, h in enumerate(raw_holes):
            if not isinstance(h, Mapping) or h.get("name") not in known or not _number(h.get("gpuHours")):
                problems.append(f"holes[{i}] needs a name (one of {', '.join(sorted(known))}) and a number gpuHours")
                continue
            holes.append((str(h["name"]), float(h["gpuHours"]), float(h["share"]) if _number(h.get("share")) else 0.0))
        missing = known - {n for n, _, _ in holes}
        if raw_holes and missing:
            problems.append(f"holes lacks {', '.join(sorted(missing))} (all four are listed)")
        largest = doc.get("largest")
        if largest is not None and largest not in known:
            problems.append(f"largest is {largest!r}, expected one of {', '.join(sorted(known))} or null")
        capacity = doc.get("capacityGpuHours")
        if not _number(capacity):
            problems.append("capacityGpuHours is not a number")
        if problems:
            raise ReportMalformed(f"the leak report from {where} does not follow the contract "
                                  f"(docs/LEAK_REPORT.md): " + "; ".join(problems))
        return cls(start=str(window.get("start", "")), end=str(window.get("end", "")),
                   capacity_gpu_hours=float(capacity), layers=layers, holes=tuple(holes),
                   largest=largest, summary=str(doc.get("summary", "")), raw=dict(doc))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
