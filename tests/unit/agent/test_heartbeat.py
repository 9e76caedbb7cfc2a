"""Registration, Lease renewal and the Ready condition, against an in-memory API."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes.client import ApiClient
from tenacity import wait_none

from refplatform.agent.clock import VirtualClock
from refplatform.agent.gpus import select_inventory
from refplatform.agent.heartbeat import NodeHeartbeat
from refplatform.agent.node import NodeConfig

from .fakeapi import FakeApi, status_error, unreachable

NODE = "/api/v1/nodes/gpu-node-0"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/gpu-node-0"


def deserialize(obj: dict[str, Any], klass: str) -> Any:
    return ApiClient()._ApiClient__deserialize(obj, klass)  # type: ignore[attr-defined]


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


def heartbeat(api: FakeApi, clock: VirtualClock, status_every: int = 10) -> NodeHeartbeat:
    config = NodeConfig("gpu-node-0", select_inventory("H100-80GB", 8, force_simulated=True), node_group="rack-a", log_port=1234)
    # No real sleeping between registration attempts in tests.
    return NodeHeartbeat(api, config, clock, 1.0, status_every=status_every, register_wait=wait_none())  # type: ignore[arg-type]


def test_register_creates_the_node_and_writes_its_status(api: FakeApi, clock: VirtualClock) -> None:
    hb = heartbeat(api, clock)
    assert hb.register()
    node = deserialize(api.objects[NODE], "V1Node")
    assert node.metadata.labels["firedrill.dev/node-group"] == "rack-a"
    assert node.status.capacity["nvidia.com/gpu"] == "8"
    assert hb.node_uid == node.metadata.uid and hb.registered.is_set()
    assert [c[0] for c in api.calls] == ["POST", "PATCH"]


def test_register_after_a_restart_updates_the_existing_node(api: FakeApi, clock: VirtualClock) -> None:
    heartbeat(api, clock).register()
    api.objects[NODE]["metadata"]["labels"]["quarantine"] = "yes"
    api.objects[NODE]["spec"] = {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}
    uid = api.objects[NODE]["metadata"]["uid"]
    for c in api.objects[NODE]["status"]["conditions"]:
        if c["type"] == "Ready":
            c["status"] = "Unknown"
    clock.advance(60)
    hb = heartbeat(api, clock)
    assert hb.register()
    node = api.objects[NODE]
    assert node["metadata"]["uid"] == uid == hb.node_uid
    assert node["metadata"]["labels"]["quarantine"] == "yes"  # others' labels are kept
    assert node["metadata"]["annotations"]["firedrill.dev/agent-boot-id"] == hb.config.boot_id
    assert node["spec"]["taints"]  # the spec is not ours to touch
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["lastTransitionTime"] == "2026-11-30T00:01:00Z"


def test_register_retries_until_the_server_answers(api: FakeApi, clock: VirtualClock) -> None:
    failures = iter([unreachable, unreachable, lambda v, p: status_error(503, "ServiceUnavailable")])
    api.fail = lambda verb, path: next(failures, lambda v, p: None)(verb, path)
    hb = heartbeat(api, clock)
    assert hb.register()
    assert NODE in api.objects
    assert len(api.verbs("POST", "/api/v1/nodes")) == 4


def test_register_gives_up_only_when_stopped(api: FakeApi, clock: VirtualClock) -> None:
    api.fail = unreachable
    hb = heartbeat(api, clock)
    calls = 0

    def fail(verb: str, path: str) -> Exception:
        nonlocal calls
        calls += 1
        if calls == 50:
            hb.stop_event.set()
        return unreachable(verb, path)

    api.fail = fail
    assert not hb.register()
    assert calls == 50


def test_beat_creates_then_renews_the_lease(api: FakeApi, clock: VirtualClock) -> None:
    hb = heartbeat(api, clock)
    hb.register()
    assert hb.beat()
    lease = deserialize(api.objects[LEASE], "V1Lease")
    assert lease.spec.holder_identity == "gpu-node-0" and lease.spec.lease_duration_seconds == 4
    assert lease.metadata.owner_references[0].uid == hb.node_uid
    first = api.objects[LEASE]["spec"]["renewTime"]
    clock.advance(1)
    api.calls.clear()
    assert hb.beat()
    assert api.objects[LEASE]["spec"]["renewTime"] == "2026-11-30T00:00:01.000000Z" != first
    assert [c[0] for c in api.calls] == ["PUT"]  # one request per beat in the steady state
    assert hb.renewals == 2


def test_lease_conflict_rereads_and_retries(api: FakeApi, clock: VirtualClock) -> None:
    hb = heartbeat(api, clock)
    hb.register()
    hb.beat()
    api.put_object(LEASE, api.objects[LEASE])  # someone else bumped its resourceVersion
    clock.advance(1)
    assert hb.beat()
    assert [c[0] for c in api.calls[-3:]] == ["PUT", "GET", "PUT"]
    assert api.objects[LEASE]["spec"]["renewTime"].startswith("2026-11-30T00:00:01")


def test_missing_lease_namespace_is_created(api: FakeApi, clock: VirtualClock) -> None:
    api.namespaces.discard("kube-node-lease")
    hb = heartbeat(api, clock)
    hb.register()
    assert hb.beat()
    assert LEASE in api.objects and "kube-node-lease" in api.namespaces


def test_status_is_refreshed_every_n_beats(api: FakeApi, clock: VirtualClock) -> None:
    hb = heartbeat(api, clock, status_every=3)
    hb.register()
    api.calls.clear()
    for _ in range(6):
        clock.advance(1)
        hb.beat()
    assert len(api.verbs("PATCH", NODE + "/status")) == 2
    ready = next(c for c in api.objects[NODE]["status"]["conditions"] if c["type"] == "Ready")
    assert ready["lastHeartbeatTime"] == "2026-11-30T00:00:06Z"
    assert ready["lastTransitionTime"] == "2026-11-30T00:00:00Z"


def test_after_an_outage_the_first_good_beat_refreshes_the_status(api: FakeApi, clock: VirtualClock) -> None:
    hb = heartbeat(api, clock)
    hb.register()
    hb.beat()
    for c in api.objects[NODE]["status"]["conditions"]:
        if c["type"] == "Ready":
            c["status"] = "Unknown"  # what the node lifecycle controller does
    api.fail = unreachable
    clock.advance(1)
    assert not hb.beat()
    api.fail = lambda v, p: None
    clock.advance(1)
    assert hb.beat()
    ready = next(c for c in api.objects[NODE]["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["lastTransitionTime"] == "2026-11-30T00:00:02Z"


def test_a_deleted_node_is_registered_again(api: FakeApi, clock: VirtualClock) -> None:
    hb = heartbeat(api, clock, status_every=1)
    hb.register()
    hb.beat()
    old_uid = hb.node_uid
    del api.objects[NODE]
    clock.advance(1)
    assert hb.beat()
    assert NODE in api.objects and hb.node_uid != old_uid
    clock.advance(1)
    assert hb.beat()
    assert api.objects[LEASE]["metadata"]["ownerReferences"][0]["uid"] == hb.node_uid


def test_run_stops_promptly(api: FakeApi, clock: VirtualClock) -> None:
    hb = heartbeat(api, clock)
    t = threading.Thread(target=hb.run, daemon=True)
    t.start()
    assert hb.registered.wait(5)
    hb.stop_event.set()
    t.join(3)
    assert not t.is_alive() and hb.renewals >= 1


def test_health_follows_the_heartbeat(api: FakeApi, clock: VirtualClock) -> None:
    hb = heartbeat(api, clock)
    assert hb.health() == (False, "not registered yet")
    hb.register()
    assert hb.health() == (False, "no heartbeat yet")
    assert hb.beat() and hb.health() == (True, "ok")
    api.fail = unreachable
    assert not hb.beat()
    healthy, why = hb.health()
    assert not healthy and why.startswith("heartbeat failing: API server unreachable")
    api.fail = lambda v, p: None
    assert hb.beat() and hb.health() == (True, "ok")


def test_ready_condition_follows_the_ready_check(api: FakeApi, clock: VirtualClock) -> None:
    reason: list[str | None] = [None]
    config = NodeConfig("gpu-node-0", select_inventory("H100-80GB", 8, force_simulated=True))
    hb = NodeHeartbeat(api, config, clock, 1.0, status_every=100, register_wait=wait_none(),  # type: ignore[arg-type]
                       ready_check=lambda: reason[0])
    hb.register()
    hb.beat()

    def ready() -> dict[str, Any]:
        return next(c for c in api.objects[NODE]["status"]["conditions"] if c["type"] == "Ready")

    assert (ready()["status"], ready()["reason"]) == ("True", "KubeletReady")
    reason[0] = "pod sync loop stalled for 3.0s"
    clock.advance(1)
    hb.beat()  # a change is written on the next beat, not after status_every beats
    assert (ready()["status"], ready()["reason"], ready()["message"]) == ("False", "KubeletNotReady", "pod sync loop stalled for 3.0s")
    deserialize(api.objects[NODE], "V1Node")
    reason[0] = None
    clock.advance(1)
    hb.beat()
    assert (ready()["status"], ready()["reason"], ready()["lastTransitionTime"]) == ("True", "KubeletReady", "2026-11-30T00:00:02Z")


def test_the_gpus_held_below_full_clock_are_reported_on_the_next_beat(api: FakeApi, clock: VirtualClock) -> None:
    held: list[tuple[int, ...]] = [()]
    hb = heartbeat(api, clock, status_every=100)
    hb.throttled_gpus = lambda: held[0]
    hb.register()
    hb.beat()
    assert "firedrill.dev/throttled-gpus" not in (api.objects[NODE]["metadata"].get("annotations") or {})
    held[0] = (0, 3)
    clock.advance(1)
    hb.beat()  # a change goes out at the next beat, not after status_every beats
    assert api.objects[NODE]["metadata"]["annotations"]["firedrill.dev/throttled-gpus"] == "0,3"
    held[0] = ()
    clock.advance(1)
    hb.beat()
    assert not (api.objects[NODE]["metadata"].get("annotations") or {}).get("firedrill.dev/throttled-gpus")


def test_kick_beats_at_once(api: FakeApi, clock: VirtualClock) -> None:
    config = NodeConfig("gpu-node-0", select_inventory("H100-80GB", 8, force_simulated=True))
    hb = NodeHeartbeat(api, config, clock, 60.0, register_wait=wait_none())  # type: ignore[arg-type]
    t = threading.Thread(target=hb.run, daemon=True)
    t.start()
    try:
        assert hb.registered.wait(5)
        deadline = time.monotonic() + 5
        while hb.renewals < 1 and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        hb.kick()
        while hb.renewals < 2 and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        assert hb.renewals == 2  # a 60 s interval, yet a second beat
    finally:
        hb.stop_event.set()
        hb.kick()
        t.join(3)
