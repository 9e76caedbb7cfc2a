"""Judge a leak report against the truth: the named hole, then its size within the feature's tolerance (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from drills.kinds.leak.truth import Truth
from drills.target.leakreport.model import Hole, LeakReading, gpu_hours_text


@dataclass(frozen=True)
class Naming:
    """Did the report name the injected hole as the largest?"""

    ok: bool
    message: str


@dataclass(frozen=True)
class Sizing:
    """How far the report's size of the injected hole is from the truth."""

    ok: bool
    error_percent: float
    reported_gpu_hours: float
    message: str


def unmeasurable(truth: Truth, reading: LeakReading, where: str) -> str | None:
    """Why the scenario is INCONCLUSIVE when the source cannot measure the injected hole (None: it can)."""
    why = reading.unmeasured.get(truth.hole.value)
    if why is None:
        return None
    return cannot_measure(truth.hole, why, where, f"the {gpu_hours_text(truth.gpu_hours)} injected")


def cannot_measure(hole: Hole, why: str, where: str, what: str) -> str:
    """The INCONCLUSIVE reason for a hole the source cannot measure, ``what`` naming what no claim is made about."""
    return (f"{where} cannot measure {hole.words}: {why}; no claim either way about {what}. To judge this hole, "
            "set leakReport.url in the target profile to a URL that serves the contract (docs/LEAK_REPORT.md)")


def _among(reading: LeakReading) -> str:
    """The ranking's scope when the source could not measure every hole ('' when it did)."""
    if not reading.unmeasured:
        return ""
    left_out = ", ".join(Hole(n).words if n in {h.value for h in Hole} else n for n in reading.unmeasured)
    return f" (ranked among the holes the source can measure; {left_out} not measurable)"


def judge_naming(truth: Truth, reading: LeakReading) -> Naming:
    expected = f"{truth.hole.words} ({gpu_hours_text(truth.gpu_hours)} injected)"
    if reading.largest == truth.hole.value:
        return Naming(True, f"the leak report names {expected} as the largest hole{_among(reading)}")
    named = reading.largest_words()
    if reading.largest is not None:
        named += f" ({gpu_hours_text(next(h for n, h, _ in reading.holes if n == reading.largest))})"
    return Naming(False, f"expected the largest hole to be {expected}; the leak report names {named}"
                         f" and sizes {truth.hole.words} at {gpu_hours_text(reading.gpu_hours(truth.hole))}"
                         f"{_among(reading)}")


def judge_size(truth: Truth, reading: LeakReading, tolerance_percent: float) -> Sizing:
    reported = reading.gpu_hours(truth.hole)
    if truth.gpu_seconds <= 0:
        raise ValueError(f"nothing was injected through {truth.hole.words}: the drill cannot judge a size of 0")
    error = abs(reported - truth.gpu_hours) / truth.gpu_hours * 100.0
    ok = error <= tolerance_percent
    signed = (reported - truth.gpu_hours) / truth.gpu_hours * 100.0
    return Sizing(ok, error, reported,
                  f"the leak report sizes {truth.hole.words} at {gpu_hours_text(reported)}; "
                  f"{gpu_hours_text(truth.gpu_hours)} were injected ({signed:+.1f} %, tolerance "
                  f"{tolerance_percent:g} %)")


__all__ = ["Hole", "Naming", "Sizing", "judge_naming", "judge_size", "unmeasurable"]
