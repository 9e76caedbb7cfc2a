"""Health on shared GPUs (issue 49): on a partitioned node, an Xid that takes its GPU out fails every tenant on it,
takes every MIG instance, replica or vGPU of it off the Node's allocatable (and hands none out) while it stands, and
returns them through the same burn-in as a whole GPU; ``shared-health-lost`` loses all but the one slice."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tenacity import wait_none

from refplatform.agent.clock import VirtualClock
from refplatform.agent.events import PodEventRecorder
from refplatform.agent.gpus import GpuInventory
from refplatform.agent.heartbeat import NodeHeartbeat
from refplatform.agent.logs import LogStore
from refplatform.agent.node import NodeConfig
from refplatform.agent.pods import PodSync
from refplatform.gpu.device import DeviceSet
from refplatform.gpu.lifecycle import GpuState
from refplatform.gpu.partition import parse_partition_config

from .fakeapi import FakeApi, sync_pass

NODE = "part-node-0"
NODE_PATH = f"/api/v1/nodes/{NODE}"
H200 = GpuInventory(1, "NVIDIA-H200", 143771, simulated=True)
MIG7 = {"mode": "mig-single", "layout": [["1g.18gb"] * 7]}
SLICED = {"mode": "time-slicing", "replicas": 4}
GPU = "nvidia.com/gpu"


class Env:
    """One partitioned H200 node: its pod sync and its heartbeat, on a fake API and a virtual clock."""

    def __init__(self, tmp_path: Path, config: dict[str, Any], lost: bool = False) -> None:
        self.api = FakeApi()
        self.clock = VirtualClock()
        self.events = PodEventRecorder(self.api, NODE, retry_delays=())
        partition = parse_partition_config(config)
        self.devices = DeviceSet(partition, "H200", 1, H200.memory_mib, shared_health_lost=lost)
        self.sync = PodSync(self.api, NODE, LogStore(tmp_path / "logs" / NODE), self.clock,  # type: ignore[arg-type]
                            events=self.events, devices=self.devices, gpu_count=1)
        self.hb = NodeHeartbeat(self.api, NodeConfig(NODE, H200, partition=partition, gpu_model="H200"),  # type: ignore[arg-type]
                                self.clock, 1.0, status_every=100, register_wait=wait_none(),
                                on_node=self.sync.note_node)
        self.hb.unhealthy_gpus = self.sync.reported_unhealthy
        self.hb.withdrawn = self.sync.withdrawn
        self.hb.gpu_health = self.sync.gpu_health.annotation
        assert self.hb.register()
        self.tenants = 0

    def add_tenant(self, name: str, resource: str = GPU) -> None:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
               "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "busybox", "resources": {
                   "limits": {resource: "1"}, "requests": {resource: "1"}}}]},
               "status": {"phase": "Pending"}}
        self.sync._apply("ADDED", self.api.put_object(f"/api/v1/namespaces/default/pods/{name}", pod))

    def fill(self, n: int) -> list[str]:
        names = [f"t{i}" for i in range(n)]
        for name in names:
            self.add_tenant(name)
        self.step()
        self.step()
        assert self.phases(names) == {name: "Running" for name in names}
        return names

    def step(self) -> None:
        sync_pass(self.sync, self.api, self.clock)

    def beats(self, n: int = 2) -> None:
        """Heartbeats: each reads the Node (its injections), and a change goes out at the next one."""
        for _ in range(n):
            assert self.hb.beat()

    def inject(self, entries: list[dict[str, Any]]) -> None:
        self.api.patch(NODE_PATH, {"metadata": {"annotations": {
            "firedrill.dev/inject-xid": json.dumps(entries) if entries else None}}})
        self.beats()
        self.step()

    def pass_until(self, done: Callable[[], bool], seconds: float = 10.0) -> None:
        start = self.clock.now()
        while not done():
            assert (self.clock.now() - start).total_seconds() < seconds, "never happened"
            self.step()

    def phases(self, names: list[str]) -> dict[str, str]:
        return {n: self.api.objects[f"/api/v1/namespaces/default/pods/{n}"]["status"]["phase"] for n in names}

    def allocatable(self, resource: str = GPU) -> str:
        return str(self.api.objects[NODE_PATH]["status"]["allocatable"][resource])

    def annotations(self) -> dict[str, str]:
        return self.api.objects[NODE_PATH]["metadata"].get("annotations") or {}


XID_79 = [{"id": "x1", "gpu": 0, "instance": None, "xid": 79}]


def test_a_reset_takes_every_replica_out_fails_every_tenant_and_returns_them_through_a_burn_in(tmp_path: Path) -> None:
    env = Env(tmp_path, SLICED)
    tenants = env.fill(4)
    assert env.allocatable() == "4"
    env.inject(XID_79)
    env.beats()
    assert env.allocatable() == "0"  # every replica of the GPU, not the one a tenant saw the Xid on
    assert set(env.phases(tenants).values()) == {"Failed"}
    assert env.api.objects[NODE_PATH]["status"]["capacity"][GPU] == "4"  # capacity keeps them
    assert json.loads(env.annotations()["firedrill.dev/gpu-health"])["gpus"]["0"]["state"] == "failed"
    # the whole-GPU index annotation would read as replica indexes to the scheduler: not written here
    assert not env.annotations().get("firedrill.dev/unhealthy-gpus")
    env.events.drain()
    assert any("4 slices of GPU 0 out of service: failed pod(s) default/t0, default/t1, default/t2, default/t3"
               in o["message"] for p, o in env.api.objects.items() if "/events/" in p and o["reason"] == "XidError")
    env.add_tenant("late")  # bound anyway (a scheduler that ignored allocatable): the node hands out no replica
    env.step()
    late = env.api.objects["/api/v1/namespaces/default/pods/late"]["status"]
    assert late["reason"] == "UnexpectedAdmissionError"
    assert "4 out of service" in late["containerStatuses"][0]["state"]["terminated"]["message"]

    env.inject([])  # repaired: burnt in before it returns, out of service meanwhile
    assert env.sync.gpu_health.states() == {0: GpuState.BURN_IN}
    env.beats()
    assert env.allocatable() == "0"
    env.pass_until(lambda: env.sync.reported_unhealthy() == ())
    env.beats()
    assert env.allocatable() == "4"
    env.add_tenant("after")
    env.step()
    env.step()
    assert env.phases(["after"]) == {"after": "Running"}


def test_on_mig_a_contained_xid_takes_nothing_out_and_a_reset_takes_every_instance(tmp_path: Path) -> None:
    env = Env(tmp_path, MIG7)
    tenants = env.fill(7)
    env.inject([{"id": "c1", "gpu": 0, "instance": 3, "xid": 94}])
    env.beats()
    assert env.allocatable() == "7" and list(env.phases(tenants).values()).count("Failed") == 1
    env.inject([{"id": "c1", "gpu": 0, "instance": 3, "xid": 94}, {"id": "r1", "gpu": 0, "instance": 5, "xid": 79}])
    env.beats()
    assert env.allocatable() == "0" and set(env.phases(tenants).values()) == {"Failed"}
    env.events.drain()
    messages = [o["message"] for p, o in env.api.objects.items() if "/events/" in p and o["reason"] == "XidError"
                and o["involvedObject"]["kind"] == "Node"]
    assert any("Xid 79" in m and "slices 0/0, 0/1, 0/2, 0/3, 0/4, 0/5, 0/6 out of service" in m for m in messages)


def test_shared_health_lost_takes_out_one_instance_and_leaves_the_others_running(tmp_path: Path) -> None:
    env = Env(tmp_path, MIG7, lost=True)
    tenants = env.fill(7)
    env.inject(XID_79)
    env.beats()
    assert env.allocatable() == "6"  # only instance 0, the GPU's first: the Xid named none
    phases = env.phases(tenants)
    assert phases == {**{t: "Running" for t in tenants}, "t0": "Failed"}  # the others run on a dead GPU
