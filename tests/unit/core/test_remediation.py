"""The remediation budget on a virtual clock: which GpuFault nodes are quarantined, when the breaker trips.

Every case is a pure function of plain data and ``now``; no clock is read, no process started.
"""

from __future__ import annotations

import pytest

from refplatform.core.healing import HealAction, PoolNode, Readiness, plan_healing
from refplatform.core.remediation import (
    Breaker, BreakerState, Remediation, RemediationBudget, RemediationError, RemediationPlan, plan_remediation,
)
from refplatform.profiles import K8S_DEFAULTS, TUNED

T0 = 1_800_000_000.0  # a virtual epoch
BUDGET = RemediationBudget(share=0.25, min_nodes=1, window=600.0)
SPARE = dict(spare=True, enrolled=True, configured_spare=True)


def fleet(faulty: tuple[str, ...] = (), working: int = 4, spares: int = 1, **kw: dict[str, object]) -> list[PoolNode]:
    """``working`` nodes n0.. and ``spares`` spares after them; ``faulty`` report GpuFault=True; ``kw`` per node."""
    out = []
    for i in range(working + spares):
        name = f"n{i}"
        fields: dict[str, object] = {"ready": Readiness.TRUE, **(SPARE if i >= working else {}),
                                     "gpu_fault": name in faulty, **kw.get(name, {})}
        out.append(PoolNode(name, **fields))  # type: ignore[arg-type]
    return out


def plan(nodes: list[PoolNode], now: float = T0, breaker: Breaker = Breaker(),
         history: tuple[Remediation, ...] = (), budget: RemediationBudget = BUDGET, **kw: object) -> RemediationPlan:
    return plan_remediation(nodes, now, budget, breaker, history, **kw)  # type: ignore[arg-type]


def actions(p: RemediationPlan) -> list[tuple[str, str, str]]:
    return [(s.action.value, s.node, s.reason) for s in p.steps]


def test_the_budget_is_a_share_of_the_pool_with_a_floor_and_the_profiles_carry_it() -> None:
    assert [BUDGET.limit(n) for n in (1, 3, 4, 5, 7, 8, 12, 100)] == [1, 1, 1, 1, 1, 2, 3, 25]
    assert RemediationBudget(share=0.25, min_nodes=3).limit(5) == 3
    assert BUDGET.describe(5) == "1 (25 % of 5 nodes, at least 1)"
    for profile in (TUNED, K8S_DEFAULTS):
        assert (profile.remediation_share, profile.remediation_min_nodes, profile.remediation_window) == \
            (0.25, 1, 600.0)
    for bad in (dict(share=1.5), dict(share=-0.1), dict(min_nodes=-1), dict(window=0.0)):
        with pytest.raises(RemediationError):
            RemediationBudget(**bad)  # type: ignore[arg-type]


def test_under_the_budget_every_gpu_fault_node_is_remediated_and_a_spare_released_for_each_working_one() -> None:
    nodes = fleet(("n1", "n6"), working=6, spares=2)  # 8 nodes: a budget of 2
    p = plan(nodes)
    assert actions(p) == [("NodeQuarantined", "n1", "gpu-fault"), ("SparePromoted", "n7", "n1"),
                          ("NodeQuarantined", "n6", "gpu-fault")]  # n6: a faulty spare, never released
    assert (p.breaker, p.tripped_now, p.hold, p.limit, p.used) == (Breaker(), False, (), 2, 0)


def test_over_the_budget_exactly_the_budget_is_quarantined_and_the_breaker_names_the_rest() -> None:
    p = plan(fleet(("n2", "n0", "n3")))
    assert actions(p) == [("NodeQuarantined", "n0", "gpu-fault"), ("SparePromoted", "n4", "n0")]
    assert p.tripped_now and p.hold == ("n2", "n3")
    assert p.breaker == Breaker(BreakerState.TRIPPED, T0, "3 nodes reported GpuFault within 600 s; the budget is 1 "
                                                          "(25 % of 5 nodes, at least 1)", ("n2", "n3"))


def test_quarantines_already_made_in_the_window_use_the_budget() -> None:
    history = (Remediation("n0", T0 - 100),)
    p = plan(fleet(("n1",), n0=dict(quarantined=True)), history=history)
    assert actions(p) == [] and p.used == 1 and p.tripped_now and p.hold == ("n1",)
    assert p.breaker.reason.startswith("2 nodes reported GpuFault within 600 s")


def test_a_tripped_breaker_quarantines_nothing_more_however_long_it_stands() -> None:
    tripped = plan(fleet(("n0", "n2", "n3"))).breaker
    nodes = fleet(("n2", "n3", "n1"), n0=dict(quarantined=True))  # a new node faults too
    later = plan(nodes, now=T0 + 10_000, breaker=tripped, history=(Remediation("n0", T0),))
    assert actions(later) == [] and not later.tripped_now
    assert later.hold == ("n1", "n2", "n3")
    assert later.breaker.left_alone == ("n1", "n2", "n3") and later.breaker.tripped_at == T0
    # The agents report at their own beats: one fault, then two more once the budget is spent; the reason counts
    # every node that reported.
    first = plan(fleet(("n1",)))
    assert first.quarantined() == ["n1"] and not first.tripped_now
    history = (Remediation("n1", T0),)
    second = plan(fleet(("n2",), n1=dict(quarantined=True, gpu_fault=True)), now=T0 + 0.5, history=history)
    assert second.tripped_now and second.breaker.reason.startswith("2 nodes reported GpuFault")
    third = plan(fleet(("n2", "n3"), n1=dict(quarantined=True, gpu_fault=True)), now=T0 + 1, history=history,
                 breaker=second.breaker)
    assert third.breaker.left_alone == ("n2", "n3") and third.breaker.reason == (
        "3 nodes reported GpuFault within 600 s; the budget is 1 (25 % of 5 nodes, at least 1)")


def test_a_reset_breaker_acts_again_with_a_fresh_budget_and_releases_the_held_nodes() -> None:
    held = dict(remediation_held=True)
    nodes = fleet(("n2", "n3"), n0=dict(quarantined=True), n2=held, n3=held)
    # Reset: the breaker is Closed and the window's record starts afresh (the healer forgets what came before).
    p = plan(nodes, now=T0 + 30, breaker=Breaker(), history=())
    assert actions(p) == [("NodeQuarantined", "n2", "gpu-fault"), ("SparePromoted", "n4", "n2")]
    assert p.tripped_now and p.hold == ("n3",) and p.release == ("n2",)
    # A held node whose fault cleared is released too, even while the breaker stays tripped.
    cleared = fleet((), n3=held)
    assert plan(cleared, breaker=p.breaker).release == ("n3",)


def test_the_window_slides() -> None:
    history = (Remediation("n0", T0),)
    nodes = fleet(("n1",))
    assert plan(nodes, now=T0 + 599.9, history=history).tripped_now  # n0's quarantine still counts
    p = plan(nodes, now=T0 + 600.0, history=history)  # exactly a window old: it has left the window
    assert actions(p) == [("NodeQuarantined", "n1", "gpu-fault"), ("SparePromoted", "n4", "n1")]
    assert not p.tripped_now and p.used == 0


def test_the_budget_never_holds_back_the_healing_of_a_dead_node() -> None:
    lost = dict(ready=Readiness.UNKNOWN, not_ready_since=T0 - 5, lease_fresh=False, condition_tainted=True)
    nodes = fleet(("n2", "n3"), spares=2, n0=lost, n1=lost)
    tripped = Breaker(BreakerState.TRIPPED, T0 - 60, "held", ("n2", "n3"))
    healing = plan_healing(nodes, T0)
    assert [(s.action, s.node) for s in healing.steps] == [
        (HealAction.QUARANTINE, "n0"), (HealAction.PROMOTE_SPARE, "n4"),
        (HealAction.QUARANTINE, "n1"), (HealAction.PROMOTE_SPARE, "n5")]
    busy = {s.node for s in healing.steps}
    p = plan(nodes, breaker=tripped, busy=busy)
    assert actions(p) == [] and p.hold == ("n2", "n3")
    # Closed, within a budget of 1: the GpuFault quarantine gets no spare the dead nodes already took.
    p = plan(nodes, busy=busy)
    assert actions(p) == [("NodeQuarantined", "n2", "gpu-fault")] and p.hold == ("n3",)


def test_a_dead_node_that_also_reports_gpu_fault_is_healed_and_not_counted_twice() -> None:
    lost = dict(ready=Readiness.UNKNOWN, not_ready_since=T0 - 5, lease_fresh=False, condition_tainted=True)
    nodes = fleet(("n0", "n1"), n0=lost)
    healing = plan_healing(nodes, T0)
    assert [(s.action, s.node, s.reason) for s in healing.steps][0] == (HealAction.QUARANTINE, "n0", "unreachable")
    p = plan(nodes, busy={s.node for s in healing.steps})
    assert actions(p) == [("NodeQuarantined", "n1", "gpu-fault")] and not p.tripped_now


def test_remediate_the_fleet_quarantines_every_gpu_fault_node_and_never_trips() -> None:
    p = plan(fleet(("n0", "n1", "n2", "n3")), budget=RemediationBudget(unlimited=True))
    assert p.quarantined() == ["n0", "n1", "n2", "n3"] and not p.tripped_now and p.hold == ()
    assert [s.node for s in p.steps if s.action is HealAction.PROMOTE_SPARE] == ["n4"]  # one spare to give
    tripped = Breaker(BreakerState.TRIPPED, T0, "held", ("n0",))
    assert plan(fleet(("n0",)), breaker=tripped, budget=RemediationBudget(unlimited=True)).quarantined() == ["n0"]


def test_a_spare_with_a_gpu_fault_is_never_released() -> None:
    nodes = fleet(("n0", "n4"), spares=2, n4=dict(spare=True))
    p = plan(nodes, budget=RemediationBudget(share=0.5))
    assert actions(p) == [("NodeQuarantined", "n0", "gpu-fault"), ("SparePromoted", "n5", "n0"),
                          ("NodeQuarantined", "n4", "gpu-fault")]
    lost = dict(ready=Readiness.UNKNOWN, not_ready_since=T0 - 5, lease_fresh=False, condition_tainted=True)
    healing = plan_healing(fleet(("n4",), n0=lost), T0)
    assert [s.action for s in healing.steps] == [HealAction.QUARANTINE]  # the only spare is faulty: none released


def test_a_gpu_fault_node_returns_once_its_fault_cleared_and_it_passed_its_health_check() -> None:
    quarantined = dict(quarantined=True, gpu_fault=True)
    standing = plan_healing(fleet(n0=quarantined), T0)
    assert standing.steps == () and standing.probes == ()  # nothing to probe while the fault stands
    cleared = dict(quarantined=True)
    probing = plan_healing(fleet(n0=cleared), T0)
    assert probing.steps == () and probing.probes == ("n0",)
    back = plan_healing(fleet(n0=dict(quarantined=True, healthy=True)), T0)
    assert [(s.action, s.node) for s in back.steps] == [(HealAction.RETURN_TO_POOL, "n0")]
    not_ready = plan_healing(fleet(n0=dict(quarantined=True, healthy=True, ready=Readiness.FALSE)), T0)
    assert not_ready.steps == ()
