"""The Node, Lease and pod status the agent writes, checked by the official client's strict models."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from kubernetes.client import ApiClient

from refplatform import KUBE_VERSION
from refplatform.agent.clock import VirtualClock
from refplatform.agent.gpus import select_inventory
from refplatform.agent.node import (
    NodeConfig,
    build_lease,
    build_node,
    lease_duration_seconds,
    node_conditions,
    node_status,
)
from refplatform.agent.podstatus import ContainerRun, image_id, pod_ip_for, pod_status
from refplatform.agent.workload import Exit


def deserialize(obj: dict[str, Any], klass: str) -> Any:
    return ApiClient()._ApiClient__deserialize(obj, klass)  # type: ignore[attr-defined]


@pytest.fixture
def config() -> NodeConfig:
    return NodeConfig(
        name="gpu-node-0",
        gpus=select_inventory("H100-80GB", 8, force_simulated=True),
        node_group="rack-a",
        log_port=43123,
        boot_id="b00710",
    )


def test_node_deserialises_as_v1node_with_everything_the_brief_names(config: NodeConfig) -> None:
    clock = VirtualClock()
    node = deserialize(build_node(config, clock.now()), "V1Node")
    assert node.metadata.name == "gpu-node-0"
    assert node.metadata.labels == {
        "kubernetes.io/hostname": "gpu-node-0",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": node.status.node_info.architecture,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",
        "firedrill.dev/simulated-gpus": "true",
        "firedrill.dev/node-group": "rack-a",
    }
    st = node.status
    assert st.capacity == {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    assert st.allocatable == st.capacity
    assert [(a.type, a.address) for a in st.addresses] == [("InternalIP", "127.0.0.1"), ("Hostname", "gpu-node-0")]
    assert st.daemon_endpoints.kubelet_endpoint.port == 43123
    info = st.node_info
    assert info.kubelet_version == KUBE_VERSION and info.operating_system == "linux" and info.boot_id == "b00710"
    assert all(getattr(info, f) for f in ("machine_id", "system_uuid", "kernel_version", "os_image", "container_runtime_version", "kube_proxy_version"))
    conds = {c.type: c for c in st.conditions}
    assert set(conds) == {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}
    assert (conds["Ready"].status, conds["Ready"].reason) == ("True", "KubeletReady")
    assert all(conds[t].status == "False" for t in ("MemoryPressure", "DiskPressure", "PIDPressure"))
    assert conds["Ready"].last_heartbeat_time == clock.now()
    assert conds["Ready"].last_transition_time == clock.now()


def test_node_info_has_all_ten_fields(config: NodeConfig) -> None:
    info = node_status(config, VirtualClock().now())["nodeInfo"]
    assert set(info) == {
        "machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
        "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture",
    }
    assert all(isinstance(v, str) and v for v in info.values())


def test_machine_id_is_stable_and_boot_id_is_per_process() -> None:
    gpus = select_inventory("H100-80GB", 1, force_simulated=True)
    a, b = NodeConfig("n1", gpus), NodeConfig("n1", gpus)
    sa, sb = (node_status(c, VirtualClock().now())["nodeInfo"] for c in (a, b))
    assert sa["machineID"] == sb["machineID"] and sa["bootID"] != sb["bootID"]


def test_a_cpu_only_node_has_no_gpu_resource_or_labels() -> None:
    config = NodeConfig("cpu-0", select_inventory("H100-80GB", 0, force_simulated=True))
    node = deserialize(build_node(config, VirtualClock().now()), "V1Node")
    assert "nvidia.com/gpu" not in node.status.capacity
    assert not any(k.startswith("nvidia.com/") for k in node.metadata.labels)


def test_condition_transition_time_moves_only_on_a_change() -> None:
    clock = VirtualClock()
    first = node_conditions(clock.now())
    clock.advance(10)
    again = node_conditions(clock.now(), first)
    assert [c["lastTransitionTime"] for c in again] == [c["lastTransitionTime"] for c in first]
    assert all(c["lastHeartbeatTime"] == "2026-11-30T00:00:10Z" for c in again)
    # The node lifecycle controller marked us Unknown; coming back is a transition.
    for c in again:
        if c["type"] == "Ready":
            c["status"] = "Unknown"
    clock.advance(10)
    back = {c["type"]: c for c in node_conditions(clock.now(), again)}
    assert back["Ready"]["status"] == "True" and back["Ready"]["lastTransitionTime"] == "2026-11-30T00:00:20Z"
    assert back["DiskPressure"]["lastTransitionTime"] == "2026-11-30T00:00:00Z"


@pytest.mark.parametrize("heartbeat, duration", [(1.0, 4), (0.25, 1), (0.1, 1), (0.3, 2), (10, 40), (2.5, 10)])
def test_lease_duration_is_four_heartbeats_rounded_up(heartbeat: float, duration: int) -> None:
    assert lease_duration_seconds(heartbeat) == duration


def test_lease_deserialises_as_v1lease_with_micro_time_and_owner() -> None:
    clock = VirtualClock()
    clock.advance(1.5)
    body = build_lease("gpu-node-0", "uid-1", 4, clock.now(), {"metadata": {"resourceVersion": "17", "uid": "l-1"}})
    assert body["spec"]["renewTime"] == "2026-11-30T00:00:01.500000Z"
    lease = deserialize(body, "V1Lease")
    assert lease.metadata.namespace == "kube-node-lease" and lease.metadata.resource_version == "17"
    assert lease.spec.holder_identity == "gpu-node-0" and lease.spec.lease_duration_seconds == 4
    assert lease.spec.renew_time == clock.now()
    (owner,) = lease.metadata.owner_references
    assert (owner.api_version, owner.kind, owner.name, owner.uid) == ("v1", "Node", "gpu-node-0", "uid-1")
    assert "ownerReferences" not in build_lease("n", None, 4, clock.now())["metadata"]


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "0b7f2c4e-uid"},
        "spec": {"nodeName": "gpu-node-0", "containers": [{"name": "main", "image": "busybox:1.36"}, {"name": "side", "image": "busybox"}]},
        "status": status,
    }


def test_running_pod_status_deserialises_as_v1pod() -> None:
    clock = VirtualClock()
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T23:59:59Z"}
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
    pod = _pod(phase="Pending", conditions=[scheduled, disruption])
    pod["status"] = pod_status(pod, ContainerRun(clock.now()), clock.now())
    v1 = deserialize(pod, "V1Pod")
    st = v1.status
    assert st.phase == "Running"
    assert st.host_ip == "127.0.0.1" and st.pod_ip == pod_ip_for("0b7f2c4e-uid")
    assert st.pod_ip.startswith("127.1.") and [i.ip for i in st.pod_ips] == [st.pod_ip]
    assert st.start_time == clock.now()
    conds = {c.type: c for c in st.conditions}
    assert {t for t, c in conds.items() if c.status == "True"} >= {"PodScheduled", "Initialized", "ContainersReady", "Ready"}
    assert conds["PodScheduled"].last_transition_time.isoformat().startswith("2026-11-29T23:59:59")  # the scheduler's own
    assert conds["DisruptionTarget"].reason == "DeletionByTaintManager"  # others' conditions are kept
    assert [c.name for c in st.container_statuses] == ["main", "side"]
    main = st.container_statuses[0]
    assert main.ready and main.started and main.restart_count == 0 and main.image == "busybox:1.36"
    assert main.image_id.startswith("busybox@sha256:") and main.container_id.startswith("containerd://")
    assert main.state.running.started_at == clock.now()


@pytest.mark.parametrize("code, phase, reason", [(0, "Succeeded", "Completed"), (1, "Failed", "Error")])
def test_terminated_pod_status_deserialises_as_v1pod(code: int, phase: str, reason: str) -> None:
    clock = VirtualClock()
    started = clock.now()
    running = pod_status(_pod(), ContainerRun(started), started)
    finished = clock.advance(30)
    pod = _pod(**running)
    pod["status"] = pod_status(pod, ContainerRun(started, 0, Exit.of(code, finished)), finished)
    st = deserialize(pod, "V1Pod").status
    assert st.phase == phase
    assert st.start_time == started
    conds = {c.type: c for c in st.conditions}
    assert (conds["Ready"].status, conds["Ready"].reason) == ("False", "PodCompleted")
    assert conds["Initialized"].status == "True"
    t = st.container_statuses[0].state.terminated
    assert (t.exit_code, t.reason, t.started_at, t.finished_at) == (code, reason, started, finished)
    assert st.container_statuses[0].state.running is None
    assert not st.container_statuses[0].ready


def test_restarted_container_reports_its_last_state() -> None:
    clock = VirtualClock()
    last = {"exitCode": 255, "reason": "Unknown", "startedAt": "2026-11-29T00:00:00Z", "finishedAt": "2026-11-30T00:00:00Z"}
    pod = _pod()
    pod["status"] = pod_status(pod, ContainerRun(clock.now(), 2, None, last), clock.now())
    cs = deserialize(pod, "V1Pod").status.container_statuses[0]
    assert cs.restart_count == 2 and cs.last_state.terminated.exit_code == 255


def test_pod_ips_are_loopback_and_stable() -> None:
    ips = {pod_ip_for(f"uid-{i}") for i in range(500)}
    for ip in ips:
        addr = ipaddress.ip_address(ip)
        assert addr.is_loopback and addr in ipaddress.ip_network("127.1.0.0/16")
        assert not ip.endswith((".0", ".255"))
    assert len(ips) > 400
    assert pod_ip_for("x") == pod_ip_for("x")
    assert image_id("ghcr.io/org/img:1.0").startswith("ghcr.io/org/img@sha256:")
