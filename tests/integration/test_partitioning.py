"""GPU partitioning end to end (docs/PARTITIONING.md): a MIG H200 agent, Xid injection, an invalid config.

No scheduler (``controllers=()``): the test binds the pods itself.  Every wait has a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refplatform.client import MERGE_PATCH, RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec, wait_until

pytestmark = pytest.mark.integration

NODE = "mig-node-0"
PODS = resource_path("", "v1", "pods", "default")
NODE_PATH = resource_path("", "v1", "nodes", None, NODE)
DEADLINE = 30.0
TENANTS = [f"tenant-{i}" for i in range(7)]


def wait_for(cluster: Cluster, predicate: Any, what: str, timeout: float = DEADLINE) -> None:
    def check() -> bool:
        proc = cluster.agents[NODE]
        if proc.popen.poll() is not None:
            raise AssertionError(f"agent exited {proc.popen.returncode}:\n{proc.tail(40)}")
        return bool(predicate())

    wait_until(check, timeout, what, interval=0.05)


@pytest.fixture
def mig_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, RestClient]]:
    config = tmp_path / "partition.yaml"
    config.write_text('mode: mig-mixed\nlayout:\n  - ["1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", '
                      '"1g.18gb", "1g.18gb"]\n')
    c = Cluster(ClusterSpec(tmp_path / "cluster", nodes=0, heartbeat=0.5, controllers=()))
    c.start_server()
    try:
        c.start_agent(NODE, gpus=1, gpu_model="H200", extra=("--simulate-gpus", "--partition-config", str(config)))
        with RestClient(c.url, c.token, ca_file=c.ca_file) as client:
            yield c, client
    finally:
        c.stop()


def pod(api: RestClient, name: str) -> dict[str, Any]:
    return api.get(f"{PODS}/{name}")


def phase(api: RestClient, name: str) -> str:
    return str((pod(api, name).get("status") or {}).get("phase") or "")


def terminated(api: RestClient, name: str) -> dict[str, Any]:
    statuses = (pod(api, name).get("status") or {}).get("containerStatuses") or [{}]
    return (statuses[0].get("state") or {}).get("terminated") or {}


def xid_events(api: RestClient) -> list[dict[str, Any]]:
    listed = api.list(resource_path("", "v1", "events", None), {"fieldSelector": "reason=XidError"})
    return [e for e in listed["items"] if e.get("reason") == "XidError"]


def inject(api: RestClient, entries: list[dict[str, Any]]) -> None:
    api.patch(NODE_PATH, {"metadata": {"annotations": {"firedrill.dev/inject-xid": json.dumps(entries)}}}, MERGE_PATCH)


def test_mig_tenants_fail_by_fault_class(mig_cluster: tuple[Cluster, RestClient]) -> None:
    cluster, api = mig_cluster

    def node_alloc() -> dict[str, str]:
        try:
            return api.get(NODE_PATH)["status"]["allocatable"]
        except Exception:
            return {}

    wait_for(cluster, lambda: node_alloc().get("nvidia.com/mig-1g.18gb") == "7", "the node to advertise 7 MIG slices")
    labels = api.get(NODE_PATH)["metadata"]["labels"]
    assert labels["firedrill.dev/partition-mode"] == "mig-mixed"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert "nvidia.com/gpu" not in node_alloc()

    for name in TENANTS:
        api.create(PODS, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {
                "limits": {"nvidia.com/mig-1g.18gb": "1"}, "requests": {"nvidia.com/mig-1g.18gb": "1"}}}]},
        })
        api.create(f"{PODS}/{name}/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                              "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}})
    wait_for(cluster, lambda: all(phase(api, n) == "Running" for n in TENANTS), "7 tenants Running")
    wait_for(cluster, lambda: all("firedrill.dev/devices" in (pod(api, n)["metadata"].get("annotations") or {})
                                  for n in TENANTS), "device annotations")
    devices = {n: pod(api, n)["metadata"]["annotations"]["firedrill.dev/devices"] for n in TENANTS}
    assert sorted(devices.values()) == [f"0/{i}" for i in range(7)]
    victim = next(n for n, d in devices.items() if d == "0/3")

    inject(api, [{"id": "p1", "gpu": 0, "instance": 3, "xid": 94}])
    wait_for(cluster, lambda: phase(api, victim) == "Failed", "the instance-3 tenant to fail", timeout=10)
    term = terminated(api, victim)
    assert term["reason"] == "GPUXid94"
    assert "Xid 94" in term["message"] and "GPU 0 instance 3" in term["message"]
    assert pod(api, victim)["status"]["reason"] == "GPUXid94"
    wait_for(cluster, lambda: len(xid_events(api)) >= 2, "XidError events on the node and the pod", timeout=10)
    events = xid_events(api)
    assert {(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["type"]) for e in events} == {
        ("Node", NODE, "Warning"), ("Pod", victim, "Warning")}
    others = [n for n in TENANTS if n != victim]
    assert all(phase(api, n) == "Running" for n in others)

    inject(api, [{"id": "p1", "gpu": 0, "instance": 3, "xid": 94}, {"id": "p2", "gpu": 0, "instance": None, "xid": 79}])
    wait_for(cluster, lambda: all(phase(api, n) == "Failed" for n in others), "every tenant of GPU 0 to fail", timeout=10)
    assert {terminated(api, n)["reason"] for n in others} == {"GPUXid79"}
    assert terminated(api, victim)["reason"] == "GPUXid94"  # p1 was applied once
    wait_for(cluster, lambda: len(xid_events(api)) >= 2 + 1 + len(others), "XidError events for Xid 79", timeout=10)
    wait_for(cluster, lambda: json.loads((api.get(NODE_PATH)["metadata"].get("annotations") or {})
                                         .get("firedrill.dev/applied-xid", "[]")) == ["p1", "p2"],
             "the applied ids recorded on the Node", timeout=10)


def test_an_invalid_partition_config_is_refused_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "partition.yaml"
    bad.write_text('mode: mig-mixed\nlayout:\n  - ["1g.18gb"]\n  - ["4g.71gb", "4g.71gb"]\n')
    proc = subprocess.run(
        [sys.executable, "-m", "refplatform.agent", "--api", "http://127.0.0.1:9", "--node", NODE, "--data-dir",
         str(tmp_path / "data"), "--gpus", "2", "--gpu-model", "H200", "--simulate-gpus", "--partition-config", str(bad)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "GPU 1 (H200): profile 4g.71gb x2 exceeds its maximum of 1 per GPU" in proc.stderr
