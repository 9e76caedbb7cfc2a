"""The comparison's arithmetic: batch-means estimates, the change between two windows and its uncertainty."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from drills.kinds.baseline.stats import Estimate, change, share_estimate, t_quantile, total_estimate


@pytest.mark.parametrize("dof, expected", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (5, 2.5706), (10, 2.2281),
                                           (30, 2.0423), (1000, 1.9623)])
def test_t_quantiles_match_the_published_table(dof: float, expected: float) -> None:
    assert t_quantile(0.975, dof) == pytest.approx(expected, abs=1e-4)


def test_t_quantile_takes_fractional_degrees_of_freedom_between_its_neighbours() -> None:
    assert t_quantile(0.975, 4) > t_quantile(0.975, 4.5) > t_quantile(0.975, 5)
    assert t_quantile(0.5, 3) == 0.0
    assert t_quantile(0.975, 1e9) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError):
        t_quantile(0.975, 0)


def test_a_share_is_the_ratio_of_totals_and_its_error_the_mean_shares_error_when_capacity_is_constant() -> None:
    parts, wholes = [2.0, 3.0, 4.0, 3.0], [10.0, 10.0, 10.0, 10.0]
    est = share_estimate(parts, wholes)
    shares = [p / w for p, w in zip(parts, wholes)]
    assert est.value == pytest.approx(12 / 40)
    assert est.standard_error == pytest.approx(statistics.stdev(shares) / math.sqrt(4))
    assert est.slices == 4 and est.dof == 3


def test_a_share_weighs_slices_by_their_capacity() -> None:
    # A node was unhealthy in the second slice: half the capacity. The share is sum/sum, not the mean of shares.
    est = share_estimate([4.0, 1.0], [8.0, 4.0])
    assert est.value == pytest.approx(5 / 12)
    residual = (4 - 5 / 12 * 8) ** 2 + (1 - 5 / 12 * 4) ** 2
    assert est.standard_error == pytest.approx(math.sqrt(residual / 2) / 6)


def test_a_hole_total_has_sqrt_n_times_the_slices_spread_as_its_error() -> None:
    est = total_estimate([1.0, 2.0, 3.0])
    assert est.value == 6.0
    assert est.standard_error == pytest.approx(math.sqrt(3) * 1.0)


def test_one_slice_has_no_standard_error_and_so_no_uncertainty() -> None:
    one = total_estimate([5.0])
    assert one.standard_error is None
    c = change(one, total_estimate([4.0, 4.0]))
    assert c.delta == 3.0 and c.uncertainty is None and c.standard_error is None


def test_the_change_uses_welch_satterthwaite_and_a_t_interval() -> None:
    before, after = Estimate(0.30, 0.01, 10), Estimate(0.45, 0.02, 5)
    c = change(before, after)
    se = math.sqrt(0.01 ** 2 + 0.02 ** 2)
    dof = se ** 4 / (0.01 ** 4 / 9 + 0.02 ** 4 / 4)
    assert c.delta == pytest.approx(0.15)
    assert c.standard_error == pytest.approx(se)
    assert c.dof == pytest.approx(dof)
    assert c.uncertainty == pytest.approx(t_quantile(0.975, dof) * se)


def test_two_perfectly_steady_windows_have_zero_uncertainty() -> None:
    c = change(total_estimate([1.0, 1.0, 1.0]), total_estimate([0.5, 0.5, 0.5]))
    assert c.delta == -1.5 and c.uncertainty == 0.0


def test_bad_slices_are_refused() -> None:
    with pytest.raises(ValueError, match="no slices"):
        total_estimate([])
    with pytest.raises(ValueError, match="finite"):
        total_estimate([1.0, float("nan")])
    with pytest.raises(ValueError, match="capacity"):
        share_estimate([0.0], [0.0])
    with pytest.raises(ValueError, match="one of each"):
        share_estimate([1.0, 2.0], [3.0])


def test_the_interval_covers_the_true_change_about_95_percent_of_the_time() -> None:
    """Simulated windows of independent slices around known means: the 95 % interval of the change must contain
    the true change in about 95 % of trials (it is a check of the whole chain: estimates, Welch, t)."""
    rng = random.Random(15)
    true_before, true_after, trials, covered = 0.30, 0.34, 2000, 0
    for _ in range(trials):
        before = share_estimate([rng.gauss(true_before * 8, 0.4) for _ in range(8)], [8.0] * 8)
        after = share_estimate([rng.gauss(true_after * 8, 0.8) for _ in range(6)], [8.0] * 6)
        c = change(before, after)
        assert c.uncertainty is not None
        covered += abs(c.delta - (true_after - true_before)) <= c.uncertainty
    assert 0.93 <= covered / trials <= 0.97
