"""Defects of the controller-manager (docs/DEFECTS.md): each off on an honest platform, each at its one place.

``slow-detect`` lives in the node lifecycle controller, ``no-spare`` and ``return-cordoned`` in the healer, and
``partial-gang-bind`` reaches the scheduler's pure core as a config switch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from refplatform.controllers import process
from refplatform.controllers.healer import HealerController
from refplatform.controllers.nodelifecycle import SLOW_DETECT_FACTOR, NodeLifecycleController
from refplatform.defects import Defect
from refplatform.resources import LEASES, NODES

from .fakes import FakeApi
from .test_healing_controllers import T0, Clock, StaticProber, iso, lease, node

Obj = dict[str, Any]


def _ready(api: FakeApi, name: str) -> str:
    stored = api.find(NODES, "", name)
    assert stored is not None
    return next(c["status"] for c in stored["status"]["conditions"] if c["type"] == "Ready")


# ------------------------------------------------------------------ slow-detect
@pytest.mark.parametrize("slow", [False, True])
def test_slow_detect_declares_a_lost_node_only_after_ten_grace_periods(slow: bool) -> None:
    api, clock = FakeApi(), Clock()
    api.put(NODES, node("n0"))
    api.put(LEASES, lease("n0", T0))
    ctrl = NodeLifecycleController(api, grace=3, monitor_period=5, prober=StaticProber({}),  # type: ignore[arg-type]
                                   clock=clock, slow_detect=slow)
    clock.t = T0 + 3.2  # past the grace period: an honest controller declares the node lost now
    ctrl.reconcile(api.cache())
    assert _ready(api, "n0") == ("True" if slow else "Unknown")
    assert [e["reason"] for e in api.events()] == ([] if slow else ["NodeNotReady"])
    clock.t = T0 + 3 * SLOW_DETECT_FACTOR - 0.1
    ctrl.reconcile(api.cache())
    assert _ready(api, "n0") == ("True" if slow else "Unknown")
    clock.t = T0 + 3 * SLOW_DETECT_FACTOR + 0.1
    ctrl.reconcile(api.cache())
    assert _ready(api, "n0") == "Unknown"
    assert [e["reason"] for e in api.events()] == ["NodeNotReady"]


# ------------------------------------------------------------- keep-unreachable
@pytest.mark.parametrize("keep", [False, True])
def test_keep_unreachable_leaves_the_noschedule_taint_on_a_node_ready_again(keep: bool) -> None:
    api, clock = FakeApi(), Clock()
    api.put(NODES, node("n0", ready="Unknown", taints=[
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]))
    api.put(LEASES, lease("n0", T0 + 9.9))  # it heartbeats again
    prober = StaticProber({"n0": True})
    ctrl = NodeLifecycleController(api, grace=3, monitor_period=5, prober=prober,  # type: ignore[arg-type]
                                   clock=clock, keep_unreachable=keep)
    clock.t = T0 + 10
    ctrl.reconcile(api.cache())
    assert _ready(api, "n0") == "True"
    stored = api.find(NODES, "", "n0")
    assert stored is not None
    left = [(t["key"], t["effect"]) for t in stored["spec"].get("taints") or []]
    assert left == ([("node.kubernetes.io/unreachable", "NoSchedule")] if keep else [])


# --------------------------------------------------------------------- no-spare
def _lost_node_with_a_spare(no_spare: bool) -> FakeApi:
    api, clock = FakeApi(), Clock(T0 + 10)
    for name in ("n0", "n1", "n4"):
        api.put(NODES, node(name))
        api.put(LEASES, lease(name, T0 + 9.5))
    healer = HealerController(api, spares=["n4"], grace=3, prober=StaticProber({}),  # type: ignore[arg-type]
                              clock=clock, no_spare=no_spare)
    healer.reconcile(api.cache())  # enrolls n4 in the spare pool
    n0 = api.find(NODES, "", "n0")
    assert n0 is not None
    n0["status"]["conditions"][0].update(status="Unknown", lastTransitionTime=iso(T0 + 13))
    n0["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    api.put(NODES, n0)
    for t in (13.5, 14.0, 20.0):  # several passes: the defect never draws on the pool
        clock.t = T0 + t
        for name in ("n1", "n4"):
            api.put(LEASES, lease(name, clock.t - 0.5))
        healer.reconcile(api.cache())
    return api


@pytest.mark.parametrize("no_spare", [False, True])
def test_no_spare_quarantines_the_lost_node_but_never_promotes_the_spare(no_spare: bool) -> None:
    api = _lost_node_with_a_spare(no_spare)
    n0, n4 = api.find(NODES, "", "n0"), api.find(NODES, "", "n4")
    assert n0 is not None and n4 is not None
    assert n0["metadata"]["labels"]["firedrill.dev/quarantine"] == "unreachable"  # quarantine works either way
    reasons = [e["reason"] for e in api.events()]
    if no_spare:
        assert n4["metadata"]["labels"]["firedrill.dev/spare"] == "true"
        assert [t["key"] for t in n4["spec"]["taints"]] == ["firedrill.dev/spare"]
        assert reasons == ["NodeQuarantined"]
    else:
        assert "firedrill.dev/spare" not in n4["metadata"]["labels"] and not n4["spec"].get("taints")
        assert reasons == ["NodeQuarantined", "SparePromoted"]


# -------------------------------------------------------------- return-cordoned
@pytest.mark.parametrize("cordoned", [False, True])
def test_return_cordoned_puts_a_healed_node_back_in_the_pool_still_cordoned(cordoned: bool) -> None:
    api, clock = FakeApi(), Clock(T0 + 10)
    for name in ("n0", "n1"):
        api.put(NODES, node(name))
        api.put(LEASES, lease(name, T0 + 9.5))
    prober = StaticProber({"n0": True})
    healer = HealerController(api, spares=[], grace=3, prober=prober, clock=clock,  # type: ignore[arg-type]
                              return_cordoned=cordoned)
    n0 = api.find(NODES, "", "n0")
    assert n0 is not None
    n0["status"]["conditions"][0].update(status="Unknown", lastTransitionTime=iso(T0 + 13))
    n0["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    api.put(NODES, n0)
    clock.t = T0 + 13.5
    healer.reconcile(api.cache())
    n0 = api.find(NODES, "", "n0")
    assert n0 is not None and n0["spec"]["unschedulable"] is True  # quarantined: cordoned either way
    n0["status"]["conditions"][0].update(status="True")  # it heartbeats again and passes its health check
    n0["spec"]["taints"] = [t for t in n0["spec"]["taints"] if t["key"] != "node.kubernetes.io/unreachable"]
    api.put(NODES, n0)
    api.put(LEASES, lease("n0", T0 + 20))
    clock.t = T0 + 20.2
    healer.reconcile(api.cache())
    back = api.find(NODES, "", "n0")
    assert back is not None and back["metadata"]["labels"] == {"firedrill.dev/spare": "true"}
    assert api.events()[-1]["reason"] == "NodeRecovered"
    assert bool(back["spec"].get("unschedulable")) is cordoned


# ------------------------------------------------------- the process's wiring
@pytest.fixture
def build() -> Iterator[Callable[..., dict[str, Any]]]:
    """Builds every controller of the process as ``--defect`` arguments make it; closes those that serve (the load
    balancer's proxy loop, kube-state-metrics' HTTP server) when the test ends."""
    built: list[Any] = []

    def make(*defects: str) -> dict[str, Any]:
        argv = ["--api", "https://127.0.0.1:1"] + [a for d in defects for a in ("--defect", d)]
        args = process.build_parser().parse_args(argv)
        controllers = {name: factory(None, args) for name, factory in process.FACTORIES.items()}  # type: ignore[arg-type]
        built.extend(controllers.values())
        return controllers

    yield make
    for controller in built:
        close = getattr(controller, "close", None)
        if close is not None:
            close()


def test_the_controller_process_turns_each_defect_on_only_in_its_own_controller(
        build: Callable[..., dict[str, Any]]) -> None:
    honest = build()
    assert honest["scheduler"].config.partial_gang_bind is False
    assert honest["nodelifecycle"].grace == 3.0 and honest["healer"].no_spare is False
    broken = build(Defect.PARTIAL_GANG_BIND.value, Defect.SLOW_DETECT.value, Defect.NO_SPARE.value)
    assert broken["scheduler"].config.partial_gang_bind is True
    assert broken["nodelifecycle"].grace == 3.0 * SLOW_DETECT_FACTOR
    assert broken["healer"].no_spare is True and broken["healer"].grace == 3.0  # the healer's own timer is honest
    assert build(Defect.RETURN_CORDONED.value)["healer"].return_cordoned and not honest["healer"].return_cordoned
    assert build(Defect.GPU_HEALTH_BLIND.value)["scheduler"].config.gpu_health_blind
    assert build(Defect.KEEP_UNREACHABLE.value)["nodelifecycle"].keep_unreachable
    assert not honest["nodelifecycle"].keep_unreachable
    assert not honest["scheduler"].config.gpu_health_blind
    one = build(Defect.NO_SPARE.value)
    assert one["healer"].no_spare and not one["scheduler"].config.partial_gang_bind and one["nodelifecycle"].grace == 3
    assert honest["nodelifecycle"].disruption.handled and one["nodelifecycle"].disruption.handled
    assert not build(Defect.EVICT_STORM.value)["nodelifecycle"].disruption.handled


def test_an_unknown_defect_is_refused_naming_the_zoo(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        process.build_parser().parse_args(["--api", "x", "--defect", "flaky-disk"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown defect 'flaky-disk'" in err and "partial-gang-bind" in err and "no-spare" in err
