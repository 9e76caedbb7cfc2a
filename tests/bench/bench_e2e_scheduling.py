"""End-to-end scheduling throughput and pod startup latency, through the API, at 1,000 nodes.

The API server, the controllers (the scheduler on its gang profile) and a hollow fleet of nodes
(refplatform.hollow: one process, a real Node and Lease per node, pods reported Running through
pods/status) run as separate processes.  This benchmark creates gangs of pods through the API from
several client threads (a PodGroup with minMember = the gang size, then its pods), and measures with its
OWN watch and clock, never the platform's word:

- **created**: the instant the harness sent the pod's create (before the answer: the create's own
  latency counts against the platform);
- **bound**: the instant the harness's watch first shows the pod with ``spec.nodeName``;
- **running**: the instant the watch first shows it ``Running``.

Figures: pods bound per second over the whole run (pods / (last bound - first created)), the median of the
per-second bind counts while binding went on, and the p50/p99 of created -> bound and created -> running
(pod startup latency as the Kubernetes SLO counts it: no image pulls here).  Budgets (docs/SCHEDULER.md,
"End-to-end throughput"): >= 300 pods/s bound and startup p99 <= 5 s; anchors: kube-scheduler 180 pods/s
with extended resources at 5,000 nodes, the Kubernetes pod startup SLO 5 s at p99.

The run is also checked: every pod bound exactly once and never moved, every gang whole, no GPU booked
twice on a node (the scheduler's ``firedrill.dev/gpu-index`` annotations), every pod Running.

    nice -n 15 python tests/bench/bench_e2e_scheduling.py --nice 4         # 1,000 nodes, 10,000 pods, 3 rounds
    nice -n 15 python tests/bench/bench_e2e_scheduling.py --nodes 50 --pods 400 --rounds 1

Exit status 1 when a budget is missed or the run is not correct (the figures are printed either way).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec, wait_until
from refplatform.hollow.launch import start_hollow, wait_nodes_ready

BOUND_BUDGET = 300.0
"""Pods bound per second, end to end (docs/SCHEDULER.md)."""
STARTUP_P99_BUDGET = 5.0
"""Pod startup latency p99, seconds (the Kubernetes SLO)."""
GPU_INDEX = "firedrill.dev/gpu-index"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
NAMESPACE = "default"

Obj = dict[str, Any]


@dataclass
class PodTimes:
    """What the harness saw of one pod (time.monotonic() instants)."""

    created: float | None = None
    added: float | None = None
    """When the harness's watch first showed the pod: created -> added is the watch's own delay."""
    bound: float | None = None
    running: float | None = None
    node: str = ""
    gpus: int = 0
    gpu_index: str = ""
    group: str = ""
    binds: int = 0
    """How often the watch showed the pod's node change from none (or another) to a node: 1 when bound once."""


@dataclass
class Observer:
    """The harness's own watch on the benchmark's pods."""

    client: RestClient
    prefix: str
    pods: dict[str, PodTimes] = field(default_factory=lambda: defaultdict(PodTimes))
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop_event: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    relists: int = 0
    """How often the watch broke and was resumed or relisted (printed: the figures around a relist are late)."""
    _thread: threading.Thread | None = None
    _rv: str = ""

    def start(self) -> None:
        self._relist()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)
        self._thread.start()

    def _relist(self) -> None:
        """List the pods (each seen now: a relist can only make the figures later, never earlier) and watch on
        from the list's version."""
        listed = self.client.list(resource_path("", "v1", "pods", NAMESPACE))
        now = time.monotonic()
        for pod in listed.get("items") or []:
            self.see(pod, now)
        self._rv = str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                stream = self.client.watch(resource_path("", "v1", "pods", NAMESPACE), resource_version=self._rv,
                                           timeout_seconds=60, read_timeout=5)
                self._stream = stream
                for event in stream:
                    if self.stop_event.is_set():
                        break
                    if event.type == "ERROR":  # 410 Gone (or another error): relist, as an informer does
                        self.relists += 1
                        self._relist()
                        break
                    meta = event.object.get("metadata") or {}
                    if meta.get("resourceVersion"):
                        self._rv = str(meta["resourceVersion"])
                    if event.type in ("ADDED", "MODIFIED"):
                        self.see(event.object, time.monotonic())
            except (ApiStatusError, ApiUnreachable) as exc:
                self.relists += 1  # the stream broke: resume from the last version seen (or relist on 410)
                if isinstance(exc, ApiStatusError) and exc.gone:
                    try:
                        self._relist()
                    except (ApiStatusError, ApiUnreachable) as again:
                        self.errors.append(f"watch failed and relist failed: {again}")
                        self.stop_event.wait(0.2)
                else:
                    self.stop_event.wait(0.2)

    def see(self, pod: Obj, now: float) -> None:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name.startswith(self.prefix):
            return
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        phase = (pod.get("status") or {}).get("phase")
        with self.lock:
            t = self.pods[name]
            if t.added is None:
                t.added = now
            if node and node != t.node:
                t.binds += 1
                t.node = node
                if t.bound is None:
                    t.bound = now
            t.gpu_index = str((meta.get("annotations") or {}).get(GPU_INDEX) or t.gpu_index)
            if phase == "Running" and t.running is None:
                t.running = now

    def count(self, what: str) -> int:
        with self.lock:
            return sum(1 for t in self.pods.values() if getattr(t, what) is not None)

    def stop(self) -> None:
        self.stop_event.set()
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)


def pod_body(name: str, group: str, gpus: int) -> Obj:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"requests": {"cpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {GROUP_ANNOTATION: group}},
            "spec": {"schedulerName": "volcano", "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "firedrill/bench:1", "resources": resources}]}}


def gpu_gangs(gangs: int, gang_size: int, gpu_capacity: int) -> list[bool]:
    """Which gangs ask one GPU a pod: as many as the GPUs hold (10,000 pods cannot each hold one of 8,000
    GPUs), spread evenly among the others, which ask one CPU a pod instead."""
    with_gpu = min(gangs, gpu_capacity // gang_size)
    return [(g + 1) * with_gpu // gangs > g * with_gpu // gangs for g in range(gangs)]


def create_gangs(client: RestClient, observer: Observer, prefix: str, gangs: list[bool], gang_size: int,
                 creators: int, rate: float = 0.0) -> tuple[float, float]:
    """Create a PodGroup (minMember ``gang_size``) and its pods for each gang (True: one GPU a pod) from
    ``creators`` threads; each pod's created instant is taken just before its create is sent.  ``rate``:
    pods a second at most (gang ``g`` starts no earlier than ``g * gang_size / rate`` seconds in; 0: as fast
    as the creators go).  Returns the first and the last instant."""
    groups_path = resource_path("scheduling.volcano.sh", "v1beta1", "podgroups", NAMESPACE)
    pods_path = resource_path("", "v1", "pods", NAMESPACE)

    def one_gang(g: int) -> None:
        if rate > 0:  # pacing the load, not waiting for a condition
            time.sleep(max(0.0, first + g * gang_size / rate - time.monotonic()))
        group, gpus = f"{prefix}g{g}", 1 if gangs[g] else 0
        min_resources = {"nvidia.com/gpu": str(gang_size)} if gpus else {"cpu": str(gang_size)}
        client.create(groups_path, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                                    "metadata": {"name": group},
                                    "spec": {"minMember": gang_size, "minResources": min_resources}})
        for i in range(gang_size):
            name = f"{group}-{i}"
            sent = time.monotonic()
            with observer.lock:
                t = observer.pods[name]
                t.created, t.group, t.gpus = sent, group, gpus
            client.create(pods_path, pod_body(name, group, gpus))

    first = time.monotonic()
    with ThreadPoolExecutor(max_workers=creators, thread_name_prefix="bench-create") as pool:
        list(pool.map(one_gang, range(len(gangs))))
    return first, time.monotonic()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class RoundResult:
    pods: int
    nodes: int
    created_per_s: float
    bound_per_s: float
    """pods / (last bound - first created)."""
    bound_per_s_windows: float
    """Median of the per-second bind counts between the first and the last bind (whole seconds only)."""
    bind_p50: float
    bind_p99: float
    startup_p50: float
    startup_p99: float
    watch_p50: float
    """created -> the harness's watch shows the pod: what the harness's own observation adds to the others."""
    watch_p99: float
    cpu: dict[str, float]
    """CPU seconds (user + system) each process spent from the first create to the last pod Running:
    apiserver, controllers (the scheduler), hollow, bench (this process: creators and watch)."""
    problems: tuple[str, ...]


def check(observer: Observer, gang_size: int, gpus_per_node: int) -> list[str]:
    """Every pod bound once and Running, gangs whole, no GPU index booked twice on a node."""
    problems: list[str] = []
    with observer.lock:
        pods = dict(observer.pods)
    moved = [n for n, t in pods.items() if t.binds > 1]
    if moved:
        problems.append(f"{len(moved)} pod(s) bound more than once or moved, e.g. {moved[:3]}")
    unbound = [n for n, t in pods.items() if t.bound is None]
    if unbound:
        problems.append(f"{len(unbound)} pod(s) never bound, e.g. {sorted(unbound)[:3]}")
    not_running = [n for n, t in pods.items() if t.running is None]
    if not_running:
        problems.append(f"{len(not_running)} pod(s) never Running, e.g. {sorted(not_running)[:3]}")
    per_group = Counter(t.group for t in pods.values() if t.bound is not None)
    partial = [g for g, c in per_group.items() if c != gang_size]
    if partial:
        problems.append(f"{len(partial)} gang(s) not whole, e.g. {partial[:3]}")
    booked: dict[str, Counter[str]] = defaultdict(Counter)
    for name, t in pods.items():
        if not t.node:
            continue
        indices = [i for i in t.gpu_index.split(",") if i]
        if len(indices) != t.gpus:
            problems.append(f"pod {name} holds GPU indices {t.gpu_index!r}, wants {t.gpus}")
        booked[t.node].update(indices)
    for node, counts in booked.items():
        twice = sorted(i for i, c in counts.items() if c > 1)
        if twice:
            problems.append(f"node {node}: GPU(s) {twice} booked twice")
        if sum(counts.values()) > gpus_per_node:
            problems.append(f"node {node}: {sum(counts.values())} GPUs booked of {gpus_per_node}")
    return problems


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) of a process so far, from /proc (NaN where there is none)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summarize(observer: Observer, nodes: int, first: float, last_sent: float, problems: list[str],
              cpu: dict[str, float] | None = None) -> RoundResult:
    with observer.lock:
        pods = list(observer.pods.values())
    created = [t.created for t in pods if t.created is not None]
    bound = sorted(t.bound for t in pods if t.bound is not None)
    binds = [t.bound - t.created for t in pods if t.bound is not None and t.created is not None]
    startup = [t.running - t.created for t in pods if t.running is not None and t.created is not None]
    seen = [t.added - t.created for t in pods if t.added is not None and t.created is not None]
    span = (bound[-1] - min(created)) if bound and created else math.nan
    windows: list[float] = []
    if len(bound) > 1:
        per_second = Counter(int(b - bound[0]) for b in bound)
        whole = int(bound[-1] - bound[0])  # the last, partial second is left out
        windows = [float(per_second.get(s, 0)) for s in range(whole)] or [float(len(bound))]
    return RoundResult(
        pods=len(pods), nodes=nodes,
        created_per_s=len(created) / max(1e-9, last_sent - first),
        bound_per_s=len(bound) / span if span and span > 0 else math.nan,
        bound_per_s_windows=statistics.median(windows) if windows else math.nan,
        bind_p50=percentile(binds, 50), bind_p99=percentile(binds, 99),
        startup_p50=percentile(startup, 50), startup_p99=percentile(startup, 99),
        watch_p50=percentile(seen, 50), watch_p99=percentile(seen, 99), cpu=dict(cpu or {}),
        problems=tuple(problems))


def run_round(data_dir: Path, *, nodes: int, pods: int, gang_size: int, gpus_per_node: int, creators: int,
              profile: str, nice: int, timeout: float, log: Any = print, rate: float = 0.0,
              server_http: str = "httptools") -> RoundResult:
    """One cluster from scratch: API server, scheduler, hollow fleet; the workload; the figures."""
    if pods % gang_size:
        raise SystemExit(f"--pods {pods} is not a multiple of --gang {gang_size}")
    spec = ClusterSpec(data_dir, nodes=nodes, gpus_per_node=gpus_per_node, controllers=("scheduler",),
                       profile=profile, bookmark_interval=5.0, extra_server_args=("--http", server_http))
    cluster = Cluster(spec)
    hollow = None
    try:
        t0 = time.monotonic()
        cluster.start_server(timeout=60)
        hollow = start_hollow(cluster, nice=nice)
        wait_nodes_ready(cluster, hollow, timeout=max(60.0, nodes * 0.2))
        log(f"  {nodes} hollow nodes Ready in {time.monotonic() - t0:.1f}s")
        cluster.start_controllers()
        client = RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file, maxsize=creators + 2,
                            timeout=30)
        observer = Observer(client, "b")
        observer.start()
        wait_until(lambda: _scheduler_ready(client), 60, "the scheduler to come up (its first PodGroup status)")
        gangs = gpu_gangs(pods // gang_size, gang_size, nodes * gpus_per_node)
        procs = {"apiserver": cluster.server.pid if cluster.server else None,
                 "controllers": cluster.controller_manager.pid if cluster.controller_manager else None,
                 "hollow": hollow.pid}
        cpu0 = {name: cpu_seconds(pid) for name, pid in procs.items()} | {"bench": cpu_seconds()}
        first, last_sent = create_gangs(client, observer, "b", gangs, gang_size, creators, rate)
        log(f"  created {pods} pods in {last_sent - first:.1f}s ({pods / (last_sent - first):.0f}/s)")
        try:
            wait_until(lambda: observer.count("running") >= pods, timeout, f"{pods} pods Running", interval=0.2)
        except Exception as exc:  # noqa: BLE001 - report what was reached, as a problem
            log(f"  {exc}: bound {observer.count('bound')}, running {observer.count('running')}")
        cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in procs.items()}
        cpu["bench"] = cpu_seconds() - cpu0["bench"]
        observer.stop()
        problems = check(observer, gang_size, gpus_per_node) + observer.errors
        if observer.relists:
            log(f"  the harness's watch was resumed or relisted {observer.relists} time(s)")
        return summarize(observer, nodes, first, last_sent, problems, cpu)
    finally:
        if hollow is not None:
            hollow.stop()
        cluster.stop()


def _scheduler_ready(client: RestClient) -> bool:
    """Whether the scheduler is up, judged by its effect: a probe pod (no GPU, no gang, outside the measured
    set) gets bound.  The harness reads no platform log."""
    probe = "probe-ready"
    path = resource_path("", "v1", "pods", NAMESPACE)
    try:
        pod = client.get(f"{path}/{probe}")
    except ApiStatusError as exc:
        if not exc.not_found:
            raise
        client.create(path, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": probe},
                             "spec": {"schedulerName": "volcano",
                                      "containers": [{"name": "main", "image": "firedrill/bench:1"}]}})
        return False
    return bool((pod.get("spec") or {}).get("nodeName"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--gang", type=int, default=8, help="pods per gang (PodGroup minMember)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--creators", type=int, default=4, help="client threads creating the pods")
    p.add_argument("--profile", default="k8s-defaults",
                   help="healing profile: the nodes' heartbeat (k8s-defaults: 10 s Leases, as kubemark's)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate", type=float, default=0.0,
                   help="create at most this many pods a second (0: as fast as the creators go, the default)")
    p.add_argument("--nice", type=int, default=0,
                   help="run the hollow fleet this many steps nicer than the control plane (it stands in for other "
                        "machines; docs/SCHEDULER.md records --nice 4 beside 0)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every pod Running")
    p.add_argument("--server-http", choices=["httptools", "h11"], default="httptools",
                   help="the API server's HTTP implementation (default httptools, as the server's own default)")
    args = p.parse_args(argv)
    results = []
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}: {args.nodes} nodes x {args.gpus_per_node} GPUs, {args.pods} pods in "
              f"gangs of {args.gang}, {args.creators} creators"
              + (f" paced at {args.rate:g} pods/s" if args.rate else "") + f", profile {args.profile}, "
              f"API server on {args.server_http}", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
            res = run_round(Path(tmp), nodes=args.nodes, pods=args.pods, gang_size=args.gang,
                            gpus_per_node=args.gpus_per_node, creators=args.creators, profile=args.profile,
                            nice=args.nice, timeout=args.timeout, log=lambda m: print(m, flush=True),
                            rate=args.rate, server_http=args.server_http)
        results.append(res)
        print(f"  created/s {res.created_per_s:.0f}; bound/s {res.bound_per_s:.0f} (per-second median "
              f"{res.bound_per_s_windows:.0f}); created->bound p50 {res.bind_p50:.2f}s p99 {res.bind_p99:.2f}s; "
              f"startup p50 {res.startup_p50:.2f}s p99 {res.startup_p99:.2f}s; created->seen by the harness's "
              f"watch p50 {res.watch_p50:.2f}s p99 {res.watch_p99:.2f}s; CPU s "
              + ", ".join(f"{k} {v:.1f}" for k, v in res.cpu.items())
              + (f"; PROBLEMS: {'; '.join(res.problems)}" if res.problems else "; correct"), flush=True)

    def med(attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in results)
    bound, p99 = med("bound_per_s"), med("startup_p99")
    print(f"\nmedian of {len(results)} round(s), {args.nodes} nodes x {args.gpus_per_node} GPUs, {args.pods} pods "
          f"in gangs of {args.gang}:")
    print(f"  created pods/s:                {med('created_per_s'):8.0f}")
    print(f"  bound pods/s (end to end):     {bound:8.0f}   (budget >= {BOUND_BUDGET:.0f}; anchor: kube-scheduler "
          "180 pods/s, extended resources, 5,000 nodes)")
    print(f"  bound pods/s (per-second med): {med('bound_per_s_windows'):8.0f}")
    print(f"  created -> bound p50 / p99:    {med('bind_p50'):8.2f} s / {med('bind_p99'):.2f} s")
    print(f"  pod startup p50 / p99:         {med('startup_p50'):8.2f} s / {p99:.2f} s   (budget p99 <= "
          f"{STARTUP_P99_BUDGET:.0f} s; anchor: Kubernetes pod startup SLO 5 s at p99)")
    print(f"  created -> seen (harness watch): {med('watch_p50'):6.2f} s / {med('watch_p99'):.2f} s   (the "
          "harness's own delay, inside the figures above)")
    for name in results[0].cpu:
        print(f"  CPU ms a pod, {name + ':':12s}  {statistics.median(r.cpu[name] for r in results) * 1e3 / args.pods:8.2f}")
    bad = [r for r in results if r.problems]
    ok = bound >= BOUND_BUDGET and p99 <= STARTUP_P99_BUDGET and not bad
    print("  verdict: " + ("within budget" if ok else "BUDGET MISSED" if not bad else "INCORRECT RUN"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
