"""The trend as plain text for a terminal or a CI log: what was read, the score by run, a table per scenario
(each measure's baseline, last value and status; then the recent runs' values), and one line per finding."""

from __future__ import annotations

from collections.abc import Sequence

from drills.records.evidence.report import COMPARISON, fmt_limit, fmt_time, fmt_value
from drills.records.trend.archives import Loaded
from drills.records.trend.rules import Assessment
from drills.records.trend.series import MeasureSeries, ScenarioTrend, Trend

__all__ = ["change_words", "rule_words", "short_platform", "text_lines", "threshold_words"]

ROWS = 10
"""Recent runs listed per scenario in the text; the HTML page has them all."""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    out = []
    for row in (header, *rows):
        out.append(indent + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    return out


def threshold_words(m: MeasureSeries) -> str:
    if m.threshold is None:
        return "-"
    return f"{COMPARISON.get(m.threshold.comparison, m.threshold.comparison)} " \
           f"{fmt_limit(m.threshold.limit, m.threshold.unit)}"


def change_words(a: Assessment, unit: str) -> str:
    """The change of the last runs from the baseline median: ``+26.9 s (x9.2)``, ``no data`` or ``-``."""
    if a.change is not None:
        sign = "+" if a.change > 0 else "-" if a.change < 0 else ""
        return sign + fmt_value(abs(a.change), unit) + (f" (x{a.ratio:.1f})" if a.ratio is not None else "")
    if a.last and all(v is None for v in a.last):
        return "no data"
    return "-"


def _cell(value: float | None, unit: str, verdict: str | None) -> str:
    text = fmt_value(value, unit) if value is not None else "no data"
    return text + (" *" if verdict in ("FAIL", "INCONCLUSIVE") or (verdict and value is None) else "")


def short_platform(platform: str) -> str:
    digest, _, defects = platform.partition("+")
    return f"{digest[:12]}…" + (f" with defect(s) {defects.replace('+', ', ')}" if defects else "")


def rule_words(trend: Trend) -> str:
    r = trend.rule
    last = "the last run" if r.last == 1 else f"each of the last {r.last} runs"
    return (f"REGRESSION when {last} is worse than the median of up to {r.baseline_nights} runs before it by more "
            f"than max({r.k:g} x 1.4826 x MAD, {r.relative:.0%} of the median, {r.of_limit:.0%} of the threshold), "
            f"or has no value (at least {r.min_nights} runs with a value needed); "
            f"FLAKY when a verdict changes twice or more at one platform fingerprint in the last "
            f"{r.baseline_nights + r.last} runs (docs/TRENDS.md)")


def _scenario(trend: Trend, s: ScenarioTrend) -> list[str]:
    out = [f"{s.title}: {len(s.verdicts)} run{'s' if len(s.verdicts) != 1 else ''}, verdicts "
           + " ".join(v for _, v in s.verdicts[-20:]) + (" (last 20)" if len(s.verdicts) > 20 else "")]
    rows = []
    for m in s.measures:
        a = m.assessment
        last = ", ".join(fmt_value(v, m.unit) if v is not None else "no data" for v in a.last) or "-"
        change = change_words(a, m.unit)
        rows.append([m.name, threshold_words(m),
                     f"{fmt_value(a.median, m.unit)} ({len(a.baseline)})" if a.median is not None else "-",
                     fmt_value(a.mad, m.unit) if a.mad is not None else "-",
                     fmt_value(a.margin, m.unit) if a.margin is not None else "-", last, change, a.status.value])
    out += _table(["measure", "threshold", "baseline median (n)", "MAD", "margin", "last", "change", "status"],
                  rows)
    names = [m.name for m in s.measures]
    recent = [i for i, _ in s.verdicts][-ROWS:]
    cells: dict[int, list[str]] = {i: [] for i in recent}
    for m in s.measures:
        by_run = {p.run: p for p in m.points}
        for i in recent:
            p = by_run.get(i)
            cells[i].append(_cell(p.value, m.unit, p.verdict) if p is not None else "-")
    verdict_of = dict(s.verdicts)
    table = [[trend.runs[i].run_id, fmt_time(trend.runs[i].time).removesuffix(" UTC"), verdict_of[i], *cells[i]]
             for i in recent]
    out.append(f"  recent runs ({len(recent)} of {len(s.verdicts)}; * missed its threshold or not measured):")
    out += _table(["run", "sealed (UTC)", "verdict", *names], table, indent="    ")
    if s.flaky is not None:
        out.append(f"  FLAKY: {s.flaky.flips} verdict changes at platform {short_platform(s.flaky.platform)}: "
                   + " ".join(s.flaky.verdicts))
    elif s.change:
        out.append(f"  note: {s.change}")
    return out


def text_lines(trend: Trend, loaded: Loaded, *, key_given: bool = False) -> list[str]:
    runs = trend.runs
    out: list[str] = []
    if runs:
        out.append(f"Trend of {len(runs)} run{'s' if len(runs) != 1 else ''} in {loaded.reports}, "
                   f"{fmt_time(runs[0].time)} to {fmt_time(runs[-1].time)} (ledger lines {runs[0].line} to "
                   f"{runs[-1].line})")
    else:
        out.append(f"Trend: no verified run in {loaded.reports}")
    signed = "each signed by the given --key" if key_given else \
        "each checked with its own public-key.pem (integrity only; pass --key for identity)"
    out.append(f"  verified: {len(runs)} archive{'s' if len(runs) != 1 else ''} ({signed}); ledger chain of "
               f"{loaded.chain.length} line{'s' if loaded.chain.length != 1 else ''} "
               + ("intact" if loaded.chain_ok else f"BROKEN ({len(loaded.chain.problems)} problem(s))"))
    if loaded.before_since:
        out.append(f"  {loaded.before_since} earlier run(s) before --since left out")
    if loaded.missing:
        out.append(f"  {len(loaded.missing)} run(s) of the ledger have no archive here (left out): "
                   + ", ".join(loaded.missing[:5]) + (" ..." if len(loaded.missing) > 5 else ""))
    for problem in loaded.chain.problems:
        out.append(f"  NOT VERIFIED {problem}")
    for run_id, problem, count in loaded.unverified:
        out.append(f"  NOT VERIFIED run {run_id} (left out): {problem}"
                   + (f" (and {count - 1} more problem(s); `firedrill verify` shows all)" if count > 1 else ""))
    out.append(f"  rule: {rule_words(trend)}")
    if runs:
        scores = [f"{s:.1f}" if s is not None else "-" for s in trend.scores[-20:]]
        out.append("")
        out.append(f"Resilience score by run, oldest first{' (last 20)' if len(runs) > 20 else ''}: "
                   + " ".join(scores) + " (0-100, docs/TRENDS.md)")
    for s in trend.scenarios:
        out.append("")
        out += _scenario(trend, s)
    out.append("")
    for s, m in trend.regressions:
        out.append(f"REGRESSION {s.title}: {m.assessment.words}")
    for s in trend.flaky:
        assert s.flaky is not None
        out.append(f"FLAKY {s.title}: the verdict changed {s.flaky.flips} times at one platform "
                   f"({short_platform(s.flaky.platform)}): {' '.join(s.flaky.verdicts)}")
    return out
