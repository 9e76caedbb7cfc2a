"""The GPU-fault drain's decisions (refplatform.core.drain): pod by pod, out of service once empty, stopped when
the fault clears first (unless the drain-past-recovery defect ignores it)."""

from __future__ import annotations

import pytest

from refplatform.core.drain import DrainAction, DrainError, DrainingNode, plan_drain


def test_the_first_pod_goes_at_once_and_the_next_after_the_interval() -> None:
    node = DrainingNode("n", gpu_fault=True, pods=("a/p1", "a/p2"))
    (step,) = plan_drain(node, 100.0, 1.0).steps
    assert (step.action, step.pod) == (DrainAction.EVICT, "a/p1")
    later = DrainingNode("n", gpu_fault=True, pods=("a/p2",), leaving=1, last_eviction=100.0)
    waiting = plan_drain(later, 100.4, 1.0)
    assert waiting.steps == () and waiting.next_check == pytest.approx(101.0)
    assert plan_drain(later, 101.0, 1.0).steps[0].pod == "a/p2"


def test_an_empty_node_goes_out_of_service_once_its_pods_have_left() -> None:
    assert plan_drain(DrainingNode("n", gpu_fault=True, leaving=1, last_eviction=5.0), 9.0, 1.0).steps == ()
    (step,) = plan_drain(DrainingNode("n", gpu_fault=True, last_eviction=5.0), 9.0, 1.0).steps
    assert step.action is DrainAction.FINISH


def test_a_node_that_is_not_ready_finishes_at_once() -> None:
    (step,) = plan_drain(DrainingNode("n", gpu_fault=True, pods=("a/p",), ready=False), 0.0, 1.0).steps
    assert step.action is DrainAction.FINISH


def test_a_fault_that_clears_halfway_stops_the_drain_unless_the_defect_ignores_it() -> None:
    halfway = DrainingNode("n", gpu_fault=False, pods=("a/p2", "a/p3"), last_eviction=10.0)
    (step,) = plan_drain(halfway, 12.0, 1.0).steps
    assert step.action is DrainAction.CANCEL
    (step,) = plan_drain(halfway, 12.0, 1.0, ignore_recovery=True).steps
    assert (step.action, step.pod) == (DrainAction.EVICT, "a/p2")


def test_a_negative_interval_is_refused_naming_it() -> None:
    with pytest.raises(DrainError, match="drain interval must be >= 0 seconds, not -1"):
        plan_drain(DrainingNode("n", gpu_fault=True), 0.0, -1.0)
