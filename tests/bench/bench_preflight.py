"""What the harness's own checks cost on a large cluster: pre-flight, free capacity, blast radius (issue 29).

Before a drill moves anything the harness lists every Node and Pod, looks for damage already there
(:func:`drills.target.safety.require_preflight`), counts the free GPUs of each usable node
(:func:`drills.target.capacity.free_gpus_per_node`, what the gang and leak drills plan with) and checks that the
node it is about to pull is within the profile's blast radius (:func:`drills.target.safety.check_blast_radius`).
The promise: all three over 5,000 nodes take under a second.

Run on demand (not part of the test suite), from the repository root:

    python tests/bench/bench_preflight.py                     # 5,000 nodes, 20,000 pods, 7 rounds, both servers
    python tests/bench/bench_preflight.py --nodes 500 --pods 2000 --rounds 3
    python tests/bench/bench_preflight.py --server kube-apiserver

The cluster is an API server alone (no controllers, no agents: nothing changes while it is measured), filled
through its HTTP API with Ready GPU nodes of 8 GPUs carrying the reference profile's allow label and pods of 2
GPUs bound to them; ``--server`` (repeatable) picks which: ``reference`` (the reference API server) and
``kube-apiserver`` (kube-apiserver v1.37.2 and etcd from ``tests/realk8s/build.sh``'s cache, as
``bench_side_by_side.py`` starts them; the cluster users run, serving lists from its watch cache). On
kube-apiserver the pods stay Pending (only a kubelet writes a Running phase), which every check counts as a
running pod would: bound, not terminal, holding its GPUs. Each round times, through the same ``KubeDriver`` a
run uses:

- **pre-flight**: ``Target.preflight`` as a run calls it: every Node, every pod's metadata alone
  (``PartialObjectMetadataList``), the pods being deleted in full, and :func:`require_preflight` over them;
- **free capacity**: :func:`free_gpus_per_node` (every Node and every pod in full: their GPU limits);
- **blast radius**: every Node, and :func:`check_blast_radius` of one node against them, as a pull does;
- **full lists** (for comparison, not in the sum): ``GET /api/v1/nodes`` and ``GET /api/v1/pods``.

It prints the median and the slowest round of each, and of the sum, per server; exit status 1 when a server's
median sum is a second or more.
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
from drills.target.safety import check_blast_radius

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # tests.bench lives in the repository, not in the installed packages
    sys.path.insert(0, str(ROOT))

from tests.bench.bench_side_by_side import (  # noqa: E402
    BUILD_SCRIPT, NO_BINARIES_EXIT, Backend, Server, real_bin_dir, start)

SERVERS = {"reference": Backend.REFERENCE, "kube-apiserver": Backend.REAL}

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


def fill(server: Server, nodes: int, pods: int, allow: tuple[str, str]) -> None:
    """Create the nodes (with their status) and the bound pods, 8 writers at a time, each its own client."""
    names = [f"gpu-{i:05d}" for i in range(nodes)]

    def create_nodes(first: int) -> None:
        with server.client() as http:
            for name in names[first:first + 500]:
                body = node(name, allow)
                made = http.post("/api/v1/nodes", json=body)
                made.raise_for_status()
                stored = http.put(f"/api/v1/nodes/{name}/status", json=made.json() | {"status": body["status"]})
                stored.raise_for_status()
                if stored.json()["spec"].get("taints"):  # kube-apiserver's TaintNodesByCondition admission marks a
                    # new node not-ready; with no controller-manager here to lift it, the bench does
                    http.put(f"/api/v1/nodes/{name}", json=stored.json() | {"spec": {}}).raise_for_status()

    def create_pods(first: int) -> None:
        with server.client() as http:
            for i in range(first, min(first + 500, pods)):
                http.post("/api/v1/namespaces/default/pods",
                          json=pod(f"p{i:06d}", names[i % nodes])).raise_for_status()

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create_nodes, range(0, nodes, 500)))
        list(pool.map(create_pods, range(0, pods, 500)))
    print(f"  filled {nodes} nodes and {pods} pods in {time.monotonic() - started:.0f} s", flush=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


STEPS = ("pre-flight", "free capacity", "blast radius", "all", "full lists")


def measure(server: Server, args: argparse.Namespace) -> dict[str, list[float]]:
    """Fill ``server`` and time each check as a run makes it, its own reads included, ``args.rounds`` times
    (seconds per step, one value per round); ``full lists`` (not in ``all``) is one full list of the nodes and of
    the pods, for comparison."""
    profile = reference_profile()
    allow = (profile.safety.allow_label_key, profile.safety.allow_label_value)
    fill(server, args.nodes, args.pods, allow)
    driver = KubeDriver.connect(server.kubeconfig, timeline=Timeline())
    target = Target(driver, profile)
    rows: dict[str, list[float]] = {k: [] for k in STEPS}
    try:
        for _ in range(args.rounds):
            t_pre, _ = timed(target.preflight)
            assert target.warnings == [], target.warnings[:3]
            t_free, free = timed(lambda: free_gpus_per_node(target))
            assert len(free) == args.nodes and sum(free.values()) == args.nodes * GPUS_PER_NODE - args.pods * 2
            t_blast, radius = timed(lambda: check_blast_radius(
                [{"metadata": {"name": "gpu-00000"}}], driver.list(NODE), profile.safety, profile.gpu_resource))
            assert radius.total_gpus == args.nodes * GPUS_PER_NODE
            t_list, (nodes, pods) = timed(lambda: (driver.list(NODE), driver.list(POD)))
            assert len(nodes) == args.nodes and len(pods) == args.pods, (len(nodes), len(pods))
            for key, value in zip(STEPS, (t_pre, t_free, t_blast, t_pre + t_free + t_blast, t_list)):
                rows[key].append(value)
    finally:
        driver.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--server", choices=list(SERVERS), action="append",
                   help="reference or kube-apiserver (repeatable; default: both)")
    args = p.parse_args(argv)
    chosen = [SERVERS[v] for v in args.server or SERVERS]
    bins = real_bin_dir() if Backend.REAL in chosen else None
    if Backend.REAL in chosen and bins is None:
        print(f"kube-apiserver is not built: run bash {BUILD_SCRIPT} first", file=sys.stderr)
        return NO_BINARIES_EXIT
    results: dict[Backend, dict[str, list[float]]] = {}
    for backend in chosen:
        with tempfile.TemporaryDirectory(prefix="bench-preflight-") as tmp:
            print(f"{backend.value}:", flush=True)
            server = start(backend, Path(tmp), bins or Path(tmp))
            try:
                results[backend] = measure(server, args)
            finally:
                server.stop()
    print(f"{args.nodes} nodes, {args.pods} pods, {args.rounds} rounds (milliseconds, median / slowest)")
    print(f"{'':16}" + "".join(f" {b.value:>24}" for b in results))
    for key in STEPS:
        print(f"{key:16}" + "".join(f" {statistics.median(r[key]) * 1e3:>14.0f} / {max(r[key]) * 1e3:>7.0f}"
                                    for r in results.values()))
    ok = True
    for backend, rows in results.items():
        total = statistics.median(rows["all"])
        ok &= total < BUDGET_S
        print(f"budget on {backend.value}: under {BUDGET_S:g} s together: "
              f"{'met' if total < BUDGET_S else 'MISSED'} ({total:.2f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
