"""The two rules of ``firedrill trend``, as pure functions of the numbers (docs/TRENDS.md states them).

**Regression.** For one measure of one scenario with a threshold (the threshold says which way is worse:
``<=`` higher is worse, ``>=`` lower is worse), the *baseline* is its values in the N runs before the last K
(``--baseline-nights N``, default 7; ``--last K``, default 1) in which the scenario ran, and at least 3 of them
must have a value, else it is not judged. With ``m`` their median and ``MAD`` the median absolute deviation
from ``m``, the *noise margin* is::

    margin = max(3 x 1.4826 x MAD,  0.5 x |m|,  0.1 x |threshold|)

(1.4826 x MAD estimates the standard deviation of normal noise; the two floors keep a quiet baseline, whose MAD
is near zero, from calling ordinary jitter a regression: a measure must get at least 50 % worse than its
median, and by a tenth of its promise.) A run's value is *worse* when it is beyond ``m`` by more than
``margin`` in the bad direction, or when it has no value at all (a measure with no data counts as worse: the
drill could not even observe it). The measure **regressed** when each of the last K runs is worse. Its size is
the change of the last K runs' median from ``m`` (and the ratio). The median is robust: a regression that
persists is flagged night after night until it is half of the baseline (4 nights with N = 7), when it has
become the platform's normal (and its thresholds, not this rule, keep the run red).

**Flaky.** A scenario is flaky when, among its runs in the window (the last N + K) against one unchanged
platform (the same target fingerprint digest and the same defects), its verdict changes at least twice in run
order (repeats in order): it left a verdict and came back, or moved on again. One change (PASS, PASS, FAIL,
FAIL) is a change, not flakiness. ERROR is the harness's, not the platform's, and is skipped.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from drills.records.evidence.report import fmt_value
from drills.records.trend.model import Threshold

__all__ = ["MAD_TO_SIGMA", "Assessment", "Flakiness", "RegressionRule", "Status", "assess", "combine",
           "find_flaky", "worse_direction"]

MAD_TO_SIGMA = 1.4826
"""1 / Phi^-1(3/4): the MAD of normal noise times this is its standard deviation."""


class Status(Enum):
    """What the regression rule says of one measure."""

    OK = "ok"
    """Judged: the last runs are within the noise of the baseline, or better."""
    REGRESSION = "REGRESSION"
    """Judged: each of the last K runs is worse than the baseline beyond its noise margin (or has no value)."""
    SHORT_HISTORY = "short history"
    """Fewer baseline runs with a value than the rule needs: shown, not judged."""
    NO_THRESHOLD = "no threshold"
    """The measure has no threshold, so nothing says which way is worse: shown, not judged."""
    NOT_IN_LAST = "not in the last runs"
    """The scenario did not run in each of the last K runs: shown, not judged."""


@dataclass(frozen=True)
class RegressionRule:
    """The regression rule's parameters (module docstring); the defaults are the documented rule."""

    baseline_nights: int = 7
    """N: how many runs before the last K make the baseline."""
    last: int = 1
    """K: how many of the most recent runs are judged (each must be worse)."""
    min_nights: int = 3
    """Baseline runs with a value needed to judge at all."""
    k: float = 3.0
    """Noise margin in robust standard deviations (MAD_TO_SIGMA x MAD)."""
    relative: float = 0.5
    """Floor of the margin as a share of the baseline median."""
    of_limit: float = 0.1
    """Floor of the margin as a share of the threshold's limit."""

    def margin(self, median: float, mad: float, limit: float) -> float:
        return max(self.k * MAD_TO_SIGMA * mad, self.relative * abs(median), self.of_limit * abs(limit))


@dataclass(frozen=True)
class Assessment:
    status: Status
    baseline: tuple[float, ...] = ()
    """The baseline runs' values that exist, oldest first."""
    baseline_runs: int = 0
    """Baseline runs, with a value or not."""
    median: float | None = None
    mad: float | None = None
    margin: float | None = None
    last: tuple[float | None, ...] = ()
    """The last K runs' values (None: not measured)."""
    change: float | None = None
    """How much worse the last runs' median is than the baseline median (positive: worse); None when they have
    no value."""
    ratio: float | None = None
    """The last runs' median over the baseline median, when both are positive."""
    words: str = ""
    """One sentence for people."""

    @property
    def regressed(self) -> bool:
        return self.status is Status.REGRESSION


def worse_direction(threshold: Threshold | None) -> int:
    """+1 when a higher value is worse (``<=``), -1 when a lower one is (``>=``), 0 when unknown."""
    if threshold is None:
        return 0
    return 1 if threshold.comparison == "<=" else -1


def combine(values: Sequence[float | None], direction: int) -> float | None:
    """One run's value from its repeats: their median, where a repeat with no value ranks as the worst (so
    when most repeats measured nothing, the run has no value either)."""
    if not values:
        return None
    if direction == 0:
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None
    ranked = sorted(values, key=lambda v: (v is None, direction * v if v is not None else 0.0))
    n = len(ranked)
    middle = ranked[(n - 1) // 2: n // 2 + 1]
    if any(v is None for v in middle):
        return None
    return sum(middle) / len(middle)  # type: ignore[arg-type]


def _fmt(value: float, unit: str) -> str:
    return fmt_value(value, unit)


def assess(baseline: Sequence[float | None], last: Sequence[float | None], threshold: Threshold | None,
           rule: RegressionRule, name: str = "the measure", unit: str = "") -> Assessment:
    """Judge one measure: ``baseline`` is its value in each baseline run (oldest first), ``last`` in each of
    the last K runs; None where a run measured nothing."""
    present = tuple(float(v) for v in baseline if v is not None)
    last = tuple(last)
    direction = worse_direction(threshold)
    if direction == 0 or threshold is None:
        return Assessment(Status.NO_THRESHOLD, present, len(baseline), last=last,
                          words=f"{name}: no threshold, so no way is worse; not judged")
    if len(present) < rule.min_nights:
        return Assessment(Status.SHORT_HISTORY, present, len(baseline), last=last,
                          words=f"{name}: {len(present)} earlier run{'s' if len(present) != 1 else ''} with a value, "
                                f"the rule needs {rule.min_nights}; not judged")
    median = statistics.median(present)
    mad = statistics.median(abs(v - median) for v in present)
    margin = rule.margin(median, mad, threshold.limit)

    def worse(v: float | None) -> bool:
        return v is None or direction * (v - median) > margin

    measured = [v for v in last if v is not None]
    last_median = statistics.median(measured) if measured else None
    change = direction * (last_median - median) if last_median is not None else None
    ratio = last_median / median if last_median is not None and median > 0 and last_median > 0 else None
    regressed = bool(last) and all(worse(v) for v in last)
    runs = "the last run" if len(last) == 1 else f"each of the last {len(last)} runs"
    base = (f"the median of the {len(present)} runs before was {_fmt(median, unit)} (noise margin "
            f"{_fmt(margin, unit)})")
    if regressed and last_median is None:
        words = f"{name}: not measured in {runs}; {base}; a measure with no data counts as worse"
    elif regressed:
        unmeasured = len(last) - len(measured)
        size = f"{_fmt(abs(change), unit)} {'worse' if change and change > 0 else 'off'}"  # type: ignore[arg-type]
        words = (f"{name}: {_fmt(last_median, unit)} in {runs}" + (f" (median; {unmeasured} not measured)"
                 if unmeasured else " (median)" if len(last) > 1 else "") + f"; {base}: {size}"
                 + (f" (x{ratio:.1f})" if ratio is not None else ""))
    elif last_median is None:
        words = f"{name}: not measured in some of {runs}, measured in others; {base}"
    else:
        words = f"{name}: {_fmt(last_median, unit)} in {runs}; {base}: within noise"
    return Assessment(Status.REGRESSION if regressed else Status.OK, present, len(baseline), median, mad, margin,
                      last, change, ratio, words)


@dataclass(frozen=True)
class Flakiness:
    platform: str
    """The platform (fingerprint digest and defects) at which the verdict flipped."""
    verdicts: tuple[str, ...]
    """The scenario's verdicts at that platform, in run order (repeats in order), ERROR left out."""
    flips: int
    """Changes between consecutive verdicts."""


def find_flaky(history: Sequence[tuple[str, str]], min_flips: int = 2) -> Flakiness | None:
    """``history``: (platform, verdict) of one scenario's runs in order.  The platform whose verdicts changed
    most, when that is at least ``min_flips`` times; else None."""
    by_platform: dict[str, list[str]] = {}
    for platform, verdict in history:
        if verdict != "ERROR":
            by_platform.setdefault(platform, []).append(verdict)
    found: Flakiness | None = None
    for platform, verdicts in by_platform.items():
        flips = sum(1 for a, b in zip(verdicts, verdicts[1:]) if a != b)
        if flips >= min_flips and (found is None or flips > found.flips):
            found = Flakiness(platform, tuple(verdicts), flips)
    return found
