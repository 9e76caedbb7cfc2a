"""The platform's REST client: CPU a request on the client's side, against a real API server.

Run on demand (not part of the test suite), from the repository root:

    python tests/bench/bench_client.py [--requests 1500] [--rounds 3]

One thread creates Events through :class:`refplatform.client.RestClient` (TLS, token, JSON both ways), as
the scheduler writes its ``Scheduled`` Events; the figure is the client thread's own CPU time a request
(``time.thread_time``), the median over the rounds, with the wall time beside.  Every process of the
end-to-end benchmark is such a client, so this cost is paid four times over for each pod there
(docs/SCHEDULER.md, "End-to-end throughput").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from refplatform.client import RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec


def event(i: int, round_: int) -> dict:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"bench-{round_}-{i}", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"},
            "reason": "Scheduled", "message": "benchmark", "type": "Normal"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1500, help="creates a round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        cluster = Cluster(ClusterSpec(Path(tmp), nodes=0, controllers=()))
        cluster.start_server(timeout=60)
        try:
            client = RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file, timeout=30)
            path = resource_path("", "v1", "events", "default")
            for i in range(200):  # warm up: connections, caches
                client.create(path, event(i, -1))
            cpu, wall = [], []
            for r in range(args.rounds):
                c0, w0 = time.thread_time(), time.perf_counter()
                for i in range(args.requests):
                    client.create(path, event(i, r))
                cpu.append((time.thread_time() - c0) / args.requests * 1e6)
                wall.append((time.perf_counter() - w0) / args.requests * 1e6)
                print(f"round {r + 1}/{args.rounds}: client CPU {cpu[-1]:.0f} us a request, wall {wall[-1]:.0f} us",
                      flush=True)
            client.close()
        finally:
            cluster.stop()
    print(f"median of {args.rounds}: client CPU {statistics.median(cpu):.0f} us a request "
          f"(wall {statistics.median(wall):.0f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
