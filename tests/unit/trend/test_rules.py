"""The regression and flakiness rules of ``firedrill trend`` (docs/TRENDS.md), as tables."""

from __future__ import annotations

import pytest

from drills.records.trend.model import Threshold
from drills.records.trend.rules import RegressionRule, Status, assess, combine, find_flaky

LOWER_IS_BETTER = Threshold(5.0, "<=", "s")
HIGHER_IS_BETTER = Threshold(100.0, ">=", "req/s")
RULE = RegressionRule()

# (case, baseline, last, threshold, rule, status, change)
ASSESS = [
    ("within noise", [2.0, 2.2, 2.4, 2.1, 2.3], [2.6], LOWER_IS_BETTER, RULE, Status.OK, 0.4),
    ("better is never a regression", [2.0, 2.2, 2.4], [0.5], LOWER_IS_BETTER, RULE, Status.OK, -1.7),
    ("far worse", [2.0, 2.2, 2.4, 2.1, 2.3], [30.0], LOWER_IS_BETTER, RULE, Status.REGRESSION, 27.8),
    ("no value counts as worse", [2.0, 2.2, 2.4], [None], LOWER_IS_BETTER, RULE, Status.REGRESSION, None),
    # margin = max(3 x 1.4826 x 0.1, 0.5 x 2.2, 0.1 x 5) = 1.1: 3.31 is beyond it, 3.29 is not
    ("just beyond the 50 % floor", [2.1, 2.2, 2.3], [3.31], LOWER_IS_BETTER, RULE, Status.REGRESSION, 1.11),
    ("just inside the 50 % floor", [2.1, 2.2, 2.3], [3.29], LOWER_IS_BETTER, RULE, Status.OK, 1.09),
    # a quiet baseline (MAD 0) of zeros: the floor is 10 % of the threshold, 1 step of 10
    ("zero baseline, 1 step is the limit's floor", [0, 0, 0, 0], [1.0], Threshold(10, "<=", "steps"), RULE,
     Status.OK, 1.0),
    ("zero baseline, 2 steps", [0, 0, 0, 0], [2.0], Threshold(10, "<=", "steps"), RULE, Status.REGRESSION, 2.0),
    # the MAD term: a noisy baseline widens the margin beyond the 50 % floor (MAD 2.0 -> 8.90 s, not 5 s)
    ("noisy baseline absorbs a jump", [6.0, 10.0, 14.0, 8.0, 12.0], [18.5], Threshold(30, "<=", "s"), RULE,
     Status.OK, 8.5),
    ("noisy baseline, far worse", [6.0, 10.0, 14.0, 8.0, 12.0], [19.0], Threshold(30, "<=", "s"), RULE,
     Status.REGRESSION, 9.0),
    # the median is robust: a regression that persists is flagged until it is half of the baseline
    ("a persisting regression is still flagged", [1.0, 1.0, 1.0, 1.0, 9.0, 9.0, 9.0], [9.0],
     Threshold(20, "<=", "s"), RULE, Status.REGRESSION, 8.0),
    ("once half the baseline, the new normal", [1.0, 1.0, 1.0, 9.0, 9.0, 9.0, 9.0], [9.0],
     Threshold(20, "<=", "s"), RULE, Status.OK, 0.0),
    ("higher is better: a drop", [200.0, 210.0, 205.0], [90.0], HIGHER_IS_BETTER, RULE, Status.REGRESSION, 115.0),
    ("higher is better: a rise", [200.0, 210.0, 205.0], [400.0], HIGHER_IS_BETTER, RULE, Status.OK, -195.0),
    ("two runs of history are too few", [2.0, 2.1], [30.0], LOWER_IS_BETTER, RULE, Status.SHORT_HISTORY, None),
    ("baseline runs without a value do not count", [2.0, None, 2.1, None], [30.0], LOWER_IS_BETTER, RULE,
     Status.SHORT_HISTORY, None),
    ("no threshold, no judgement", [2.0, 2.1, 2.2], [30.0], None, RULE, Status.NO_THRESHOLD, None),
    ("last 2: both worse", [2.0, 2.2, 2.4], [30.0, None], LOWER_IS_BETTER, RegressionRule(last=2),
     Status.REGRESSION, 27.8),
    ("last 2: one back in the noise", [2.0, 2.2, 2.4], [30.0, 2.3], LOWER_IS_BETTER, RegressionRule(last=2),
     Status.OK, 13.95),
    ("a stricter rule (k and floors)", [2.1, 2.2, 2.3], [2.9], LOWER_IS_BETTER,
     RegressionRule(relative=0.2, of_limit=0.05), Status.REGRESSION, 0.7),
]


@pytest.mark.parametrize("case,baseline,last,threshold,rule,status,change", ASSESS, ids=[c[0] for c in ASSESS])
def test_assess(case: str, baseline: list[float | None], last: list[float | None], threshold: Threshold | None,
                rule: RegressionRule, status: Status, change: float | None) -> None:
    a = assess(baseline, last, threshold, rule, "detect", "s")
    assert a.status is status, a.words
    if status in (Status.OK, Status.REGRESSION):
        assert a.change == pytest.approx(change), a.words
    if status is Status.REGRESSION:
        assert a.regressed and "detect:" in a.words
        assert ("worse" in a.words) or ("not measured" in a.words)


def test_the_margin_is_the_largest_of_its_three_terms() -> None:
    rule = RegressionRule()
    assert rule.margin(median=2.0, mad=0.0, limit=5.0) == pytest.approx(1.0)         # 50 % of the median
    assert rule.margin(median=0.1, mad=0.0, limit=5.0) == pytest.approx(0.5)         # 10 % of the threshold
    assert rule.margin(median=2.0, mad=1.0, limit=5.0) == pytest.approx(3 * 1.4826)  # 3 robust sigmas


def test_a_regression_says_the_size_in_the_measure_s_unit() -> None:
    a = assess([3.9, 4.0, 4.1], [30.24], LOWER_IS_BETTER, RULE, "total", "s")
    assert a.words == ("total: 30.24 s in the last run; the median of the 3 runs before was 4.00 s (noise margin "
                       "2.00 s): 26.24 s worse (x7.6)")
    missing = assess([2.2, 2.3, 2.4], [None], LOWER_IS_BETTER, RULE, "detect", "s")
    assert missing.words == ("detect: not measured in the last run; the median of the 3 runs before was 2.30 s "
                             "(noise margin 1.15 s); a measure with no data counts as worse")


# (case, repeats, direction, combined)
COMBINE = [
    ("one value", [2.0], 1, 2.0),
    ("median of three", [3.0, 1.0, 2.0], 1, 2.0),
    ("median of two", [1.0, 3.0], 1, 2.0),
    ("one missing of three ranks worst", [1.0, None, 2.0], 1, 2.0),
    ("two missing of three: no value", [None, 1.0, None], 1, None),
    ("one missing of two: no value", [1.0, None], 1, None),
    ("higher is better, one missing ranks worst", [5.0, None, 7.0], -1, 5.0),
    ("not judged: median of what exists", [None, 1.0, 3.0], 0, 2.0),
    ("nothing", [], 1, None),
]


@pytest.mark.parametrize("case,values,direction,combined", COMBINE, ids=[c[0] for c in COMBINE])
def test_combine_repeats(case: str, values: list[float | None], direction: int, combined: float | None) -> None:
    assert combine(values, direction) == combined


# (case, history as (platform, verdict), flips or None)
FLAKY = [
    ("steady", [("a", "PASS")] * 8, None),
    ("one change is a change, not flakiness", [("a", "PASS")] * 4 + [("a", "FAIL")] * 4, None),
    ("left and came back", [("a", "PASS"), ("a", "FAIL"), ("a", "PASS")], 2),
    ("alternating", [("a", v) for v in ("PASS", "FAIL") * 4], 7),
    ("inconclusive counts as a verdict", [("a", "PASS"), ("a", "INCONCLUSIVE"), ("a", "PASS")], 2),
    ("errors are the harness's, skipped", [("a", "PASS"), ("a", "ERROR"), ("a", "PASS"), ("a", "ERROR")], None),
    ("a changed platform is not flakiness", [("a", "PASS"), ("b", "FAIL"), ("a", "PASS"), ("b", "FAIL")], None),
    ("interleaved platforms, one flaky", [("a", "PASS"), ("b", "PASS"), ("a", "FAIL"), ("b", "PASS"),
                                          ("a", "PASS")], 2),
    ("defects make another platform", [("d", "PASS"), ("d+slow-detect", "FAIL"), ("d", "PASS"),
                                       ("d+slow-detect", "FAIL")], None),
]


@pytest.mark.parametrize("case,history,flips", FLAKY, ids=[c[0] for c in FLAKY])
def test_find_flaky(case: str, history: list[tuple[str, str]], flips: int | None) -> None:
    found = find_flaky(history)
    assert (found.flips if found else None) == flips
