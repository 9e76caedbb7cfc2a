"""The HTML report: one self-contained file a customer opens from disk and reads.

:func:`render_report` turns a :class:`~drills.records.evidence.record.RunRecord` (and what is known about its
signature) into a single HTML document: inline CSS, inline SVG charts, no script, no font, no image and
no URL fetched (a Content-Security-Policy of ``default-src 'none'`` says so to the browser).  Every name
that comes from the cluster or a feature file goes through Jinja's autoescaping.

Top to bottom: the verdict (with the run's resilience score, :mod:`drills.records.score`); findings; the contract clauses traced to scenarios, judgements and evidence
files; a timeline per node pull; a placement chart per gang submission; a tenant x probe matrix per partition
isolation scenario; latency and requests per second around the act of each serving and control-plane scenario,
with the Ready replica count on the same axis; where the GPU time went (the run's leak report: layers, ranked
holes, and each leak scenario's injected against reported hole); distributions when scenarios were repeated;
the target fingerprint; what the run was made of.

Rendering is deterministic (no clock, no randomness): re-rendering the same record with the same
Firedrill version gives the same bytes, so an archive's manifest digest of ``report.html`` stays valid.

Charts are computed here as plain geometry (numbers and label strings) and drawn by the template, so the
template escapes every label like any other text.  The chart cards are macros of ``templates/charts.html.j2`` and
the style sheet is ``templates/report.css``: the report inlines both, and the live view of a run
(:mod:`drills.records.live`) draws the same cards with :func:`scenario_charts` and serves the same sheet.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from drills import __version__
from drills.records.evidence.errors import EvidenceError
from drills.records.evidence.record import JudgementRecord, MeasurementRecord, RunRecord, ScenarioRecord
from drills.records.score import explain as explain_score, run_score, scored_from_record

__all__ = ["ReportError", "SignatureStatus", "find_archive", "render_archive", "render_report", "report_css",
           "scenario_charts", "write_report"]

VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE", "ERROR", "ABORTED")
VERDICT_ICON = {"PASS": "\u2713", "FAIL": "\u2717", "INCONCLUSIVE": "?", "ERROR": "!", "ABORTED": "\u25a0"}
NODE_PULL_PHASES = (("detect", "fault", "detect"), ("evict", "detect", "evict"), ("replace", "evict", "replace"),
                    ("resume", "replace", "resume"), ("total", "fault", "resume"))
GPU_FAULT_PHASES = (("detect", "fault", "detect"), ("off", "fault", "off"), ("replace", "off", "replace"),
                    ("resume", "replace", "resume"), ("total", "fault", "resume"))
BLIP_PHASES = (("outage", "fault", "end"), ("ready", "end", "ready"))
STRAGGLER_PHASES = (("named", "fault", "named"), ("recovered", "fault", "recovered"))
HANG_PHASES = (("named", "fault", "named"), ("restart", "named", "restart"), ("resume", "restart", "resume"),
               ("total", "fault", "resume"))
RECOVERY_PHASES = {"node-pull": NODE_PULL_PHASES, "gpu-fault": GPU_FAULT_PHASES, "blip": BLIP_PHASES,
                   "straggler": STRAGGLER_PHASES, "hang": HANG_PHASES, "campaign": ()}
"""The drills whose recovery is drawn as a phase timeline, and their phases (name, from instant, to instant)."""
PHASE_COLOURS = {"detect": "#c4314b", "named": "#c4314b", "outage": "#c4314b", "evict": "#d9730d", "off": "#d9730d",
                 "replace": "#2f6fb0", "restart": "#2f6fb0", "recovered": "#2e8540", "ready": "#2e8540",
                 "resume": "#2e8540", "total": "#5b6270"}
GANG_COLOURS = ("#2f6fb0", "#d9730d", "#2e8540", "#8e44ad", "#b8860b", "#0e8a9a", "#c4314b", "#5b6270")
COMPARISON = {"<=": "\u2264", ">=": "\u2265"}


@dataclass(frozen=True)
class SignatureStatus:
    """What the report says about the archive's signature.

    ``keyid``: SHA-256 of the signing public key (hex), or None when the run was not signed.
    ``ephemeral``: the key was generated for this run only, so a valid signature proves the archive is
    unaltered (integrity), not who produced it.
    ``verified``: True or False when the signatures were checked before rendering, None when not checked.
    """

    keyid: str | None = None
    ephemeral: bool = True
    verified: bool | None = None
    note: str = ""

    @classmethod
    def from_signer(cls, signer: dict[str, Any] | None, *, verified: bool | None = None,
                    note: str = "") -> "SignatureStatus":
        """From an archive's ``signer.json`` (``{"keyid": ..., "ephemeral": bool}``); None: unsigned."""
        if not signer:
            return cls(None, True, verified, note)
        keyid = signer.get("keyid")
        return cls(str(keyid) if keyid else None, bool(signer.get("ephemeral", True)), verified, note)

    @property
    def short_keyid(self) -> str:
        return "" if not self.keyid else (self.keyid[:16] + "\u2026" if len(self.keyid) > 16 else self.keyid)

    def describe(self) -> str:
        """One line, e.g. ``signed by key 3f9a0c…  (ephemeral: integrity only)``."""
        if not self.keyid:
            return "unsigned: this run carries no signature"
        kind = "ephemeral: integrity only" if self.ephemeral else "persistent key: integrity and origin"
        return f"signed by key {self.short_keyid} ({kind})"

    @property
    def check(self) -> str:
        if self.verified is True:
            return "signatures verified"
        if self.verified is False:
            return "SIGNATURE CHECK FAILED"
        return "not checked by this report: run `firedrill verify` on the archive"


# --------------------------------------------------------------------------------------------- formatting


def fmt_value(value: float | None, unit: str = "") -> str:
    """A measured value for people: durations in ms below a second, counts without decimals."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "not measured"
    if unit == "s":
        if abs(value) < 1:
            return f"{value * 1000:.0f} ms" if abs(value) >= 0.0095 else f"{value * 1000:.1f} ms"
        return f"{value:.2f} s"
    if float(value).is_integer():
        text = f"{int(value)}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".strip()


def fmt_limit(value: float, unit: str) -> str:
    return f"{value:g} {unit}".strip()


def fmt_signed_ms(value: float | None) -> str:
    if value is None:
        return "\u2014"
    return f"{value * 1000:+.1f} ms"


def fmt_time(rfc3339: str) -> str:
    dt = _parse_time(rfc3339)
    return rfc3339 if dt is None else dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _parse_time(text: str) -> datetime | None:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def fmt_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def nice_axis(xmax: float, target_ticks: int = 6) -> tuple[float, list[float]]:
    """An axis end at or above ``xmax`` and round tick values from 0 (1, 2, 2.5, 5 x 10^k steps)."""
    xmax = max(xmax, 1e-3)
    raw = xmax / target_ticks
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    end = math.ceil(xmax / step - 1e-9) * step
    ticks = [round(i * step, 10) for i in range(int(round(end / step)) + 1)]
    return end, ticks


def fmt_tick(value: float, unit: str = "s") -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".") if value else "0"
    return f"{text} {unit}".strip()


def _percentile(values: list[float], q: float) -> float:
    """Nearest rank on sorted values (as the run summary does)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# --------------------------------------------------------------------------------------------- view model


@dataclass
class JudgementView:
    name: str
    measured: str
    limit: str
    comparison: str
    verdict: str
    note: str


@dataclass
class ScenarioRow:
    anchor: str
    clauses: list[str]
    feature: str
    scenario: str
    repeat: int
    repeats: int
    drill: str
    verdict: str
    seconds: float
    judgements: list[JudgementView]
    findings: list[tuple[str, str]]
    error: str
    evidence: str


@dataclass
class Tick:
    x: float
    label: str


@dataclass
class InstantMark:
    x: float
    label: str
    label_y: float
    title: str


@dataclass
class PhaseRow:
    name: str
    span: str
    colour: str
    y: float
    x0: float | None
    x1: float | None
    """Harness bar; x1 None: the end instant was never observed."""
    px0: float | None
    px1: float | None
    """Platform-stamped bar, when both platform instants are known."""
    label: str
    platform_label: str
    limit_x: float | None
    verdict: str


@dataclass
class PhaseTableRow:
    name: str
    span: str
    harness: str
    platform: str
    error: str
    threshold: str
    verdict: str


@dataclass
class NodePullView:
    anchor: str
    title: str
    verdict: str
    fault: list[tuple[str, str]]
    note: str
    width: float = 1000
    height: float = 0
    plot_x: float = 0
    plot_w: float = 0
    plot_top: float = 0
    plot_bottom: float = 0
    ticks: list[Tick] = field(default_factory=list)
    instants: list[InstantMark] = field(default_factory=list)
    rows: list[PhaseRow] = field(default_factory=list)
    table: list[PhaseTableRow] = field(default_factory=list)
    extras: list[tuple[str, str]] = field(default_factory=list)
    has_platform: bool = False
    findings: list[tuple[str, str]] = field(default_factory=list)
    steps: StepChart | None = None
    """The straggler drill's per-rank step time chart (None for the other recoveries)."""


@dataclass
class StepChart:
    """Each rank's compute time per step around the fault, from the canaries' step lines (``details.step_times``)."""

    width: float
    height: float
    plot_x: float
    plot_w: float
    plot_top: float
    plot_bottom: float
    ticks: list[Tick]
    y_ticks: list[tuple[float, str]]
    lines: list[tuple[str, str, str]]
    """(label, colour, SVG points) per rank and generation."""
    marks: list[tuple[float, str]]
    """(x, label) of the fault and the instants after it."""
    caption: str = ("seconds from the fault (harness clock); each rank's compute time per step, from its canary's "
                    "step lines")


def step_chart(details: dict[str, Any]) -> StepChart | None:
    """The per-rank step chart: x is seconds from the fault, y each rank's ``compute_s`` per step (the straggler
    drill), or the series' own ``value`` with its ``caption`` and ``marks`` (the blip drill: the time since each
    rank's previous step, so a pause is a spike)."""
    raw = details.get("step_times") or {}
    key = str(raw.get("value") or "compute_s")
    unit = str(raw.get("unit", "s"))  # the y axis's unit ("" for a step number)
    pts = [{**p, "compute_s": p.get(key)} for p in raw.get("points") or [] if isinstance(p, dict)
           and _num(p.get("t")) is not None and _num(p.get(key)) is not None]
    if not pts:
        return None
    t0, t1 = min(float(p["t"]) for p in pts), max(float(p["t"]) for p in pts)
    t0 = math.floor(t0)  # the axis starts on a whole second, so its ticks fall on round values
    span = max(t1 - t0, 1e-3)
    y_end, y_ticks = nice_axis(max(float(p["compute_s"]) for p in pts) * 1.05, 4)
    x_end, x_ticks = nice_axis(span, 8)
    left, plot_w, top, bottom = 70.0, 880.0, 20.0, 220.0
    x = lambda t: left + (t - t0) / x_end * plot_w  # noqa: E731
    y = lambda v: bottom - v / y_end * (bottom - top)  # noqa: E731
    series: dict[tuple[int, str], list[str]] = {}
    for p in sorted(pts, key=lambda p: float(p["t"])):
        series.setdefault((int(p.get("rank") or 0), str(p.get("generation") or "")), []).append(
            f"{x(float(p['t'])):.1f},{y(float(p['compute_s'])):.1f}")
    gens = sorted({g for _, g in series})
    lines = [(f"rank {r}" + (f" (run {gens.index(g) + 1})" if len(gens) > 1 else ""),
              GANG_COLOURS[r % len(GANG_COLOURS)], " ".join(xy)) for (r, g), xy in sorted(series.items())]
    instants = details.get("instants") or {}
    fault = _num((instants.get("fault") or {}).get("mono"))
    marks = [(x(0.0), "fault")] if t0 <= 0.0 <= t1 else []
    for name in raw.get("marks") or ("named", "recovered"):
        at = _num((instants.get(name) or {}).get("mono"))
        if fault is not None and at is not None and t0 <= at - fault <= t1:
            marks.append((x(at - fault), name))
    chart = StepChart(1000, bottom + 40, left, plot_w, top, bottom,
                      [Tick(x(t0 + t), fmt_tick(round(t0 + t, 3))) for t in x_ticks],
                      [(y(v), fmt_tick(v) if unit == "s" else f"{v:g}{' ' + unit if unit else ''}") for v in y_ticks],
                      lines, marks)
    if raw.get("caption"):
        chart.caption = str(raw["caption"])
    return chart


@dataclass
class PodRow:
    name: str
    label: str
    colour: str
    y: float
    wait_x1: float
    """End of the pending line (bind, or the axis end when never placed)."""
    placed: bool
    bound_x: float | None
    running_x: float | None
    end_x: float | None
    node: str
    text_x: float
    title: str


@dataclass
class GangHeader:
    name: str
    label: str
    colour: str
    y: float
    summary: str


@dataclass
class EpisodeBox:
    gang: str
    x0: float
    x1: float
    y0: float
    y1: float
    label: str
    label_y: float


@dataclass
class GangView:
    anchor: str
    title: str
    verdict: str
    note: str
    legend: list[tuple[str, str]]
    width: float = 1000
    height: float = 0
    plot_x: float = 0
    plot_w: float = 0
    plot_top: float = 0
    plot_bottom: float = 0
    ticks: list[Tick] = field(default_factory=list)
    headers: list[GangHeader] = field(default_factory=list)
    pods: list[PodRow] = field(default_factory=list)
    episodes: list[EpisodeBox] = field(default_factory=list)
    holds: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(gang, pods placed, partial-hold GPU-seconds, episodes as text) for the table under the chart."""
    findings: list[tuple[str, str]] = field(default_factory=list)
    open_running: bool = False
    """Some pod ran but the record does not say when it let go of its GPUs (drawn as a dot)."""


@dataclass
class DistributionRow:
    name: str
    unit: str
    n: int
    p50: str
    p95: str
    max: str
    threshold: str
    dots: list[tuple[float, float]]
    box: tuple[float, float]
    p50_x: float
    p95_x: float
    limit_x: float | None
    axis_end: str


@dataclass
class DistributionView:
    anchor: str
    title: str
    runs: int
    verdicts: str
    rows: list[DistributionRow]


@dataclass
class IsolationCell:
    state: str
    """survived, failed, or not run (the probe could not be performed)."""
    reason: str
    expected: str
    escaped: bool
    """Failed although the mode promises it survives (isolation escaped)."""
    spared: bool
    """Survived although the mode promises it fails."""
    victim: bool

    @property
    def css(self) -> str:
        if self.escaped or self.spared:
            return "bad"
        return {"failed": "failed", "survived": "survived"}.get(self.state, "none")


@dataclass
class IsolationProbe:
    title: str
    victim: str
    gpu: str
    expected: str
    observed: str
    status: str
    verdict: str
    note: str


@dataclass
class IsolationView:
    anchor: str
    title: str
    verdict: str
    facts: list[tuple[str, str]]
    probes: list[IsolationProbe]
    rows: list[tuple[str, list[IsolationCell]]]
    pending: list[tuple[str, str]]
    findings: list[tuple[str, str]] = field(default_factory=list)
    escapes: int = 0


@dataclass
class LeakBar:
    """One utilization layer or hole as a row with a bar (``pct``: its share of healthy capacity, in %)."""

    name: str
    words: str
    gpu_hours: str
    share: str
    pct: float
    rank: int = 0
    largest: bool = False


@dataclass
class LeakScenario:
    """One leak identification scenario: the hole injected against the hole and size the report gave."""

    anchor: str
    title: str
    verdict: str
    expected: str
    expected_gpu_hours: str
    reported: str
    reported_gpu_hours: str
    error: str
    source: str
    formula: str


@dataclass
class LeakView:
    """The run's leak report (layers, ranked holes) and every leak scenario's expected vs reported."""

    source: str = ""
    window: str = ""
    error: str = ""
    capacity: str = ""
    headline: str = ""
    layers: list[LeakBar] = field(default_factory=list)
    holes: list[LeakBar] = field(default_factory=list)
    scenarios: list[LeakScenario] = field(default_factory=list)

    @property
    def present(self) -> bool:
        return bool(self.layers or self.holes or self.scenarios)


HOLE_WORDS = {"dataPipeline": "data pipeline", "communication": "communication", "fragmentation": "fragmentation",
              "faultTolerance": "fault tolerance"}


def fmt_gpu_hours(value: Any) -> str:
    v = _num(value)
    return "\u2014" if v is None else f"{v:.4g} GPU-h"


def fmt_share(value: Any) -> str:
    v = _num(value)
    return "\u2014" if v is None else f"{v * 100:.3g} %"


def leak_view(record: RunRecord, repeats: dict[tuple[str, str], int]) -> LeakView:
    view = LeakView()
    run = record.leak_report or {}
    src = run.get("source") or {}
    view.source = str(src.get("where", ""))
    window = run.get("window") or {}
    if window:
        view.window = f"{fmt_time(str(window.get('start', '')))} \u2192 {fmt_time(str(window.get('end', '')))}"
    view.error = str(run.get("error", ""))
    report = run.get("report") if isinstance(run.get("report"), dict) else None
    if report is not None:
        view.capacity = fmt_gpu_hours(report.get("capacityGpuHours"))
        layers = report.get("layers") or {}
        for name in ("allocated", "active", "effective"):
            layer = layers.get(name) or {}
            share = _num(layer.get("share")) or 0.0
            view.layers.append(LeakBar(name, name, fmt_gpu_hours(layer.get("gpuHours")), fmt_share(share),
                                       round(min(max(share, 0.0), 1.0) * 100, 1)))
        largest = report.get("largest")
        for i, h in enumerate(report.get("holes") or []):
            if not isinstance(h, dict):
                continue
            share = _num(h.get("share")) or 0.0
            name = str(h.get("name", ""))
            view.holes.append(LeakBar(name, str(h.get("words") or HOLE_WORDS.get(name, name)),
                                      fmt_gpu_hours(h.get("gpuHours")), fmt_share(share),
                                      round(min(max(share, 0.0), 1.0) * 100, 1), int(h.get("rank") or i + 1),
                                      name == largest))
        top = next((h for h in view.holes if h.largest), None)
        view.headline = (f"The largest hole is {top.words}: {top.gpu_hours}, {top.share} of healthy capacity."
                         if top is not None else "No leak: every hole is zero.")
    for s in record.scenarios:
        leak = (s.details or {}).get("leak")
        if s.drill != "leak-identification" or not isinstance(leak, dict):
            continue
        expected = leak.get("expected") or {}
        reported = leak.get("reported") or {}
        error = _measurement(s, "hole size error")
        largest = reported.get("largest")
        view.scenarios.append(LeakScenario(
            _anchor("leak", s.slug), _scenario_title(s, repeats[(s.feature_file, s.scenario)]), s.verdict,
            str(leak.get("words") or HOLE_WORDS.get(str(leak.get("hole")), "")),
            fmt_gpu_hours(expected.get("gpuHours")),
            (HOLE_WORDS.get(str(largest), str(largest)) if largest else "no hole") if reported else "not read",
            fmt_gpu_hours(reported.get("gpuHours")) if reported else "\u2014",
            fmt_value(error.value, "%") if error is not None and error.value is not None else "\u2014",
            str((leak.get("source") or {}).get("where", "")), str(expected.get("formula", ""))))
    return view


# -------------------------------------------------------------------------------------------- the charts


def _anchor(prefix: str, slug: str) -> str:
    return f"{prefix}-{re.sub(r'[^a-z0-9-]+', '-', slug.lower()).strip('-') or 'scenario'}"


def _judgement_for(s: ScenarioRecord, name: str) -> JudgementRecord | None:
    return next((j for j in s.judgements if j.threshold.name == name), None)


def _measurement(s: ScenarioRecord, name: str) -> MeasurementRecord | None:
    return next((m for m in s.measurements if m.name == name), None)


def _scenario_title(s: ScenarioRecord, repeats: int) -> str:
    run = f" (run {s.repeat} of {repeats})" if repeats > 1 else ""
    return f"{s.scenario}{run}"


def node_pull_view(s: ScenarioRecord, repeats: int) -> NodePullView:
    details = s.details or {}
    fault = details.get("fault") or {}
    phases = RECOVERY_PHASES.get(s.drill, NODE_PULL_PHASES)
    facts = [(k, str(fault[k])) for k in ("what", "seconds", "node", "nodes", "method", "gpu", "uuid", "xid", "speed",
                                         "input_delay_s", "step_time_before_s", "rank", "detail",
                                         "checkpoint_at_fault", "step_at_fault") if k in fault]
    if "confirmed" in fault:
        facts.append(("confirmed", "yes" if fault["confirmed"] else "NO"))
    series = details.get("allocatable") or []
    if series:  # a failed GPU: the node's allocatable GPUs over time, as the harness's watch saw them
        facts.append(("allocatable GPUs", ", ".join(f"{p.get('gpus')} at {fmt_value(p.get('t'), 's')}"
                                                    for p in series if isinstance(p, dict))))
    steps = [p for p in details.get("outage-steps") or [] if isinstance(p, dict)]
    if steps:  # a blip: each rank's steps inside the outage, by the canary's own clock
        ranks = sorted({int(p.get("rank") or 0) for p in steps})
        facts.append(("steps during the outage", ", ".join(
            f"rank {r}: {sum(1 for p in steps if int(p.get('rank') or 0) == r)}" for r in ranks)))
    view = NodePullView(_anchor("nodepull", s.slug), _scenario_title(s, repeats), s.verdict, facts, "")
    view.steps = step_chart(details)
    view.findings = [_split_finding(f) for f in s.findings]
    view.extras = [(m.name, fmt_value(m.value, m.unit)) for m in s.measurements
                   if m.name not in dict((p[0], p) for p in phases)]
    raw = details.get("instants") or {}
    instants = {k: v for k, v in raw.items() if isinstance(v, dict) and _num(v.get("mono")) is not None}
    if "fault" not in instants:
        view.note = ("No timeline: the fault was never confirmed, so no phase was timed."
                     if fault.get("confirmed") is False or s.verdict == "INCONCLUSIVE"
                     else "No timeline: the drill recorded no fault instant.")
        return view
    f = instants["fault"]
    harness = {k: float(v["mono"]) - float(f["mono"]) for k, v in instants.items()}
    base = _num(f.get("server")) if _num(f.get("server")) is not None else _num(f.get("wall"))
    platform: dict[str, float] = {"fault": 0.0}
    for k, v in instants.items():
        if k != "fault" and base is not None and _num(v.get("server")) is not None:
            platform[k] = float(v["server"]) - base
    view.has_platform = len(platform) > 1
    end = max([*harness.values(), *platform.values(), 0.001])
    axis_end, ticks = nice_axis(end * 1.02)
    left, plot_w, row_h, top = 190.0, 560.0, 46.0 if view.has_platform else 34.0, 56.0
    scale = plot_w / axis_end
    view.plot_x, view.plot_w, view.plot_top = left, plot_w, top
    view.ticks = [Tick(left + t * scale, fmt_tick(t)) for t in ticks]
    levels: list[float] = []
    for k in ("fault", *(p[2] for p in phases if p[0] != "total")):
        if k in harness:
            ix = left + harness[k] * scale
            level = next((i for i, last in enumerate(levels) if ix - last >= 64), len(levels))
            if level == len(levels):
                levels.append(ix)
            levels[level] = ix
            view.instants.append(InstantMark(ix, f"t_{k}", 14 + 12 * min(level, 3),
                                             f"t_{k} at {fmt_value(harness[k], 's')} after the fault"))

    def x(t: float | None) -> float | None:
        return None if t is None else left + max(0.0, t) * scale

    for i, (phase, a, b) in enumerate(phases):
        m, j = _measurement(s, phase), _judgement_for(s, phase)
        hv = m.value if m is not None and m.value is not None else (
            harness[b] - harness[a] if a in harness and b in harness else None)
        pv = m.platform if m is not None and m.platform is not None else (
            platform[b] - platform[a] if a in platform and b in platform else None)
        err = m.error if m is not None and m.error is not None else (
            hv - pv if hv is not None and pv is not None else None)
        y = top + i * row_h
        if a in harness and b in harness:
            label = fmt_value(hv, "s")
        elif a in harness:
            label = f"t_{b} never observed"
        else:
            label = "not observed"
        limit_x = None
        if j is not None and a in harness and j.threshold.unit == "s" and j.threshold.comparison == "<=":
            candidate = harness[a] + j.threshold.limit
            limit_x = x(candidate) if candidate <= axis_end else None
        view.rows.append(PhaseRow(
            phase, f"t_{a} \u2192 t_{b}", PHASE_COLOURS[phase], y, x(harness.get(a)), x(harness.get(b)),
            x(platform.get(a)) if b in platform else None, x(platform.get(b)),
            label, f"platform {fmt_value(pv, 's')}" if pv is not None and b in platform else "",
            limit_x, j.verdict if j is not None else ""))
        view.table.append(PhaseTableRow(
            phase, f"t_{a} \u2192 t_{b}", fmt_value(hv, "s") if hv is not None else (m.note if m and m.note
                                                                                    else "not observed"),
            fmt_value(pv, "s") if pv is not None else "\u2014", fmt_signed_ms(err),
            f"{COMPARISON.get(j.threshold.comparison, j.threshold.comparison)} "
            f"{fmt_limit(j.threshold.limit, j.threshold.unit)}" if j else "\u2014", j.verdict if j else ""))
    view.plot_bottom = top + len(phases) * row_h
    view.height = view.plot_bottom + 44
    return view


def isolation_view(s: ScenarioRecord, repeats: int) -> IsolationView:
    """The tenant x probe matrix of a partition isolation scenario (``details["isolation_matrix"]``)."""
    m = (s.details or {}).get("isolation_matrix") or {}
    layout = m.get("layout") if isinstance(m.get("layout"), dict) else {}
    facts = [("node", str(m.get("node") or "?")), ("mode", str(m.get("mode") or "?"))]
    if layout:
        kinds = ", ".join(f"{k.get('count')} x {k.get('profile') or k.get('resource')} ({k.get('memory_mib')} MiB)"
                          for k in layout.get("slices") or [] if isinstance(k, dict))
        facts.append(("layout", f"{layout.get('gpus', '?')} x {layout.get('product', '?')}: {kinds}"))
    if m.get("enforced") is False:
        facts.append(("isolation enforced", "no (the node labels firedrill.dev/isolation-enforced=false)"))
    if m.get("wanted"):
        facts.append(("tenants", f"{m.get('reached', 0)} running of {m.get('wanted')} asked for"))
    probes_raw = [p for p in m.get("probes") or [] if isinstance(p, dict)]
    probes = []
    tenants: list[str] = [str(t) for t in m.get("tenants") or []]
    for p in probes_raw:
        for t in (p.get("outcomes") or {}):
            if t not in tenants:
                tenants.append(str(t))
        probes.append(IsolationProbe(
            str(p.get("title") or p.get("probe") or "?"), str(p.get("victim") or ""),
            "" if p.get("gpu") is None else str(p.get("gpu")),
            str(p.get("expected") or p.get("promised") or ""), str(p.get("affected") or ""),
            str(p.get("status") or ""), str(p.get("verdict") or ("INCONCLUSIVE" if p.get("status") == "inconclusive"
                                                                  else "")),
            str(p.get("note") or "")))
    rows = []
    escapes = 0
    for t in sorted(tenants, key=_natural):
        cells = []
        for p in probes_raw:
            o = (p.get("outcomes") or {}).get(t)
            if not isinstance(o, dict):
                cells.append(IsolationCell("not run" if p.get("status") != "done" else "absent", "", "", False,
                                           False, t == p.get("victim")))
                continue
            cell = IsolationCell(str(o.get("state") or "?"), str(o.get("reason") or ""), str(o.get("expected") or ""),
                                 bool(o.get("escaped")), bool(o.get("spared")), t == p.get("victim"))
            escapes += cell.escaped
            cells.append(cell)
        rows.append((t, cells))
    view = IsolationView(_anchor("isolation", s.slug), _scenario_title(s, repeats), s.verdict, facts, probes, rows,
                         sorted((str(k), str(v)) for k, v in (m.get("pending") or {}).items()), escapes=escapes)
    view.findings = [_split_finding(f) for f in s.findings]
    return view


def _submitted_mono(s: ScenarioRecord, gangs: list[str], pods: dict[str, dict[str, Any]],
                    timeline: tuple[dict[str, Any], ...]) -> float | None:
    """The harness's monotonic time of the gangs' submission: from the details when the drill recorded it,
    else the ``submit-gangs`` action in the timeline, else inferred from the first partial-hold episode
    (an episode opens when the gang's first pod binds)."""
    for key in ("submitted_mono", "submitted_at"):
        if _num((s.details or {}).get(key)) is not None:
            return float(s.details[key])
    for ob in timeline:
        if ob.get("kind") == "Action" and ob.get("event") == "submit-gangs" and _num(ob.get("mono")) is not None:
            names = str((ob.get("summary") or {}).get("target") or ob.get("name") or "").split(",")
            if gangs and set(gangs) <= set(names):
                return float(ob["mono"])
    for gang, hold in ((s.details or {}).get("partial_hold") or {}).items():
        episodes = hold.get("episodes") or [] if isinstance(hold, dict) else []
        bound = [p["bound_s"] for p in pods.values() if p.get("gang") == gang and _num(p.get("bound_s")) is not None]
        if episodes and bound and _num(episodes[0][0]) is not None:
            return float(episodes[0][0]) - min(bound)
    return None


def _pod_ends(pods: dict[str, dict[str, Any]], submitted: float | None,
              timeline: tuple[dict[str, Any], ...]) -> dict[str, float]:
    """Seconds from submission until each pod stopped holding its GPUs (finished, failed or deleted)."""
    ends: dict[str, float] = {name: float(p["ended_s"]) for name, p in pods.items() if _num(p.get("ended_s")) is not None}
    if submitted is None:
        return ends
    for ob in timeline:
        name = ob.get("name")
        if ob.get("kind") != "Pod" or name not in pods or name in ends or _num(ob.get("mono")) is None:
            continue
        phase = (ob.get("summary") or {}).get("phase")
        if ob["mono"] >= submitted and (ob.get("event") == "DELETED" or phase in ("Succeeded", "Failed")):
            if _num(pods[name].get("bound_s")) is not None:
                ends[name] = float(ob["mono"]) - submitted
    return ends


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def gang_view(s: ScenarioRecord, repeats: int, timeline: tuple[dict[str, Any], ...]) -> GangView:
    details = s.details or {}
    raw = details.get("bind_report") or {}
    pods = {str(k): v for k, v in raw.items() if isinstance(v, dict)}
    holds = {str(k): v for k, v in (details.get("partial_hold") or {}).items() if isinstance(v, dict)}
    gangs = sorted({str(p.get("gang") or "?") for p in pods.values()} | set(holds))
    colour = {g: GANG_COLOURS[i % len(GANG_COLOURS)] for i, g in enumerate(gangs)}
    view = GangView(_anchor("gang", s.slug), _scenario_title(s, repeats), s.verdict, "",
                    [(g, colour[g]) for g in gangs])
    view.findings = [_split_finding(f) for f in s.findings]
    submitted = _submitted_mono(s, gangs, pods, timeline)
    ends = _pod_ends(pods, submitted, timeline)
    for g in gangs:
        h = holds.get(g) or {}
        eps = h.get("episodes") or []
        text = "; ".join(f"{e[2] if len(e) > 2 else '?'} pods holding {e[3] if len(e) > 3 else '?'} GPUs "
                         f"for {fmt_value(e[1] - e[0], 's')}"
                         for e in eps if len(e) >= 2 and _num(e[0]) is not None and _num(e[1]) is not None)
        members = [p for p in pods.values() if str(p.get("gang") or "?") == g]
        placed = sum(1 for p in members if _num(p.get("bound_s")) is not None)
        view.holds.append((g, f"{placed} of {len(members)}",
                           fmt_value(_num(h.get("gpu_seconds")), "GPU-s") if h else "\u2014", text or "none"))
    if not pods:
        view.note = "No pod placement was recorded for this scenario."
        return view
    episodes: list[tuple[str, float, float, int, int]] = []
    if submitted is not None:
        for g, h in holds.items():
            for e in h.get("episodes") or []:
                if len(e) >= 2 and _num(e[0]) is not None and _num(e[1]) is not None:
                    episodes.append((g, float(e[0]) - submitted, float(e[1]) - submitted,
                                     int(e[2]) if len(e) > 2 else 0, int(e[3]) if len(e) > 3 else 0))
    elif any(h.get("episodes") for h in holds.values()):
        view.note = "Partial-hold episodes are listed below; their times could not be placed on this axis."
    values = [float(v) for p in pods.values() for v in (p.get("bound_s"), p.get("running_s")) if _num(v) is not None]
    values += list(ends.values()) + [e[2] for e in episodes]
    axis_end, ticks = nice_axis(max(values, default=0.1) * 1.02)
    left, plot_w, top, row_h, head_h = 250.0, 580.0, 30.0, 20.0, 24.0
    scale = plot_w / axis_end
    view.plot_x, view.plot_w, view.plot_top = left, plot_w, top
    view.ticks = [Tick(left + t * scale, fmt_tick(t)) for t in ticks]
    y = top
    for g in gangs:
        members = sorted((n for n, p in pods.items() if str(p.get("gang") or "?") == g), key=_natural)
        placed = sum(1 for n in members if _num(pods[n].get("bound_s")) is not None)
        view.headers.append(GangHeader(g, _short(g, 30), colour[g], y + 15,
                                       f"{placed} of {len(members)} pods placed"))
        y += head_h
        first = y
        for n in members:
            p = pods[n]
            bound, running = _num(p.get("bound_s")), _num(p.get("running_s"))
            bx = None if bound is None else left + bound * scale
            rx = None if running is None else left + running * scale
            ex = None if n not in ends else left + ends[n] * scale
            last = max([v for v in (bx, rx, ex) if v is not None], default=left + plot_w)
            node = str(p.get("node") or "") if bound is not None else "never placed"
            title = (f"{n}: " + (f"bound to {p.get('node')} at {fmt_value(bound, 's')}" if bound is not None
                                 else "never bound") +
                     (f", running at {fmt_value(running, 's')}" if running is not None else "") +
                     (f", released at {fmt_value(ends[n], 's')}" if n in ends else ""))
            if rx is not None and ex is None:
                view.open_running = True
            view.pods.append(PodRow(n, _short(n, 34), colour[g], y, bx if bx is not None else left + plot_w,
                                    bx is not None, bx, rx, ex, node, last + (10 if ex is None else 6), title))
            y += row_h
        for eg, e0, e1, npods, gpus in episodes:
            if eg == g:
                x0, x1 = left + max(0.0, e0) * scale, left + max(0.0, e1) * scale
                view.episodes.append(EpisodeBox(g, x0, max(x1, x0 + 2), first - 2, y - 2,
                                                f"partial hold: {npods} pods, {gpus} GPUs, {fmt_value(e1 - e0, 's')}",
                                                first - 5))
        y += 6
    view.plot_bottom = y
    view.height = y + 44
    return view


# ------------------------------------------------------------------------------- load through the act


LOAD_DRILLS = ("serving", "control-plane")
LOAD_LATENCY = {"serving": ("p99 time to first token", "p99 TTFT"),
                "control-plane": ("mutating API call p99", "p99 mutating call latency")}
"""Per drill: the judged measurement its per-second line is a p99 of, and the line's words."""


@dataclass
class LoadBucket:
    """One second of the load (by request start, seconds from the act) as a bar of requests and a p99 point."""

    t: float
    sent: int
    answered: int
    failed: int
    lost: int
    p99: str
    """The bucket's p99 for people (``57 ms``), or ``none answered``."""
    x: float
    w: float
    answered_y: float
    failed_y: float
    lost_y: float
    """Tops of the stacked bar segments (answered at the bottom, then failed, then lost)."""
    point_y: float | None
    labels: list[tuple[str, str, float]]
    """(css class, text, y) of the failed / lost counts written above the bar."""
    title: str


@dataclass
class LoadView:
    """A serving or control-plane scenario: p99 latency and requests per second around the act, with the Ready
    replica count (the scale events) on the same time axis."""

    anchor: str
    title: str
    verdict: str
    drill: str
    act: str
    """The act in words: ``drain of gpu-node-1``, ``pull of gpu-node-0 with kill``, ``load jumped to 16 users``."""
    line_words: str
    facts: list[tuple[str, str]]
    note: str
    findings: list[tuple[str, str]] = field(default_factory=list)
    width: float = 1000
    height: float = 0
    plot_x: float = 0
    plot_w: float = 0
    plot_top: float = 0
    plot_bottom: float = 0
    act_x: float = 0
    main_bottom: float = 0
    """Bottom of the latency and requests panel (``plot_bottom`` is below the replicas band when there is one)."""
    ticks: list[Tick] = field(default_factory=list)
    latency_ticks: list[tuple[float, str]] = field(default_factory=list)
    count_ticks: list[tuple[float, str]] = field(default_factory=list)
    buckets: list[LoadBucket] = field(default_factory=list)
    segments: list[str] = field(default_factory=list)
    """Polyline points of the p99 line; a second with nothing answered breaks it."""
    limit_y: float | None = None
    limit_label: str = ""
    instants: list[InstantMark] = field(default_factory=list)
    replicas_top: float | None = None
    replicas_bottom: float = 0
    replica_ticks: list[tuple[float, str]] = field(default_factory=list)
    replica_path: str = ""
    replica_events: list[tuple[float, float, str, str]] = field(default_factory=list)
    """(x, y, label, title) of each change of the Ready count within the axis."""
    desc: str = ""
    totals: list[tuple[str, str, str]] = field(default_factory=list)
    """(what, count, note) for the table under the chart."""
    bad_seconds: int = 0


def _act_words(act: dict[str, Any]) -> str:
    kind = act.get("kind")
    if kind == "drain":
        return f"drain of {act.get('node', '?')}"
    if kind == "pull":
        return f"pull of {act.get('node', '?')}" + (f" with {act['method']}" if act.get("method") else "")
    if kind == "burst":
        after = act.get("users_after")
        return f"load jumped to {after} users" if after is not None else "load jumped"
    return "the act"


def _span_axis(lo: float, hi: float, target_ticks: int = 8) -> tuple[float, float, list[float]]:
    """Round axis ends around ``lo``..``hi`` (which may be negative) and the round ticks between them."""
    _, ticks = nice_axis(max(hi - lo, 1e-3), target_ticks)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    start, end = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    return start, end, [round(start + i * step, 10) for i in range(int(round((end - start) / step)) + 1)]


def load_view(s: ScenarioRecord, repeats: int) -> LoadView:
    """The latency-over-time chart of a serving or control-plane scenario, from ``details["series"]`` (per-second
    buckets relative to the act), ``details["replicas_ready"]`` and ``details["burst"]``."""
    details = s.details or {}
    act = details.get("act") if isinstance(details.get("act"), dict) else {}
    judged_name, line_words = LOAD_LATENCY.get(s.drill, LOAD_LATENCY["serving"])
    p99_key = "p99_ttft_s" if s.drill == "serving" else "p99_latency_s"
    facts = _load_facts(s.drill, details)
    view = LoadView(_anchor("load", s.slug), _scenario_title(s, repeats), s.verdict, s.drill, _act_words(act),
                    line_words, facts, "")
    view.findings = [_split_finding(f) for f in s.findings]
    rows = sorted((b for b in details.get("series") or [] if isinstance(b, dict) and _num(b.get("t")) is not None),
                  key=lambda b: float(b["t"]))
    req = details.get("requests") if isinstance(details.get("requests"), dict) else {}

    def count(b: dict[str, Any], k: str) -> int:
        v = _num(b.get(k))
        return int(v) if v is not None else 0
    sums = {k: sum(count(b, k) for b in rows) for k in ("sent", "answered", "failed", "lost")}
    calls = "requests" if s.drill == "serving" else "mutating calls"
    for k, words in (("sent", f"{calls} sent"), ("answered", "answered"), ("failed", "failed (refused or an error "
                                                                                       "status)"),
                     ("lost", "lost (sent, never answered)")):
        v = req.get(k, req.get("mutating") if k == "sent" else None)
        v = sums[k] if _num(v) is None else v
        view.totals.append((words, str(int(v)), ""))
    if s.drill == "serving":
        view.totals.append(("retried (sent more than once under the retry policy)",
                            str(req["retried"]) if _num(req.get("retried")) is not None else "\u2014", ""))
        locust = _num(req.get("locust_total"))
        view.totals.append(("locust's own request total", "\u2014" if locust is None else str(int(locust)),
                            "" if locust is None or int(locust) == int(view.totals[0][1]) else
                            "differs from the harness's count of requests sent"))
    else:
        view.totals.append(("retried", "\u2014", "mutating calls are not retried"))
        view.totals.append(("locust's own request total", "\u2014", "not recorded by this drill"))
        for k, words in (("reads", "reads (lists and watches)"), ("acknowledged_creates", "creates acknowledged")):
            if _num(req.get(k)) is not None:
                view.totals.append((words, str(int(req[k])), ""))
        missing = req.get("acknowledged_missing")
        if isinstance(missing, list):
            view.totals.append(("acknowledged, then not found", str(len(missing)), ", ".join(map(str, missing[:5])) +
                                (" \u2026" if len(missing) > 5 else "")))
    if not rows:
        view.note = "No per-second load series was recorded for this scenario (the load never ran, or this " \
                    "record predates the series)."
        return view

    bucket = min((float(b["t"]) - float(a["t"]) for a, b in zip(rows, rows[1:])), default=1.0) or 1.0
    lo, hi = min(float(rows[0]["t"]), 0.0), max(float(rows[-1]["t"]) + bucket, 0.0)
    lo, hi, xticks = _span_axis(lo, hi)
    left, plot_w, top, h = 76.0, 828.0, 64.0, 220.0
    scale = plot_w / (hi - lo)

    def x(t: float) -> float:
        return left + (min(max(t, lo), hi) - lo) * scale
    view.plot_x, view.plot_w, view.plot_top, view.plot_bottom = left, plot_w, top, top + h
    view.main_bottom = top + h
    view.ticks = [Tick(x(t), fmt_tick(t)) for t in xticks]
    view.act_x = x(0.0)

    p99s = [float(b[p99_key]) for b in rows if _num(b.get(p99_key)) is not None]
    j = _judgement_for(s, judged_name)
    limit = j.threshold.limit if j is not None and j.threshold.unit == "s" and j.threshold.comparison == "<=" else None
    hi_lat = max(p99s, default=0.0)
    if limit is not None and hi_lat < limit <= 2 * max(hi_lat, 1e-9):
        hi_lat = limit
    lat_end, lat_ticks = nice_axis(hi_lat * 1.08 if hi_lat > 0 else 0.1, 5)
    count_end, count_ticks = nice_axis(max([count(b, "sent") for b in rows] + [1]) * 1.15, 5)
    count_ticks = [c for c in count_ticks if float(c).is_integer()] or [0.0, count_end]

    def ly(v: float) -> float:
        return top + h - min(v, lat_end) / lat_end * h

    def cy(v: float) -> float:
        return top + h - min(v, count_end) / count_end * h
    view.latency_ticks = [(ly(v), fmt_value(v, "s") if v else "0") for v in lat_ticks]
    view.count_ticks = [(cy(v), f"{int(v)}") for v in count_ticks]
    if limit is not None:
        if limit <= lat_end:
            view.limit_y = ly(limit)
        view.limit_label = f"threshold {fmt_limit(limit, 's')}" + ("" if limit <= lat_end else " (above this scale)")
    segment: list[str] = []
    for b in rows:
        t = float(b["t"])
        sent, answered, failed, lost = (count(b, k) for k in ("sent", "answered", "failed", "lost"))
        p99 = _num(b.get(p99_key))
        bx, bw = x(t) + 1.0, max(x(t + bucket) - x(t) - 2.0, 1.0)
        ay, fy = cy(answered), cy(answered + failed)
        ly_ = cy(answered + failed + lost)
        labels: list[tuple[str, str, float]] = []
        y_label = ly_ - 4
        for css, n, word in (("lost", lost, "lost"), ("failed", failed, "failed")):
            if n:
                labels.append((css, f"{n} {word}" if bw >= 40 else str(n), max(y_label, top - 2)))
                y_label -= 12
        if failed or lost:
            view.bad_seconds += 1
        py = ly(p99) if p99 is not None else None
        if py is None:
            if segment:
                view.segments.append(" ".join(segment))
            segment = []
        else:
            segment.append(f"{x(t + bucket / 2):.1f},{py:.1f}")
        words = fmt_value(p99, "s") if p99 is not None else "none answered"
        view.buckets.append(LoadBucket(
            t, sent, answered, failed, lost, words, bx, bw, ay, fy, ly_, py, labels,
            f"{fmt_tick(t)} to {fmt_tick(t + bucket)} from the act: {sent} sent, {answered} answered, {failed} failed, "
            f"{lost} lost; {line_words} {words}"))
    if segment:
        view.segments.append(" ".join(segment))

    marks: list[tuple[str, float, str]] = []
    burst = details.get("burst") if isinstance(details.get("burst"), dict) else {}
    crossed = _num(burst.get("queue_crossed_s"))
    if crossed is not None:
        marks.append(("queue over threshold", crossed, f"the replicas' queue crossed the autoscaler's threshold "
                                                       f"{fmt_value(crossed, 's')} after the jump"))
        new = _measurement(s, "time to a new replica serving")
        if new is not None and new.value is not None:
            marks.append(("new replica serving", crossed + new.value,
                          f"a new replica ({burst.get('first_new_replica', '?')}) served its first request "
                          f"{fmt_value(new.value, 's')} after the crossing"))
    back = _measurement(s, "time until the SLA holds again")
    if back is not None and back.value is not None:
        marks.append(("SLA holds again", back.value, f"the SLA held again from {fmt_value(back.value, 's')} after "
                                                      "the jump"))
    levels: list[float] = [view.act_x + 10 + 6.5 * len(view.act)]
    """Right end of the last label written on each line above the plot; the act's label is on the first."""
    for label, t, title in marks:
        if not lo <= t <= hi:
            continue
        ix = x(t)
        level = next((i for i, right in enumerate(levels) if ix >= right + 6), len(levels))
        if level == len(levels):
            levels.append(0.0)
        levels[level] = ix + 4 + 6 * len(label)
        view.instants.append(InstantMark(ix, label, 14 + 12 * min(level, 3), title))

    ready = sorted(((float(r["t"]), int(r["ready"])) for r in details.get("replicas_ready") or []
                    if isinstance(r, dict) and _num(r.get("t")) is not None and _num(r.get("ready")) is not None),
                   key=lambda r: r[0])
    steps = ""
    if ready:
        rtop, rh = top + h + 28.0, 64.0
        view.replicas_top, view.replicas_bottom = rtop, rtop + rh
        rmax = max(max(n for _, n in ready), 1)

        def ry(n: int) -> float:
            return rtop + rh - n / rmax * (rh - 8)
        view.replica_ticks = [(ry(n), str(n)) for n in sorted({0, rmax})]
        before = [n for t, n in ready if t <= lo]
        current = before[-1] if before else None
        path = [] if current is None else [f"M{x(lo):.1f},{ry(current):.1f}"]
        for t, n in ready:
            if t <= lo or t > hi:
                continue
            if current is None:
                path.append(f"M{x(t):.1f},{ry(n):.1f}")
            else:
                path.append(f"H{x(t):.1f} V{ry(n):.1f}")
                view.replica_events.append((x(t), ry(n), str(n), f"{fmt_tick(t)}: Ready replicas {current} \u2192 {n}"))
            current = n
        if current is not None:
            path.append(f"H{x(hi):.1f}")
        view.replica_path = " ".join(path)
        # changes a few pixels apart (replicas turning Ready together) keep their dots; only the last is labelled
        view.replica_events = [(ex, ey, "" if nxt is not None and nxt[0] - ex < 12 else label, title)
                               for (ex, ey, label, title), nxt in zip(view.replica_events,
                                                                     [*view.replica_events[1:], None])]
        steps = "; Ready replicas " + (f"{before[-1]}" if before else "") + "".join(
            f" \u2192 {n} at {fmt_tick(t)}" for t, n in ready if lo < t <= hi)
        view.plot_bottom = view.replicas_bottom
    view.height = view.plot_bottom + 44

    lat_range = (f"between {fmt_value(min(p99s), 's')} and {fmt_value(max(p99s), 's')}" if p99s
                 else "never measured (nothing was answered)")
    view.desc = (f"From {fmt_tick(float(rows[0]['t']))} to {fmt_tick(float(rows[-1]['t']) + bucket)} around the "
                 f"{view.act} at 0 s: {sums['sent']} {calls} sent, {sums['answered']} answered, {sums['failed']} "
                 f"failed, {sums['lost']} lost; {line_words} per second {lat_range}"
                 + (f"; failed or lost calls in {view.bad_seconds} second{'s' if view.bad_seconds != 1 else ''}"
                    if view.bad_seconds else "") + steps + ".")
    return view


def _load_facts(drill: str, details: dict[str, Any]) -> list[tuple[str, str]]:
    facts: list[tuple[str, str]] = []
    service = details.get("service") if isinstance(details.get("service"), dict) else {}
    load = details.get("load") if isinstance(details.get("load"), dict) else {}
    act = details.get("act") if isinstance(details.get("act"), dict) else {}
    if service.get("name"):
        facts.append(("service", f"{service['name']}: {service.get('replicas', '?')} replicas of "
                                 f"{service.get('gpus_per_replica', '?')} GPUs"))
    autoscale = service.get("autoscale") if isinstance(service.get("autoscale"), dict) else {}
    if autoscale:
        facts.append(("autoscaler", f"up to {autoscale.get('max_replicas', '?')} replicas when more than "
                                    f"{autoscale.get('waiting_per_replica', '?')} requests wait per replica "
                                    f"({autoscale.get('metric', '?')}), model load {autoscale.get('warmup_s', '?')} s"))
    if load.get("users") is not None:
        facts.append(("load", f"{load['users']} users" + (f", retrying up to {load['retries']} times on "
                                                          f"{load.get('retry_on', '?')}" if load.get("retries") else "")
                      + (f", {load['object']}" if drill == "control-plane" and load.get("object") else "")))
    if act.get("kind") == "burst":
        facts.append(("burst", f"{act.get('users_before', '?')} \u2192 {act.get('users_after', '?')} users"))
    elif act.get("kind") == "drain" and act.get("evicted"):
        facts.append(("evicted", ", ".join(map(str, act["evicted"]))))
    elif act.get("kind") == "pull" and "confirmed" in act:
        facts.append(("fault confirmed", "yes" if act["confirmed"] else "NO"))
    startup = details.get("startup") if isinstance(details.get("startup"), dict) else {}
    if startup.get("per_second") is not None:
        facts.append(("startup pods", f"{startup['per_second']} per second"))
    return facts


def distribution_views(record: RunRecord) -> list[DistributionView]:
    groups: dict[tuple[str, str], list[ScenarioRecord]] = {}
    for s in record.scenarios:
        groups.setdefault((s.feature_file, s.scenario), []).append(s)
    views = []
    for (_, name), runs in groups.items():
        if len(runs) < 2 and all(r.repeat <= 1 for r in runs):
            continue
        series: dict[str, tuple[str, list[float]]] = {}
        for r in runs:
            for m in r.measurements:
                unit, vals = series.setdefault(m.name, (m.unit, []))
                if m.value is not None and math.isfinite(m.value):
                    vals.append(float(m.value))
        rows = []
        width = 300.0
        for mname, (unit, vals) in series.items():
            if not vals:
                continue
            j = next((j for r in runs for j in r.judgements if j.threshold.name == mname), None)
            hi = max(vals)
            limit = j.threshold.limit if j is not None else None
            if limit is not None and hi < limit <= 2 * max(hi, 1e-9):
                hi = limit
            end, _ = nice_axis(hi * 1.05 if hi > 0 else 1.0, 4)
            sx = width / end

            def px(v: float) -> float:
                return round(6 + max(0.0, v) * sx, 1)
            dots = [(px(v), 17 + ((i % 3) - 1) * 4) for i, v in enumerate(vals)]
            p50 = statistics.median(vals)
            p95 = _percentile(vals, 0.95)
            rows.append(DistributionRow(
                mname, unit, len(vals), fmt_value(p50, unit), fmt_value(p95, unit), fmt_value(max(vals), unit),
                f"{COMPARISON.get(j.threshold.comparison, j.threshold.comparison)} "
                f"{fmt_limit(j.threshold.limit, j.threshold.unit)}" if j else "\u2014",
                dots, (px(_percentile(vals, 0.25)), px(_percentile(vals, 0.75))), px(p50), px(p95),
                px(limit) if limit is not None and limit <= end else None, fmt_tick(end, unit)))
        verdicts = ", ".join(f"{sum(1 for r in runs if r.verdict == v)} {v}" for v in VERDICTS
                             if any(r.verdict == v for r in runs))
        views.append(DistributionView(_anchor("dist", runs[0].slug), name, len(runs), verdicts, rows))
    return views


def _scenario_rows(record: RunRecord, repeats: dict[tuple[str, str], int]) -> list[ScenarioRow]:
    rows = []
    for idx, s in enumerate(record.scenarios):
        judgements = []
        for j in s.judgements:
            m = _measurement(s, j.threshold.name)
            judgements.append(JudgementView(
                j.threshold.name, fmt_value(j.measured, j.threshold.unit),
                fmt_limit(j.threshold.limit, j.threshold.unit),
                COMPARISON.get(j.threshold.comparison, j.threshold.comparison), j.verdict,
                m.note if m is not None and j.measured is None and m.note else ""))
        clauses = tuple(_natural(c) for c in sorted(s.clauses, key=_natural))
        rows.append(((0 if clauses else 1, clauses), idx, ScenarioRow(
            _anchor("scenario", s.slug), sorted(s.clauses, key=_natural), s.feature, s.scenario, s.repeat,
            repeats[(s.feature_file, s.scenario)], s.drill, s.verdict, s.seconds, judgements,
            [_split_finding(f) for f in s.findings], s.error, f"evidence/{s.slug}.dsse.json")))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [r[2] for r in rows]


def _split_finding(text: str) -> tuple[str, str]:
    """``DEADLOCK: gang a holds ...`` -> (``DEADLOCK``, ``gang a holds ...``): a named finding is shown bold."""
    m = re.match(r"^([A-Z][A-Z _-]{2,}):\s*(.*)$", text, re.S)
    return (m.group(1), m.group(2)) if m else ("", text)


def _defect_note(record: RunRecord) -> str:
    """Why a run on a platform started with defects (docs/DEFECTS.md) is no acceptance ('' when honest)."""
    defects = record.target.defects
    if not defects:
        return ""
    return (f"The reference platform ran with defect{'s' if len(defects) != 1 else ''} from the defect zoo: "
            f"{', '.join(defects)} (docs/DEFECTS.md). This run tests whether the drills catch "
            f"{'them' if len(defects) != 1 else 'it'}; it is not an acceptance of any platform.")


def _headline(record: RunRecord) -> str:
    n = len(record.scenarios)
    counts = {v: sum(1 for s in record.scenarios if s.verdict == v) for v in VERDICTS}
    if record.verdict == "PASS":
        return f"Every promise held: {counts['PASS']} of {n} scenario{'s' if n != 1 else ''} passed."
    if record.verdict == "FAIL":
        return (f"A promise was broken: {counts['FAIL']} of {n} scenario{'s' if n != 1 else ''} failed.")
    if record.verdict == "INCONCLUSIVE":
        return (f"No promise was shown broken, but {counts['INCONCLUSIVE']} of {n} scenario"
                f"{'s' if n != 1 else ''} could not be judged.")
    if record.verdict == "ERROR":
        return (f"The harness could not finish: {counts['ERROR']} of {n} scenario{'s' if n != 1 else ''} hit a "
                "harness error; no claim is made about those.")
    if record.verdict == "ABORTED":
        return ("The abort guard stopped the run: a condition of the profile's safety.abort_when was breached, every "
                "fault was undone, and no scenario after the aborted one ran; no claim is made about it.")
    return f"{n} scenario{'s' if n != 1 else ''}."


def _fingerprint(record: RunRecord) -> dict[str, Any]:
    fp = record.target.fingerprint or {}

    def hist(d: Any) -> list[tuple[str, int]]:
        return sorted(((str(k), int(v)) for k, v in d.items() if isinstance(v, int)), key=lambda kv: kv[0]) \
            if isinstance(d, dict) else []
    server = fp.get("server") if isinstance(fp.get("server"), dict) else {}
    gpus = fp.get("gpus") if isinstance(fp.get("gpus"), dict) else {}
    nodes = fp.get("nodes") if isinstance(fp.get("nodes"), dict) else {}
    labels = fp.get("labels") if isinstance(fp.get("labels"), dict) else {}
    crds = fp.get("crds") if isinstance(fp.get("crds"), dict) else {}
    software = nodes.get("software") if isinstance(nodes.get("software"), dict) else {}
    return {
        "present": bool(fp),
        "server_version": str(server.get("gitVersion") or "unknown"),
        "server": sorted((str(k), str(v)) for k, v in server.items() if v not in ("", None)),
        "node_count": nodes.get("count", "unknown"),
        "software": [(k, hist(v)) for k, v in sorted(software.items())],
        "gpu_resource": str(gpus.get("resource") or ""),
        "gpu_capacity": gpus.get("capacity"),
        "gpu_allocatable": gpus.get("allocatable"),
        "models": [m for m in gpus.get("models") or [] if isinstance(m, dict)],
        "drivers": hist(fp.get("driver_versions")),
        "cuda": hist(fp.get("cuda_runtime_versions")),
        "labels": [(k, hist(v)) for k, v in sorted(labels.items())],
        "crds": [(str(k), ", ".join(map(str, v)) if isinstance(v, list) else str(v)) for k, v in sorted(crds.items())],
        "schema": str(fp.get("schema") or ""),
    }


# ------------------------------------------------------------------------------------------------ render


def _grouped(views: list[tuple[ScenarioRecord, Any]]) -> list[list[Any]]:
    """Charts of one scenario together, in record order: the first is shown, its repeats fold under it."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for s, v in views:
        groups.setdefault((s.feature_file, s.scenario), []).append(v)
    return list(groups.values())


CHART_MACROS = ("nodepull", "gangchart", "isolationmatrix", "loadchart")
"""The chart cards of ``templates/charts.html.j2``, in the order the report's sections show them."""


def chart_views(s: ScenarioRecord, repeats: int, timeline: tuple[dict[str, Any], ...]) -> list[tuple[str, Any]]:
    """The cards the report draws for one scenario: (macro of ``charts.html.j2``, its view), in section order."""
    views: list[tuple[str, Any]] = []
    if s.drill in RECOVERY_PHASES:
        views.append(("nodepull", node_pull_view(s, repeats)))
    if s.drill == "gang-submission":
        views.append(("gangchart", gang_view(s, repeats, timeline)))
    if (s.details or {}).get("isolation_matrix"):
        views.append(("isolationmatrix", isolation_view(s, repeats)))
    if s.drill in LOAD_DRILLS or (s.details or {}).get("series"):
        views.append(("loadchart", load_view(s, repeats)))
    return views


def scenario_charts(s: ScenarioRecord, timeline: tuple[dict[str, Any], ...] = (), repeats: int = 1) -> str:
    """The report's chart cards of one scenario as an HTML fragment, drawn by the same macros as ``report.html``:
    what the live view (:mod:`drills.records.live`) shows of a scenario as its record fills in. Empty when the
    report would draw none (a drill with no chart, or none started yet)."""
    module = _environment().get_template("charts.html.j2").module
    return "".join(str(getattr(module, macro)(view)) for macro, view in chart_views(s, repeats, timeline))


def report_css() -> str:
    """The report's style sheet (``templates/report.css``), inlined by ``report.html`` and served by the live view,
    so a chart looks the same in both."""
    return resources.files("drills.records.evidence").joinpath("templates", "report.css").read_text(encoding="utf-8")


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("drills.records.evidence", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.filters["n"] = lambda v: f"{v:.1f}"
    env.filters["fmt_time"] = fmt_time
    env.filters["fmt_value"] = fmt_value
    env.filters["lower"] = lambda v: str(v).lower()
    env.globals["icon"] = VERDICT_ICON  # the chart macros' badges (charts.html.j2 is imported without context)
    return env


def render_report(record: RunRecord, signature: SignatureStatus) -> str:
    """The run as one self-contained HTML document (no network access needed to open it)."""
    repeats: dict[tuple[str, str], int] = {}
    for s in record.scenarios:
        key = (s.feature_file, s.scenario)
        repeats[key] = max(repeats.get(key, 0), s.repeat, sum(1 for t in record.scenarios
                                                            if (t.feature_file, t.scenario) == key))
    start, end = _parse_time(record.started), _parse_time(record.finished)
    cards: dict[str, list[tuple[ScenarioRecord, Any]]] = {macro: [] for macro in CHART_MACROS}
    for s in record.scenarios:
        for macro, view in chart_views(s, repeats[(s.feature_file, s.scenario)], record.timeline):
            cards[macro].append((s, view))
    node_pulls, gangs = _grouped(cards["nodepull"]), _grouped(cards["gangchart"])
    isolations, loads = _grouped(cards["isolationmatrix"]), _grouped(cards["loadchart"])
    findings = [(s, _split_finding(f)) for s in record.scenarios for f in s.findings]
    errors = [s for s in record.scenarios if s.verdict == "ERROR" or (s.verdict != "PASS" and s.error
                                                                        and not s.findings)]
    scored = [scored_from_record(s) for s in record.scenarios]
    return _environment().get_template("report.html.j2").render(
        r=record, sig=signature, verdict=record.verdict if record.verdict in VERDICTS else "ERROR",
        verdict_word=record.verdict, icon=VERDICT_ICON, headline=_headline(record), defect_note=_defect_note(record),
        duration=fmt_duration((end - start).total_seconds()) if start and end and end >= start else "",
        counts=[(v, sum(1 for s in record.scenarios if s.verdict == v)) for v in VERDICTS],
        rows=_scenario_rows(record, repeats), findings=findings, errors=errors,
        node_pulls=node_pulls, gangs=gangs, isolations=isolations, loads=loads,
        distributions=distribution_views(record),
        leak=leak_view(record, repeats), score=run_score(scored), score_words=explain_score(scored),
        fp=_fingerprint(record), renderer_version=__version__,
        options=sorted((str(k), str(v)) for k, v in (record.options or {}).items()),
        features=sorted(record.features.items()))


# ------------------------------------------------------------------------------------------- archives


class ReportError(EvidenceError):
    """A run archive cannot be rendered: no such run, no or unreadable ``record.json``, or a write refused."""


def find_archive(run: str | Path, reports_dir: Path = Path("reports")) -> Path:
    """The archive folder for ``run``: a folder holding ``record.json``, or a run id under ``reports_dir``."""
    for candidate in (Path(run), reports_dir / str(run)):
        if (candidate / "record.json").is_file():
            return candidate
    if Path(run).is_dir() or (reports_dir / str(run)).is_dir():
        folder = Path(run) if Path(run).is_dir() else reports_dir / str(run)
        raise ReportError(f"{folder} holds no record.json, so it is not a run archive Firedrill can render")
    raise ReportError(f"no run archive {str(run)!r}: neither a folder nor a run id under {reports_dir}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"cannot read {path}: {exc}") from None


def render_archive(archive: Path) -> str:
    """The report of an archive, from its ``record.json`` and, when present, ``signer.json``."""
    data = _read_json(archive / "record.json")
    try:
        record = RunRecord.from_dict(data)
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise ReportError(f"{archive / 'record.json'} is not a run record this Firedrill ({__version__}) "
                          f"can read: {exc}") from None
    signer_path = archive / "signer.json"
    signer = _read_json(signer_path) if signer_path.is_file() else None
    if signer is not None and not isinstance(signer, dict):
        raise ReportError(f"{signer_path} should hold an object such as {{\"keyid\": ..., \"ephemeral\": true}}")
    return render_report(record, SignatureStatus.from_signer(signer))


def write_report(archive: Path, output: Path | None = None, *, force: bool = False) -> tuple[Path, bool]:
    """Render ``archive`` to ``output`` (default: the archive's ``report.html``); returns (path, changed).

    An archive with a ``manifest.json`` records the digest of its ``report.html``: a re-render that would
    change those bytes is refused unless ``force`` (write elsewhere with ``output`` instead), because
    ``firedrill verify`` would then report the archive as altered."""
    html = render_archive(archive).encode("utf-8")
    target = output if output is not None else archive / "report.html"
    try:
        old = target.read_bytes() if target.is_file() else None
    except OSError:
        old = None
    if old == html:
        return target, False
    if output is None and old is not None and (archive / "manifest.json").is_file() and not force:
        raise ReportError(f"{target} differs from the re-rendered report, and {archive / 'manifest.json'} records "
                          "its digest: overwriting it would make `firedrill verify` report the archive as altered. "
                          "Write it elsewhere with --output FILE, or overwrite with --force.")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(html)
    except OSError as exc:
        raise ReportError(f"cannot write {target}: {exc}") from None
    return target, True
