"""kubectl as users type it, no extra flags, against a started reference cluster (issue 13, item 4).

The cluster runs the scheduler, so ``kubectl run`` pods are bound and their
containers (with ``command``) run as real processes on the reference agents.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.integration.kube import api_client

pytestmark = [pytest.mark.integration, pytest.mark.kubectl]

KUBECTL = shutil.which("kubectl")
if KUBECTL is None:
    pytest.skip("kubectl is not installed (.ci/run installs it)", allow_module_level=True)

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:1
    command: [sh, -c, "sleep 600"]
    env: [{name: A, value: "1"}]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(ClusterSpec(tmp_path_factory.mktemp("kubectl-typed"), nodes=2, heartbeat=0.5,
                            controllers=("scheduler",)))
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

    def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "--cache-dir", str(cache), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc
    return run


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "pod-v2.yaml").write_text(POD.replace("busybox:1", "busybox:2").replace("app: web", "app: web, tier: a"))
    (tmp_path / "bad.yaml").write_text(POD.replace("name: web", "name: bad").replace("    env:", "    imagee: x\n    env:"))
    return tmp_path


def requests(log: str) -> list[str]:
    """'GET /path' lines of a kubectl -v=6 log."""
    out = []
    for line in log.splitlines():
        if "round_trippers.go" in line and " https://" in line:
            method, url = line.split("] ", 1)[1].split()[:2]
            out.append(f"{method} {url.split('://', 1)[1].split('/', 1)[1].split('?')[0]}")
    return out


def test_create_namespace_is_sent_as_protobuf(kubectl, v1: client.CoreV1Api) -> None:
    proc = kubectl("create", "namespace", "team-x", "-v=8")
    assert "namespace/team-x created" in proc.stdout
    assert "Content-Type: application/vnd.kubernetes.protobuf" in proc.stderr
    assert v1.read_namespace("team-x").status.phase == "Active"
    kubectl("delete", "namespace", "team-x")
    with pytest.raises(ApiException) as err:
        v1.read_namespace("team-x")
    assert err.value.status == 404


def test_create_f_validates_through_openapi_v3_and_the_server(kubectl, manifests: Path,
                                                               v1: client.CoreV1Api) -> None:
    proc = kubectl("create", "-f", str(manifests / "pod.yaml"), "-v=6")
    assert "pod/web created" in proc.stdout
    seen = requests(proc.stderr)
    assert "GET openapi/v3" in seen and "GET openapi/v3/api/v1" in seen
    assert not any("openapi/v2" in r for r in seen)
    bad = kubectl("create", "-f", str(manifests / "bad.yaml"), check=False)
    assert bad.returncode == 1
    assert 'strict decoding error: unknown field "spec.containers[0].imagee"' in bad.stderr
    assert "bad" not in [p.metadata.name for p in v1.list_namespaced_pod("default").items]
    kubectl("delete", "-f", str(manifests / "pod.yaml"))


def test_apply_twice_patches_with_the_advertised_merge_keys(kubectl, manifests: Path,
                                                            v1: client.CoreV1Api) -> None:
    assert "pod/web created" in kubectl("apply", "-f", str(manifests / "pod.yaml")).stdout
    proc = kubectl("apply", "-f", str(manifests / "pod-v2.yaml"), "-v=8")
    assert "pod/web configured" in proc.stdout
    assert "Content-Type: application/strategic-merge-patch+json" in proc.stderr
    assert "$setElementOrder/containers" in proc.stderr  # kubectl merged by name, as the OpenAPI said
    pod = v1.read_namespaced_pod("web", "default")
    assert pod.spec.containers[0].image == "busybox:2"
    assert pod.metadata.labels == {"app": "web", "tier": "a"}
    assert [(e.name, e.value) for e in pod.spec.containers[0].env] == [("A", "1")]
    assert "pod/web unchanged" in kubectl("apply", "-f", str(manifests / "pod-v2.yaml")).stdout
    out = kubectl("delete", "-f", str(manifests / "pod-v2.yaml"), timeout=90).stdout
    assert 'pod "web" deleted' in out
    assert "web" not in [p.metadata.name for p in v1.list_namespaced_pod("default").items]


def test_apply_custom_resource_uses_a_merge_patch(kubectl, tmp_path: Path, cluster: Cluster) -> None:
    pg = tmp_path / "pg.yaml"
    pg.write_text("apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: pg-a}\n"
                  "spec: {minMember: 2}\n")
    kubectl("apply", "-f", str(pg))
    pg.write_text(pg.read_text().replace("minMember: 2", "minMember: 3"))
    proc = kubectl("apply", "-f", str(pg), "-v=8")
    assert "podgroup.scheduling.volcano.sh/pg-a configured" in proc.stdout
    assert "Content-Type: application/merge-patch+json" in proc.stderr
    custom = client.CustomObjectsApi(api_client(cluster))
    got = custom.get_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", "default", "podgroups", "pg-a")
    assert got["spec"]["minMember"] == 3


def test_explain(kubectl) -> None:
    pod = kubectl("explain", "pod").stdout
    assert "KIND:       Pod" in pod and "spec\t<PodSpec>" in pod and "metadata\t<ObjectMeta>" in pod
    containers = kubectl("explain", "pod.spec.containers").stdout
    assert "FIELD: containers <[]Container>" in containers
    assert "name\t<string> -required-" in containers and "resources\t<ResourceRequirements>" in containers
    assert "minMember\t<integer>" in kubectl("explain", "podgroup.spec").stdout
    assert "<map[string]Quantity>" in kubectl("explain", "node.status.capacity").stdout


def test_run_logs_delete(kubectl, v1: client.CoreV1Api) -> None:
    out = kubectl("run", "printer", "--image=busybox", "--restart=Never", "--command", "--",
                  "sh", "-c", "for i in 1 2 3; do echo line $i; done").stdout
    assert "pod/printer created" in out
    wait_until(lambda: v1.read_namespaced_pod("printer", "default").status.phase == "Succeeded", 30,
               "the pod's command to run to completion on an agent")
    assert kubectl("logs", "printer").stdout == "line 1\nline 2\nline 3\n"
    assert 'pod "printer" deleted' in kubectl("delete", "pod", "printer").stdout
    wait_until(lambda: "printer" not in [p.metadata.name for p in v1.list_namespaced_pod("default").items], 30,
               "the pod to be gone")
