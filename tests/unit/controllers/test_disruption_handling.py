"""The node lifecycle controller under a disruption, over an in-memory API on a virtual clock.

What a blip must not do (issue 26): when most nodes go quiet together, nothing is tainted
``NoExecute`` (so nothing is evicted or quarantined); when every node went quiet (the control
plane itself was away), the evicting taints are lifted and every node gets a fresh grace period
once one is back; a single node lost alone is still tainted at once.  The ``evict-storm`` defect
taints every quiet node whatever the disruption.
"""

from __future__ import annotations

from typing import Any

import pytest

from refplatform.controllers.healer import HealerController
from refplatform.controllers.nodelifecycle import NodeLifecycleController
from refplatform.core.disruption import DisruptionPolicy
from refplatform.resources import LEASES, NODES

from .fakes import FakeApi
from .test_healing_controllers import T0, Clock, StaticProber, lease, node

Obj = dict[str, Any]
UNREACHABLE = "node.kubernetes.io/unreachable"
TUNED_RATE = DisruptionPolicy(eviction_rate=10.0)


def cluster(names: list[str], renewed: float = T0) -> FakeApi:
    api = FakeApi()
    for name in names:
        api.put(NODES, node(name))
        api.put(LEASES, lease(name, renewed))
    return api


def controller(api: FakeApi, clock: Clock, policy: DisruptionPolicy = TUNED_RATE,
               answers: dict[str, bool] | None = None) -> NodeLifecycleController:
    return NodeLifecycleController(api, grace=3, monitor_period=5, prober=StaticProber(answers or {}),  # type: ignore[arg-type]
                                   clock=clock, disruption=policy)


def taints(api: FakeApi, name: str) -> set[tuple[str, str]]:
    stored = api.find(NODES, "", name)
    assert stored is not None
    return {(t["key"], t["effect"]) for t in stored["spec"].get("taints") or []}


def ready(api: FakeApi, name: str) -> str:
    stored = api.find(NODES, "", name)
    assert stored is not None
    return next(c["status"] for c in stored["status"]["conditions"] if c["type"] == "Ready")


def renew(api: FakeApi, names: list[str], at: float) -> None:
    for name in names:
        api.put(LEASES, lease(name, at))


def passes(ctrl: NodeLifecycleController, api: FakeApi, clock: Clock, until: float) -> None:
    """The controller's passes up to ``until``, each when it was due (as the manager runs it)."""
    while clock.t + ctrl.resync < until:
        clock.t += ctrl.resync
        ctrl.reconcile(api.cache())
    clock.t = until
    ctrl.reconcile(api.cache())


QUIET = {(UNREACHABLE, "NoSchedule")}
EVICTING = {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}


def test_most_nodes_quiet_is_a_partial_disruption_nobody_is_tainted_to_evict() -> None:
    api = cluster(["n0", "n1", "n2", "n3", "n4"])
    renew(api, ["n3", "n4"], T0 + 100)  # two nodes keep talking
    clock = Clock(T0 + 3.5)
    ctrl = controller(api, clock)
    ctrl.reconcile(api.cache())
    for name in ("n0", "n1", "n2"):
        assert ready(api, name) == "Unknown" and taints(api, name) == QUIET, name
    assert taints(api, "n3") == set() and ctrl.last_disruption is not None
    assert ctrl.last_disruption.state("").value == "PartialDisruption"
    assert sorted(e["involvedObject"]["name"] for e in api.events()) == ["n0", "n1", "n2"]  # one NodeNotReady each
    clock.t = T0 + 60  # however long it lasts
    ctrl.reconcile(api.cache())
    assert all(taints(api, n) == QUIET for n in ("n0", "n1", "n2"))
    assert len(api.events()) == 3


def test_two_quiet_nodes_of_five_are_lost_nodes_tainted_at_the_rate() -> None:
    api = cluster(["n0", "n1", "n2", "n3", "n4"])
    renew(api, ["n2", "n3", "n4"], T0 + 100)
    clock = Clock(T0 + 3.5)
    ctrl = controller(api, clock, DisruptionPolicy())  # upstream's 0.1 nodes/s
    ctrl.reconcile(api.cache())
    assert [taints(api, n) for n in ("n0", "n1")] == [EVICTING, QUIET]  # one at once, the next one 10 s later
    assert ctrl.resync == 5  # the monitor period is sooner than the bucket's 10 s
    clock.t = T0 + 8.5  # the pass that was due
    ctrl.reconcile(api.cache())
    assert taints(api, "n1") == QUIET
    clock.t = T0 + 13.4
    ctrl.reconcile(api.cache())
    assert taints(api, "n1") == QUIET
    clock.t = T0 + 13.6
    ctrl.reconcile(api.cache())
    assert taints(api, "n1") == EVICTING
    assert [e["reason"] for e in api.events()] == ["NodeNotReady", "NodeNotReady"]  # no second event for n1


def test_a_control_plane_blip_lifts_evicting_taints_and_restarts_every_grace_period() -> None:
    names = ["n0", "n1", "n2"]
    api = cluster(names)
    clock = Clock(T0 + 0.5)
    ctrl = controller(api, clock, answers={n: True for n in names})
    ctrl.reconcile(api.cache())  # all fresh
    # The control plane stops for 20 s: nobody renews, and the controller, still running, watches every Lease
    # go stale.
    passes(ctrl, api, clock, T0 + 20)
    assert all(ready(api, n) == "Unknown" and taints(api, n) == QUIET for n in names)
    assert ctrl.last_disruption is not None and ctrl.last_disruption.master_disruption
    # n0 renews first and is Ready again; the others have not renewed yet, and must not be taken for dead.
    renew(api, ["n0"], T0 + 20.2)
    clock.t = T0 + 20.3
    ctrl.reconcile(api.cache())
    assert ready(api, "n0") == "True" and taints(api, "n0") == set()
    assert not ctrl.last_disruption.master_disruption
    assert taints(api, "n1") == QUIET and taints(api, "n2") == QUIET
    renew(api, ["n1"], T0 + 21)
    clock.t = T0 + 21.1
    ctrl.reconcile(api.cache())
    assert ready(api, "n1") == "True"
    # n2 never renews: once its fresh grace period (3 s from T0 + 20.3) is over it is a lost node like any other.
    clock.t = T0 + 23.2
    ctrl.reconcile(api.cache())
    assert taints(api, "n2") == QUIET
    clock.t = T0 + 23.4
    ctrl.reconcile(api.cache())
    assert taints(api, "n2") == EVICTING


def test_master_disruption_lifts_a_taint_added_before_it() -> None:
    api = cluster(["n0", "n1"])
    renew(api, ["n1"], T0 + 2)
    clock = Clock(T0 + 3.5)
    ctrl = controller(api, clock)
    ctrl.reconcile(api.cache())
    assert taints(api, "n0") == EVICTING  # one node of two: a lost node
    clock.t = T0 + 5.5  # now n1 is quiet too: every node is
    ctrl.reconcile(api.cache())
    assert taints(api, "n0") == QUIET and taints(api, "n1") == QUIET


def test_the_evict_storm_defect_taints_every_quiet_node_at_once() -> None:
    api = cluster(["n0", "n1", "n2", "n3", "n4"])
    renew(api, ["n3", "n4"], T0 + 100)
    ctrl = controller(api, Clock(T0 + 3.5), DisruptionPolicy(handled=False))
    ctrl.reconcile(api.cache())
    assert [taints(api, n) for n in ("n0", "n1", "n2")] == [EVICTING] * 3


def test_the_healer_quarantines_only_what_the_lifecycle_controller_tainted_to_evict() -> None:
    api = cluster(["n0", "n1", "n2", "n3", "n4"])
    renew(api, ["n3", "n4"], T0 + 100)
    clock = Clock(T0 + 3.5)
    controller(api, clock).reconcile(api.cache())
    healer = HealerController(api, spares=[], grace=3, prober=StaticProber({}),  # type: ignore[arg-type]
                              clock=clock)
    clock.t = T0 + 10
    healer.reconcile(api.cache())
    for name in ("n0", "n1", "n2"):
        stored = api.find(NODES, "", name)
        assert stored is not None and not stored["spec"].get("unschedulable"), name
        assert "firedrill.dev/quarantine" not in stored["metadata"]["labels"], name


def test_nodes_cut_off_together_are_counted_together_though_their_leases_expire_a_heartbeat_apart() -> None:
    api = cluster(["n0", "n1", "n2", "n3", "n4"])
    renew(api, ["n1"], T0 + 0.5)
    renew(api, ["n2"], T0 + 0.9)
    renew(api, ["n3", "n4"], T0 + 100)
    clock = Clock(T0 + 3.05)
    ctrl = controller(api, clock, DisruptionPolicy(eviction_rate=10.0, settle=1.0))
    ctrl.reconcile(api.cache())
    assert taints(api, "n0") == QUIET  # quiet alone so far: not yet judged a lone loss
    assert ctrl.resync <= 1.0
    for at in (3.6, 4.06, 6.0):
        clock.t = T0 + at
        ctrl.reconcile(api.cache())
    assert [taints(api, n) for n in ("n0", "n1", "n2")] == [QUIET] * 3  # 3 of 5: a partial disruption


def test_a_node_quiet_alone_is_tainted_to_evict_once_the_settle_time_is_over() -> None:
    api = cluster(["n0", "n1", "n2"])
    renew(api, ["n1", "n2"], T0 + 100)
    clock = Clock(T0 + 3.05)
    ctrl = controller(api, clock, DisruptionPolicy(eviction_rate=10.0, settle=1.0))
    ctrl.reconcile(api.cache())
    assert taints(api, "n0") == QUIET and ctrl.resync == pytest.approx(0.955, abs=0.01)  # wakes when it settles
    clock.t = T0 + 4.06
    ctrl.reconcile(api.cache())
    assert taints(api, "n0") == EVICTING


def test_a_controller_that_could_not_look_during_the_blip_gives_every_node_a_fresh_grace_period() -> None:
    # The controller's write hung on the stopped API server for the whole 10 s blip, so no pass saw every Lease
    # stale (master disruption mode never came).  When it looks again two nodes have renewed and n2 has not yet:
    # n2's silence was the controller's own, and it gets a whole grace period before it is judged.
    names = ["n0", "n1", "n2"]
    api = cluster(names)
    clock = Clock(T0 + 0.5)
    ctrl = controller(api, clock, answers={n: True for n in names})
    ctrl.reconcile(api.cache())
    renew(api, ["n0", "n1"], T0 + 10.1)
    clock.t = T0 + 10.2
    ctrl.reconcile(api.cache())
    assert ready(api, "n2") == "True" and taints(api, "n2") == set()
    assert not api.events()
    renew(api, ["n2"], T0 + 11.5)
    passes(ctrl, api, clock, T0 + 13)
    assert all(ready(api, n) == "True" and taints(api, n) == set() for n in names)


def test_a_node_lost_while_the_controller_could_not_look_is_still_tainted_a_grace_period_later() -> None:
    names = ["n0", "n1", "n2"]
    api = cluster(names)
    clock = Clock(T0 + 0.5)
    ctrl = controller(api, clock)
    ctrl.reconcile(api.cache())
    renew(api, ["n0", "n1"], T0 + 10.1)  # n2 died meanwhile and never renews
    clock.t = T0 + 10.2
    ctrl.reconcile(api.cache())
    assert taints(api, "n2") == set()
    renew(api, ["n0", "n1"], T0 + 13.1)
    clock.t = T0 + 13.0
    ctrl.reconcile(api.cache())
    assert taints(api, "n2") == set()  # still inside the fresh grace period (until T0 + 13.2)
    clock.t = T0 + 13.3
    ctrl.reconcile(api.cache())
    assert taints(api, "n2") == EVICTING
