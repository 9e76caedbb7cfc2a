"""Chart geometry for the trend page, computed here as plain numbers and label strings (as the run report does)
so the template only draws them and escapes every label.

One chart per measure: x is the run (ledger order, evenly spaced, dates under it), y the measured value from
0; the threshold is a dashed red line; a judged point is a dot (met) or a cross (missed); a run that measured
nothing is a red triangle on the top edge; the baseline's median and noise margin (the regression rule's band)
are shaded over the baseline runs; a regressed run is ringed and labelled with the change.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from drills.records.evidence.report import COMPARISON, fmt_limit, fmt_tick, fmt_value, nice_axis
from drills.records.trend.model import Run
from drills.records.trend.rules import worse_direction
from drills.records.trend.series import MeasureSeries
from drills.records.trend.text import change_words

__all__ = ["Chart", "measure_chart", "score_chart", "verdict_strip"]

WIDTH, HEIGHT = 760.0, 210.0
LEFT, RIGHT, TOP, BOTTOM = 78.0, 18.0, 18.0, 36.0


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    kind: str
    """``pass`` (met its threshold), ``fail`` (missed it), ``plain`` (not judged)."""
    label: str
    last: bool = False


@dataclass(frozen=True)
class Chart:
    anchor: str
    title: str
    unit: str
    status: str
    words: str
    regressed: bool
    width: float = WIDTH
    height: float = HEIGHT
    x0: float = LEFT
    x1: float = WIDTH - RIGHT
    y0: float = TOP
    y1: float = HEIGHT - BOTTOM
    yticks: list[tuple[float, str]] = field(default_factory=list)
    xticks: list[tuple[float, str, str]] = field(default_factory=list)
    """x, label, text-anchor (the first and last labels stay inside the chart)."""
    path: str = ""
    dots: list[Dot] = field(default_factory=list)
    missing: list[tuple[float, str]] = field(default_factory=list)
    limit_y: float | None = None
    """Where the threshold's line is drawn; None when it is above the axis (kept for the data to be readable:
    the axis stops at 4 x the highest value), or there is none."""
    limit_label: str = ""
    band: tuple[float, float, float, float] | None = None
    """x, y, width, height of the baseline's noise band (median to median + margin, in the bad direction)."""
    median_y: float | None = None
    median_x: tuple[float, float] | None = None
    callout: tuple[float, float, str] | None = None
    """x, y of the regressed point (ringed) and the label drawn above it."""
    radius: float = 3.5
    summary: str = ""
    """The chart in words, for a screen reader (the SVG's desc)."""


def _x(i: int, n: int) -> float:
    if n <= 1:
        return round((LEFT + WIDTH - RIGHT) / 2, 1)
    return round(LEFT + i * (WIDTH - RIGHT - LEFT) / (n - 1), 1)


def _xticks(runs: Sequence[Run]) -> list[tuple[float, str, str]]:
    n = len(runs)
    if not n:
        return []
    count = min(n, 6)
    picks = sorted({round(k * (n - 1) / max(1, count - 1)) for k in range(count)})
    ticks = []
    for i in picks:
        m = re.match(r"\d{4}-(\d\d-\d\d)T(\d\d:\d\d)", runs[i].time)
        ticks.append((_x(i, n), f"{m.group(1)} {m.group(2)}" if m else f"#{i + 1}",
                      "middle" if n == 1 else "start" if i == 0 else "end" if i == n - 1 else "middle"))
    return ticks


def anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:90] or "chart"


def _scale(top: float) -> tuple[float, list[float], float]:
    end, ticks = nice_axis(top * 1.08 if top > 0 else 1.0, 5)
    return end, ticks, (HEIGHT - BOTTOM - TOP) / end


def measure_chart(title: str, m: MeasureSeries, runs: Sequence[Run]) -> Chart:
    n = len(runs)
    a = m.assessment
    values = [p.value for p in m.points if p.value is not None]
    candidates = [*values, 0.0]
    limit = m.threshold.limit if m.threshold is not None else None
    if limit is not None and (not values or limit <= 4 * max(max(values), 1e-9)):
        candidates.append(limit)
    if a.median is not None and a.margin is not None:
        candidates.append(a.median + a.margin)
    end, ticks, sy = _scale(max(candidates))

    def y(v: float) -> float:
        return round(HEIGHT - BOTTOM - max(0.0, min(v, end)) * sy, 1)
    last_runs = {p.run for p in m.points[-len(a.last):]} if a.last else set()
    dots: list[Dot] = []
    missing: list[tuple[float, str]] = []
    segments: list[str] = []
    pen_up = True
    for p in m.points:
        x = _x(p.run, n)
        run = runs[p.run]
        if p.value is None:
            missing.append((x, f"{run.run_id}: not measured"))
            pen_up = True
            continue
        kind = "fail" if p.verdict in ("FAIL", "INCONCLUSIVE") else "pass" if p.verdict == "PASS" else "plain"
        label = f"{run.run_id} ({run.time}): {fmt_value(p.value, m.unit)}" + \
                (f", median of {p.repeats} repeats" if p.repeats > 1 else "") + (f", {p.verdict}" if p.verdict else "")
        dots.append(Dot(x, y(p.value), kind, label, p.run in last_runs))
        segments.append(f"{'M' if pen_up else 'L'}{x} {y(p.value)}")
        pen_up = False
    band = median_y = median_x = None
    if a.median is not None and a.margin is not None and a.baseline_runs:
        base_points = [p for p in m.points if p.run not in last_runs][-a.baseline_runs:]
        if base_points:
            bx0, bx1 = _x(base_points[0].run, n), _x(base_points[-1].run, n)
            edge = a.median + worse_direction(m.threshold) * a.margin
            lo, hi = sorted((y(a.median), y(edge)))
            band = (bx0 - 4, lo, max(8.0, bx1 - bx0 + 8), max(1.0, hi - lo))
            median_y, median_x = y(a.median), (bx0 - 4, bx1 + 4)
    callout = None
    if a.regressed:
        last_dots = [d for d in dots if d.last]
        change = change_words(a, m.unit) if a.change is not None else "no data"
        if last_dots:
            callout = (last_dots[-1].x, last_dots[-1].y, f"REGRESSION {change}")
        else:  # ring the last "not measured" mark on the top edge
            callout = (missing[-1][0] if missing else WIDTH - RIGHT, TOP - 3, f"REGRESSION {change}")
    limit_y = y(limit) if limit is not None and limit <= end else None
    limit_label = ""
    if m.threshold is not None:
        limit_label = f"{COMPARISON.get(m.threshold.comparison, m.threshold.comparison)} " \
                      f"{fmt_limit(m.threshold.limit, m.threshold.unit)}"
        if limit_y is None and values and max(values) > 0:
            limit_label += f", above this axis ({m.threshold.limit / max(values):.0f} x the highest value)"
    failed = sum(1 for d in dots if d.kind == "fail")
    summary = (f"{m.name} over {len(m.points)} runs: {len(values)} measured"
               + (f", from {fmt_value(min(values), m.unit)} to {fmt_value(max(values), m.unit)}" if values else "")
               + f"; {failed} missed the threshold; {len(missing)} not measured. {a.words}")
    return Chart(anchor(f"{title}-{m.name}"), m.name, m.unit, a.status.value, a.words, a.regressed,
                 yticks=[(y(t), fmt_tick(t, m.unit)) for t in ticks], xticks=_xticks(runs),
                 path=" ".join(segments), dots=dots, missing=missing, limit_y=limit_y, limit_label=limit_label,
                 band=band, median_y=median_y, median_x=median_x, callout=callout,
                 radius=3.5 if n <= 120 else 2.0 if n <= 400 else 1.4, summary=summary)


def score_chart(scores: Sequence[float | None], runs: Sequence[Run]) -> Chart:
    n = len(runs)
    sy = (HEIGHT - BOTTOM - TOP) / 100.0

    def y(v: float) -> float:
        return round(HEIGHT - BOTTOM - v * sy, 1)
    dots, missing, segments = [], [], []
    for i, (score, run) in enumerate(zip(scores, runs)):
        x = _x(i, n)
        if score is None:
            missing.append((x, f"{run.run_id}: no scenario, no score"))
            continue
        dots.append(Dot(x, y(score), "pass" if run.verdict == "PASS" else "fail",
                        f"{run.run_id} ({run.time}): {score:.1f}, run verdict {run.verdict}"))
        segments.append(f"{'M' if not segments else 'L'}{x} {y(score)}")
    present = [s for s in scores if s is not None]
    summary = f"resilience score over {n} runs" + (f": from {min(present):.1f} to {max(present):.1f}, last "
                                                    f"{present[-1]:.1f}" if present else "")
    return Chart("resilience-score", "resilience score", "", "", "", False,
                 yticks=[(y(t), f"{t:g}") for t in (0, 25, 50, 75, 100)], xticks=_xticks(runs),
                 path=" ".join(segments), dots=dots, missing=missing,
                 radius=3.5 if n <= 120 else 2.0 if n <= 400 else 1.4, summary=summary)


@dataclass(frozen=True)
class StripCell:
    x: float
    width: float
    verdict: str
    label: str


def verdict_strip(verdicts: Sequence[tuple[int, str]], runs: Sequence[Run]) -> list[StripCell]:
    """One cell per run of the scenario, coloured by its verdict, on the charts' x axis."""
    n = len(runs)
    step = (WIDTH - RIGHT - LEFT) / max(1, n - 1)
    w = max(1.0, min(14.0, step * 0.8))
    return [StripCell(round(_x(i, n) - w / 2, 1), round(w, 1), v, f"{runs[i].run_id}: {v}") for i, v in verdicts]
