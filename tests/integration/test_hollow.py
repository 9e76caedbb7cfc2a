"""Hollow nodes (refplatform.hollow) on a running API server and scheduler: the nodes are real to the API
and each writes as itself, and the end-to-end benchmark's workload at small scale (50 nodes x 8 GPUs, 400
pods in gangs of 8) comes out correct: every pod bound once and Running, every gang whole, no GPU booked
twice."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from refplatform.client import ApiStatusError, RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec, wait_until
from refplatform.credentials import node_user
from refplatform.hollow.launch import start_hollow, wait_nodes_ready
from tests.bench.bench_e2e_scheduling import run_round

pytestmark = pytest.mark.integration


@pytest.fixture
def hollow_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """An API server (no controllers) and a fleet of 3 hollow nodes with 0.5 s heartbeats."""
    cluster = Cluster(ClusterSpec(tmp_path / "c", nodes=3, gpus_per_node=8, controllers=(), heartbeat=0.5))
    cluster.start_server()
    hollow = start_hollow(cluster)
    try:
        wait_nodes_ready(cluster, hollow, timeout=30)
        yield cluster
    finally:
        hollow.stop()
        cluster.stop()


def test_hollow_nodes_are_real_nodes_with_leases_written_as_themselves(hollow_cluster: Cluster) -> None:
    cluster = hollow_cluster
    admin = RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file)
    nodes = {n["metadata"]["name"]: n for n in admin.list("/api/v1/nodes")["items"]}
    assert sorted(nodes) == ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
    for node in nodes.values():
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    leases = resource_path("coordination.k8s.io", "v1", "leases", "kube-node-lease")

    def leases_exist() -> bool:  # every node's Lease exists and moves on the heartbeat
        found = {item["metadata"]["name"]: item for item in admin.list(leases)["items"]}
        return all(n in found and int(found[n]["metadata"]["resourceVersion"]) > 0 for n in nodes)
    wait_until(leases_exist, 10, "a Lease for every hollow node")
    first = {i["metadata"]["name"]: i["spec"]["renewTime"] for i in admin.list(leases)["items"]}
    wait_until(lambda: all(i["spec"]["renewTime"] != first[i["metadata"]["name"]]
                           for i in admin.list(leases)["items"]), 10, "every Lease renewed again")
    # Each node's writes were made by that node's own identity, never by a shared or admin one.
    writers: dict[str, set[str]] = {}
    for line in cluster.audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if ref.get("resource") in ("nodes", "leases") and event["verb"] in ("create", "update", "patch"):
            writers.setdefault(ref["name"], set()).add(event["user"]["username"])
    assert writers == {n: {node_user(n)} for n in nodes}


def test_a_hollow_node_may_not_write_another_nodes_lease(hollow_cluster: Cluster) -> None:
    cluster = hollow_cluster
    token = cluster.credentials.ensure(node_user("gpu-node-0"), "node", node="gpu-node-0")
    as_node0 = RestClient(cluster.url, token, ca_file=cluster.ca_file)
    path = resource_path("coordination.k8s.io", "v1", "leases", "kube-node-lease", "gpu-node-1")

    def lease() -> dict | None:
        try:
            return as_node0.get(path)  # a node reads what it needs
        except ApiStatusError as exc:
            if exc.not_found:  # not renewed for the first time yet
                return None
            raise
    wait_until(lambda: lease() is not None, 10, "gpu-node-1's Lease")
    current = lease()
    with pytest.raises(ApiStatusError) as refused:
        as_node0.update(path, current)
    assert refused.value.code == 403


def test_a_pod_bound_to_a_hollow_node_runs_and_its_deletion_completes(hollow_cluster: Cluster) -> None:
    cluster = hollow_cluster
    admin = RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file)
    pods = resource_path("", "v1", "pods", "default")
    admin.create(pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                        "spec": {"containers": [{"name": "main", "image": "x"}]}})
    admin.create(f"{pods}/p/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                                       "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-2"}})
    wait_until(lambda: admin.get(f"{pods}/p").get("status", {}).get("phase") == "Running", 10, "pod p Running")
    status = admin.get(f"{pods}/p")["status"]
    assert status["containerStatuses"][0]["ready"] is True and status["podIP"]
    admin.delete(f"{pods}/p")  # graceful: the node finishes it, as a kubelet does once the containers stop

    def gone() -> bool:
        try:
            admin.get(f"{pods}/p")
        except ApiStatusError as exc:
            return exc.not_found
        return False
    wait_until(gone, 10, "pod p deleted by its node")


def test_the_benchmark_workload_at_small_scale_is_correct(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_round(tmp_path / "bench", nodes=50, pods=400, gang_size=8, gpus_per_node=8, creators=4,
                       profile="tuned", nice=0, timeout=40, log=lambda _m: None)
    assert result.problems == ()
    assert result.pods == 400
    assert result.startup_p99 > 0 and result.bound_per_s > 0
    assert time.monotonic() - started < 60
