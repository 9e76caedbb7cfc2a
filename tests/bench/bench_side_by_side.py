"""Side by side: the reference API server and kube-apiserver + etcd doing the same work, in one run (issue 13).

Run on demand (not part of the test suite), from the repository root:

    python tests/bench/bench_side_by_side.py            # 5 repetitions
    python tests/bench/bench_side_by_side.py --quick    # 1 repetition, fewer samples (a smoke run)
    python tests/bench/bench_side_by_side.py --reps 3

Three API servers, each started fresh for every repetition (the order rotates between repetitions):

- ``reference``: the refplatform API server as ``bench_api.py`` starts it (no nodes, no controllers), with
  ``--durability normal``, the mode it ships with (SQLite WAL, ``synchronous=NORMAL``);
- ``reference-full``: the same with ``--durability full`` (an fsync per commit, as etcd fsyncs its WAL);
- ``kube-apiserver+etcd``: etcd 3.7.0 and kube-apiserver v1.37.2 as ``tests/realk8s/cluster.py`` starts them
  (its flags, PKI and static tokens), without kube-controller-manager and kube-scheduler, so only the two
  API servers and their stores compete for the CPUs.  The binaries come from ``tests/realk8s/build.sh``'s
  cache; when they are missing the bench says how to build them and exits 3.

The work, the same HTTP client (httpx, HTTP/1.1, TLS, a bearer token with full rights) and the same pod
bodies for all three, in namespace ``default`` (on kube-apiserver the bench first creates the ``default``
ServiceAccount, which the absent controller-manager would have made and pod admission requires):

1. **sequential writes**: one client creates 400 pods one after the other (each answered only once stored);
2. **concurrent writes**: 4 clients, each its own connection, create the next 600 pods together;
3. **list 1,000 pods**: a full ``GET .../pods`` (no ``limit``), timed until the whole body is read, and the
   same with ``labelSelector=bench-group=g3`` (100 of the 1,000);
4. **watch delivery**: one watch stream from the list's resourceVersion; one client creates 300 more pods one
   at a time and, after each write's response, waits for that pod's ADDED event; the figure is the time from
   the write's response to the event's arrival at the watcher (negative when the event came first), and from
   the write's start (before its request is sent), as ``bench_api.py`` measures it.

Rates are one figure per repetition (median of the repetitions printed); latencies pool every sample of every
repetition (median and p95).  ``real/ref`` divides kube-apiserver+etcd's figure by the shipped reference's:
below 1 for a rate, or above 1 for a latency, means kube-apiserver+etcd is slower.  The machine is shared:
compare ratios from the same run.
"""

from __future__ import annotations

import argparse
import enum
import json
import math
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # tests.realk8s lives in the repository, not in the installed packages
    sys.path.insert(0, str(ROOT))

from refplatform.cluster import Cluster, ClusterSpec  # noqa: E402
from tests.realk8s.cluster import RealCluster, RealClusterError, RealClusterSpec, read_build_info  # noqa: E402

BUILD_SCRIPT = ROOT / "tests" / "realk8s" / "build.sh"
NO_BINARIES_EXIT = 3
NAMESPACE = "default"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
LIST_TOTAL = 1000
LABEL_GROUPS = 10
SELECTOR = "bench-group=g3"
CLIENT_TIMEOUT_S = 60.0
EVENT_TIMEOUT_S = 30.0


class Backend(enum.Enum):
    """The API servers compared."""

    REFERENCE = "reference"
    """refplatform's API server, --durability normal (as shipped)."""
    REFERENCE_FULL = "reference-full"
    """refplatform's API server, --durability full (fsync per commit)."""
    REAL = "kube-apiserver+etcd"
    """kube-apiserver v1.37.2 and etcd 3.7.0 from tests/realk8s."""


@dataclass(frozen=True)
class Sizes:
    """How much work one repetition does."""

    reps: int
    sequential_writes: int
    concurrent_clients: int
    list_samples: int
    watch_writes: int

    @property
    def concurrent_writes(self) -> int:
        return LIST_TOTAL - self.sequential_writes


FULL = Sizes(reps=5, sequential_writes=400, concurrent_clients=4, list_samples=30, watch_writes=300)
QUICK = Sizes(reps=1, sequential_writes=400, concurrent_clients=4, list_samples=10, watch_writes=50)


@dataclass
class Figures:
    """What one backend measured over all repetitions (seconds, except rates)."""

    sequential_rate: list[float] = field(default_factory=list)
    sequential_latency: list[float] = field(default_factory=list)
    concurrent_rate: list[float] = field(default_factory=list)
    list_full: list[float] = field(default_factory=list)
    list_selector: list[float] = field(default_factory=list)
    list_bytes: list[int] = field(default_factory=list)
    watch_delivery: list[float] = field(default_factory=list)
    """From each write's response to its event at the watcher."""
    watch_from_start: list[float] = field(default_factory=list)
    """From each write's start (before the request is sent) to its event at the watcher."""


@dataclass
class Server:
    """A started API server: where it is, how to trust it, who we are, and how to stop it."""

    url: str
    ca_file: Path
    token: str
    stop: Callable[[], None]
    kubeconfig: Path
    """An admin kubeconfig, for a client that reads one (the harness's KubeDriver)."""
    tls: ssl.SSLContext = field(init=False)

    def __post_init__(self) -> None:
        self.tls = ssl.create_default_context(cafile=str(self.ca_file))

    def client(self) -> httpx.Client:
        """The one client configuration every backend gets."""
        return httpx.Client(base_url=self.url, verify=self.tls, timeout=CLIENT_TIMEOUT_S,
                            headers={"Authorization": f"Bearer {self.token}"})


class ApiServerAndEtcd(RealCluster):
    """tests/realk8s's control plane with only etcd and kube-apiserver: the two components a write, a list and
    a watch touch.  RealCluster.start() still makes the PKI, the tokens and the admin kubeconfig."""

    def _start_controller_manager(self) -> None:
        pass

    def _start_scheduler(self) -> None:
        pass


def default_bin_dir() -> Path:
    """Where build.sh caches the binaries (its own defaults and environment variables)."""
    cache = Path(os.environ.get("FIREDRILL_REALK8S_CACHE") or Path.home() / ".cache" / "firedrill" / "realk8s")
    return cache / os.environ.get("FIREDRILL_K8S_VERSION", "v1.37.2") / "bin"


def real_bin_dir() -> Path | None:
    """build.sh's bin folder when the binaries are cached (build.sh then only reuses them), else None."""
    try:
        read_build_info(default_bin_dir())
    except RealClusterError:
        return None
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise RealClusterError(f"{BUILD_SCRIPT} failed ({proc.returncode}): {proc.stderr.strip()}")
    return Path(proc.stdout.strip().splitlines()[-1])


def start(backend: Backend, work: Path, bin_dir: Path) -> Server:
    if backend is Backend.REAL:
        real = ApiServerAndEtcd(RealClusterSpec(bin_dir=bin_dir, work_dir=work))
        real.start()
        server = Server(real.url, real.ca_file, real.admin_token, real.stop, real.admin_kubeconfig)
        with server.client() as http:
            sa = http.post(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                           json={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
            if sa.status_code != 409:
                sa.raise_for_status()
        return server
    durability = "full" if backend is Backend.REFERENCE_FULL else "normal"
    ref = Cluster(ClusterSpec(work, nodes=0, extra_server_args=("--durability", durability)))
    ref.start_server()
    assert ref.url and ref.token and ref.ca_file
    return Server(ref.url, ref.ca_file, ref.token, ref.stop, Path(str(ref.kubeconfig)))


def pod(name: str, index: int, phase: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"bench": "1", "bench-phase": phase,
                                                  "bench-group": f"g{index % LABEL_GROUPS}"}},
            "spec": {"containers": [{"name": "main", "image": "firedrill/canary:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def warm(http: httpx.Client) -> None:
    """Open the connection (TLS handshake) and touch the list path before any timer starts."""
    for _ in range(5):
        http.get(PODS, params={"limit": "1"}).raise_for_status()


def sequential_writes(server: Server, count: int) -> tuple[float, list[float]]:
    """Writes/s of one client creating ``count`` pods one after the other, and each create's latency."""
    latencies = []
    with server.client() as http:
        warm(http)
        t0 = time.perf_counter()
        for i in range(count):
            t = time.perf_counter()
            http.post(PODS, json=pod(f"s{i:04d}", i, "sequential")).raise_for_status()
            latencies.append(time.perf_counter() - t)
        return count / (time.perf_counter() - t0), latencies


def concurrent_writes(server: Server, count: int, clients: int, offset: int) -> float:
    """Writes/s of ``clients`` clients creating ``count`` pods in all, together."""
    per, extra = divmod(count, clients)
    shares = [per + (1 if c < extra else 0) for c in range(clients)]
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def write(c: int) -> None:
        try:
            with server.client() as http:
                warm(http)
                barrier.wait()
                first = offset + sum(shares[:c])
                for i in range(first, first + shares[c]):
                    http.post(PODS, json=pod(f"c{i:04d}", i, "concurrent")).raise_for_status()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=write, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return count / elapsed


def list_latency(server: Server, samples: int, figures: Figures) -> str:
    """Time full lists and label-selector lists; returns the resourceVersion of the last full list."""
    rv = ""
    with server.client() as http:
        warm(http)
        for _ in range(samples):
            for params, expect, into in (({}, LIST_TOTAL, figures.list_full),
                                         ({"labelSelector": SELECTOR}, LIST_TOTAL // LABEL_GROUPS,
                                          figures.list_selector)):
                t = time.perf_counter()
                resp = http.get(PODS, params=params)
                body = resp.read()
                into.append(time.perf_counter() - t)
                resp.raise_for_status()
                doc = json.loads(body)
                if len(doc["items"]) != expect:
                    raise AssertionError(f"list {params or 'all'} returned {len(doc['items'])} pods, not {expect}")
                if not params:
                    rv = doc["metadata"]["resourceVersion"]
                    figures.list_bytes.append(len(body))
    return rv


def watch_delivery(server: Server, rv: str, count: int) -> tuple[list[float], list[float]]:
    """Create ``count`` pods one at a time; per write, the time from its response (and from its start) to its ADDED
    event at a watcher."""
    arrived: dict[str, float] = {}
    cond = threading.Condition()
    connected = threading.Event()
    errors: list[BaseException] = []

    def watch() -> None:
        seen = 0
        try:
            with server.client() as http, http.stream(
                    "GET", PODS, params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "600"},
                    timeout=httpx.Timeout(CLIENT_TIMEOUT_S, read=None)) as resp:
                resp.raise_for_status()
                connected.set()
                for line in resp.iter_lines():
                    if not line:
                        continue
                    now = time.perf_counter()
                    event = json.loads(line)
                    if event["type"] != "ADDED":
                        continue
                    with cond:
                        arrived[event["object"]["metadata"]["name"]] = now
                        cond.notify_all()
                    seen += 1
                    if seen == count:
                        return
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            connected.set()
            with cond:
                cond.notify_all()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    if not connected.wait(EVENT_TIMEOUT_S):
        raise TimeoutError("the watch stream did not open")
    latencies, from_start = [], []
    with server.client() as http:
        warm(http)
        for i in range(count):
            name = f"w{i:04d}"
            sent = time.perf_counter()
            http.post(PODS, json=pod(name, i, "watch")).raise_for_status()
            answered = time.perf_counter()
            with cond:
                if not cond.wait_for(lambda n=name: n in arrived or bool(errors), EVENT_TIMEOUT_S):
                    raise TimeoutError(f"no ADDED event for {name} within {EVENT_TIMEOUT_S:.0f}s")
                if errors:
                    raise errors[0]
                latencies.append(arrived[name] - answered)
                from_start.append(arrived[name] - sent)
    watcher.join(EVENT_TIMEOUT_S)
    return latencies, from_start


def run_once(backend: Backend, work: Path, bin_dir: Path, sizes: Sizes, figures: Figures) -> str:
    server = start(backend, work, bin_dir)
    try:
        rate, lat = sequential_writes(server, sizes.sequential_writes)
        figures.sequential_rate.append(rate)
        figures.sequential_latency += lat
        crate = concurrent_writes(server, sizes.concurrent_writes, sizes.concurrent_clients,
                                  offset=sizes.sequential_writes)
        figures.concurrent_rate.append(crate)
        n_full = len(figures.list_full)
        rv = list_latency(server, sizes.list_samples, figures)
        lists = figures.list_full[n_full:]
        watch, from_start = watch_delivery(server, rv, sizes.watch_writes)
        figures.watch_delivery += watch
        figures.watch_from_start += from_start
        return (f"{rate:6.0f} w/s seq, {crate:6.0f} w/s x{sizes.concurrent_clients}, "
                f"list {ms(statistics.median(lists)):6.1f} ms, watch p95 {ms(p95(watch)):5.1f} ms")
    finally:
        server.stop()


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def ms(seconds: float) -> float:
    return seconds * 1e3


def summary(results: dict[Backend, Figures], sizes: Sizes) -> list[tuple[str, list[float]]]:
    """Rows of (metric, value per backend in Backend order)."""
    def each(fn: Callable[[Figures], float]) -> list[float]:
        return [fn(results[b]) for b in Backend]
    c = sizes.concurrent_clients
    return [
        (f"writes/s, 1 client, {sizes.sequential_writes} creates (median of reps)",
         each(lambda f: statistics.median(f.sequential_rate))),
        ("create latency, 1 client, median ms", each(lambda f: ms(statistics.median(f.sequential_latency)))),
        ("create latency, 1 client, p95 ms", each(lambda f: ms(p95(f.sequential_latency)))),
        (f"writes/s, {c} clients, {sizes.concurrent_writes} creates (median of reps)",
         each(lambda f: statistics.median(f.concurrent_rate))),
        (f"list {LIST_TOTAL:,} pods, median ms", each(lambda f: ms(statistics.median(f.list_full)))),
        (f"list {LIST_TOTAL:,} pods, p95 ms", each(lambda f: ms(p95(f.list_full)))),
        (f"list {SELECTOR} ({LIST_TOTAL // LABEL_GROUPS} of {LIST_TOTAL:,}), median ms",
         each(lambda f: ms(statistics.median(f.list_selector)))),
        (f"list {SELECTOR}, p95 ms", each(lambda f: ms(p95(f.list_selector)))),
        (f"list {LIST_TOTAL:,} pods, body KiB", each(lambda f: statistics.median(f.list_bytes) / 1024)),
        ("watch delivery after the write's response, median ms",
         each(lambda f: ms(statistics.median(f.watch_delivery)))),
        ("watch delivery after the write's response, p95 ms", each(lambda f: ms(p95(f.watch_delivery)))),
        ("watch delivery after the write's start, median ms",
         each(lambda f: ms(statistics.median(f.watch_from_start)))),
        ("watch delivery after the write's start, p95 ms", each(lambda f: ms(p95(f.watch_from_start)))),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="1 repetition, fewer list samples and watch writes")
    parser.add_argument("--reps", type=int, help="repetitions (default 5, or 1 with --quick)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.reps is not None:
        if args.reps < 1:
            parser.error("--reps must be at least 1")
        sizes = Sizes(args.reps, sizes.sequential_writes, sizes.concurrent_clients, sizes.list_samples,
                      sizes.watch_writes)

    bin_dir = real_bin_dir()
    if bin_dir is None:
        print(f"kube-apiserver and etcd are not built in {default_bin_dir()}.\n"
              f"Build them once (needs Go and the Go module proxy; about 7 minutes cold on 2 cores):\n"
              f"    bash tests/realk8s/build.sh\n"
              f"then run this benchmark again.", file=sys.stderr)
        return NO_BINARIES_EXIT
    build = read_build_info(bin_dir)
    print(f"side by side: reference API server vs kube-apiserver {build.kubernetes} + etcd {build.etcd}; "
          f"{sizes.reps} repetition(s); {os.cpu_count()} CPUs; httpx {httpx.__version__}, HTTP/1.1")
    print(f"work per repetition: {sizes.sequential_writes} sequential creates, {sizes.concurrent_writes} creates "
          f"by {sizes.concurrent_clients} clients, {sizes.list_samples} full + {sizes.list_samples} selector lists "
          f"of {LIST_TOTAL:,} pods, {sizes.watch_writes} watched creates")
    results = {b: Figures() for b in Backend}
    order = list(Backend)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-sbs-") as tmp_s:
        tmp = Path(tmp_s)
        for rep in range(sizes.reps):
            for backend in order[rep % len(order):] + order[:rep % len(order)]:
                line = run_once(backend, tmp / f"{backend.name.lower()}-{rep}", bin_dir, sizes, results[backend])
                print(f"  rep {rep + 1} {backend.value:<20} {line}", flush=True)
    print(f"\n{'':60} {'reference':>10} {'ref-full':>10} {'k-a+etcd':>10} {'real/ref':>9}")
    for label, values in summary(results, sizes):
        ref, _, real = values
        ratio = f"{real / ref:9.2f}" if ref > 0 and real > 0 else f"{'-':>9}"  # no ratio across zero
        print(f"{label:60} " + " ".join(f"{v:10.2f}" for v in values) + f" {ratio}")
    print(f"\n(reference = refplatform --durability normal, as shipped; ref-full = --durability full; "
          f"k-a+etcd = kube-apiserver + etcd; {time.monotonic() - t0:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
