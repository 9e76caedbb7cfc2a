"""KWOK's fake GPU nodes beside the refplatform agents: the real-cluster tests at the size users run (issue 29).

``build_kwok.sh`` (the ``kwok_dir`` fixture) builds ``sigs.k8s.io/kwok``'s controller from the Go module proxy;
:func:`start_fleet` points it, with the release's own fast Stages, at a :class:`~tests.realk8s.cluster.RealCluster`
and registers ``count`` Nodes that it keeps alive (their Ready condition and Lease heartbeats) and whose bound
pods it reports Running, with no process behind them; :func:`fleet_beside` does so for a cluster of agents and
stops all of it on the way out.
Each fake node looks like a GPU node of the cluster: ``nvidia.com/gpu`` capacity and GPU Feature Discovery
labels, and ``load_per_node`` pods of 4 GPUs bound to it (a busy cluster, so every list the harness makes is as
long as on a real one). What keeps the drills on the real agents, whose canary processes are the truth a drill
measures (DESIGN.md), is the taint KWOK's own docs give fake nodes, ``kwok.x-k8s.io/node=fake:NoSchedule``: the
canary's ranks do not tolerate it, and the harness's free-capacity count skips a node whose taints repel them.

KWOK runs as a process of its own (its log in ``WORK/kwok.log``), with the cluster's admin kubeconfig; it manages
only the nodes annotated ``kwok.x-k8s.io/node=fake`` (``--manage-all-nodes=false``), never the agents' nodes.
Nothing here is imported by ``drills`` or ``refplatform``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.rest import ApiException

from refplatform.cluster import ManagedProcess
from tests.realk8s.agents import RefAgents
from tests.realk8s.cluster import RealCluster, RealClusterError
from tests.realk8s.standin import api_client, wait_for

FAKE = "kwok.x-k8s.io/node"
FAKE_TAINT = {"key": FAKE, "value": "fake", "effect": "NoSchedule"}
LOAD_NAMESPACE = "kwok-load"
LEASE_SECONDS = 40
"""KWOK's ``--node-lease-duration-seconds``: a kubelet's default, renewed every quarter of it (10 s), so
1,000 fake nodes write 100 Leases a second. The cluster's ``--node-monitor-grace-period`` must exceed the
renewal interval: :data:`NODE_MONITOR_GRACE_PERIOD_S` (upstream's default), not the tests' tuned 6 s, under
which fake nodes flip unreachable between renewals and their pods are evicted."""
NODE_MONITOR_GRACE_PERIOD_S = 50.0
PULL_WINDOWS = {"detects the failure within {} seconds": 120,
                "off the failed node within {} seconds of detection": 60,
                "runs again on healthy nodes within {} seconds of eviction": 120,
                "the whole recovery takes at most {} seconds": 300,
                "back in service within {} seconds": 120}
"""Node pull's windows on :data:`NODE_MONITOR_GRACE_PERIOD_S`: detection alone takes about that long."""
CONTROLLER_MANAGER_ARGS = ("--kube-api-qps=300", "--kube-api-burst=600")
"""kube-controller-manager's client rate limits as large clusters raise them: at the default 20 requests a
second its node lifecycle controller lifts the not-ready taint of about 5 registering nodes a second (200 s
for 1,000 nodes, every one of which the harness's pre-flight rightly counts as degraded until then)."""
GPUS_PER_NODE = 8
GPUS_PER_LOAD_POD = 4
WRITERS = 8
"""Client threads creating the fleet (kube-apiserver's default client QPS limits do not apply: one client each)."""


def fake_node(name: str) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": str(GPUS_PER_NODE), "cpu": "96", "memory": "1Ti", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {FAKE: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok",
                                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}},
            "spec": {"taints": [FAKE_TAINT]},
            "status": {"capacity": gpus, "allocatable": gpus}}


def load_pod(name: str, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": LOAD_NAMESPACE,
                                                           "labels": {"app": "kwok-load"}},
            "spec": {"nodeName": node, "automountServiceAccountToken": False,
                     "tolerations": [{"key": FAKE, "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "train", "image": "training:1",
                                     "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_LOAD_POD)}}}]}}


@dataclass
class Fleet:
    """The KWOK process and the fake nodes it keeps alive."""

    process: ManagedProcess
    nodes: list[str]
    load_pods: int
    seconds_to_ready: float

    def stop(self) -> None:
        self.process.stop()


def start_fleet(kwok_dir: Path, cluster: RealCluster, work: Path, count: int, *, load_per_node: int = 1,
                ready_timeout: float = 300.0, nice: int = 0) -> Fleet:
    """Start KWOK (``kwok_dir``: the ``kwok_dir`` fixture) against ``cluster`` and register ``count`` fake GPU nodes
    (``kwok-node-00000``...), each with ``load_per_node`` Running pods (0: every GPU free); returns once every fake
    node is Ready and every load pod Running.  ``nice``: run KWOK that many steps nicer (a benchmark on a shared
    machine, where the fleet stands in for other machines)."""
    work.mkdir(parents=True, exist_ok=True)
    process = ManagedProcess.spawn("kwok", [
        *(("nice", "-n", str(nice)) if nice else ()),
        str(kwok_dir / "bin" / "kwok"), f"--config={kwok_dir / 'stages.yaml'}",
        "--kubeconfig", str(cluster.admin_kubeconfig), "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={FAKE}=fake", "--cidr=10.250.0.1/16",
        "--node-ip=127.0.0.1", f"--node-lease-duration-seconds={LEASE_SECONDS}"], work / "kwok.log")
    started = time.monotonic()
    names = [f"kwok-node-{i:05d}" for i in range(count)]
    api = api_client(cluster.url, cluster.ca_file, cluster.admin_token)
    try:
        core = client.CoreV1Api(api)

        def create(body: dict[str, Any], namespace: str | None = None) -> None:
            for attempt in range(5):
                try:
                    if namespace is None:
                        core.create_node(body)
                    else:
                        core.create_namespaced_pod(namespace, body)
                    return
                except ApiException as exc:
                    if exc.status == 409:
                        return
                    if exc.status not in (429, 500, 503) or attempt == 4:
                        raise
                    time.sleep(0.2 * (attempt + 1))

        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(lambda n: create(fake_node(n)), names))
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LOAD_NAMESPACE}})
            wait_for(lambda: any(sa.metadata.name == "default"
                                 for sa in core.list_namespaced_service_account(LOAD_NAMESPACE).items),
                     60, f"the service-account controller to create {LOAD_NAMESPACE}/default")
            pods = [(f"load-{i:05d}-{j}", name) for i, name in enumerate(names) for j in range(load_per_node)]
            list(pool.map(lambda p: create(load_pod(*p), LOAD_NAMESPACE), pods))

        def fleet_ready() -> bool:
            if not process.alive():
                raise RealClusterError(f"kwok exited ({process.popen.returncode}):\n{process.tail()}")
            # Ready, and the node lifecycle controller has lifted the not-ready taint it put on at registration
            # (the harness's pre-flight rightly refuses a cluster whose nodes still carry it)
            ready = sum(1 for n in core.list_node(label_selector="type=kwok").items
                        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                        and not any(t.key.startswith("node.kubernetes.io/") for t in n.spec.taints or []))
            running = sum(1 for p in core.list_namespaced_pod(LOAD_NAMESPACE).items if p.status.phase == "Running")
            return ready == count and running == len(pods)
        wait_for(fleet_ready, ready_timeout,
                 f"{count} KWOK nodes Ready and untainted and {len(pods)} load pods Running")
    except BaseException:
        process.stop()
        raise
    finally:
        api.close()
    return Fleet(process, names, len(pods), time.monotonic() - started)


class WithAgents(Protocol):
    """A started cluster of refplatform agents (the gang, governance and node-pull tests' clusters)."""

    cluster: RealCluster
    agents: RefAgents


@contextmanager
def fleet_beside(made: WithAgents, kwok_dir: Path, work: Path, count: int) -> Iterator[Fleet]:
    """``count`` fake nodes beside ``made``'s agents; stops all of it (fleet, agents, control plane) on the way out,
    the cluster too when the fleet cannot start."""
    try:
        fleet = start_fleet(kwok_dir, made.cluster, work / "kwok", count)
        try:
            yield fleet
        finally:
            fleet.stop()
    finally:
        made.agents.close()
        made.cluster.stop()


def node_counts(kubeconfig: Path) -> dict[str, int]:
    """How many nodes the cluster lists, and how many are fake (``kubectl get nodes -o json``)."""
    out = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "json"],
                         capture_output=True, text=True, check=True, timeout=120)
    items = json.loads(out.stdout)["items"]
    fake = sum(1 for n in items if (n["metadata"].get("annotations") or {}).get(FAKE) == "fake")
    return {"nodes": len(items), "fake": fake}
