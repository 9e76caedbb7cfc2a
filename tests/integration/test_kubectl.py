"""The real kubectl against a running reference cluster (API server + two node agents)."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.integration.kube import api_client, pod_manifest

pytestmark = [pytest.mark.integration, pytest.mark.kubectl]

KUBECTL = shutil.which("kubectl")
if KUBECTL is None:
    pytest.skip("kubectl is not installed (.ci/run installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # No scheduler: these tests bind pods themselves, as a user would with the binding subresource.
    c = Cluster(ClusterSpec(tmp_path_factory.mktemp("kubectl"), nodes=2, heartbeat=0.5, controllers=()))
    c.start()
    v1 = client.CoreV1Api(api_client(c))
    wait_until(lambda: len(v1.list_node().items) == 2, 30, "both nodes to register")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def v1(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(api_client(cluster))


@pytest.fixture(scope="module")
def kubectl(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("kubectl-cache")

    def run(*args: str, check: bool = True, timeout: float = 30) -> str:
        argv = [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "--cache-dir", str(cache), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc.stdout + proc.stderr
    run.argv = [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "--cache-dir", str(cache)]  # type: ignore[attr-defined]
    return run


def bind(v1: client.CoreV1Api, name: str, node: str, namespace: str = "default") -> None:
    v1.create_namespaced_pod_binding(name, namespace, {"target": {"kind": "Node", "name": node},
                                                      "metadata": {"name": name}}, _preload_content=False)


def running(v1: client.CoreV1Api, name: str, namespace: str = "default") -> bool:
    return v1.read_namespaced_pod(name, namespace).status.phase == "Running"


def test_get_nodes_shows_gpus_and_readiness(kubectl, v1: client.CoreV1Api) -> None:
    wait_until(lambda: "Ready" in kubectl("get", "nodes"), 20, "nodes Ready in kubectl")
    out = kubectl("get", "nodes")
    header = out.splitlines()[0].split()
    assert header[:4] == ["NAME", "STATUS", "GPUS", "GPUS-USED"]
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert set(rows) == {"gpu-node-0", "gpu-node-1"}
    assert rows["gpu-node-0"][1:4] == ["Ready", "8", "0"]


def test_get_pods_all_namespaces_wide_and_logs(kubectl, v1: client.CoreV1Api) -> None:
    v1.create_namespace({"metadata": {"name": "team-a"}})
    v1.create_namespaced_pod("team-a", pod_manifest("trainer", gpus=2, annotations={
        "firedrill.dev/workload": "training", "firedrill.dev/step-seconds": "0.05"}))
    bind(v1, "trainer", "gpu-node-1", "team-a")
    wait_until(lambda: running(v1, "trainer", "team-a"), 20, "the pod to run")
    out = kubectl("get", "pods", "-A", "-o", "wide")
    line = next(line for line in out.splitlines() if "trainer" in line)
    assert line.split()[:3] == ["team-a", "trainer", "1/1"] and "Running" in line and "gpu-node-1" in line
    assert "2" in kubectl("get", "nodes").split("gpu-node-1", 1)[1].split()[:3]
    wait_until(lambda: "step=" in kubectl("logs", "-n", "team-a", "trainer"), 20, "step lines in the log")


def test_get_podgroups(kubectl, cluster: Cluster) -> None:
    custom = client.CustomObjectsApi(api_client(cluster))
    custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", "default", "podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "pg-train"}, "spec": {"minMember": 4, "queue": "default"}})
    out = kubectl("get", "podgroups")
    assert out.splitlines()[0].split()[:3] == ["NAME", "PHASE", "MINMEMBER"]
    assert out.splitlines()[1].split()[:3] == ["pg-train", "Pending", "4"]
    assert "pg-train" in kubectl("get", "pg")


def test_cordon_and_uncordon(kubectl, v1: client.CoreV1Api) -> None:
    kubectl("cordon", "gpu-node-0")
    assert v1.read_node("gpu-node-0").spec.unschedulable is True
    assert "SchedulingDisabled" in kubectl("get", "node", "gpu-node-0")
    kubectl("uncordon", "gpu-node-0")
    assert not v1.read_node("gpu-node-0").spec.unschedulable


def test_delete_pod_waits_for_the_agent_to_stop_it(kubectl, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod_manifest("doomed"))
    bind(v1, "doomed", "gpu-node-0")
    wait_until(lambda: running(v1, "doomed"), 20, "the pod to run")
    out = kubectl("delete", "pod", "doomed", timeout=60)
    assert 'pod "doomed" deleted' in out
    assert "doomed" not in [p.metadata.name for p in v1.list_namespaced_pod("default").items]


def test_get_pods_watch_prints_a_change(kubectl, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod_manifest("watched"))
    proc = subprocess.Popen([*kubectl.argv, "get", "pods", "-w"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        wait_until(lambda: any("watched" in line for line in lines), 20, "the initial listing")
        bind(v1, "watched", "gpu-node-1")
        wait_until(lambda: any("watched" in line and "Running" in line for line in lines), 20,
                   "kubectl -w to print the pod Running")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        t.join(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()
