"""What the end-to-end scheduling benches share: the harness's own watch and clock on the pods, gangs created
from client threads, the correctness checks and the figures.

Used by ``bench_e2e_scheduling.py`` (the reference platform alone) and ``bench_schedulers.py`` (the reference
platform's scheduler beside upstream kube-scheduler), so both sides of a comparison are created, watched, timed
and judged by the same code.  The client is ``refplatform.client.RestClient``: plain Kubernetes REST, so it
speaks to the reference API server and to kube-apiserver alike.

- **created**: the instant the harness sent the pod's create (before the answer: the create's own latency
  counts against the platform);
- **bound**: the instant the harness's watch first shows the pod with ``spec.nodeName``;
- **running**: the instant the watch first shows it ``Running``.

Nothing here starts a process.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, RestClient, resource_path

GPU_INDEX = "firedrill.dev/gpu-index"
"""The reference scheduler's annotation naming the GPUs a pod holds on its node."""
NAMESPACE = "default"
PROGRESS_EVERY_S = 10.0

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
    """The harness's own watch on the benchmark's pods (those whose name starts with ``prefix``)."""

    client: RestClient
    prefix: str
    namespace: str = NAMESPACE
    pods: dict[str, PodTimes] = field(default_factory=lambda: defaultdict(PodTimes))
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop_event: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    relists: int = 0
    """How often the watch broke and was resumed or relisted (printed: the figures around a relist are late)."""
    bound_count: int = 0
    running_count: int = 0
    _thread: threading.Thread | None = None
    _rv: str = ""

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)
        """Notified whenever a pod is first seen bound or Running (under ``lock``)."""

    @property
    def _path(self) -> str:
        return resource_path("", "v1", "pods", self.namespace)

    def start(self) -> None:
        self._relist()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)
        self._thread.start()

    def _relist(self) -> None:
        """List the pods (each seen now: a relist can only make the figures later, never earlier) and watch on
        from the list's version."""
        listed = self.client.list(self._path)
        now = time.monotonic()
        for pod in listed.get("items") or []:
            self.see(pod, now)
        self._rv = str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                stream = self.client.watch(self._path, resource_version=self._rv, timeout_seconds=60,
                                           read_timeout=5)
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
            news = False
            if node and node != t.node:
                t.binds += 1
                t.node = node
                if t.bound is None:
                    t.bound = now
                    self.bound_count += 1
                    news = True
            t.gpu_index = str((meta.get("annotations") or {}).get(GPU_INDEX) or t.gpu_index)
            if phase == "Running" and t.running is None:
                t.running = now
                self.running_count += 1
                news = True
            if news:
                self.changed.notify_all()

    def count(self, what: str) -> int:
        with self.lock:
            return sum(1 for t in self.pods.values() if getattr(t, what) is not None)

    def wait_running(self, want: int, timeout: float, log: Callable[[str], None] = print,
                     every: float = PROGRESS_EVERY_S) -> bool:
        """Wait until the watch has shown ``want`` pods Running, at most ``timeout`` seconds, logging the counts
        every ``every`` seconds; whether they all ran."""
        started = time.monotonic()
        deadline = started + timeout
        with self.changed:
            while self.running_count < want:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if not self.changed.wait_for(lambda: self.running_count >= want, timeout=min(left, every)):
                    log(f"  {time.monotonic() - started:.0f}s: bound {self.bound_count}, Running "
                        f"{self.running_count} of {want}")
        return True

    def stop(self) -> None:
        self.stop_event.set()
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)


@dataclass(frozen=True)
class PodToCreate:
    name: str
    gpus: int
    body: Obj


@dataclass(frozen=True)
class Gang:
    """One gang as one scheduler wants it: its group objects (``(collection path, body)``, created first, in
    order), then its pods, created in ``pods_path``."""

    name: str
    objects: list[tuple[str, Obj]]
    pods: list[PodToCreate]
    pods_path: str


def gpu_gangs(gangs: int, gang_size: int, gpu_capacity: int) -> list[bool]:
    """Which gangs ask one GPU a pod: as many as the GPUs hold (10,000 pods cannot each hold one of 8,000
    GPUs), spread evenly among the others, which ask one CPU a pod instead."""
    with_gpu = min(gangs, gpu_capacity // gang_size)
    return [(g + 1) * with_gpu // gangs > g * with_gpu // gangs for g in range(gangs)]


def create_gangs(client: RestClient, observer: Observer, gangs: int, make_gang: Callable[[int], Gang],
                 creators: int, rate: float = 0.0) -> tuple[float, float]:
    """Create gang ``g`` = ``make_gang(g)`` for each of ``gangs`` from ``creators`` threads (each on a connection
    of its own from ``client``'s pool); each pod's created instant is taken just before its create is sent.
    ``rate``: pods a second at most (a gang starts no earlier than its first pod's turn; 0: as fast as the
    creators go).  Returns the first and the last instant."""

    def one_gang(g: int) -> None:
        gang = make_gang(g)
        if rate > 0:  # pacing the load, not waiting for a condition
            time.sleep(max(0.0, first + g * len(gang.pods) / rate - time.monotonic()))
        for path, body in gang.objects:
            client.create(path, body)
        for pod in gang.pods:
            sent = time.monotonic()
            with observer.lock:
                t = observer.pods[pod.name]
                t.created, t.group, t.gpus = sent, gang.name, pod.gpus
            client.create(gang.pods_path, pod.body)

    first = time.monotonic()
    with ThreadPoolExecutor(max_workers=creators, thread_name_prefix="bench-create") as pool:
        list(pool.map(one_gang, range(gangs)))
    return first, time.monotonic()


def scheduler_probe(client: RestClient, namespace: str, body: Obj) -> bool:
    """Whether the scheduler is up, judged by its effect: the probe pod ``body`` (no GPU, no gang, outside the
    measured set) is created once and then watched for a node.  The harness reads no platform log."""
    path = resource_path("", "v1", "pods", namespace)
    try:
        pod = client.get(f"{path}/{body['metadata']['name']}")
    except ApiStatusError as exc:
        if not exc.not_found:
            raise
        client.create(path, body)
        return False
    return bool((pod.get("spec") or {}).get("nodeName"))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def check(observer: Observer, gang_size: int, gpus_per_node: int, *, gpu_indices: bool = False) -> list[str]:
    """Every pod bound once, never moved, and Running; every gang whole (all its pods bound or none); no node
    holding pods of more GPUs than it has.  ``gpu_indices``: also no GPU index booked twice on a node and each
    pod given as many indices as it asked GPUs (the reference scheduler's ``firedrill.dev/gpu-index``)."""
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
    held: Counter[str] = Counter()
    booked: dict[str, Counter[str]] = defaultdict(Counter)
    for name, t in pods.items():
        if not t.node:
            continue
        held[t.node] += t.gpus
        if gpu_indices:
            indices = [i for i in t.gpu_index.split(",") if i]
            if len(indices) != t.gpus:
                problems.append(f"pod {name} holds GPU indices {t.gpu_index!r}, wants {t.gpus}")
            booked[t.node].update(indices)
    over = sorted(node for node, gpus in held.items() if gpus > gpus_per_node)
    if over:
        problems.append(f"{len(over)} node(s) over their {gpus_per_node} GPUs, e.g. "
                        + ", ".join(f"{n} ({held[n]})" for n in over[:3]))
    for node, counts in booked.items():
        twice = sorted(i for i, c in counts.items() if c > 1)
        if twice:
            problems.append(f"node {node}: GPU(s) {twice} booked twice")
    return problems


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) of a process so far, from /proc (NaN where there is none); this process's
    own when ``pid`` is None."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds each named process (and this one, as ``bench``) spends from construction to :meth:`spent`."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = dict(pids)
        self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()} | {"bench": cpu_seconds()}

    def spent(self) -> dict[str, float]:
        spent = {name: cpu_seconds(pid) - self.start[name] for name, pid in self.pids.items()}
        spent["bench"] = cpu_seconds() - self.start["bench"]
        return spent


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
    """CPU seconds (user + system) each process spent from the first create to the last pod Running (or the
    deadline); ``bench`` is this process: creators and watch."""
    problems: tuple[str, ...]

    def line(self) -> str:
        """The round's figures on one line."""
        return (f"created/s {self.created_per_s:.0f}; bound/s {self.bound_per_s:.0f} (per-second median "
                f"{self.bound_per_s_windows:.0f}); created->bound p50 {self.bind_p50:.2f}s p99 {self.bind_p99:.2f}s; "
                f"startup p50 {self.startup_p50:.2f}s p99 {self.startup_p99:.2f}s; created->seen by the harness's "
                f"watch p50 {self.watch_p50:.2f}s p99 {self.watch_p99:.2f}s; CPU s "
                + ", ".join(f"{k} {v:.1f}" for k, v in self.cpu.items())
                + (f"; PROBLEMS: {'; '.join(self.problems)}" if self.problems else "; correct"))


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


def measure(client: RestClient, observer: Observer, *, nodes: int, pods: int, gang_size: int, gpus_per_node: int,
            make_gang: Callable[[int], Gang], creators: int, pids: dict[str, int | None], timeout: float,
            log: Callable[[str], None] = print, rate: float = 0.0, gpu_indices: bool = False) -> RoundResult:
    """The workload and its figures, on a platform that is up with ``observer`` watching: create
    ``pods // gang_size`` gangs, wait until every pod is Running (or ``timeout``), check and summarize.
    ``pids``: the platform's processes whose CPU time is reported."""
    meter = CpuMeter(pids)
    creating = threading.Event()

    def progress() -> None:
        started = time.monotonic()
        while not creating.wait(PROGRESS_EVERY_S):
            log(f"  {time.monotonic() - started:.0f}s: created {observer.count('created')} of {pods}, bound "
                f"{observer.bound_count}, Running {observer.running_count}")
    ticker = threading.Thread(target=progress, name="bench-progress", daemon=True)
    ticker.start()
    try:
        first, last_sent = create_gangs(client, observer, pods // gang_size, make_gang, creators, rate)
    finally:
        creating.set()
        ticker.join()
    log(f"  created {pods} pods in {last_sent - first:.1f}s ({pods / (last_sent - first):.0f}/s)")
    if not observer.wait_running(pods, timeout, log):
        log(f"  not all Running within {timeout:.0f}s: bound {observer.count('bound')}, running "
            f"{observer.count('running')}")
    cpu = meter.spent()
    observer.stop()
    problems = check(observer, gang_size, gpus_per_node, gpu_indices=gpu_indices) + observer.errors
    if observer.relists:
        log(f"  the harness's watch was resumed or relisted {observer.relists} time(s)")
    return summarize(observer, nodes, first, last_sent, problems, cpu)
