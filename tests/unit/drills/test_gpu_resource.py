"""The profile's ``gpu_resource`` on a real cluster's path: the node-pull blast radius counts it (a MIG mixed cluster
advertises ``nvidia.com/mig-1g.10gb``, no ``nvidia.com/gpu``), and the free-capacity count and the canary's pods
agree on a node tainted ``<gpu_resource>:NoSchedule`` (the taint ExtendedResourceToleration lets such pods past).

The drills read the cluster through the real KubeDriver, here from a loopback HTTP server that answers the node
and pod lists (nothing else: any other request gets a 404, and the server keeps what it was asked)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from drills.kinds.nodepull.drill import NodePullDrill
from drills.kube.driver import KubeDriver
from drills.kube.flavors import GangFlavor, VolcanoForm, gang_manifests, indexed_job
from drills.records.verdict import DrillResult
from drills.target.capacity import free_gpus_per_node
from drills.target.connect import Target
from drills.target.profile import FaultMethod, FaultSettings, SafetySettings, reference_profile
from drills.target.safety import SafetyError
from drills.workloads.canaryjob import CanaryForm, CanaryTraining, canary_job_spec

MIG = "nvidia.com/mig-1g.10gb"
ALLOW = {"firedrill.dev/chaos": "allowed"}
PROFILE = replace(reference_profile(), name="mig-cluster", gpu_resource=MIG,
                  fault=FaultSettings(FaultMethod.DELETE_NODE), safety=SafetySettings())  # max 25% of the GPUs


def node(name: str, slices: int = 7, *, taints: list[dict[str, str]] | None = None,
         unschedulable: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": dict(ALLOW)}, "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "capacity": {"cpu": "64", MIG: str(slices)}, "allocatable": {"cpu": "63", MIG: str(slices)}}}


def pod(name: str, node_name: str, slices: int, rank: int | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if rank is not None:
        meta["annotations"] = {"firedrill.dev/rank": str(rank)}
    return {"metadata": meta, "status": {"phase": "Running"},
            "spec": {"nodeName": node_name, "containers": [{"name": "worker",
                                                             "resources": {"limits": {MIG: str(slices)}}}]}}


@dataclass
class Cluster:
    """A loopback server answering ``GET /api/v1/nodes`` and ``GET /api/v1/pods`` with these lists."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)


@pytest.fixture()
def target() -> Iterator[Callable[[Cluster], Target]]:
    opened: list[tuple[ThreadingHTTPServer, threading.Thread, KubeDriver]] = []

    def start(cluster: Cluster) -> Target:
        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                cluster.asked.append(f"{self.command} {self.path}")
                items = {"/api/v1/nodes": cluster.nodes, "/api/v1/pods": cluster.pods}.get(urlsplit(self.path).path)
                body = json.dumps({"kind": "List", "items": items} if items is not None else
                                  {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not here"})
                self.send_response(200 if items is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            do_GET = do_DELETE = do_POST = do_PATCH = _answer  # noqa: N815 - http.server's names

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        driver = KubeDriver(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")),
                            attempts=1)
        opened.append((server, thread, driver))
        return Target(driver, PROFILE)

    yield start
    for server, thread, driver in opened:
        driver.close()
        server.shutdown()
        server.server_close()
        thread.join(5)


# --- node pull: the blast radius in the profile's resource -------------------------------------------------


def test_node_pull_refuses_a_node_holding_too_large_a_share_of_the_mig_slices(
        target: Callable[[Cluster], Target]) -> None:
    """Two 7-slice MIG nodes: pulling one removes 50% of the cluster's GPUs, over the 25% cap. Counted in
    nvidia.com/gpu it would remove 0 of 0, and the node would be pulled."""
    cluster = Cluster(nodes=[node("mig-0"), node("mig-1")], pods=[pod("canary-worker-0", "mig-0", 1, rank=0)])
    drill = NodePullDrill(target(cluster), DrillResult("node-pull"), "run1")
    drill.spec = canary_job_spec("canary-run1", "run1", PROFILE, CanaryTraining(1, 1, 5),
                                 form=CanaryForm.INDEXED_JOB)
    drill.pods = {p["metadata"]["name"]: p for p in cluster.pods}
    with pytest.raises(SafetyError, match=r"holding 7 of 14 GPUs \(50.0%\).*nvidia.com/mig-1g.10gb capacity"):
        drill.pull(0, FaultMethod.DELETE_NODE)
    assert drill.pulled is None and cluster.asked == ["GET /api/v1/nodes"]  # nothing was touched


# --- free capacity and the GPU resource's NoSchedule taint -------------------------------------------------


def test_a_node_tainted_with_the_gpu_resource_counts_as_free_capacity(target: Callable[[Cluster], Target]) -> None:
    """The drill's pods request the MIG resource and tolerate its NoSchedule taint (as ExtendedResourceToleration
    would make them); every other NoSchedule or NoExecute taint still keeps a node out of the count."""
    cluster = Cluster(nodes=[
        node("plain"),
        node("gpu-tainted", taints=[{"key": MIG, "value": "present", "effect": "NoSchedule"}]),
        node("gpu-noexecute", taints=[{"key": MIG, "value": "present", "effect": "NoExecute"}]),
        node("other-resource", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
        node("dedicated", taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]),
        node("both", taints=[{"key": MIG, "effect": "NoSchedule"}, {"key": "dedicated", "effect": "NoSchedule"}]),
        node("prefer", taints=[{"key": "dedicated", "effect": "PreferNoSchedule"}]),
        node("cordoned", taints=[{"key": MIG, "effect": "NoSchedule"}], unschedulable=True),
    ], pods=[pod("busy", "gpu-tainted", 3)])
    assert free_gpus_per_node(target(cluster)) == {"plain": 7, "gpu-tainted": 4, "prefer": 7}


@pytest.mark.parametrize(("flavor", "render"), [
    (GangFlavor.VOLCANO, lambda s: gang_manifests(s, GangFlavor.VOLCANO, VolcanoForm.JOB)[0]["spec"]["tasks"][0]
     ["template"]["spec"]),
    (GangFlavor.KUEUE, lambda s: indexed_job(s, GangFlavor.KUEUE)["spec"]["template"]["spec"]),
    (GangFlavor.NATIVE, lambda s: [m for m in gang_manifests(s, GangFlavor.NATIVE, VolcanoForm.PODGROUP)
                                   if m["kind"] == "Pod"][0]["spec"]),
])
def test_the_canarys_ranks_tolerate_their_gpu_resources_noschedule_taint(
        flavor: GangFlavor, render: Callable[[Any], dict[str, Any]]) -> None:
    """What the count assumes, written in every form the canary runs as, so it holds on a cluster without the
    admission plugin too; a rank that requests no GPU gets no toleration (the plugin would give it none)."""
    profile = replace(PROFILE, flavor=flavor)
    form = CanaryForm.VOLCANO_JOB if flavor is GangFlavor.VOLCANO else \
        CanaryForm.INDEXED_JOB if flavor is GangFlavor.KUEUE else CanaryForm.GANG_PODS
    with_gpus = render(canary_job_spec("c", "r", profile, CanaryTraining(2, 1, 5), form=form))
    assert with_gpus["tolerations"] == [{"key": MIG, "operator": "Exists", "effect": "NoSchedule"}]
    without = render(canary_job_spec("c", "r", profile, CanaryTraining(2, 0, 5), form=form))
    assert "tolerations" not in without
