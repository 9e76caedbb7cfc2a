"""``python -m refplatform.sim``: replay the openb trace and print a table."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from refplatform.core import PLACEMENT_POLICIES, TieBreak
from refplatform.sim.replay import PUBLISHED_UNALLOCATED_100, PUBLISHED_UNALLOCATED_130, default_trace_dir, replay
from refplatform.sim.trace import DEFAULT_POD_FILE, TraceError


def _seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            seeds.extend(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m refplatform.sim",
        description="Replay the Alibaba GPU trace v2023 (openb) with the FGD paper's method "
                    "(workload inflated to 130%% of GPU capacity, shuffled, pods never leave, equal scores to the "
                    "first node in a fixed seeded order) "
                    "and print GPU allocation and fragmentation per policy.")
    parser.add_argument("--trace-dir", type=Path, default=None,
                        help=f"trace directory (default: {default_trace_dir()})")
    parser.add_argument("--pod-file", default=DEFAULT_POD_FILE, help="pod list CSV in the trace directory")
    parser.add_argument("--policy", nargs="+", choices=PLACEMENT_POLICIES, default=list(PLACEMENT_POLICIES),
                        help="placement policies to replay")
    parser.add_argument("--seeds", default="42", help="seeds, e.g. 42 or 42-51 or 42,43")
    parser.add_argument("--ratio", type=float, default=1.3, help="workload inflation ratio (default 1.3)")
    parser.add_argument("--tie-break", choices=[t.value for t in TieBreak], default=TieBreak.ORDER.value,
                        help="how equal scores are broken (default order: the first node in a fixed seeded "
                             "order, as in the FGD authors' simulator)")
    parser.add_argument("--fgd-packing-weight", type=float, default=None,
                        help="fgd+bestfit's weight of the best-fit score (default: SchedulerConfig's)")
    args = parser.parse_args(argv)
    trace_dir = args.trace_dir or default_trace_dir()
    seeds = _seeds(args.seeds)
    header = (f"{'policy':<15} {'seeds':>5} {'alloc@100%':>10} {'unalloc@100%':>12} {'unalloc@130%':>12} "
              f"{'frag ratio@90%':>14} {'failed pods':>11} {'s/replay':>8}  published unalloc@100/130%")
    weight = "" if args.fgd_packing_weight is None else f"  fgd+bestfit weight: {args.fgd_packing_weight}"
    print(f"trace: {trace_dir}  pod file: {args.pod_file}  seeds: {args.seeds}  tie-break: {args.tie_break}{weight}")
    print(header)
    print("-" * len(header))
    for policy in args.policy:
        try:
            results = [replay(trace_dir, policy, seed, args.pod_file, ratio=args.ratio,
                              tie_break=TieBreak(args.tie_break), fgd_packing_weight=args.fgd_packing_weight)
                       for seed in seeds]
        except TraceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        mean = lambda f: statistics.fmean(f(r) for r in results)  # noqa: E731
        published = "-"
        if args.pod_file == DEFAULT_POD_FILE and policy in PUBLISHED_UNALLOCATED_130:
            published = f"{PUBLISHED_UNALLOCATED_100[policy]:.2f} / {PUBLISHED_UNALLOCATED_130[policy]:.2f}"
        print(f"{policy:<15} {len(seeds):>5} {mean(lambda r: r.alloc_at(100)):>10.2f} "
              f"{mean(lambda r: r.unallocated_100):>12.2f} {mean(lambda r: r.unallocated_130):>12.2f} "
              f"{mean(lambda r: r.frag_ratio_at(90)):>14.1f} {mean(lambda r: r.failed_pods):>11.0f} "
              f"{statistics.median(r.seconds for r in results):>8.2f}  {published}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
