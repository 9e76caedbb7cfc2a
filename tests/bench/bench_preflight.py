"""What the harness's own checks cost on a large cluster: pre-flight, free capacity, blast radius (issue 29).

Before a drill moves anything the harness lists every Node and Pod, looks for damage already there
(:func:`drills.target.safety.require_preflight`), counts the free GPUs of each usable node
(:func:`drills.target.capacity.free_gpus_per_node`, what the gang and leak drills plan with) and checks that the
node it is about to pull is within the profile's blast radius (:func:`drills.target.safety.check_blast_radius`).
The promise: all three over 5,000 nodes take under a second.

Run on demand (not part of the test suite), from the repository root:

    python tests/bench/bench_preflight.py                     # 5,000 nodes, 20,000 pods, 7 rounds
    python tests/bench/bench_preflight.py --nodes 500 --pods 2000 --rounds 3

The cluster is the reference API server alone (no controllers, no agents: nothing changes while it is
measured), filled through its HTTP API with Ready GPU nodes of 8 GPUs carrying the reference profile's allow
label and Running pods of 2 GPUs bound to them. Each round times, through the same ``KubeDriver`` a run uses:

- **list**: ``GET /api/v1/nodes`` and ``GET /api/v1/pods`` (what the pre-flight reads);
- **pre-flight**: :func:`require_preflight` over those lists;
- **free capacity**: :func:`free_gpus_per_node` (it lists both again, as a drill does);
- **blast radius**: :func:`check_blast_radius` of one node against all of them.

It prints the median and the slowest round of each, and of the sum; exit status 1 when the median sum is a
second or more.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from drills.kube.driver import NODE, POD, KubeDriver
from drills.kube.timeline import Timeline
from drills.target.capacity import free_gpus_per_node
from drills.target.connect import Target
from drills.target.profile import reference_profile
from drills.target.safety import check_blast_radius, require_preflight
from refplatform.cluster import Cluster, ClusterSpec

BUDGET_S = 1.0
"""Issue 29: pre-flight, the free-capacity count and the blast-radius check over 5,000 nodes, together."""
GPUS_PER_NODE = 8
GPUS_PER_POD = 2


def node(name: str, allow: tuple[str, str]) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": str(GPUS_PER_NODE), "cpu": "96", "memory": "1Ti"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {allow[0]: allow[1], "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                  "kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"capacity": gpus, "allocatable": gpus,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}


def pod(name: str, node_name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "bench"}},
            "spec": {"nodeName": node_name,
                     "containers": [{"name": "main", "image": "firedrill/canary:1",
                                     "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_POD)}}}]},
            "status": {"phase": "Running"}}


def fill(cluster: Cluster, nodes: int, pods: int, allow: tuple[str, str]) -> None:
    """Create the nodes (with their status) and the bound pods, 8 writers at a time."""
    names = [f"gpu-{i:05d}" for i in range(nodes)]

    def create_node(name: str) -> None:
        with cluster.http_client(timeout=60) as http:
            body = node(name, allow)
            http.post("/api/v1/nodes", json=body).raise_for_status()
            http.put(f"/api/v1/nodes/{name}/status", json=http.get(f"/api/v1/nodes/{name}").json()
                     | {"status": body["status"]}).raise_for_status()

    def create_pods(first: int) -> None:
        with cluster.http_client(timeout=60) as http:
            for i in range(first, min(first + 500, pods)):
                http.post("/api/v1/namespaces/default/pods",
                          json=pod(f"p{i:06d}", names[i % nodes])).raise_for_status()

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create_node, names))
        list(pool.map(create_pods, range(0, pods, 500)))
    print(f"filled {nodes} nodes and {pods} pods in {time.monotonic() - started:.0f} s", flush=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    profile = reference_profile()
    allow = (profile.safety.allow_label_key, profile.safety.allow_label_value)
    with tempfile.TemporaryDirectory(prefix="bench-preflight-") as tmp:
        cluster = Cluster(ClusterSpec(Path(tmp), nodes=0))
        cluster.start_server()
        try:
            fill(cluster, args.nodes, args.pods, allow)
            driver = KubeDriver.connect(cluster.kubeconfig, timeline=Timeline())
            target = Target(driver, profile)
            rows: dict[str, list[float]] = {k: [] for k in ("list", "pre-flight", "free capacity", "blast radius",
                                                            "all")}
            for _ in range(args.rounds):
                t_list, (nodes, pods) = timed(lambda: (driver.list(NODE), driver.list(POD)))
                assert len(nodes) == args.nodes and len(pods) == args.pods, (len(nodes), len(pods))
                t_pre, problems = timed(lambda: require_preflight(nodes, pods, profile.safety,
                                                                  gpu_resource=profile.gpu_resource))
                assert problems == [], problems[:3]
                t_free, free = timed(lambda: free_gpus_per_node(target))
                assert len(free) == args.nodes and sum(free.values()) == args.nodes * GPUS_PER_NODE - args.pods * 2
                t_blast, radius = timed(lambda: check_blast_radius(nodes[:1], nodes, profile.safety,
                                                                   profile.gpu_resource))
                assert radius.total_gpus == args.nodes * GPUS_PER_NODE
                for key, value in zip(rows, (t_list, t_pre, t_free, t_blast, t_list + t_pre + t_free + t_blast)):
                    rows[key].append(value)
            driver.close()
        finally:
            cluster.stop()
    print(f"{args.nodes} nodes, {args.pods} pods, {args.rounds} rounds (milliseconds)")
    print(f"{'':16} {'median':>8} {'slowest':>8}")
    for key, values in rows.items():
        print(f"{key:16} {statistics.median(values) * 1e3:8.0f} {max(values) * 1e3:8.0f}")
    total = statistics.median(rows["all"])
    print(f"budget: under {BUDGET_S:g} s together: {'met' if total < BUDGET_S else 'MISSED'} ({total:.2f} s)")
    return 0 if total < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
