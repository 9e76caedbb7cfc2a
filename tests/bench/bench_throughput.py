"""Scheduling throughput of the pure core: 1,000 nodes x 8 GPUs, 10,000 pods in gangs of 8.

Run from the repository root::

    python tests/bench/bench_throughput.py [--runs 3] [--placement best-fit]

Each pod asks for 1 GPU, so a gang fills one node: 1,000 gangs (8,000 pods) fit and
250 gangs (2,000 pods) are reported unschedulable in the same cycle.  One
``schedule(snapshot, config)`` call is timed (building the session from the
snapshot included, building the snapshot objects excluded); the figure is the
median over the runs.  Anchor: kube-scheduler's CI floor for extended resources
is 180 pods/s at 5,000 nodes (scheduler_perf SchedulingWithExtendedResource).
Budget (docs/SCHEDULER.md): >= 1,000 bound pods/s.  Exit code 1 when missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from refplatform.core import (
    Node,
    Pod,
    PodGroup,
    PodGroupPhase,
    Resources,
    SchedulerConfig,
    Snapshot,
    schedule,
)

NODES, GPUS, PODS, GANG = 1000, 8, 10_000, 8
BUDGET = 1000.0
ANCHOR = 180.0


def build() -> Snapshot:
    nodes = tuple(Node(f"node-{i:04d}", Resources(128_000, 1 << 40, GPUS),
                       labels={"nvidia.com/gpu.product": "H100"}) for i in range(NODES))
    groups, pods = [], []
    for g in range(PODS // GANG):
        groups.append(PodGroup("bench", f"job-{g:04d}", GANG, queue="default", phase=PodGroupPhase.INQUEUE,
                               created_at=g * 0.01))
        for k in range(GANG):
            pods.append(Pod("bench", f"job-{g:04d}-{k}", uid=f"u{g}-{k}", requests=Resources(4000, 16 << 30, 1),
                            group=f"job-{g:04d}", created_at=g * 0.01))
    # all gangs arrived within the last 13 s: none is past the starvation bound
    return Snapshot(nodes, tuple(pods), tuple(groups), (), now=15.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--placement", default="best-fit", choices=("random", "best-fit", "fgd"))
    args = parser.parse_args(argv)
    snapshot = build()
    config = SchedulerConfig(placement=args.placement)
    seconds, bound, failed = [], 0, 0
    for _ in range(args.runs):
        started = time.perf_counter()
        decisions = schedule(snapshot, config)
        seconds.append(time.perf_counter() - started)
        bound, failed = len(decisions.binds), len(decisions.failures)
    median = statistics.median(seconds)
    print(f"scheduling throughput: {NODES} nodes x {GPUS} GPUs, {PODS} pods in gangs of {GANG}, "
          f"placement {args.placement}, {args.runs} runs")
    print(f"  one cycle: median {median:.2f} s (runs: {', '.join(f'{s:.2f}' for s in seconds)})")
    print(f"  bound {bound} pods, unschedulable {failed} pods")
    print(f"  bound pods/s:     {bound / median:8.0f}   (budget >= {BUDGET:.0f}; "
          f"anchor: kube-scheduler floor {ANCHOR:.0f} pods/s, extended resources, 5,000 nodes)")
    print(f"  processed pods/s: {PODS / median:8.0f}")
    ok = bound == NODES * GPUS and bound / median >= BUDGET
    print("  PASS" if ok else "  FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
