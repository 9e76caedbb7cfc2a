"""The node-down confirmation of real-cluster faults: a pure function of Lease and Node objects and a clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from drills.target.confirm import (ConfirmedBy, NodeDownWatch, ready_status, renew_interval, stale_after)


def node(ready: str | None = "True") -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                                                 *conditions]}}


def lease(renew: str | None, duration: Any = 40) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": "n1"}
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    if renew is not None:
        spec["renewTime"] = renew
    return {"metadata": {"name": "n1", "namespace": "kube-node-lease"}, "spec": spec}


T0, T1, T2 = "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:10.000000Z", "2026-01-01T00:00:20.000000Z"


@pytest.mark.parametrize(("duration", "interval", "stale"), [
    (40, 10.0, 20.0),     # the kubelet's defaults: 40 s lease renewed every 10 s
    (4, 1.0, 2.0),        # the reference platform on tuned: heartbeat 1 s, lease 4 s
    (None, 10.0, 20.0),   # no leaseDurationSeconds: the kubelet default is assumed
    (0, 10.0, 20.0),      # nonsense values are not trusted either
    ("40", 10.0, 20.0),
    (True, 10.0, 20.0),
])
def test_the_renew_interval_is_a_quarter_of_the_lease_and_stale_is_two_intervals(
        duration: Any, interval: float, stale: float) -> None:
    assert renew_interval(lease(T0, duration)) == interval
    assert stale_after(lease(T0, duration)) == stale


@pytest.mark.parametrize(("obj", "status"), [
    (node("True"), "True"), (node("False"), "False"), (node("Unknown"), "Unknown"), (node(None), None),
    (None, None), ({}, None),
])
def test_ready_status(obj: Any, status: str | None) -> None:
    assert ready_status(obj) == status


@dataclass(frozen=True)
class Case:
    name: str
    before: tuple[Any, Any]
    """(node, lease) read just before the fault, at t=0."""
    reads: tuple[tuple[float, Any, Any], ...]
    """(harness time, node, lease) of each later read."""
    by: ConfirmedBy | None
    """What confirms it (None: nothing does)."""
    at: float | None = None
    """The read that confirms it."""


CASES = [
    Case("a stopped lease confirms once unchanged for more than two renew intervals",
         (node(), lease(T0)),
         ((5.0, node(), lease(T0)), (15.0, node(), lease(T0)), (20.0, node(), lease(T0)),
          (20.5, node(), lease(T0)), (30.0, node(), lease(T0))),
         ConfirmedBy.LEASE_STOPPED, 20.5),
    Case("the clock restarts at every renewal the harness sees",
         (node(), lease(T0)),
         ((9.0, node(), lease(T0)), (12.0, node(), lease(T1)), (25.0, node(), lease(T1)),
          (32.5, node(), lease(T1))),
         ConfirmedBy.LEASE_STOPPED, 32.5),
    Case("a renewing lease and a Ready node never confirm",
         (node(), lease(T0)),
         ((10.0, node(), lease(T1)), (20.0, node(), lease(T2)), (25.0, node(), lease(T2))),
         None),
    Case("Ready leaving True confirms before the lease rule would",
         (node(), lease(T0)),
         ((3.0, node(), lease(T0)), (4.0, node("Unknown"), lease(T0))),
         ConfirmedBy.NOT_READY, 4.0),
    Case("Ready=False confirms too",
         (node(), lease(T0)), ((1.0, node("False"), lease(T1)),), ConfirmedBy.NOT_READY, 1.0),
    Case("a Ready condition that disappears has left True",
         (node(), lease(T0)), ((1.0, node(None), lease(T0)),), ConfirmedBy.NOT_READY, 1.0),
    Case("a node that was not Ready before cannot be confirmed by Ready",
         (node("False"), None), ((1.0, node("False"), None), (100.0, node("Unknown"), None)), None),
    Case("a deleted Node confirms (a cloud removed a terminated instance)",
         (node(), lease(T0)), ((2.0, None, None),), ConfirmedBy.NODE_DELETED, 2.0),
    Case("a lease that shows up only after the fault is timed from when it was first seen",
         (node(), None),
         ((5.0, node(), lease(T0)), (20.0, node(), lease(T0)), (25.5, node(), lease(T0))),
         ConfirmedBy.LEASE_STOPPED, 25.5),
    Case("no lease and Ready staying True never confirm",
         (node(), None), ((50.0, node(), None), (100.0, node(), None)), None),
    Case("a short lease (the reference platform) confirms in seconds",
         (node(), lease(T0, 4)), ((1.0, node(), lease(T1, 4)), (2.5, node(), lease(T1, 4)),
                                  (3.1, node(), lease(T1, 4))),
         ConfirmedBy.LEASE_STOPPED, 3.1),
    Case("a lease deleted while the Node stays keeps the last renewTime's clock running",
         (node(), lease(T0)), ((10.0, node(), None), (20.1, node(), None)), ConfirmedBy.LEASE_STOPPED, 20.1),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_confirmation(case: Case) -> None:
    watch = NodeDownWatch("n1", *case.before, now=0.0)
    got = None
    for at, n, lz in case.reads:
        got = watch.observe(n, lz, at)
        if got is not None:
            break
    if case.by is None:
        assert got is None
        final = watch.unconfirmed(case.reads[-1][0], timeout=case.reads[-1][0])
        assert not final.confirmed and final.by is None and "not confirmed" in final.detail
    else:
        assert got is not None and got.confirmed and got.by is case.by
        assert got.at == case.at
        assert watch.observe(node(), lease("later"), 1000.0) is got  # a confirmation is final


def test_a_confirmation_records_the_last_renewal_and_how_long_it_stood() -> None:
    watch = NodeDownWatch("n1", node(), lease(T0), now=100.0)
    assert watch.observe(node(), lease(T1), 105.0) is None
    got = watch.observe(node(), lease(T1), 125.5)
    assert got is not None and got.last_renew_time == T1 and got.unchanged_seconds == 20.5
    assert got.renewals_seen == 1
    assert "20.5 s" in got.detail and "10 s renew interval" in got.detail and T1 in got.detail
    assert got.to_dict()["by"] == "lease-stopped"


@pytest.mark.parametrize(("reads", "timeout", "says"), [
    (((10.0, lease(T1)), (20.0, lease(T2))), 30.0, "renewed 2 time(s)"),
    (((5.0, lease(T0)),), 8.0, "stayed the same for only 8.0 s of the 20 s"),
    (((5.0, lease(T0)),), 8.0, "fault.timeout_seconds (8 s) is not longer than the 20 s"),
    (((5.0, None),), 60.0, "has no Lease"),
])
def test_an_unconfirmed_fault_says_what_the_node_did_instead(reads: Any, timeout: float, says: str) -> None:
    watch = NodeDownWatch("n1", node(), lease(T0) if reads[0][1] is not None else None, now=0.0)
    for at, lz in reads:
        assert watch.observe(node(), lz, at) is None
    final = watch.unconfirmed(timeout, timeout)
    assert not final.confirmed and says in final.detail, final.detail
    assert "Ready stayed True" in final.detail


def test_the_ready_rule_is_named_when_the_node_was_not_ready_before() -> None:
    watch = NodeDownWatch("n1", node("False"), None, now=0.0)
    final = watch.unconfirmed(60.0, 60.0)
    assert "Ready was not True before the fault" in final.detail


def test_observations_must_move_forward() -> None:
    watch = NodeDownWatch("n1", node(), lease(T0), now=10.0)
    with pytest.raises(ValueError, match="back in time"):
        watch.observe(node(), lease(T0), 9.0)
