"""The trend as one self-contained HTML page: the result and its findings, the resilience score by run, and per
scenario a verdict strip, a table of its measures and one chart per measure (drills.records.trend.chart).

Like the run report (drills.records.evidence.report): inline CSS and SVG, no script, no font, no URL fetched (a
Content-Security-Policy of ``default-src 'none'``), every label autoescaped, and deterministic: the same
archives give the same bytes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jinja2

from drills import __version__
from drills.records.evidence.report import fmt_time, fmt_value
from drills.records.trend.archives import Loaded
from drills.records.trend.chart import WIDTH, Chart, StripCell, anchor, measure_chart, score_chart, verdict_strip
from drills.records.trend.series import Trend
from drills.records.trend.text import change_words, rule_words, short_platform, threshold_words

__all__ = ["render_html"]


@dataclass(frozen=True)
class Row:
    name: str
    anchor: str
    threshold: str
    median: str
    margin: str
    last: str
    change: str
    status: str
    regressed: bool


@dataclass(frozen=True)
class ScenarioView:
    anchor: str
    title: str
    runs: int
    strip: list[StripCell]
    rows: list[Row]
    charts: list[Chart]
    flaky: str
    change: str


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("drills.records.trend", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.filters["n"] = lambda v: f"{v:.1f}"
    env.filters["fmt_time"] = fmt_time
    return env


def headline(trend: Trend, loaded: Loaded) -> tuple[str, str, str]:
    """(word, css class, sentence) of the trend's result."""
    regressions, flaky = trend.regressions, trend.flaky
    if regressions:
        scenarios = len({s.key for s, _ in regressions})
        return ("REGRESSED", "regressed",
                f"{len(regressions)} measure{'s' if len(regressions) != 1 else ''} of {scenarios} scenario"
                f"{'s' if scenarios != 1 else ''} got worse in the last run{'s' if trend.rule.last > 1 else ''} "
                "than the runs before, beyond their noise.")
    if loaded.unverified or loaded.chain.problems:
        return ("NOT VERIFIED", "unverified", "Some evidence does not verify and was left out; no regression in "
                                              "what does.")
    if flaky:
        return ("FLAKY", "flaky", f"{len(flaky)} scenario{'s' if len(flaky) != 1 else ''} changed verdict back and "
                                  "forth against an unchanged platform; no measure regressed.")
    return ("NO REGRESSION", "ok", "No measure of the last runs is worse than the runs before beyond their noise, "
                                   "and no verdict flips at an unchanged platform.")


def render_html(trend: Trend, loaded: Loaded, *, key_given: bool = False) -> str:
    runs = trend.runs
    scenarios: list[ScenarioView] = []
    for s in trend.scenarios:
        rows, charts = [], []
        for m in s.measures:
            c = measure_chart(s.title, m, runs)
            charts.append(c)
            a = m.assessment
            change = change_words(a, m.unit)
            rows.append(Row(m.name, c.anchor, threshold_words(m),
                            f"{fmt_value(a.median, m.unit)} ({len(a.baseline)})" if a.median is not None else "-",
                            fmt_value(a.margin, m.unit) if a.margin is not None else "-",
                            ", ".join(fmt_value(v, m.unit) if v is not None else "no data" for v in a.last) or "-",
                            change, a.status.value, a.regressed))
        flaky = ""
        if s.flaky is not None:
            flaky = f"{s.flaky.flips} changes at platform {short_platform(s.flaky.platform)}: " \
                    + " ".join(s.flaky.verdicts)
        scenarios.append(ScenarioView(anchor(s.title), s.title, len(s.verdicts), verdict_strip(s.verdicts, runs),
                                      rows, charts, flaky, s.change))
    findings: list[tuple[str, str, str]] = [("REGRESSION", s.title, m.assessment.words) for s, m in trend.regressions]
    findings += [("FLAKY", s.title, f"the verdict changed {s.flaky.flips} times at one platform "
                                    f"({short_platform(s.flaky.platform)}): {' '.join(s.flaky.verdicts)}")
                 for s in trend.flaky if s.flaky is not None]
    findings += [("UNVERIFIED", f"run {run_id}", f"left out: {problem}") for run_id, problem, _ in loaded.unverified]
    findings += [("UNVERIFIED", "ledger", str(p)) for p in loaded.chain.problems]
    word, css, sentence = headline(trend, loaded)
    signed = "each signed by the given key" if key_given else \
        "each checked with its own public key (integrity, not identity)"
    verified = f"{signed}; ledger chain of {loaded.chain.length} lines " + \
        ("intact" if loaded.chain_ok else "BROKEN")
    if loaded.missing:
        verified += f"; {len(loaded.missing)} ledger run(s) have no archive here"
    context: dict[str, Any] = dict(
        runs=runs, reports=str(loaded.reports), headline_word=word, headline_class=css, headline=sentence,
        findings=findings, rule=rule_words(trend), verified_words=verified, scenarios=scenarios,
        score=score_chart(trend.scores, runs) if runs else None, width=WIDTH, version=__version__)
    return _environment().get_template("trend.html.j2").render(**context)
