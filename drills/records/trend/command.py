"""``firedrill trend``: read the ledger and its verified archives, print the trend, write the HTML page, and exit
with a code CI can act on.

Exit codes (docs/TRENDS.md):

====  ==========================================================================================================
0     no regression and nothing flaky (also when the history is still too short to judge: it says so)
2     bad input: an option, no reports folder or ledger, an unreadable key; or the HTML page cannot be written
5     evidence does not verify: an archive (left out of the trend) or the ledger chain; checked before 6 and 7
6     REGRESSED: a measure of the last run(s) is worse than the runs before beyond its noise
7     FLAKY: no regression, but a scenario's verdict flips at an unchanged platform fingerprint
====  ==========================================================================================================

When several hold, the first in the order 2, 5, 6, 7 is the exit code; every finding is printed either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from pathlib import Path

from rich.console import Console

from drills.records.trend.archives import load_runs, parse_since
from drills.records.trend.errors import TrendError
from drills.records.trend.html import render_html
from drills.records.trend.rules import RegressionRule
from drills.records.trend.series import build_trend
from drills.records.trend.text import text_lines

__all__ = ["TrendExit", "TrendOptions", "run_trend"]


class TrendExit(IntEnum):
    OK = 0
    """No regression, nothing flaky (or too little history to judge)."""
    USAGE = 2
    """Bad input, or the HTML page could not be written."""
    NOT_VERIFIED = 5
    """An archive or the ledger chain does not verify."""
    REGRESSED = 6
    """A measure of the last run(s) is worse than the runs before beyond its noise."""
    FLAKY = 7
    """A scenario's verdict flips at an unchanged platform fingerprint."""


@dataclass(frozen=True)
class TrendOptions:
    reports: Path = Path("reports")
    since: str | None = None
    baseline_nights: int = 7
    last: int = 1
    html: Path | None = None
    """Where the page goes; default ``<reports>/trend.html``."""
    key: Path | None = None
    now: datetime | None = None
    """The clock for a relative ``--since`` (tests inject it)."""


def run_trend(options: TrendOptions, console: Console, err: Console) -> int:
    try:
        since = parse_since(options.since, options.now) if options.since else None
        loaded = load_runs(options.reports, since=since, key=options.key)
    except TrendError as exc:
        err.print(f"error: {exc}")
        return TrendExit.USAGE
    rule = RegressionRule(baseline_nights=options.baseline_nights, last=options.last)
    trend = build_trend(loaded.runs, rule)
    for line in text_lines(trend, loaded, key_given=options.key is not None):
        console.print(line)
    html_path = options.html or options.reports / "trend.html"
    try:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_html(trend, loaded, key_given=options.key is not None), encoding="utf-8")
    except OSError as exc:
        err.print(f"error: cannot write the trend page {html_path}: {exc.strerror or exc}")
        return TrendExit.USAGE
    if loaded.unverified or loaded.chain.problems:
        code, word = TrendExit.NOT_VERIFIED, "NOT VERIFIED (evidence left out; see above)"
    elif trend.regressions:
        code, word = TrendExit.REGRESSED, f"REGRESSED ({len(trend.regressions)} measure(s))"
    elif trend.flaky:
        code, word = TrendExit.FLAKY, f"FLAKY ({len(trend.flaky)} scenario(s))"
    else:
        code, word = TrendExit.OK, "no regression, nothing flaky"
    if code is TrendExit.NOT_VERIFIED and trend.regressions:
        word += f"; also REGRESSED ({len(trend.regressions)} measure(s))"
    console.print(f"trend: {word}; exit {int(code)}; page: {html_path}")
    return code
