"""The agent's GPU partitioning wiring (docs/PARTITIONING.md): advertised Node, slices, memory and Xid faults."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from refplatform.agent.__main__ import main
from refplatform.agent.clock import VirtualClock
from refplatform.agent.events import PodEventRecorder
from refplatform.agent.gpus import GpuInventory
from refplatform.agent.logs import LogStore
from refplatform.agent.node import NodeConfig, build_node, node_status
from refplatform.agent.pods import PodSync, parse_xid_entries, pod_device_requests
from refplatform.gpu.device import DeviceSet
from refplatform.gpu.partition import parse_partition_config

from .fakeapi import FakeApi, sync_pass

NODE = "gpu-node-0"
H200 = GpuInventory(1, "NVIDIA-H200", 143771, simulated=True)
MIG7 = {"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]}


def deserialize(obj: dict[str, Any], klass: str) -> Any:
    return ApiClient()._ApiClient__deserialize(obj, klass)  # type: ignore[attr-defined]


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/default/pods/{name}"


class Env:
    def __init__(self, tmp_path: Path, config: dict[str, Any]) -> None:
        self.api = FakeApi()
        self.clock = VirtualClock()
        self.store = LogStore(tmp_path / "logs" / NODE)
        self.events = PodEventRecorder(self.api, NODE, retry_delays=())
        self.devices = DeviceSet(parse_partition_config(config), "H200", 1, H200.memory_mib)
        self.sync = PodSync(self.api, NODE, self.store, self.clock, events=self.events,  # type: ignore[arg-type]
                            devices=self.devices)
        self.api.put_object(f"/api/v1/nodes/{NODE}", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})

    def add_pod(self, name: str, resources: dict[str, str], annotations: dict[str, str] | None = None) -> None:
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
            "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "busybox",
                                                        "resources": {"limits": resources, "requests": resources}}]},
            "status": {"phase": "Pending"},
        }
        self.sync._apply("ADDED", self.api.put_object(pod_path(name), pod))

    def step(self) -> None:
        sync_pass(self.sync, self.api, self.clock)

    def pod(self, name: str) -> dict[str, Any]:
        return self.api.objects[pod_path(name)]

    def inject(self, entries: list[dict[str, Any]]) -> None:
        self.sync.note_node({"metadata": {"name": NODE, "uid": "node-uid",
                                          "annotations": {"firedrill.dev/inject-xid": json.dumps(entries)}}})

    def event_list(self) -> list[dict[str, Any]]:
        self.events.drain()
        return [o for p, o in self.api.objects.items() if "/events/" in p]


def test_node_advertises_the_partition_mode() -> None:
    cfg = NodeConfig(NODE, H200, partition=parse_partition_config(MIG7), gpu_model="H200")
    node = build_node(cfg, datetime.now(UTC))
    assert node["status"]["capacity"]["nvidia.com/mig-1g.18gb"] == "7"
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.18gb"] == "7"
    assert "nvidia.com/gpu" not in node["status"]["capacity"]
    labels = node["metadata"]["labels"]
    assert labels["firedrill.dev/partition-mode"] == "mig-mixed"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.18gb.count"] == "7"
    assert deserialize(node, "V1Node").status.capacity["nvidia.com/mig-1g.18gb"] == "7"


def test_without_a_partition_config_the_node_is_unchanged() -> None:
    status = node_status(NodeConfig(NODE, H200), datetime.now(UTC))
    assert status["capacity"]["nvidia.com/gpu"] == "1"
    labels = build_node(NodeConfig(NODE, H200), datetime.now(UTC))["metadata"]["labels"]
    assert not any(k.startswith("firedrill.dev/partition") for k in labels)


def test_requests_and_xid_annotation_parsing() -> None:
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}},
                                   {"resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}
    assert pod_device_requests(pod) == {"nvidia.com/gpu": 2}
    entries, problems = parse_xid_entries('[{"id": "p1", "gpu": 0, "instance": 3, "xid": 94}, {"gpu": 0}]')
    assert [(e.id, e.gpu, e.instance, e.xid) for e in entries] == [("p1", 0, 3, 94)]
    assert len(problems) == 1
    assert parse_xid_entries("nope")[0] == []


def test_mig_pods_get_slices_xid94_fails_only_its_tenant_and_xid79_the_rest(tmp_path: Path) -> None:
    env = Env(tmp_path, MIG7)
    for i in range(7):
        env.add_pod(f"t{i}", {"nvidia.com/mig-1g.18gb": "1"})
    env.step()
    env.step()
    assert [env.pod(f"t{i}")["metadata"]["annotations"]["firedrill.dev/devices"] for i in range(7)] == [
        f"0/{i}" for i in range(7)]
    assert all(env.pod(f"t{i}")["status"]["phase"] == "Running" for i in range(7))

    env.inject([{"id": "p1", "gpu": 0, "instance": 3, "xid": 94}])
    env.step()
    phases = {f"t{i}": env.pod(f"t{i}")["status"]["phase"] for i in range(7)}
    assert phases == {**{f"t{i}": "Running" for i in range(7)}, "t3": "Failed"}
    status = deserialize(env.pod("t3"), "V1Pod").status
    term = status.container_statuses[0].state.terminated
    assert (term.reason, status.reason) == ("GPUXid94", "GPUXid94")
    assert "Xid 94" in term.message and "GPU 0 instance 3" in term.message
    events = env.event_list()
    node_ev = [e for e in events if e["involvedObject"]["kind"] == "Node"]
    pod_ev = [e for e in events if e["involvedObject"]["kind"] == "Pod" and e["reason"] == "XidError"]
    assert [(e["type"], e["reason"], e["involvedObject"]["uid"]) for e in node_ev] == [("Warning", "XidError", "node-uid")]
    assert [e["involvedObject"]["name"] for e in pod_ev] == ["t3"]

    env.inject([{"id": "p1", "gpu": 0, "instance": 3, "xid": 94}])  # applied once, by id
    env.step()
    assert len(env.event_list()) == len(events)
    node = env.api.objects["/api/v1/nodes/gpu-node-0"]
    assert node["metadata"]["annotations"]["firedrill.dev/applied-xid"] == '["p1"]'

    env.inject([{"id": "p1", "gpu": 0, "instance": 3, "xid": 94}, {"id": "p2", "gpu": 0, "instance": None, "xid": 79}])
    env.step()
    for i in range(7):
        assert env.pod(f"t{i}")["status"]["phase"] == "Failed"
    assert {env.pod(f"t{i}")["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] for i in range(7)} == {
        "GPUXid94", "GPUXid79"}
    assert env.devices.holder == {}  # every slice released


def test_a_restarted_agent_skips_injections_already_applied(tmp_path: Path) -> None:
    env = Env(tmp_path, MIG7)
    env.add_pod("t0", {"nvidia.com/mig-1g.18gb": "1"})
    env.step()
    entries = [{"id": "old", "gpu": 0, "instance": None, "xid": 79}]
    env.sync.note_node({"metadata": {"name": NODE, "annotations": {
        "firedrill.dev/inject-xid": json.dumps(entries), "firedrill.dev/applied-xid": '["old"]'}}})
    env.step()
    assert env.pod("t0")["status"]["phase"] == "Running"


def test_no_free_slice_fails_the_pod_at_admission(tmp_path: Path) -> None:
    env = Env(tmp_path, {"mode": "mig-mixed", "layout": [["3g.71gb"]]})
    env.add_pod("a", {"nvidia.com/mig-3g.71gb": "1"})
    env.add_pod("b", {"nvidia.com/mig-3g.71gb": "1"})
    env.step()
    reasons = sorted(env.pod(n)["status"]["containerStatuses"][0]["state"].get("terminated", {}).get("reason", "-")
                     for n in "ab")
    assert reasons == ["-", "UnexpectedAdmissionError"]
    refused = next(env.pod(n) for n in "ab" if env.pod(n)["status"]["phase"] == "Failed")
    assert refused["status"]["reason"] == "UnexpectedAdmissionError"  # at pod level too, as the kubelet says it


@pytest.mark.parametrize("config,failed", [
    (MIG7, {"t1"}),
    ({"mode": "hami", "vgpus_per_gpu": 4}, {"t1"}),
    ({"mode": "time-slicing", "replicas": 4}, {"t0", "t1", "t2"}),
    ({**MIG7, "enforce_isolation": False}, {"t0", "t1", "t2"}),
])
def test_memory_overuse_fails_with_out_of_memory(tmp_path: Path, config: dict[str, Any], failed: set[str]) -> None:
    env = Env(tmp_path, config)
    resource = "nvidia.com/mig-1g.18gb" if config["mode"].startswith("mig") else "nvidia.com/gpu"
    for i in range(3):
        env.add_pod(f"t{i}", {resource: "1"}, {"firedrill.dev/memory-mib": "1000"})
    env.step()
    env.add_pod("t1", {resource: "1"}, {"firedrill.dev/memory-mib": "100000"})  # the pod now uses more
    env.step()
    env.step()
    got = {f"t{i}" for i in range(3) if env.pod(f"t{i}")["status"]["phase"] == "Failed"}
    assert got == failed
    status = env.pod("t1")["status"]
    assert status["reason"] == "OutOfMemory"
    assert "100000 MiB" in status["containerStatuses"][0]["state"]["terminated"]["message"]


def test_invalid_partition_config_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text('mode: mig-mixed\nlayout: [["1g.10gb"]]\n')
    rc = main(["--api", "http://127.0.0.1:1", "--node", NODE, "--data-dir", str(tmp_path), "--gpu-model", "H200",
               "--simulate-gpus", "--partition-config", str(bad)])
    assert rc == 2
    assert "GPU 0 (H200): profile '1g.10gb' is not a MIG profile of H200" in caplog.text


def test_every_heartbeat_hands_the_node_to_the_callback() -> None:
    from tenacity import wait_none

    from refplatform.agent.heartbeat import NodeHeartbeat

    api, seen = FakeApi(), []
    cfg = NodeConfig(NODE, H200, partition=parse_partition_config(MIG7), gpu_model="H200")
    hb = NodeHeartbeat(api, cfg, VirtualClock(), 1.0, status_every=10, register_wait=wait_none(),  # type: ignore[arg-type]
                       on_node=lambda node: seen.append(node["metadata"]["name"]))
    assert hb.register()
    for _ in range(3):
        assert hb.beat()
    assert seen == [NODE] * 3
    hb.on_node = lambda node: 1 / 0  # a failing callback never fails the beat
    assert hb.beat()
