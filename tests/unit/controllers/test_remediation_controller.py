"""The healer's remediation budget over an in-memory API: the ConfigMap, Events and conditions it writes.

The decisions are tested in ``tests/unit/core/test_remediation.py``; here the point is what the breaker leaves
on the cluster, that a restarted healer stays tripped, that a person's reset is honoured, and that the healer's
condition writes never wipe the agent's.
"""

from __future__ import annotations

from typing import Any

import pytest

from refplatform.client import STRATEGIC_MERGE_PATCH
from refplatform.controllers.healer import HealerController
from refplatform.core.remediation import RemediationBudget
from refplatform.resources import CONFIGMAPS, LEASES, NODES, PODS

from .fakes import FakeApi, path_of
from .test_healing_controllers import T0, Clock, StaticProber, iso, lease, node

Obj = dict[str, Any]
NAMES = ("n0", "n1", "n2", "n3", "n4")  # n4: the spare


class RecordingApi(FakeApi):
    """Records each patch's content type beside the call."""

    def __init__(self) -> None:
        super().__init__()
        self.content_types: list[tuple[str, str]] = []

    def patch(self, path: str, body: Any, content_type: str, params: Any = None) -> Obj:
        self.content_types.append((path, content_type))
        return super().patch(path, body, content_type, params)


def cluster(clock: Clock) -> RecordingApi:
    api = RecordingApi()
    for name in NAMES:
        api.put(NODES, node(name))
        api.put(LEASES, lease(name, clock.t - 0.5))
    return api


def healer(api: FakeApi, clock: Clock, prober: StaticProber | None = None, **kw: Any) -> HealerController:
    return HealerController(api, spares=["n4"], grace=3, prober=prober or StaticProber({}),  # type: ignore[arg-type]
                            clock=clock, **kw)


def stored(api: FakeApi, name: str) -> Obj:
    obj = api.find(NODES, "", name)
    assert obj is not None
    return obj


def cond(api: FakeApi, name: str, ctype: str) -> Obj:
    return next((c for c in stored(api, name)["status"]["conditions"] if c["type"] == ctype), {})


def fault(api: FakeApi, name: str, status: str = "True", reason: str = "XidStorm") -> None:
    obj = stored(api, name)
    obj["status"]["conditions"] = [c for c in obj["status"]["conditions"] if c["type"] != "GpuFault"] + [
        {"type": "GpuFault", "status": status, "reason": reason if status == "True" else "NoFault",
         "message": "Xid 79 on every GPU" if status == "True" else "no GPU fault reported"}]
    api.put(NODES, obj)


def breaker(api: FakeApi) -> Obj | None:
    return api.find(CONFIGMAPS, "kube-system", "firedrill-remediation")


def quarantined(api: FakeApi) -> dict[str, str]:
    return {n: label for n in NAMES if (label := (stored(api, n)["metadata"].get("labels") or {}).get(
        "firedrill.dev/quarantine"))}


def reasons(api: FakeApi) -> list[tuple[str, str]]:
    return [(e["reason"], e["involvedObject"]["name"]) for e in api.events()]


def tripped_cluster() -> tuple[RecordingApi, Clock]:
    clock = Clock(T0 + 10)
    api = cluster(clock)
    healer(api, clock).reconcile(api.cache())  # enrolls the spare
    for name in ("n0", "n1", "n2"):
        fault(api, name)
    return api, clock


def test_a_fleet_fault_quarantines_the_budget_trips_the_breaker_and_holds_the_rest() -> None:
    api, clock = tripped_cluster()
    h = healer(api, clock)
    h.reconcile(api.cache())
    assert quarantined(api) == {"n0": "gpu-fault"}
    n0 = stored(api, "n0")
    assert n0["spec"]["unschedulable"] is True and ("node.kubernetes.io/out-of-service", "NoExecute") in [
        (t["key"], t["effect"]) for t in n0["spec"]["taints"]]
    assert n0["metadata"]["annotations"]["firedrill.dev/remediated-at"] == iso(T0 + 10)[:-1] + ".000000Z"
    assert "firedrill.dev/spare" not in (stored(api, "n4")["metadata"].get("labels") or {})  # the spare released
    cm = breaker(api)
    assert cm is not None and cm["data"] == {
        "state": "Tripped", "trippedAt": iso(T0 + 10)[:-1] + ".000000Z", "nodesLeftAlone": "n1,n2",
        "reason": "3 nodes reported GpuFault within 600 s; the budget is 1 (25 % of 5 nodes, at least 1)"}
    for name in ("n1", "n2"):
        held = cond(api, name, "RemediationHeld")
        assert (held["status"], held["reason"]) == ("True", "BudgetExhausted")
        assert cond(api, name, "Ready")["status"] == "True" and cond(api, name, "GpuFault")["status"] == "True"
    assert cond(api, "n3", "RemediationHeld") == {}
    # n0 runs no pod: its drain ends in the same pass, out of service
    assert sorted(reasons(api)) == [("NodeDrained", "n0"), ("NodeQuarantined", "n0"), ("RemediationHalted", "n1"),
                                    ("RemediationHalted", "n2"), ("SparePromoted", "n4")]
    quarantine = next(e for e in api.events() if e["reason"] == "NodeQuarantined")
    assert "GpuFault XidStorm: Xid 79 on every GPU" in quarantine["message"]
    halted = next(e for e in api.events() if e["reason"] == "RemediationHalted")
    assert halted["type"] == "Warning" and halted["source"]["component"] == "firedrill-healer"
    assert "the budget is 1" in halted["message"] and "delete configmap firedrill-remediation" in halted["message"]
    # RemediationHeld went out alone, through /status, as a strategic merge patch: nothing else in the list.
    held_writes = [c for c in api.writes(kinds=("PATCH",)) if c[1].endswith("/status")]
    assert [[x["type"] for x in c[2]["status"]["conditions"]] for c in held_writes] == [["RemediationHeld"]] * 2
    assert {ct for p, ct in api.content_types if p.endswith("/status")} == {STRATEGIC_MERGE_PATCH}
    # A further pass writes nothing new.
    before = len(api.writes(events=True))
    h.reconcile(api.cache())
    assert len(api.writes(events=True)) == before


def test_a_restarted_healer_stays_tripped_and_a_new_fault_is_held_too() -> None:
    api, clock = tripped_cluster()
    healer(api, clock).reconcile(api.cache())
    fault(api, "n3")
    clock.t += 700  # past the window: only a person's reset closes the breaker
    for name in NAMES:
        api.put(LEASES, lease(name, clock.t - 0.5))
    healer(api, clock).reconcile(api.cache())  # a new process: the ConfigMap is all it knows
    assert quarantined(api) == {"n0": "gpu-fault"}
    cm = breaker(api)
    assert cm is not None and cm["data"]["nodesLeftAlone"] == "n1,n2,n3" and cm["data"]["state"] == "Tripped"
    assert cond(api, "n3", "RemediationHeld")["status"] == "True"
    assert reasons(api).count(("RemediationHalted", "n3")) == 1 and reasons(api).count(("RemediationHalted", "n1")) == 1


def test_a_restarted_healer_counts_the_quarantines_its_window_still_holds() -> None:
    clock = Clock(T0 + 10)
    api = cluster(clock)
    healer(api, clock).reconcile(api.cache())
    fault(api, "n0")
    healer(api, clock).reconcile(api.cache())
    assert quarantined(api) == {"n0": "gpu-fault"} and breaker(api) is None  # within the budget
    fault(api, "n1")
    clock.t += 60
    for name in NAMES:
        api.put(LEASES, lease(name, clock.t - 0.5))
    healer(api, clock).reconcile(api.cache())  # restarted: n0's remediated-at still counts
    assert quarantined(api) == {"n0": "gpu-fault"}
    cm = breaker(api)
    assert cm is not None and cm["data"]["nodesLeftAlone"] == "n1"


def test_a_reset_by_deleting_the_config_map_releases_the_held_and_acts_again_within_a_fresh_budget() -> None:
    api, clock = tripped_cluster()
    h = healer(api, clock)
    h.reconcile(api.cache())
    fault(api, "n1", "False")  # n1's fault clears while the breaker stands: nothing left to hold there
    h.reconcile(api.cache())
    assert (cond(api, "n1", "RemediationHeld")["status"], cond(api, "n1", "RemediationHeld")["reason"]) == \
        ("False", "FaultCleared")
    assert cond(api, "n2", "RemediationHeld")["status"] == "True" and quarantined(api) == {"n0": "gpu-fault"}
    api.delete(path_of(CONFIGMAPS, "kube-system", "firedrill-remediation"))
    clock.t += 1
    h.reconcile(api.cache())
    assert quarantined(api) == {"n0": "gpu-fault", "n2": "gpu-fault"}  # a fresh budget: n0's quarantine forgotten
    held = cond(api, "n2", "RemediationHeld")
    assert (held["status"], held["reason"]) == ("False", "BreakerReset") and breaker(api) is None


def test_a_reset_by_setting_the_state_to_closed_works_the_same() -> None:
    api, clock = tripped_cluster()
    h = healer(api, clock)
    h.reconcile(api.cache())
    for name in ("n1", "n2"):
        fault(api, name, "False")
    h.reconcile(api.cache())
    cm = breaker(api)
    assert cm is not None
    api.patch(path_of(CONFIGMAPS, "kube-system", "firedrill-remediation"), {"data": {"state": "Closed"}},
              "application/merge-patch+json")
    h.reconcile(api.cache())
    fault(api, "n3")
    h.reconcile(api.cache())
    assert quarantined(api) == {"n0": "gpu-fault", "n3": "gpu-fault"}
    cm = breaker(api)
    assert cm is not None and cm["data"]["state"] == "Closed"


def test_a_gpu_fault_node_returns_once_its_fault_cleared_and_its_health_check_passed() -> None:
    api, clock = tripped_cluster()
    prober = StaticProber({"n0": True})
    h = healer(api, clock, prober)
    h.reconcile(api.cache())
    h.reconcile(api.cache())
    assert quarantined(api)["n0"] == "gpu-fault"  # healthy, Ready, but GpuFault stands: stays out
    fault(api, "n0", "False")
    h.reconcile(api.cache())
    assert "n0" not in quarantined(api)
    labels = stored(api, "n0")["metadata"]["labels"]
    assert labels.get("firedrill.dev/spare") == "true" and not stored(api, "n0")["spec"].get("unschedulable")
    assert reasons(api)[-1] == ("NodeRecovered", "n0")


def test_remediate_the_fleet_quarantines_every_gpu_fault_node_and_never_trips() -> None:
    api, clock = tripped_cluster()
    healer(api, clock, budget=RemediationBudget(unlimited=True)).reconcile(api.cache())
    assert quarantined(api) == {"n0": "gpu-fault", "n1": "gpu-fault", "n2": "gpu-fault"}
    assert breaker(api) is None and not [r for r in reasons(api) if r[0] == "RemediationHalted"]


def test_a_dead_node_is_healed_while_the_breaker_stands() -> None:
    api, clock = tripped_cluster()
    h = healer(api, clock)
    h.reconcile(api.cache())
    n3 = stored(api, "n3")
    n3["status"]["conditions"][0].update(status="Unknown", lastTransitionTime=iso(clock.t))
    n3["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    api.put(NODES, n3)
    clock.t += 0.5
    h.reconcile(api.cache())
    assert quarantined(api) == {"n0": "gpu-fault", "n3": "unreachable"}


def running_pod(name: str, node_name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "work", "uid": f"u-{name}"},
            "spec": {"nodeName": node_name}, "status": {"phase": "Running"}}


def evicted(api: FakeApi) -> list[str]:
    return [path.split("/")[-2] for verb, path, _ in api.calls if verb == "POST" and path.endswith("/eviction")]


def leave(api: FakeApi, name: str) -> None:
    """What an eviction does to the pod: a deletion under way."""
    pod = api.find(PODS, "work", name)
    assert pod is not None
    pod["metadata"]["deletionTimestamp"] = iso(T0)
    api.put(PODS, pod)


def draining_cluster() -> tuple[RecordingApi, Clock]:
    clock = Clock(T0 + 10)
    api = cluster(clock)
    healer(api, clock).reconcile(api.cache())  # enrolls the spare
    for name in ("p1", "p2", "p3", "p4"):
        api.put(PODS, running_pod(name, "n0"))
    fault(api, "n0")
    return api, clock


def test_a_gpu_fault_drain_evicts_pod_by_pod_and_stops_when_the_fault_clears_halfway() -> None:
    api, clock = draining_cluster()
    h = healer(api, clock)
    h.reconcile(api.cache())
    n0 = stored(api, "n0")
    assert quarantined(api) == {"n0": "gpu-fault"} and n0["spec"]["unschedulable"] is True
    assert "node.kubernetes.io/out-of-service" not in [t["key"] for t in n0["spec"].get("taints") or []]
    assert evicted(api) == ["p1"]
    leave(api, "p1")
    clock.t += 0.5
    h.reconcile(api.cache())
    assert evicted(api) == ["p1"] and h.resync == pytest.approx(0.25)  # the next is due at +1 s
    clock.t += 0.6
    h.reconcile(api.cache())
    assert evicted(api) == ["p1", "p2"]
    leave(api, "p2")
    fault(api, "n0", "False")
    h.reconcile(api.cache())
    n0 = stored(api, "n0")
    assert quarantined(api) == {} and not n0["spec"].get("unschedulable")
    assert "node.kubernetes.io/out-of-service" not in [t["key"] for t in n0["spec"].get("taints") or []]
    cancelled = next(e for e in api.events() if e["reason"] == "DrainCancelled")
    assert "drain stopped after 2 eviction(s), uncordoned; its 2 remaining pod(s) keep running" in cancelled["message"]
    for _ in range(5):
        clock.t += 1
        h.reconcile(api.cache())
    assert evicted(api) == ["p1", "p2"] and "NodeDrained" not in [r for r, _ in reasons(api)]


def test_drain_past_recovery_empties_the_node_and_takes_it_out_of_service_though_the_fault_cleared() -> None:
    api, clock = draining_cluster()
    h = healer(api, clock, drain_past_recovery=True)
    h.reconcile(api.cache())
    fault(api, "n0", "False")
    for name in ("p1", "p2", "p3", "p4"):
        assert evicted(api)[-1] == name
        api.delete(path_of(PODS, "work", name), {"gracePeriodSeconds": 0})  # gone
        clock.t += 1
        h.reconcile(api.cache())
    n0 = stored(api, "n0")
    assert ("node.kubernetes.io/out-of-service", "NoExecute") in [(t["key"], t["effect"]) for t in n0["spec"]["taints"]]
    drained = next(e for e in api.events() if e["reason"] == "NodeDrained")
    assert "drained (4 pod(s) evicted)" in drained["message"] and "DrainCancelled" not in [r for r, _ in reasons(api)]
