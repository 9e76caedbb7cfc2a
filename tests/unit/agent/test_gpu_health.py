"""A whole GPU that fails while its node lives (issue 26): the agent fails the processes on it, reports it out of
service as the NVIDIA device plugin does (application Xids excepted), the node's allocatable shrinks, and the
scheduler's core never hands the GPU out again until the injection is removed and the GPU passed its burn-in; a GPU
whose burn-in fails, or that fails again soon after its return, is held until a person clears it (issue 49)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tenacity import wait_none

from refplatform.agent.__main__ import build_parser
from refplatform.agent.clock import VirtualClock
from refplatform.agent.events import PodEventRecorder
from refplatform.agent.gpus import GpuInventory
from refplatform.agent.heartbeat import NodeHeartbeat
from refplatform.agent.logs import LogStore
from refplatform.agent.node import NodeConfig, node_status
from refplatform.agent.pods import PodSync
from refplatform.controllers.convert import node_of
from refplatform.core.node import Node
from refplatform.core.resources import Resources
from refplatform.core.state import ClusterState
from refplatform.gpu.lifecycle import GpuState, LifecycleRules
from refplatform.profiles import PROFILES

from .fakeapi import FakeApi, status_error, sync_pass

NODE = "gpu-node-0"
H100x8 = GpuInventory(8, "NVIDIA-H100-80GB-HBM3", 81559, simulated=True)


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/default/pods/{name}"


class Env:
    def __init__(self, tmp_path: Path, rules: LifecycleRules | None = None, **defects: bool) -> None:
        self.api = FakeApi()
        self.clock = VirtualClock()
        self.events = PodEventRecorder(self.api, NODE, retry_delays=())
        self.sync = PodSync(self.api, NODE, LogStore(tmp_path / "logs" / NODE), self.clock,  # type: ignore[arg-type]
                            events=self.events, gpu_count=8, gpu_lifecycle=rules, **defects)
        self.health_calls = 0
        self.sync.on_health = self._on_health
        self.api.put_object(f"/api/v1/nodes/{NODE}", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})

    def _on_health(self) -> None:
        self.health_calls += 1

    def add_pod(self, name: str, gpus: str) -> None:
        count = str(len(gpus.split(",")))
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default", "annotations": {"firedrill.dev/gpu-index": gpus}},
               "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "busybox", "resources": {
                   "limits": {"nvidia.com/gpu": count}, "requests": {"nvidia.com/gpu": count}}}]},
               "status": {"phase": "Pending"}}
        self.sync._apply("ADDED", self.api.put_object(pod_path(name), pod))

    def step(self) -> None:
        sync_pass(self.sync, self.api, self.clock)

    def pass_until(self, done: Callable[[], bool], seconds: float = 10.0) -> float:
        """Sync passes 0.1 s apart on the virtual clock until ``done``; the virtual seconds it took."""
        start = self.clock.now()
        while not done():
            assert (self.clock.now() - start).total_seconds() < seconds, "never happened"
            self.step()
        return (self.clock.now() - start).total_seconds()

    def phase(self, name: str) -> str:
        return self.api.objects[pod_path(name)]["status"]["phase"]

    def reason(self, name: str) -> str:
        return self.api.objects[pod_path(name)]["status"]["containerStatuses"][0]["state"]["terminated"]["reason"]

    def inject(self, entries: list[dict[str, Any]], **more: str) -> None:
        """The Node as the heartbeat reads it, with these Xid entries and ``more`` annotations
        (``diag=``, ``clear=``: ``firedrill.dev/inject-diag``, ``firedrill.dev/clear-gpus``)."""
        annotations = {"firedrill.dev/inject-xid": json.dumps(entries)} if entries else {}
        names = {"diag": "firedrill.dev/inject-diag", "clear": "firedrill.dev/clear-gpus"}
        annotations.update({names[k]: v for k, v in more.items()})
        node = self.api.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {
            k: annotations.get(k) for k in ("firedrill.dev/inject-xid", *names.values())}}})
        self.sync.note_node(node)

    def events_of(self, kind: str) -> list[dict[str, Any]]:
        self.events.drain()
        return [o for p, o in self.api.objects.items() if "/events/" in p and o["involvedObject"]["kind"] == kind]


def running_pair(tmp_path: Path, **defects: bool) -> Env:
    env = Env(tmp_path, **defects)
    env.add_pod("a", "0,1,2,3")
    env.add_pod("b", "4,5,6,7")
    env.step()
    env.step()
    assert env.phase("a") == env.phase("b") == "Running"
    return env


def test_a_gpu_xid_fails_the_pod_on_that_gpu_and_takes_the_gpu_out_of_service(tmp_path: Path) -> None:
    env = running_pair(tmp_path)
    env.inject([{"id": "x1", "gpu": 2, "xid": 79}])
    env.step()
    assert (env.phase("a"), env.reason("a"), env.phase("b")) == ("Failed", "GPUXid79", "Running")
    assert env.sync.reported_unhealthy() == (2,) and env.health_calls == 1
    (node_event,) = env.events_of("Node")
    assert "Xid 79" in node_event["message"] and "out of service" in node_event["message"]
    assert "failed pod(s) default/a" in node_event["message"]
    env.inject([{"id": "x1", "gpu": 2, "xid": 79}])  # the same injection: applied once, still out of service
    env.step()
    assert len(env.events_of("Node")) == 1 and env.sync.reported_unhealthy() == (2,)
    env.inject([])  # the rollback removes the injection: the GPU burns in first, still out of service
    assert env.sync.reported_unhealthy() == (2,) and env.health_calls == 2
    assert env.sync.gpu_health.states() == {2: GpuState.BURN_IN}
    env.pass_until(lambda: env.sync.reported_unhealthy() == ())  # the sync passes alone end the burn-in
    assert env.health_calls == 3
    assert [e["reason"] for e in env.events_of("Node")][1:] == ["GpuBurnInPassed", "GpuReturned"]


def test_an_application_xid_fails_the_pod_but_the_gpu_stays_in_service(tmp_path: Path) -> None:
    env = running_pair(tmp_path)
    env.inject([{"id": "x1", "gpu": 5, "xid": 13}])
    env.step()
    assert (env.phase("a"), env.phase("b"), env.reason("b")) == ("Running", "Failed", "GPUXid13")
    assert env.sync.reported_unhealthy() == () and env.health_calls == 0
    assert "still in service (an application error)" in env.events_of("Node")[0]["message"]


def test_a_pod_started_on_a_dead_gpu_fails_at_once(tmp_path: Path) -> None:
    """sick-gpu-stays: the GPU is never reported unhealthy, so a pod is placed on it again; the device is dead
    whatever the books say, so that pod fails on its first pass."""
    env = running_pair(tmp_path, sick_gpu_stays=True)
    env.inject([{"id": "x1", "gpu": 2, "xid": 48}])
    env.step()
    assert env.phase("a") == "Failed" and env.sync.reported_unhealthy() == ()
    env.add_pod("again", "0,1,2,3")
    env.step()
    env.step()
    assert (env.phase("again"), env.reason("again")) == ("Failed", "GPUXid48")


def test_gpu_stays_out_never_returns_a_gpu_whose_xid_was_cleared(tmp_path: Path) -> None:
    """gpu-stays-out: the honest agent returns the GPU once the injection is removed (the test above); with the
    defect it stays reported unhealthy, so the node's allocatable stays a GPU short."""
    env = running_pair(tmp_path, gpu_stays_out=True)
    env.inject([{"id": "x1", "gpu": 2, "xid": 79}])
    env.step()
    assert env.sync.reported_unhealthy() == (2,)
    env.inject([])
    for _ in range(50):  # well past a burn-in
        env.step()
    assert env.sync.gpu_health.states() == {2: GpuState.FAILED}
    assert env.sync.reported_unhealthy() == (2,) and env.sync.dead_gpus == {}


def test_overreact_app_xid_takes_a_healthy_gpu_out_of_service(tmp_path: Path) -> None:
    env = running_pair(tmp_path, overreact_app_xid=True)
    env.inject([{"id": "x1", "gpu": 5, "xid": 13}])
    env.step()
    assert env.sync.reported_unhealthy() == (5,)


def test_the_node_reports_allocatable_without_the_unhealthy_gpus_and_capacity_with_them() -> None:
    status = node_status(NodeConfig(NODE, H100x8), datetime.now(UTC), unhealthy_gpus=1)
    assert (status["capacity"]["nvidia.com/gpu"], status["allocatable"]["nvidia.com/gpu"]) == ("8", "7")


def test_the_scheduler_core_never_hands_out_a_withdrawn_gpu() -> None:
    node = node_of({"metadata": {"name": NODE, "annotations": {"firedrill.dev/unhealthy-gpus": "2"}},
                    "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "8", "memory": "64Gi"},
                               "allocatable": {"nvidia.com/gpu": "7", "cpu": "8", "memory": "64Gi"},
                               "conditions": [{"type": "Ready", "status": "True"}]}})
    assert node.withdrawn_gpus == (2,) and node.gpu_slots == 8
    state = ClusterState([node])
    assert state.best_fit_gpus(0, 4, 1000) == (0, 1, 3, 4)
    assert not state.gpus_fit(0, (2,), 1000) and state.gpus_fit(0, (7,), 1000)
    assert state.best_fit_gpus(0, 8, 1000) is None and state.best_fit_gpus(0, 7, 1000) == (0, 1, 3, 4, 5, 6, 7)
    assert state.emptied().best_fit_gpus(0, 1, 1000) == (0,) and not state.emptied().gpus_fit(0, (2,), 1000)
    healthy = ClusterState([Node(NODE, Resources(gpus=8))])
    assert healthy.best_fit_gpus(0, 8, 1000) == tuple(range(8))


# -- the way back: burn-in, a failing diagnostic, flapping, a person's clear (refplatform.agent.gpuhealth) -----

XID_79 = [{"id": "x1", "gpu": 2, "xid": 79}]
DIAG_2 = json.dumps([{"id": "d1", "gpu": 2, "result": "fail"}])


def node_annotations(env: Env) -> dict[str, str]:
    return env.api.objects[f"/api/v1/nodes/{NODE}"]["metadata"].get("annotations") or {}


def node_events(env: Env) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in env.events_of("Node") if e["reason"] != "XidError"]


def test_a_burn_in_that_fails_its_diagnostic_holds_the_gpu_until_a_person_clears_it(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.inject(XID_79, diag=DIAG_2)
    env.inject([], diag=DIAG_2)
    took = env.pass_until(lambda: env.sync.gpu_health.states() == {2: GpuState.HELD})
    assert 2.0 <= took < 2.2 and env.sync.reported_unhealthy() == (2,)
    (failed, held) = node_events(env)
    assert failed[:2] == ("Warning", "GpuBurnInFailed") and "diagnostic failed (injected d1)" in failed[2]
    assert "GPU 2 (GPU-" in failed[2]
    assert held[:2] == ("Warning", "GpuHeld") and "firedrill.dev/clear-gpus=2" in held[2]
    doc = json.loads(env.sync.gpu_health.annotation() or "")
    assert doc["gpus"]["2"]["state"] == "held" and doc["burn_ins"][0]["passed"] is False
    env.inject([])  # the diagnostic's entry removed: held still, for as long as nobody clears it
    for _ in range(50):
        env.step()
    assert env.sync.gpu_health.states() == {2: GpuState.HELD}

    env.inject([], clear="2,5")  # 5 is not held: ignored; the annotation is removed once applied
    assert "firedrill.dev/clear-gpus" not in node_annotations(env)
    assert env.sync.gpu_health.states() == {2: GpuState.BURN_IN}
    env.inject([])
    env.pass_until(lambda: env.sync.reported_unhealthy() == ())
    assert [r for _, r, _ in node_events(env)][2:] == ["GpuBurnInPassed", "GpuReturned"]
    assert [b["passed"] for b in json.loads(env.sync.gpu_health.annotation() or "")["burn_ins"]] == [False, True]


def test_a_clear_applied_is_never_applied_twice_and_a_newer_one_is_not_removed(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.inject(XID_79, diag=DIAG_2)
    env.inject([], diag=DIAG_2)
    env.pass_until(lambda: env.sync.gpu_health.states() == {2: GpuState.HELD})
    removals = len(env.api.verbs("PATCH"))
    env.api.fail = lambda verb, path: (status_error(500, "InternalError")  # the JSON patches: the removals
                                       if isinstance(env.api.calls[-1][2], list) else None)
    env.inject([], diag=DIAG_2, clear="2")  # applied; its removal fails
    env.api.fail = lambda verb, path: None
    env.pass_until(lambda: env.sync.gpu_health.states() == {2: GpuState.HELD})  # the diagnostic still fails it
    env.sync.note_node(env.api.objects[f"/api/v1/nodes/{NODE}"])  # the same clear read again: removed, not applied
    assert env.sync.gpu_health.states() == {2: GpuState.HELD}
    assert "firedrill.dev/clear-gpus" not in node_annotations(env)
    assert len(env.api.verbs("PATCH")) > removals
    # a removal only takes away what was applied: the person's newer value stays, to be applied at the next read
    env.sync.gpu_health._remove_clear("2")
    env.api.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {"firedrill.dev/clear-gpus": "2,3"}}})
    env.sync.gpu_health._remove_clear("2")
    assert node_annotations(env)["firedrill.dev/clear-gpus"] == "2,3"


def test_a_gpu_that_fails_again_soon_after_its_return_is_held_when_its_xid_clears(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.inject(XID_79)
    env.inject([])
    env.pass_until(lambda: env.sync.reported_unhealthy() == ())
    env.step()
    env.inject([{"id": "x2", "gpu": 2, "xid": 48}])
    env.inject([])
    assert env.sync.gpu_health.states() == {2: GpuState.HELD} and env.sync.reported_unhealthy() == (2,)
    (*_, held) = node_events(env)
    assert held[1] == "GpuHeld" and "flapping: failed again 0.1 s after its return" in held[2]


def test_flap_back_returns_a_gpu_that_failed_again_soon_after_its_return(tmp_path: Path) -> None:
    env = Env(tmp_path, LifecycleRules(hold_flapping=False))
    env.inject(XID_79)
    env.inject([])
    env.pass_until(lambda: env.sync.reported_unhealthy() == ())
    env.inject([{"id": "x2", "gpu": 2, "xid": 48}])
    env.inject([])
    assert env.sync.gpu_health.states() == {2: GpuState.BURN_IN}
    env.pass_until(lambda: env.sync.reported_unhealthy() == ())


def test_return_without_burn_in_returns_the_gpu_as_its_xid_clears(tmp_path: Path) -> None:
    env = Env(tmp_path, LifecycleRules(burn_in=False))
    env.inject(XID_79, diag=DIAG_2)
    env.inject([], diag=DIAG_2)
    assert env.sync.reported_unhealthy() == () and env.sync.gpu_health.annotation() is None
    assert [r for _, r, _ in node_events(env)] == ["GpuReturned"]


def test_the_sync_loop_wakes_at_the_end_of_a_burn_in_however_long_its_tick(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.sync.tick = 30.0
    assert env.sync.pass_wait() == 30.0
    env.inject(XID_79)
    env.inject([])
    assert env.sync.pass_wait() == 2.0
    env.clock.advance(1.5)
    assert env.sync.pass_wait() == 0.5
    env.clock.advance(1.0)
    assert env.sync.pass_wait() == 0.0


def test_the_heartbeat_publishes_the_gpu_health_before_the_allocatable_it_explains(tmp_path: Path) -> None:
    env = Env(tmp_path)
    hb = NodeHeartbeat(env.api, NodeConfig(NODE, H100x8), env.clock, 1.0, status_every=100,  # type: ignore[arg-type]
                       register_wait=wait_none(), on_node=env.sync.note_node)
    hb.unhealthy_gpus = env.sync.reported_unhealthy
    hb.gpu_health = env.sync.gpu_health.annotation
    hb.register()
    env.api.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {"firedrill.dev/inject-xid":
                                                                          json.dumps(XID_79)}}})
    hb.beat()  # reads the Xid; the change goes out at the next beat (the kick's)
    hb.beat()
    node = env.api.objects[f"/api/v1/nodes/{NODE}"]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "7"
    assert json.loads(node_annotations(env)["firedrill.dev/gpu-health"])["gpus"]["2"]["state"] == "failed"
    env.api.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {"firedrill.dev/inject-xid": None}}})
    hb.beat()
    hb.beat()
    assert json.loads(node_annotations(env)["firedrill.dev/gpu-health"])["gpus"]["2"]["state"] == "burn-in"
    assert env.api.objects[f"/api/v1/nodes/{NODE}"]["status"]["allocatable"]["nvidia.com/gpu"] == "7"
    env.pass_until(lambda: env.sync.reported_unhealthy() == ())
    start = len(env.api.calls)
    hb.beat()
    hb.beat()
    patches = [body for verb, path, body in env.api.calls[start:] if verb == "PATCH"]
    published = next(i for i, b in enumerate(patches) if "firedrill.dev/gpu-health" in str(b))
    returned = next(i for i, b in enumerate(patches) if (b.get("status") or {}).get("allocatable"))
    assert published < returned and patches[returned]["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert json.loads(node_annotations(env)["firedrill.dev/gpu-health"])["gpus"] == {}


def test_a_restarted_agent_keeps_a_held_gpu_out_of_service(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.inject(XID_79, diag=DIAG_2)
    env.inject([], diag=DIAG_2)
    env.pass_until(lambda: env.sync.gpu_health.states() == {2: GpuState.HELD})
    env.api.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {
        "firedrill.dev/gpu-health": env.sync.gpu_health.annotation()}}})
    again = Env(tmp_path)
    again.api = env.api
    again.sync.client = again.sync.gpu_health.client = env.api
    again.inject([])
    assert again.sync.gpu_health.states() == {2: GpuState.HELD} and again.sync.reported_unhealthy() == (2,)


def test_a_malformed_diagnostic_entry_is_logged_once_and_skipped(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    env = Env(tmp_path)
    bad = json.dumps([{"id": "d1", "gpu": 2, "result": "pass"}])
    env.inject(XID_79, diag=bad)
    env.inject([], diag=bad)
    env.inject([], diag=bad)
    assert sum("inject-diag entry" in r.getMessage() for r in caplog.records) == 1
    env.pass_until(lambda: env.sync.reported_unhealthy() == ())


def test_the_agent_takes_its_burn_in_and_flap_window_from_its_flags_and_the_profiles_give_them() -> None:
    base = ["--api", "https://127.0.0.1:1", "--node", NODE, "--data-dir", "/nonexistent"]
    args = build_parser().parse_args(base)
    assert (args.burn_in_seconds, args.flap_window) == (2.0, 60.0)
    args = build_parser().parse_args(base + ["--burn-in-seconds", "0.5", "--flap-window", "30"])
    assert (args.burn_in_seconds, args.flap_window) == (0.5, 30.0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(base + ["--burn-in-seconds", "0"])
    assert {(p.gpu_burn_in_seconds, p.gpu_flap_window) for p in PROFILES.values()} == {(2.0, 60.0)}
