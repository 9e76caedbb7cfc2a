"""``firedrill trend``: the runs of a ledger, verified, as series across runs, with regressions and flaky
scenarios flagged by stated rules (docs/TRENDS.md).

Modules: ``archives`` (the ledger and its verified archives), ``model`` (what is read of each),
``rules`` (the regression and flakiness rules, pure), ``series`` (series per scenario and measure, judged),
``text`` and ``html`` with ``chart`` (the two renderings), ``command`` (the CLI's work and exit codes).
"""

from drills.records.trend.command import TrendExit, TrendOptions, run_trend

__all__ = ["TrendExit", "TrendOptions", "run_trend"]
