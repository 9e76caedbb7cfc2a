"""PodDisruptionBudget arithmetic and the eviction decision, as upstream's disruption controller and eviction
handler make them."""

from __future__ import annotations

import pytest

from refplatform.core.disruptionbudget import BudgetError, BudgetPod, counts, may_evict

RS = ("ReplicaSet", "web-1")


def _pods(healthy: int, sick: int = 0, owner: tuple[str, str] | None = RS) -> list[BudgetPod]:
    return [BudgetPod(f"p{i}", i < healthy, owner) for i in range(healthy + sick)]


@pytest.mark.parametrize(("spec", "expected", "desired", "allowed"), [
    ({"minAvailable": 2}, 3, 2, 1),
    ({"minAvailable": "50%"}, 4, 2, 1),     # of the ReplicaSet's 4 replicas, rounded up
    ({"maxUnavailable": 1}, 4, 3, 0),       # 3 healthy of 4 expected: none may go
    ({"maxUnavailable": "25%"}, 4, 3, 0),
])
def test_budget_numbers(spec: dict, expected: int, desired: int, allowed: int) -> None:
    scales = {RS: 4} if spec != {"minAvailable": 2} else {RS: 3}
    c = counts(spec, _pods(3), scales, set())
    assert (c.expected, c.desired, c.allowed) == (expected, desired, allowed)


def test_evicted_pods_not_yet_gone_do_not_count_as_healthy() -> None:
    assert counts({"minAvailable": 2}, _pods(3), {RS: 3}, {"p0"}).allowed == 0


def test_a_percentage_over_pods_without_a_controller_is_refused() -> None:
    with pytest.raises(BudgetError):
        counts({"maxUnavailable": "10%"}, _pods(2, owner=None), {}, set())
    assert counts({"minAvailable": 1}, _pods(2, owner=None), {}, set()).allowed == 1


def _pdb(allowed: int, healthy: int, desired: int, policy: str | None = None, generation: int = 1) -> dict:
    spec = {"unhealthyPodEvictionPolicy": policy} if policy else {}
    return {"metadata": {"name": "web", "generation": generation}, "spec": spec,
            "status": {"observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": healthy,
                       "desiredHealthy": desired}}


def test_an_eviction_needs_a_disruption_left() -> None:
    assert may_evict(_pdb(1, 3, 2), pod_healthy=True).uses_budget
    refused = may_evict(_pdb(0, 2, 2), pod_healthy=True)
    assert not refused.allowed and refused.message == "The disruption budget web needs 2 healthy pods and has 2 currently"
    assert not may_evict(_pdb(1, 3, 2, generation=2), pod_healthy=True).allowed  # not observed yet


def test_an_unhealthy_pod_goes_when_the_budget_is_met_or_always_allowed() -> None:
    assert may_evict(_pdb(0, 2, 2), pod_healthy=False).allowed
    assert not may_evict(_pdb(0, 1, 2), pod_healthy=False).allowed
    assert may_evict(_pdb(0, 1, 2, "AlwaysAllow"), pod_healthy=False).allowed
