"""Trace replay benchmark: the FGD paper's method on the openb trace, every placement policy.

Run from the repository root::

    python tests/bench/bench_replay.py [--seeds 42-51] [--policy fgd best-fit ...] [--trace-dir DIR]

For each policy, replays seeds 42..51 (workload inflated to 130 % of GPU capacity,
shuffled, pods never leave, equal scores to the first node in a fixed seeded order)
and prints the mean unallocated GPU share at 100 % and 130 % arrived workload next
to the published means (Weng et al., ATC'23, artifact ``analysis_allo_discrete.csv``),
their difference, and the median seconds per replay.

Budgets (issue 17, docs/SCHEDULER.md): ``fgd`` within 0.3 points of its published
mean at 130 %, every other published policy within 0.5 points, the hybrid ``fgd+headroom``
(:data:`HYBRID`) at or below 4.4 %, every replay at most 10 s.  The older hybrids ``fgd+bestfit`` and
``fgd+pack`` are printed for comparison, with no budget.  Exit code 0 when every budget of the policies
run holds, 1 when one is missed, 2 when the trace is missing (nothing was measured).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from refplatform.core import PLACEMENT_POLICIES
from refplatform.sim import DEFAULT_POD_FILE, PUBLISHED_UNALLOCATED_130, default_trace_dir, replay
from refplatform.sim.replay import PUBLISHED_UNALLOCATED_100

TOLERANCE = {"fgd": 0.3}
"""Points a policy's mean at 130 % may differ from the published one; others get DEFAULT_TOLERANCE."""
DEFAULT_TOLERANCE = 0.5
HYBRID = "fgd+headroom"
"""The hybrid issue 17's budget applies to (chosen on seeds 0..19 and confirmed on 20..41, docs/SCHEDULER.md)."""
BUDGET_HYBRID_130 = 4.4
BUDGET_SECONDS = 10.0


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-51", help="a seed or a range, e.g. 42-51")
    parser.add_argument("--policy", nargs="+", default=list(PLACEMENT_POLICIES), choices=PLACEMENT_POLICIES)
    parser.add_argument("--trace-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    seeds = _seeds(args.seeds)
    trace = args.trace_dir or default_trace_dir()
    if not (trace / DEFAULT_POD_FILE).is_file():
        print(f"error: trace not found: {trace / DEFAULT_POD_FILE}; nothing was measured. Copy the Alibaba "
              "GPU trace v2023 (openb) there or pass --trace-dir", file=sys.stderr)
        return 2
    print(f"openb replay, FGD method: trace {trace}, seeds {seeds[0]}..{seeds[-1]}")
    print(f"{'policy':<15} {'unalloc@100%':>12} {'published':>9} {'unalloc@130%':>12} {'published':>9} "
          f"{'diff':>6} {'stdev@130':>9} {'median s':>8}  budget")
    ok = True
    all_seconds = []
    for policy in args.policy:
        results = [replay(trace, policy, seed) for seed in seeds]
        u100 = statistics.fmean(r.unallocated_100 for r in results)
        u130 = statistics.fmean(r.unallocated_130 for r in results)
        all_seconds.extend(r.seconds for r in results)
        pub100 = PUBLISHED_UNALLOCATED_100.get(policy)
        pub130 = PUBLISHED_UNALLOCATED_130.get(policy)
        if pub130 is not None:
            tol = TOLERANCE.get(policy, DEFAULT_TOLERANCE)
            passed = abs(u130 - pub130) <= tol
            budget = f"|diff| <= {tol}: {'PASS' if passed else 'FAIL'}"
        elif policy == HYBRID:
            passed = u130 <= BUDGET_HYBRID_130
            budget = f"<= {BUDGET_HYBRID_130}: {'PASS' if passed else 'FAIL'}"
        else:
            passed, budget = True, "-"
        ok = ok and passed
        fmt = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
        diff = f"{u130 - pub130:+.2f}" if pub130 is not None else "-"
        print(f"{policy:<15} {u100:>12.2f} {fmt(pub100):>9} {u130:>12.2f} {fmt(pub130):>9} {diff:>6} "
              f"{statistics.pstdev(r.unallocated_130 for r in results):>9.2f} "
              f"{statistics.median(r.seconds for r in results):>8.2f}  {budget}")
    worst = max(all_seconds)
    ok = ok and worst <= BUDGET_SECONDS
    print(f"every replay <= {BUDGET_SECONDS:.0f} s (slowest {worst:.2f} s); all budgets: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
