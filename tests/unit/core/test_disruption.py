"""Upstream's zone disruption rule as pure functions: zone states, eviction rates, the token bucket.

The numbers are kube-controller-manager's (``ComputeZoneState``, ``ReducedQPSFunc``,
``HealthyQPSFunc``, master disruption mode); docs/HEALING.md sets them side by side.
"""

from __future__ import annotations

import math

import pytest

from refplatform.core.disruption import (
    DisruptionPolicy, TaintBucket, ZoneCount, ZoneState, judge_disruption, zone_state,
)

UPSTREAM = DisruptionPolicy()


@pytest.mark.parametrize("ready, not_ready, state", [
    (5, 0, ZoneState.NORMAL),
    (3, 2, ZoneState.NORMAL),       # 40 % quiet
    (1, 2, ZoneState.NORMAL),       # 67 % quiet, but not more than 2 nodes: a small zone evicts them
    (2, 3, ZoneState.PARTIAL),      # 3 of 5 = 60 % >= 55 %
    (3, 3, ZoneState.NORMAL),       # 50 % < 55 %
    (9, 11, ZoneState.PARTIAL),     # exactly 55 %
    (0, 1, ZoneState.FULL),         # no Ready node at all
    (0, 0, ZoneState.NORMAL),       # an empty zone is not disrupted
])
def test_zone_state(ready: int, not_ready: int, state: ZoneState) -> None:
    assert zone_state(ready, not_ready, UPSTREAM.unhealthy_zone_threshold) is state


def test_partial_disruption_stops_a_small_zone_and_slows_a_large_one() -> None:
    verdict = judge_disruption([ZoneCount("a", 2, 3), ZoneCount("b", 20, 31), ZoneCount("c", 9, 1)], UPSTREAM)
    assert (verdict.state("a"), verdict.rate("a")) == (ZoneState.PARTIAL, 0.0)     # 5 nodes <= 50: stop
    assert (verdict.state("b"), verdict.rate("b")) == (ZoneState.PARTIAL, 0.01)    # 51 nodes > 50: secondary
    assert (verdict.state("c"), verdict.rate("c")) == (ZoneState.NORMAL, 0.1)
    assert not verdict.master_disruption
    assert verdict.rate("unknown-zone") == 0.0


def test_one_zone_down_while_others_live_is_a_zone_failure_and_evicts() -> None:
    verdict = judge_disruption([ZoneCount("a", 0, 4), ZoneCount("b", 4, 0)], UPSTREAM)
    assert (verdict.state("a"), verdict.rate("a"), verdict.master_disruption) == (ZoneState.FULL, 0.1, False)


def test_every_zone_down_is_master_disruption_mode_and_nothing_is_evicted() -> None:
    verdict = judge_disruption([ZoneCount("a", 0, 4), ZoneCount("b", 0, 1)], UPSTREAM)
    assert verdict.master_disruption
    assert verdict.rate("a") == verdict.rate("b") == 0.0
    assert "master disruption mode" in verdict.describe() and "4 of 4 not Ready" in verdict.describe()


def test_the_evict_storm_defect_treats_every_zone_as_normal_without_a_limit() -> None:
    storm = DisruptionPolicy(handled=False)
    verdict = judge_disruption([ZoneCount("", 0, 5)], storm)
    assert (verdict.state(""), verdict.rate(""), verdict.master_disruption) == (ZoneState.NORMAL, math.inf, False)


def test_the_bucket_lets_one_taint_through_then_one_per_period() -> None:
    bucket = TaintBucket()
    assert bucket.take("a", 0.1, 100.0)
    assert not bucket.take("a", 0.1, 105.0)
    assert bucket.next_allowed("a", 0.1) == pytest.approx(110.0)
    assert bucket.take("b", 0.1, 105.0)  # each zone has its own bucket
    assert bucket.take("a", 0.1, 110.0)
    assert not bucket.take("a", 0.0, 1e12) and bucket.next_allowed("a", 0.0) is None  # a stopped zone never
    assert bucket.take("a", math.inf, 110.0) and bucket.take("a", math.inf, 110.0)   # no limit


@pytest.mark.parametrize("field, value, flag", [
    ("eviction_rate", -1.0, "--node-eviction-rate"),
    ("secondary_eviction_rate", float("nan"), "--secondary-node-eviction-rate"),
    ("unhealthy_zone_threshold", 0.0, "--unhealthy-zone-threshold"),
    ("unhealthy_zone_threshold", 1.5, "--unhealthy-zone-threshold"),
    ("large_cluster_size_threshold", -1, "--large-cluster-size-threshold"),
])
def test_a_bad_flag_is_refused_naming_it(field: str, value: float, flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        DisruptionPolicy(**{field: value})
