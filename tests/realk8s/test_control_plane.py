"""The upstream control plane the fixture starts: reachable with the real kubectl, TLS + static tokens +
Node/RBAC authorization, kubelet stand-ins registering GPU nodes and renewing Leases, the real node
lifecycle and taint-eviction controllers acting on a node whose Lease stopped, and the native gang
scheduling API (Workload/PodGroup) served and obeyed by the real kube-scheduler.

Run: ``python -m pytest tests/realk8s -m realk8s`` (builds or reuses the binaries first).
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from drills.kube.driver import POD, KubeDriver
from drills.kube.timeline import Timeline
from drills.target.connect import Target
from drills.target.profile import reference_profile
from drills.target.safety import SafetyError
from tests.realk8s.cluster import (SCHEDULER_USER, Component, RealCluster, RealClusterError, RealClusterSpec,
                                  write_kubeconfig)
from tests.realk8s.conftest import (DEFAULT_UNREACHABLE_TOLERATION_S, NODE_MONITOR_GRACE_PERIOD_S,
                                    NODE_MONITOR_PERIOD_S)
from tests.realk8s.standin import (NODE_LEASE_NAMESPACE, Heartbeat, NodeStandIn, api_client, node_user,
                                   parse_time, wait_for)

pytestmark = pytest.mark.realk8s

KUBECTL = "kubectl"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
#: How late past the grace period the controller may notice (it looks every node-monitor-period).
LIFECYCLE_MARGIN_S = 3 * NODE_MONITOR_PERIOD_S + 10.0


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([KUBECTL, f"--kubeconfig={kubeconfig}", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


@pytest.fixture(scope="module")
def admin(real_cluster: RealCluster) -> Iterator[client.ApiClient]:
    api = api_client(real_cluster.url, real_cluster.ca_file, real_cluster.admin_token)
    yield api
    api.close()


@pytest.fixture
def standins(real_cluster: RealCluster, admin: client.ApiClient) -> Iterator[Callable[[str], NodeStandIn]]:
    """Make kubelet stand-ins with each node's own token; deletes their Nodes and Leases afterwards."""
    made: list[NodeStandIn] = []

    def make(name: str) -> NodeStandIn:
        token = real_cluster.tokens[node_user(name).name]
        node = NodeStandIn(name, api_client(real_cluster.url, real_cluster.ca_file, token))
        made.append(node)
        return node

    yield make
    core, coordination = client.CoreV1Api(admin), client.CoordinationV1Api(admin)
    for node in made:
        for delete in (lambda n=node.name: core.delete_node(n),
                       lambda n=node.name: coordination.delete_namespaced_lease(n, NODE_LEASE_NAMESPACE)):
            try:
                delete()
            except ApiException as exc:
                if exc.status != 404:
                    raise
        node.api.close()


@pytest.fixture
def heartbeat() -> Iterator[Heartbeat]:
    beat = Heartbeat(interval=NODE_MONITOR_PERIOD_S).start()
    yield beat
    beat.stop()
    assert beat.errors == [], f"lease renewals failed: {beat.errors}"


def namespace_with_default_service_account(admin: client.ApiClient, name: str) -> None:
    """Create a namespace and wait for the real service-account controller to give it ``default``."""
    core = client.CoreV1Api(admin)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def has_default() -> bool:
        try:
            core.read_namespaced_service_account("default", name)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
    wait_for(has_default, 30, f"the service-account controller to create {name}/default")


def node_json(admin: client.ApiClient, name: str) -> dict[str, Any]:
    node: dict[str, Any] = admin.sanitize_for_serialization(client.CoreV1Api(admin).read_node(name))
    return node


def ready_condition(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def taints(node: dict[str, Any]) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}


def test_readyz_and_version_through_the_real_kubectl(real_cluster: RealCluster) -> None:
    assert kubectl(real_cluster.admin_kubeconfig, "get", "--raw", "/readyz").stdout.strip() == "ok"
    version = json.loads(kubectl(real_cluster.admin_kubeconfig, "get", "--raw", "/version").stdout)
    assert version["gitVersion"] == real_cluster.build.kubernetes
    for component in Component:
        assert real_cluster.pid(component) is not None, f"{component.value} is not running"


def test_rbac_refuses_what_a_component_identity_may_not_do(real_cluster: RealCluster) -> None:
    kubeconfig = write_kubeconfig(real_cluster.work_dir / "scheduler-as-user.kubeconfig", real_cluster.url,
                                  real_cluster.ca_file, SCHEDULER_USER.name,
                                  real_cluster.tokens[SCHEDULER_USER.name])
    refused = kubectl(kubeconfig, "create", "namespace", "not-for-the-scheduler", check=False)
    assert refused.returncode != 0
    assert "forbidden" in refused.stderr.lower()
    allowed = kubectl(kubeconfig, "auth", "can-i", "create", "bindings", "-n", "default", check=False)
    assert allowed.stdout.strip() == "yes"


def test_namespace_and_gpu_node_registered_by_a_kubelet_standin(
        real_cluster: RealCluster, admin: client.ApiClient, standins: Callable[[str], NodeStandIn]) -> None:
    kubectl(real_cluster.admin_kubeconfig, "create", "namespace", "realk8s-by-hand")
    phase = kubectl(real_cluster.admin_kubeconfig, "get", "namespace", "realk8s-by-hand",
                    "-o", "jsonpath={.status.phase}").stdout
    assert phase == "Active"

    created = standins("gpu-node-0").register(gpus=8)
    assert created["status"]["capacity"]["nvidia.com/gpu"] == "8"
    seen = json.loads(kubectl(real_cluster.admin_kubeconfig, "get", "node", "gpu-node-0", "-o", "json").stdout)
    assert seen["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert seen["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in seen["status"]["addresses"]


def test_a_node_identity_may_not_register_another_node(standins: Callable[[str], NodeStandIn]) -> None:
    impostor = standins("gpu-node-1")
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(impostor.api).create_node({"apiVersion": "v1", "kind": "Node",
                                                    "metadata": {"name": "gpu-node-2"}})
    assert refused.value.status == 403


def test_node_lease_is_created_and_renewed(standins: Callable[[str], NodeStandIn]) -> None:
    node = standins("gpu-node-0")
    node.register()
    first = node.renew()
    assert first["spec"]["holderIdentity"] == "gpu-node-0"
    second = node.renew()
    assert second["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    assert parse_time(second["spec"]["renewTime"]) > parse_time(first["spec"]["renewTime"])


def test_unrenewed_lease_makes_the_node_unreachable_and_evicts_its_pods(
        real_cluster: RealCluster, admin: client.ApiClient, standins: Callable[[str], NodeStandIn],
        heartbeat: Heartbeat) -> None:
    """The real node lifecycle controller: Ready -> Unknown after the grace period, the unreachable taints
    (NoExecute only while another node in the zone is healthy), and the taint-eviction controller deleting a
    pod once the default unreachable toleration runs out."""
    core = client.CoreV1Api(admin)
    healthy, victim = standins("gpu-node-0"), standins("gpu-node-1")
    for node in (healthy, victim):
        node.register()
        heartbeat.add(node)
    for node in (healthy, victim):
        wait_for(lambda n=node.name: NOT_READY not in {k for k, _ in taints(node_json(admin, n))}, 30,
                 f"the controller to lift {node.name}'s not-ready taint")

    namespace_with_default_service_account(admin, "realk8s-lifecycle")
    pod = admin.sanitize_for_serialization(core.create_namespaced_pod("realk8s-lifecycle", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rank-0"},
        "spec": {"nodeName": victim.name, "containers": [{"name": "main", "image": "firedrill/canary:1"}]}}))
    assert {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": DEFAULT_UNREACHABLE_TOLERATION_S} in pod["spec"]["tolerations"]

    last_renew = heartbeat.remove(victim.name)

    def unknown() -> dict[str, Any] | None:
        condition = ready_condition(node_json(admin, victim.name))
        return condition if condition["status"] == "Unknown" else None
    condition = wait_for(unknown, NODE_MONITOR_GRACE_PERIOD_S + LIFECYCLE_MARGIN_S,
                         f"{victim.name} Ready=Unknown after its Lease stopped")
    noticed_after = parse_time(condition["lastTransitionTime"]) - last_renew
    # lastTransitionTime has 1 s resolution; the controller must not act before the grace period.
    assert noticed_after >= NODE_MONITOR_GRACE_PERIOD_S - 1.0, condition
    assert condition["reason"] == "NodeStatusUnknown"

    wanted = {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    wait_for(lambda: wanted <= taints(node_json(admin, victim.name)), LIFECYCLE_MARGIN_S,
             f"{victim.name} to carry {sorted(wanted)}")
    healthy_now = node_json(admin, healthy.name)
    assert ready_condition(healthy_now)["status"] == "True"
    assert UNREACHABLE not in {k for k, _ in taints(healthy_now)}

    def evicted() -> dict[str, Any] | None:
        seen: dict[str, Any] = admin.sanitize_for_serialization(
            core.read_namespaced_pod("rank-0", "realk8s-lifecycle"))
        return seen if seen["metadata"].get("deletionTimestamp") else None
    gone = wait_for(evicted, DEFAULT_UNREACHABLE_TOLERATION_S + LIFECYCLE_MARGIN_S,
                    "the taint-eviction controller to delete rank-0")
    reasons = {c["type"]: c.get("reason") for c in gone["status"].get("conditions") or []}
    assert reasons.get("DisruptionTarget") == "DeletionByTaintManager", reasons


def test_native_gang_scheduling_binds_a_gang_only_once_min_count_pods_exist(
        real_cluster: RealCluster, admin: client.ApiClient, standins: Callable[[str], NodeStandIn],
        heartbeat: Heartbeat) -> None:
    assert real_cluster.gang is not None
    group_version = real_cluster.gang.api_version
    resources = kubectl(real_cluster.admin_kubeconfig, "api-resources", f"--api-group={group_version.split('/')[0]}",
                        "-o", "name").stdout.split()
    assert {"workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io"} <= set(resources)

    node = standins("gpu-node-2")
    node.register(gpus=8)
    heartbeat.add(node)
    wait_for(lambda: not taints(node_json(admin, node.name)), 30, f"{node.name} to lose its not-ready taint")
    namespace_with_default_service_account(admin, "realk8s-gang")
    kubeconfig = real_cluster.admin_kubeconfig

    def apply(doc: dict[str, Any]) -> None:
        kubectl(kubeconfig, "-n", "realk8s-gang", "create", "-f", "-", stdin=json.dumps(doc))

    def rank(name: str, group: str | None, gpus: int = 4) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
        spec: dict[str, Any] = {"containers": [{"name": "main", "image": "firedrill/canary:1",
                                                "resources": {"limits": limits}}]}
        if group:
            spec["schedulingGroup"] = {"podGroupName": group}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}

    def bound(name: str) -> str:
        return kubectl(kubeconfig, "-n", "realk8s-gang", "get", "pod", name, "-o",
                       "jsonpath={.spec.nodeName}").stdout

    apply({"apiVersion": group_version, "kind": "PodGroup", "metadata": {"name": "trainers"},
           "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})
    apply(rank("rank-0", "trainers"))
    stored = json.loads(kubectl(kubeconfig, "-n", "realk8s-gang", "get", "pod", "rank-0", "-o", "json").stdout)
    assert stored["spec"].get("schedulingGroup") == {"podGroupName": "trainers"}, "the gate dropped the field"

    # A pod outside any gang is bound at once: the scheduler is working while rank-0 waits for its peer.
    apply(rank("solo", None, gpus=0))
    assert wait_for(lambda: bound("solo"), 30, "the scheduler to bind the pod outside the gang") == node.name
    assert bound("rank-0") == "", "a gang of minCount 2 was bound with one pod"

    apply(rank("rank-1", "trainers"))
    for name in ("rank-0", "rank-1"):
        assert wait_for(lambda n=name: bound(n), 60, f"the gang scheduler to bind {name}") == node.name


def test_a_process_that_fails_to_start_is_named_with_its_log_and_the_rest_are_stopped(
        realk8s_bin_dir: Path, tmp_path: Path) -> None:
    cluster = RealCluster(RealClusterSpec(
        bin_dir=realk8s_bin_dir, work_dir=tmp_path / "broken",
        extra_args={Component.APISERVER: ("--feature-gates=NoSuchFiredrillGate=true",)}))
    with pytest.raises(RealClusterError) as failed:
        cluster.start()
    message = str(failed.value)
    assert message.startswith("kube-apiserver exited with code"), message
    assert "NoSuchFiredrillGate" in message, "the log tail is missing from the error"
    codes = cluster.exit_codes()
    assert list(codes) == [Component.ETCD, Component.APISERVER], "started past the failure, or not at all"
    assert all(code is not None for code in codes.values()), f"left running: {codes}"


def test_the_preflight_reads_pod_metadata_and_names_a_pod_stuck_terminating_with_its_node(
        real_cluster: RealCluster, admin: client.ApiClient) -> None:
    """kube-apiserver answers the pre-flight's metadata-only pod list (PartialObjectMetadataList); the one pod being
    deleted is then read whole, so the refusal names its node as a full list would have."""
    core = client.CoreV1Api(admin)
    name, ns = "preflight-stuck", "realk8s-preflight"
    namespace_with_default_service_account(admin, ns)
    core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "finalizers": ["firedrill.dev/hold"]},
        "spec": {"nodeName": "gpu-nowhere", "containers": [{"name": "c", "image": "firedrill-canary:local"}]}})
    try:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        driver = KubeDriver.connect(real_cluster.admin_kubeconfig, timeline=Timeline())
        try:
            items = driver.list_metadata(POD, ns)
            assert items and all(set(i) <= {"kind", "apiVersion", "metadata"} for i in items), items[:1]
            assert {i["kind"] for i in items} == {"PartialObjectMetadata"}
            target = Target(driver, reference_profile())
            with pytest.raises(SafetyError) as refused:
                target.preflight(now=datetime.now(timezone.utc) + timedelta(minutes=5))
        finally:
            driver.close()
        assert f"pod {ns}/{name} on gpu-nowhere has been Terminating" in str(refused.value)
    finally:
        core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": None}})
