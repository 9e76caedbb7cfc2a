"""Accounting benchmark: a month of a busy GPU cluster through ``refplatform.core.accounting.account``.

Run from the repository root::

    python tests/bench/bench_accounting.py [--nodes 64] [--days 30] [--repeat 5] [--seed 7]

Builds a seeded synthetic month (``nodes`` x 8 GPUs; training pods of 1-8 GPUs
arriving all month, each with an activity sample per hour as its rates drift,
fragmentation- and capacity-blocked demand, a node fault every few hours with
its incident) and prints the median seconds to account the whole month and one
day of it, with the history's size.  Budget (docs/BENCHMARKS.md): a month in
<= 10 s, as the pure scheduler core replays a month of trace in seconds.
Exit code 1 when the budget is missed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from refplatform.core.accounting import (
    ActivitySample, History, Incident, NodeCapacity, PendingDemand, PendingReason, PodInterval, Window, account,
)

BUDGET_MONTH_SECONDS = 10.0
DAY = 86_400.0
T0 = 1_800_000_000.0


def synthetic_month(nodes: int, days: int, seed: int) -> History:
    rng = random.Random(seed)
    end = T0 + days * DAY
    capacity: list[NodeCapacity] = []
    incidents: list[Incident] = []
    down: dict[str, list[tuple[float, float]]] = {}
    t = T0 + rng.expovariate(1 / (4 * 3600))
    while t < end:  # a node fault every ~4 h, 2-20 min down
        node = f"n{rng.randrange(nodes)}"
        back = t + rng.uniform(120, 1200)
        if all(b < t or a > back for a, b in down.get(node, [])):
            down.setdefault(node, []).append((t, back))
            incidents.append(Incident("team-a", "research", f"job-f{len(incidents)}", t, t + rng.uniform(60, 600),
                                      8, rng.uniform(0, 3600)))
        t = back + rng.expovariate(1 / (4 * 3600))
    for n in range(nodes):
        name, cursor = f"n{n}", T0
        for a, b in sorted(down.get(name, [])):
            capacity += [NodeCapacity(name, 8, cursor, a), NodeCapacity(name, 8, a, b, healthy=False)]
            cursor = b
        capacity.append(NodeCapacity(name, 8, cursor, end))
    pods: list[PodInterval] = []
    samples: list[ActivitySample] = []
    pending: list[PendingDemand] = []
    free_at = [T0] * nodes  # one pod per node at a time keeps the history consistent and the cluster busy
    tenants = [("team-a", "research"), ("team-b", "prod"), ("team-c", "batch"), ("team-d", "dev")]
    for n in range(nodes):
        while free_at[n] < end:
            start = free_at[n] + rng.expovariate(1 / 900)
            stop = min(end, start + rng.expovariate(1 / (6 * 3600)))
            if stop <= start:
                break
            ns, queue = rng.choice(tenants)
            name = f"p{len(pods)}"
            gpus = rng.choice((1, 2, 4, 8))
            pods.append(PodInterval(name, ns, queue, f"job-{name}", f"n{n}", gpus, start, stop))
            s = start
            while s < stop:  # rates drift: one sample per hour
                e = min(stop, s + 3600)
                active = rng.uniform(0.3, 0.95)
                samples.append(ActivitySample(name, s, e, active, active * rng.uniform(0.2, 0.6),
                                              (e - s) * rng.uniform(0, 0.2), (e - s) * rng.uniform(0, 0.1)))
                s = e
            if rng.random() < 0.3:  # something waited while this pod ran
                reason = rng.choice((PendingReason.FRAGMENTATION, PendingReason.INSUFFICIENT_CAPACITY))
                pending.append(PendingDemand(ns, queue, f"wait-{name}", rng.choice((2, 4, 8)), start,
                                             min(stop, start + rng.uniform(60, 3600)), reason))
            free_at[n] = stop
    return History(tuple(capacity), tuple(pods), tuple(samples), tuple(pending), tuple(incidents))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    history = synthetic_month(args.nodes, args.days, args.seed)
    print(f"history: {args.nodes} nodes x 8 GPUs, {args.days} days: {len(history.pods)} pods, "
          f"{len(history.samples)} samples, {len(history.pending)} pending intervals, "
          f"{len(history.incidents)} incidents")
    windows = {"month": Window(T0, T0 + args.days * DAY), "one day": Window(T0 + DAY, T0 + 2 * DAY)}
    medians: dict[str, float] = {}
    for label, window in windows.items():
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            report = account(window, history)
            times.append(time.perf_counter() - t)
        medians[label] = statistics.median(times)
        print(f"{label:>8}: median {medians[label]:.3f} s over {args.repeat} runs; {report.summary}")
    ok = medians["month"] <= BUDGET_MONTH_SECONDS
    print(f"budget: a month in <= {BUDGET_MONTH_SECONDS:g} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
