"""A whole GPU that fails while its node lives (issue 26): the agent fails the processes on it, reports it out of
service as the NVIDIA device plugin does (application Xids excepted), the node's allocatable shrinks, and the
scheduler's core never hands the GPU out again until the injection is removed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from refplatform.agent.clock import VirtualClock
from refplatform.agent.events import PodEventRecorder
from refplatform.agent.gpus import GpuInventory
from refplatform.agent.logs import LogStore
from refplatform.agent.node import NodeConfig, node_status
from refplatform.agent.pods import PodSync
from refplatform.controllers.convert import node_of
from refplatform.core.node import Node
from refplatform.core.resources import Resources
from refplatform.core.state import ClusterState

from .fakeapi import FakeApi, sync_pass

NODE = "gpu-node-0"
H100x8 = GpuInventory(8, "NVIDIA-H100-80GB-HBM3", 81559, simulated=True)


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/default/pods/{name}"


class Env:
    def __init__(self, tmp_path: Path, **defects: bool) -> None:
        self.api = FakeApi()
        self.clock = VirtualClock()
        self.events = PodEventRecorder(self.api, NODE, retry_delays=())
        self.sync = PodSync(self.api, NODE, LogStore(tmp_path / "logs" / NODE), self.clock,  # type: ignore[arg-type]
                            events=self.events, gpu_count=8, **defects)
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

    def phase(self, name: str) -> str:
        return self.api.objects[pod_path(name)]["status"]["phase"]

    def reason(self, name: str) -> str:
        return self.api.objects[pod_path(name)]["status"]["containerStatuses"][0]["state"]["terminated"]["reason"]

    def inject(self, entries: list[dict[str, Any]]) -> None:
        annotations = {"firedrill.dev/inject-xid": json.dumps(entries)} if entries else {}
        self.sync.note_node({"metadata": {"name": NODE, "uid": "node-uid", "annotations": annotations}})

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
    env.inject([])  # the rollback removes the injection: the GPU returns to service
    assert env.sync.reported_unhealthy() == () and env.health_calls == 2


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
    env.step()
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
