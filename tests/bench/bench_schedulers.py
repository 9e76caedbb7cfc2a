"""Side by side, in one run: the reference platform's scheduler and upstream kube-scheduler's native gang
scheduling placing the same gangs among 1,000 nodes of 8 GPUs (issue 29, item 3).

Run on demand (not part of the test suite), from the repository root, once ``tests/realk8s/build.sh`` and
``tests/realk8s/build_kwok.sh`` (and, for Kueue, ``build_kueue.sh``) have built or find cached the binaries:

    nice -n 15 python tests/bench/bench_schedulers.py                    # 1,000 nodes, 10,000 pods, 3 rounds
    nice -n 15 python tests/bench/bench_schedulers.py --quick            # 50 nodes, 400 pods, 1 round (smoke)
    nice -n 15 python tests/bench/bench_schedulers.py --nodes 50 --pods 400 --rounds 1 --only upstream
    nice -n 15 python tests/bench/bench_schedulers.py --only reference --only upstream --only kueue

The sides, each started from scratch for every round on this machine (the order rotates between rounds):

- **reference**: ``bench_e2e_scheduling.py``'s round: the reference API server, its scheduler (the controllers
  process, gang profile) and a hollow fleet (``refplatform.hollow``: a real Node and Lease per node, 10 s
  heartbeats, pods reported Running through ``pods/status``); each gang a ``scheduling.volcano.sh/v1beta1``
  PodGroup (minMember = the gang size) and its pods.
- **upstream**: etcd, kube-apiserver, kube-controller-manager and kube-scheduler v1.37.2
  (``tests/realk8s/cluster.py``) with native gang scheduling on, as ``tests/realk8s/test_native_gang.py``'s
  ``start_gang_cluster`` has it: the ``GenericWorkload`` feature gate in all three components and
  ``--runtime-config=scheduling.k8s.io/v1beta1=true``, so kube-scheduler's default profile runs its
  GangScheduling plugin; and KWOK's fake GPU nodes (``tests/realk8s/kwok.py``, Leases renewed every 10 s, bound
  pods made Running by KWOK's stages) with nothing else on them.  Each gang is what the harness's ``native``
  flavor writes (``drills/kube/flavors.py``): a Workload, its PodGroup (``schedulingPolicy.gang.minCount`` = the
  gang size), then pods naming it in ``spec.schedulingGroup``, tolerating KWOK's ``kwok.x-k8s.io/node`` taint.
  kube-scheduler's client rate limits are raised as large clusters raise them, through a
  KubeSchedulerConfiguration file (``clientConnection.qps`` 500, ``burst`` 1,000 by default instead of 50/100:
  ``--scheduler-qps``/``--scheduler-burst``); kube-controller-manager's to 300/600 (``kwok.py``).
- **kueue** (only with ``--only kueue``): the same control plane with the scheduler's gang plugin off
  (``GenericWorkload`` off) and Kueue v0.17.0's manager (``tests/realk8s/kueue.py``, client qps/burst as the
  scheduler's); each gang a Kueue plain-pod group (the ``kueue`` flavor: pods labelled with a LocalQueue whose
  ClusterQueue holds exactly the fleet's GPUs; Kueue's webhook gates them until the whole group is admitted,
  then kube-scheduler places them one by one).  Not run by default: Kueue admits by quota, not by placement,
  so it answers a different question (and adds a process and a webhook call per pod); it is here to be
  measured when asked.

The same workload on every side: ``--pods`` pods in gangs of ``--gang``, created through the API by
``--creators`` client threads (one connection each), each gang's group objects before its pods.  8,000 GPUs
cannot hold 10,000 one-GPU pods, so as many gangs as the GPUs hold ask one ``nvidia.com/gpu`` a pod (1,000 of
1,250 by default: the cluster is full at the end) and the others, spread evenly among them, one CPU a pod; with
``--pods`` at most the GPUs, every pod asks a GPU.  The fleets run ``--nice`` steps nicer than the control
planes (they stand in for other machines; 4 by default, as the reference figures in docs/BENCHMARKS.md).

Measured by the harness, the same code for every side (``sched_measure.py``): its own watch and clock, the
created instant taken before the create is sent; bound pods/s = pods / (last bound - first created); pod
startup = created -> the watch shows Running (p50, p99).  Checked the same way for every side: each pod bound
exactly once and never moved, each gang whole, no node holding more GPUs than it has, every pod Running.
Printed: each round, then the medians side by side with upstream/reference ratios, then one JSON line.  The
budget (``../shared/DESIGN.md``, "Budgets"): the reference binds >= 1.5 x kube-scheduler's pods/s, same machine,
same run.  Exit status 1 when a run is not correct or that budget is missed; 3 when the binaries are not built.
"""

from __future__ import annotations

import argparse
import enum
import json
import math
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # tests.realk8s and tests.bench live in the repository, not in the installed packages
    sys.path.insert(0, str(ROOT))

from drills.kube.flavors import (KUEUE_QUEUE_LABEL, GangFlavor, GangSpec, gang_manifests,  # noqa: E402
                                 queue_manifests)
from refplatform.client import RestClient, resource_path  # noqa: E402
from refplatform.cluster import wait_until  # noqa: E402
from tests.bench.bench_e2e_scheduling import PREFIX, run_round  # noqa: E402
from tests.bench.sched_measure import (NAMESPACE, Gang, Observer, PodToCreate, RoundResult,  # noqa: E402
                                       gpu_gangs, measure, scheduler_probe)
from tests.realk8s.cluster import (LOOPBACK, Component, RealCluster, RealClusterSpec,  # noqa: E402
                                   read_build_info)
from tests.realk8s.conftest import (BUILD_SCRIPT, KUEUE_BUILD_SCRIPT, KWOK_BUILD_SCRIPT,  # noqa: E402
                                    ensure_built)
from tests.realk8s.kueue import MANAGED_LABEL, KueueManager  # noqa: E402
from tests.realk8s.kwok import (CONTROLLER_MANAGER_ARGS, FAKE, GPUS_PER_NODE,  # noqa: E402
                                NODE_MONITOR_GRACE_PERIOD_S, start_fleet)
from tests.realk8s.test_control_plane import kubectl  # noqa: E402

BOUND_RATIO_BUDGET = 1.5
"""The reference's bound pods/s over kube-scheduler's, same machine, same run (DESIGN.md, Budgets)."""
SCHEDULER_QPS = 500.0
SCHEDULER_BURST = 1000
"""kube-scheduler's clientConnection defaults are 50/100: every bind and status write waits on them."""
NO_BINARIES_EXIT = 3
KUEUE_NAMESPACE = "bench-kueue"
LOCAL_QUEUE = "lq-bench"
RUN_ID = "bench-schedulers"
IMAGE = "firedrill/bench:1"
TOLERATION = {"key": FAKE, "operator": "Exists", "effect": "NoSchedule"}
"""KWOK's fake nodes carry ``kwok.x-k8s.io/node=fake:NoSchedule``; the measured pods tolerate it."""
NATIVE_PLURALS = {"Workload": "workloads", "PodGroup": "podgroups"}

Obj = dict[str, Any]


class Side(enum.Enum):
    """The schedulers compared."""

    REFERENCE = "reference"
    """The reference platform: its API server, scheduler (gang profile) and hollow fleet."""
    UPSTREAM = "upstream"
    """kube-scheduler v1.37.2's native gang scheduling over KWOK's fake nodes."""
    KUEUE = "kueue"
    """Kueue's admission of plain-pod groups, then kube-scheduler (no gang plugin), over KWOK's fake nodes."""


def scheduler_config(kubeconfig: Path, qps: float, burst: int) -> Obj:
    """kube-scheduler's configuration file: the client rate limits raised, everything else upstream's defaults
    (leader election off, as the cluster's flags have it; the default profile, which runs GangScheduling when
    the ``GenericWorkload`` gate is on)."""
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
            "leaderElection": {"leaderElect": False}, "enableProfiling": False}


class SchedulerEndpoint:
    """kube-scheduler's own HTTPS endpoint, asked with the admin token: ``/configz`` (the configuration it runs)
    and ``/metrics`` (how long its client waited on its rate limiter).  The port is read from the command line
    RealCluster writes first into the scheduler's log."""

    def __init__(self, cluster: RealCluster) -> None:
        command = cluster.log_path(Component.SCHEDULER).read_text(errors="replace").splitlines()[0]
        ports = re.findall(r"--secure-port=(\d+)", command)
        if not ports:
            raise RuntimeError(f"no --secure-port in kube-scheduler's command line: {command[:300]}")
        self.client = RestClient(f"https://{LOOPBACK}:{ports[-1]}", cluster.admin_token, ca_file=cluster.ca_file,
                                 timeout=10)

    def configz(self) -> tuple[float, int, bool]:
        """(clientConnection qps, burst, whether the first profile runs GangScheduling)."""
        config = self.client.get("/configz")["componentconfig"]
        plugins = {p["name"] for p in config["profiles"][0]["plugins"]["multiPoint"]["enabled"]}
        return (float(config["clientConnection"]["qps"]), int(config["clientConnection"]["burst"]),
                "GangScheduling" in plugins)

    def rate_limiter_wait(self) -> tuple[float, int]:
        """(seconds waited on the client's rate limiter, requests) since the scheduler started, all verbs."""
        waited, requests = 0.0, 0
        for line in self.client.get_raw("/metrics").decode().splitlines():
            if line.startswith("rest_client_rate_limiter_duration_seconds_sum{"):
                waited += float(line.rsplit(" ", 1)[1])
            elif line.startswith("rest_client_rate_limiter_duration_seconds_count{"):
                requests += int(float(line.rsplit(" ", 1)[1]))
        return waited, requests


def kwok_pod(pod: Obj, gpus: int) -> Obj:
    """A pod of the flavors' writing made fit for KWOK's nodes: no service-account token (no kubelet mounts it),
    one CPU asked where it asks no GPU (as the reference side's pods)."""
    spec = pod["spec"]
    spec["automountServiceAccountToken"] = False
    if not gpus:
        spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return pod


def flavor_gangs(flavor: GangFlavor, gangs: list[bool], gang_size: int, namespace: str) -> Callable[[int], Gang]:
    """Gang ``g`` as the harness's ``native`` or ``kueue`` flavor writes it (``drills/kube/flavors.py``), one GPU a
    pod where ``gangs[g]``, else one CPU."""
    pods_path = resource_path("", "v1", "pods", namespace)

    def make(g: int) -> Gang:
        gpus = 1 if gangs[g] else 0
        spec = GangSpec(name=f"{PREFIX}g{g}", run_id=RUN_ID, workers=gang_size, gpus_per_worker=gpus, image=IMAGE,
                        namespace=namespace, queue=LOCAL_QUEUE, tolerations=(TOLERATION,))
        objects, pods = [], []
        for manifest in gang_manifests(spec, flavor):
            if manifest["kind"] == "Pod":
                pods.append(PodToCreate(manifest["metadata"]["name"], gpus, kwok_pod(manifest, gpus)))
            else:
                group, version = manifest["apiVersion"].split("/")
                objects.append((resource_path(group, version, NATIVE_PLURALS[manifest["kind"]], namespace), manifest))
        return Gang(spec.name, objects, pods, pods_path)
    return make


def upstream_round(side: Side, work: Path, *, bins: Path, kwok_dir: Path, kueue_dir: Path | None, nodes: int,
                   pods: int, gang_size: int, creators: int, nice: int, timeout: float, qps: float, burst: int,
                   log: Callable[[str], None]) -> tuple[RoundResult, float]:
    """One upstream control plane from scratch with ``nodes`` empty KWOK nodes; the workload; the figures and
    the seconds kube-scheduler's client waited on its rate limiter."""
    work.mkdir(parents=True, exist_ok=True)
    cluster_dir = work / "cluster"
    config = work / "kube-scheduler-config.yaml"
    # The kubeconfig RealCluster writes for kube-scheduler before starting it (its _component_args).
    config.write_text(yaml.safe_dump(scheduler_config(cluster_dir / f"{Component.SCHEDULER.value}.kubeconfig",
                                                      qps, burst)))
    cluster = RealCluster(RealClusterSpec(
        bin_dir=bins, work_dir=cluster_dir, node_monitor_grace_period=NODE_MONITOR_GRACE_PERIOD_S,
        scheduler_gang_scheduling=side is Side.UPSTREAM,
        extra_args={Component.CONTROLLER_MANAGER: CONTROLLER_MANAGER_ARGS,
                    Component.SCHEDULER: (f"--config={config}",)}))
    with ExitStack() as stack:  # stops whatever was started, newest first, on every way out
        t0 = time.monotonic()
        stack.callback(cluster.stop)
        cluster.start()
        endpoint = SchedulerEndpoint(cluster)
        stack.callback(endpoint.client.close)
        qps_in_use, burst_in_use, gang = endpoint.configz()
        log(f"  control plane {cluster.build.kubernetes} up in {time.monotonic() - t0:.1f}s; kube-scheduler's "
            f"/configz: clientConnection qps {qps_in_use:g} burst {burst_in_use}, GangScheduling "
            f"{'on' if gang else 'off'}")
        if gang != (side is Side.UPSTREAM) or (qps_in_use, burst_in_use) != (qps, burst):
            raise RuntimeError("kube-scheduler does not run the configuration this side needs: the comparison "
                               f"would be void (see {cluster.log_path(Component.SCHEDULER)})")
        fleet = start_fleet(kwok_dir, cluster, work / "kwok", nodes, load_per_node=0, nice=nice,
                            ready_timeout=max(300.0, nodes * 0.5))
        stack.callback(fleet.stop)
        log(f"  {nodes} KWOK nodes Ready in {fleet.seconds_to_ready:.1f}s")
        client = RestClient(cluster.url, cluster.admin_token, ca_file=cluster.ca_file, maxsize=creators + 2,
                            timeout=30)
        stack.callback(client.close)
        pids = {"etcd": cluster.pid(Component.ETCD), "apiserver": cluster.pid(Component.APISERVER),
                "controllers": cluster.pid(Component.CONTROLLER_MANAGER), "scheduler": cluster.pid(Component.SCHEDULER),
                "kwok": fleet.process.pid}
        namespace, flavor = NAMESPACE, GangFlavor.NATIVE
        if side is Side.KUEUE:
            assert kueue_dir is not None
            kueue = KueueManager(kueue_dir, cluster, work / "kueue", pods_ready_timeout_s=int(timeout) + 60,
                                 client_qps=qps, client_burst=burst)
            stack.callback(kueue.stop)
            kueue.start()
            namespace, flavor = KUEUE_NAMESPACE, GangFlavor.KUEUE
            kubectl(cluster.admin_kubeconfig, "create", "namespace", namespace)
            kubectl(cluster.admin_kubeconfig, "label", "namespace", namespace, f"{MANAGED_LABEL}=true")
            for obj in queue_manifests(flavor, queue=LOCAL_QUEUE, namespace=namespace, gpus=nodes * GPUS_PER_NODE):
                kubectl(cluster.admin_kubeconfig, "apply", "-f", "-", stdin=json.dumps(obj))
            pids["kueue"] = kueue.proc.pid if kueue.proc else None
            log("  Kueue up, its queues made")
        wait_until(lambda: _has_default_service_account(client, namespace), 60,
                   f"the service-account controller to make {namespace}/default")
        observer = Observer(client, PREFIX, namespace)
        observer.start()
        stack.callback(observer.stop)
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe-ready"},
                 "spec": {"tolerations": [TOLERATION], "automountServiceAccountToken": False,
                          "containers": [{"name": "main", "image": IMAGE}]}}
        wait_until(lambda: scheduler_probe(client, namespace, probe), 60,
                   "kube-scheduler to come up (a probe pod bound)")
        if side is Side.KUEUE:  # Kueue's webhook serves before its controllers run: a pod it admits proves them
            probe["metadata"] = {"name": "probe-kueue", "labels": {KUEUE_QUEUE_LABEL: LOCAL_QUEUE}}
            wait_until(lambda: scheduler_probe(client, namespace, probe), 60,
                       "Kueue's controllers to come up (a probe pod of its LocalQueue admitted and bound)")
        gangs = gpu_gangs(pods // gang_size, gang_size, nodes * GPUS_PER_NODE)
        result = measure(client, observer, nodes=nodes, pods=pods, gang_size=gang_size, gpus_per_node=GPUS_PER_NODE,
                         make_gang=flavor_gangs(flavor, gangs, gang_size, namespace), creators=creators, pids=pids,
                         timeout=timeout, log=log)
        waited, requests = endpoint.rate_limiter_wait()
        log(f"  kube-scheduler's client waited {waited:.2f}s in all on its rate limiter, over {requests} requests")
        return result, waited
    raise AssertionError("unreachable")  # ExitStack does not swallow exceptions


def _has_default_service_account(client: RestClient, namespace: str) -> bool:
    listed = client.list(resource_path("", "v1", "serviceaccounts", namespace))
    return any((sa.get("metadata") or {}).get("name") == "default" for sa in listed.get("items") or [])


def built(script: Path) -> Path:
    """The folder a build script prints (it reuses its cache); exit 3, saying why, when there is none."""
    outcome = ensure_built(script)
    if outcome.bin_dir is None:
        print(f"{script.name}: {outcome.skip_reason or outcome.error}; build first: bash {script}", file=sys.stderr)
        sys.exit(NO_BINARIES_EXIT)
    return outcome.bin_dir


FIGURES = (("bound pods/s (end to end)", "bound_per_s", "{:.0f}"),
           ("bound pods/s (per-second median)", "bound_per_s_windows", "{:.0f}"),
           ("created pods/s", "created_per_s", "{:.0f}"),
           ("created -> bound p50 (s)", "bind_p50", "{:.2f}"),
           ("created -> bound p99 (s)", "bind_p99", "{:.2f}"),
           ("pod startup p50 (s)", "startup_p50", "{:.2f}"),
           ("pod startup p99 (s)", "startup_p99", "{:.2f}"),
           ("created -> seen by the harness p99 (s)", "watch_p99", "{:.2f}"))


def medians(results: list[RoundResult]) -> dict[str, float]:
    out = {attr: statistics.median(getattr(r, attr) for r in results) for _, attr, _ in FIGURES}
    out["cpu_ms_a_pod"] = statistics.median(sum(r.cpu.values()) for r in results) * 1e3 / max(1, results[0].pods)
    return out


def _finite(value: Any) -> Any:
    """JSON without NaN: None where a figure could not be taken."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def report(results: dict[Side, list[RoundResult]], waits: dict[Side, list[float]], args: argparse.Namespace,
           gpu_pods: int, kubernetes: str) -> int:
    sides = [s for s in Side if results.get(s)]
    med = {s: medians(results[s]) for s in sides}
    ref = Side.REFERENCE if Side.REFERENCE in med else None
    others = [s for s in sides if s is not Side.REFERENCE and ref is not None]
    print(f"\nmedian of {args.rounds} round(s), {args.nodes} nodes x {GPUS_PER_NODE} GPUs, {args.pods} pods in gangs "
          f"of {args.gang} ({gpu_pods} ask one GPU, {args.pods - gpu_pods} one CPU), {args.creators} creators, fleets "
          f"at nice +{args.nice}; kube-scheduler {kubernetes} clientConnection qps {args.scheduler_qps:g} burst "
          f"{args.scheduler_burst}:")
    header = f"  {'':40s}" + "".join(f"{s.value:>12s}" for s in sides) + "".join(
        f"{s.value + '/ref':>14s}" for s in others)
    print(header)
    rows = [*FIGURES, ("CPU ms a pod, all processes", "cpu_ms_a_pod", "{:.2f}")]
    ratios: dict[str, dict[str, float]] = {}
    for label, attr, fmt in rows:
        line = f"  {label:40s}" + "".join(f"{fmt.format(med[s][attr]):>12s}" for s in sides)
        for s in others:
            assert ref is not None
            ratio = med[s][attr] / med[ref][attr] if med[ref][attr] else math.nan
            ratios.setdefault(f"{s.value}/reference", {})[attr] = ratio
            line += f"{ratio:>14.2f}"
        print(line)
    print(f"  {'kube-scheduler client rate-limit wait (s)':40s}" + "".join(
        f"{statistics.median(waits[s]):>12.2f}" if waits.get(s) else f"{'-':>12s}" for s in sides))
    correct = {s: sum(1 for r in results[s] if not r.problems) for s in sides}
    print(f"  {'correct rounds':40s}" + "".join(f"{f'{correct[s]}/{len(results[s])}':>12s}" for s in sides))
    for s in sides:
        for i, r in enumerate(results[s]):
            if r.problems:
                print(f"  {s.value} round {i + 1}: " + "; ".join(r.problems))
    all_correct = all(correct[s] == len(results[s]) for s in sides)
    budget_met: bool | None = None
    if ref is not None and Side.UPSTREAM in med:
        ratio = med[ref]["bound_per_s"] / med[Side.UPSTREAM]["bound_per_s"]
        budget_met = ratio >= BOUND_RATIO_BUDGET
        print(f"  budget (DESIGN.md): the reference binds >= {BOUND_RATIO_BUDGET:g} x kube-scheduler's pods/s: "
              f"{ratio:.2f} x, {'met' if budget_met else 'MISSED'}")
    verdict = "INCORRECT RUN" if not all_correct else "BUDGET MISSED" if budget_met is False else "correct"
    print(f"  verdict: {verdict}")
    print(json.dumps(_finite({
        "bench": "schedulers", "nodes": args.nodes, "gpus_per_node": GPUS_PER_NODE, "pods": args.pods,
        "gpu_pods": gpu_pods, "gang": args.gang, "rounds": args.rounds, "creators": args.creators,
        "fleet_nice": args.nice, "kubernetes": kubernetes,
        "scheduler_client": {"qps": args.scheduler_qps, "burst": args.scheduler_burst},
        "median": {s.value: med[s] for s in sides}, "ratio": ratios,
        "scheduler_rate_limiter_wait_s": {s.value: waits[s] for s in waits},
        "rounds_detail": {s.value: [asdict(r) for r in results[s]] for s in sides},
        "correct": all_correct, "budget_met": budget_met})), flush=True)
    return 0 if verdict == "correct" else 1


class _Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module's docstring as written (its commands stay one a line), and each option's default."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_Help)
    p.add_argument("--nodes", type=int, default=1000, help="nodes of 8 GPUs on every side")
    p.add_argument("--pods", type=int, default=10_000, help="pods on every side (a multiple of --gang)")
    p.add_argument("--gang", type=int, default=8, help="pods per gang (minMember / minCount)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; medians are printed, the order rotates")
    p.add_argument("--only", choices=[s.value for s in Side], action="append",
                   help="run only this side (repeatable; default: reference and upstream; kueue only when named)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 50 nodes, 400 pods, 1 round")
    p.add_argument("--creators", type=int, default=4, help="client threads creating the pods")
    p.add_argument("--nice", type=int, default=4,
                   help="run the fleets (hollow, KWOK) this many steps nicer than the control planes")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a side gets for every pod Running")
    p.add_argument("--scheduler-qps", type=float, default=SCHEDULER_QPS,
                   help="kube-scheduler's (and Kueue's) clientConnection.qps (upstream's default: 50)")
    p.add_argument("--scheduler-burst", type=int, default=SCHEDULER_BURST,
                   help="kube-scheduler's (and Kueue's) clientConnection.burst (upstream's default: 100)")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.pods, args.rounds = 50, 400, 1
    if args.pods % args.gang:
        p.error(f"--pods {args.pods} is not a multiple of --gang {args.gang}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # SIGTERM and SIGHUP unwind like Ctrl-C, so every process a side started is stopped on the way out.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    sides = [Side(v) for v in dict.fromkeys(args.only or (Side.REFERENCE.value, Side.UPSTREAM.value))]
    bins = kwok_dir = kueue_dir = None
    kubernetes = ""
    if set(sides) - {Side.REFERENCE}:
        bins, kwok_dir = built(BUILD_SCRIPT), built(KWOK_BUILD_SCRIPT)
        kubernetes = read_build_info(bins).kubernetes
    if Side.KUEUE in sides:
        kueue_dir = built(KUEUE_BUILD_SCRIPT)
    gangs = gpu_gangs(args.pods // args.gang, args.gang, args.nodes * GPUS_PER_NODE)
    gpu_pods = sum(gangs) * args.gang

    def log(message: str) -> None:
        print(message, flush=True)

    results: dict[Side, list[RoundResult]] = {s: [] for s in sides}
    waits: dict[Side, list[float]] = {s: [] for s in sides if s is not Side.REFERENCE}
    for r in range(args.rounds):
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        for side in order:
            log(f"round {r + 1}/{args.rounds}, {side.value}: {args.nodes} nodes x {GPUS_PER_NODE} GPUs, {args.pods} "
                f"pods in gangs of {args.gang} ({os.cpu_count()} CPUs)")
            with tempfile.TemporaryDirectory(prefix=f"bench-schedulers-{side.value}-") as tmp:
                if side is Side.REFERENCE:
                    res = run_round(Path(tmp), nodes=args.nodes, pods=args.pods, gang_size=args.gang,
                                    gpus_per_node=GPUS_PER_NODE, creators=args.creators, profile="k8s-defaults",
                                    nice=args.nice, timeout=args.timeout, log=log, gpu_indices=False)
                else:
                    assert bins is not None and kwok_dir is not None
                    res, waited = upstream_round(side, Path(tmp), bins=bins, kwok_dir=kwok_dir, kueue_dir=kueue_dir,
                                                 nodes=args.nodes, pods=args.pods, gang_size=args.gang,
                                                 creators=args.creators, nice=args.nice, timeout=args.timeout,
                                                 qps=args.scheduler_qps, burst=args.scheduler_burst, log=log)
                    waits[side].append(waited)
            results[side].append(res)
            log(f"  {side.value}: {res.line()}")
    return report(results, waits, args, gpu_pods, kubernetes)


if __name__ == "__main__":
    sys.exit(main())
