"""API server benchmarks: list latency at 1,000 pods, durable writes per second, watch fan-out.

Run on demand (not part of the test suite):

    python tests/bench/bench_api.py

Each figure is a median over repetitions; the machine is shared and noisy, so
compare ratios between runs on the same machine rather than absolute numbers.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from refplatform.cluster import Cluster, ClusterSpec, wait_until

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": ""},
       "spec": {"containers": [{"name": "main", "image": "firedrill/canary:1",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def pod(name: str) -> dict:
    return {**POD, "metadata": {"name": name, "labels": {"bench": "1"}}}


def start(tmp: Path, durability: str = "normal") -> tuple[Cluster, httpx.Client]:
    cluster = Cluster(ClusterSpec(tmp, nodes=0, extra_server_args=("--durability", durability)))
    cluster.start_server()
    return cluster, cluster.http_client(timeout=30)


def bench_list(tmp: Path) -> dict[str, float]:
    cluster, http = start(tmp)
    try:
        for i in range(1000):
            http.post("/api/v1/namespaces/default/pods", json=pod(f"p{i:04d}")).raise_for_status()
        samples, table_samples = [], []
        for _ in range(30):
            t0 = time.perf_counter()
            items = http.get("/api/v1/namespaces/default/pods").json()["items"]
            samples.append(time.perf_counter() - t0)
            assert len(items) == 1000
            t0 = time.perf_counter()
            http.get("/api/v1/pods", headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
            table_samples.append(time.perf_counter() - t0)
        return {"list 1000 pods, JSON, median ms": statistics.median(samples) * 1e3,
                "list 1000 pods, JSON, p95 ms": sorted(samples)[int(0.95 * len(samples)) - 1] * 1e3,
                "list 1000 pods, kubectl Table, median ms": statistics.median(table_samples) * 1e3}
    finally:
        http.close()
        cluster.stop()


def bench_writes(tmp: Path, durability: str, total: int = 2000, writers: int = 4) -> float:
    cluster, http = start(tmp, durability)
    http.close()
    per = total // writers

    def write(w: int) -> None:
        with cluster.http_client(timeout=30) as c:
            for i in range(per):
                c.post("/api/v1/namespaces/default/pods", json=pod(f"w{w}-{i}")).raise_for_status()
    try:
        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return per * writers / (time.perf_counter() - t0)
    finally:
        cluster.stop()


def bench_fanout(tmp: Path, watchers: int = 50, events: int = 200) -> dict[str, float]:
    cluster, http = start(tmp)
    rv = http.get("/api/v1/namespaces/default/pods").json()["metadata"]["resourceVersion"]
    sent: dict[str, float] = {}
    latencies: list[float] = []
    done = [0]
    lock = threading.Lock()

    def watch() -> None:
        seen = 0
        with cluster.http_client(timeout=60) as c:
            with c.stream("GET", "/api/v1/namespaces/default/pods",
                          params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "60"}) as resp:
                for line in resp.iter_lines():
                    if not line:
                        continue
                    now = time.perf_counter()
                    name = line.split('"name":"', 1)[1].split('"', 1)[0]
                    with lock:
                        latencies.append(now - sent[name])
                    seen += 1
                    if seen == events:
                        break
        with lock:
            done[0] += 1

    threads = [threading.Thread(target=watch, daemon=True) for _ in range(watchers)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # let every watcher connect before the first event (bench only, not a test)
    t0 = time.perf_counter()
    try:
        for i in range(events):
            name = f"f{i:04d}"
            sent[name] = time.perf_counter()
            http.post("/api/v1/namespaces/default/pods", json=pod(name)).raise_for_status()
        wait_until(lambda: done[0] == watchers, 120, "all watchers to see every event")
        elapsed = time.perf_counter() - t0
        latencies.sort()
        return {"watchers": watchers, "events each": events,
                "delivered events/s": watchers * events / elapsed,
                "delivery latency p50 ms": latencies[len(latencies) // 2] * 1e3,
                "delivery latency p95 ms": latencies[int(0.95 * len(latencies))] * 1e3}
    finally:
        http.close()
        cluster.stop()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        print("list latency:")
        for k, v in bench_list(tmp / "list").items():
            print(f"  {k}: {v:.1f}")
        for durability in ("normal", "full"):
            rates = [bench_writes(tmp / f"w-{durability}-{r}", durability) for r in range(3)]
            print(f"durable writes/s ({durability}, 4 writers, 2000 creates, median of 3): "
                  f"{statistics.median(rates):.0f}")
        print("watch fan-out:")
        for k, v in bench_fanout(tmp / "fanout").items():
            print(f"  {k}: {v:.1f}" if isinstance(v, float) else f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
