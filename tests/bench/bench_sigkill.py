"""Every shipped feature, SIGKILLed at random instants against a cluster `firedrill up` runs (issue 45, Done-when 1).

    python tests/bench/bench_sigkill.py [--instants 20] [--seed 45] [--only node_pull gang_submission]

One `firedrill up --spares 0` runs the whole time; for each instant a fresh `firedrill run --kubeconfig ... --profile
examples/embedded/up.yaml` of one shipped feature file (files taken in turn, the instant drawn at random between 0
and that file's honest duration, measured first by a run left alone) is SIGKILLed with its whole process group,
as a CI runner's timeout would. Then, each time:

1. a `firedrill run --dry-run` started before the recover must refuse the cluster (exit 4) when the dead run left
   something (a journal entry still open, or a pod of its own), naming it; a run killed before it touched anything
   may leave nothing, and the dry run then goes ahead (exit 0 or 3);
2. `firedrill recover` must exit 0;
3. within 60 s the cluster must be as before the first run: every node Ready and schedulable, its taints, labels
   and allocatable GPUs as before, no pod labelled firedrill.dev/drill-run.

Prints one line per instant and the count of instants where any of the three failed; exit 0 when none did.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # tests.bench lives in the repository, not in the installed packages
    sys.path.insert(0, str(REPO))

from tests.integration.up_cluster import (UpCluster, cluster_state, kill_group, start_run,  # noqa: E402
                                          up_profile, wait_for)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instants", type=int, default=20)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--only", nargs="*", help="feature file stems (default: every shipped feature)")
    parser.add_argument("--expire", type=float, default=120.0, help="the profile's fault.expire_seconds")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    files = sorted(p for p in (REPO / "features").glob("*.feature") if not args.only or p.stem in args.only)
    root = Path(tempfile.mkdtemp(prefix="bench-sigkill-"))
    print(f"seed {args.seed}; {len(files)} feature files; work in {root}", flush=True)
    failures = 0
    with UpCluster.start(root) as up:
        profile = up_profile(up, root / "up.yaml", expire_seconds=args.expire)
        before = cluster_state(up)
        honest: dict[str, float] = {}
        for i in range(args.instants):
            feature = files[i % len(files)]
            folder = root / f"features-{feature.stem}"
            folder.mkdir(exist_ok=True)
            (folder / feature.name).write_text(feature.read_text())
            if feature.stem not in honest:
                started = time.monotonic()
                run = start_run(up, profile, folder, root / f"honest-{feature.stem}")
                run.wait(timeout=1800)
                honest[feature.stem] = time.monotonic() - started
                print(f"  {feature.stem}: honest run {honest[feature.stem]:.1f} s, exit {run.returncode}", flush=True)
                _recover_and_compare(up, profile, before)
            at = rng.uniform(0.5, max(honest[feature.stem], 1.0))
            reports = root / f"kill-{i:02d}"
            run = start_run(up, profile, folder, reports)
            time.sleep(at)  # the drawn instant is the point of the benchmark
            kill_group(run)
            problems = []
            dry = up.firedrill("run", "--dry-run", "--kubeconfig", str(up.kubeconfig), "--profile", str(profile),
                               "--features", str(folder))
            left = cluster_state(up) != before
            if left and dry.returncode != 4:
                problems.append(f"the dry run went ahead (exit {dry.returncode}) on a cluster the run left changed")
            started = time.monotonic()
            problems += _recover_and_compare(up, profile, before)
            print(f"{i:2d} {feature.stem:<24} SIGKILL at {at:6.1f} s  dry run exit {dry.returncode}  "
                  f"recovered in {time.monotonic() - started:5.1f} s  "
                  + ("OK" if not problems else "PROBLEM: " + "; ".join(problems)), flush=True)
            failures += bool(problems)
        print(f"\n{args.instants} instants, {failures} with a problem; honest durations: median "
              f"{statistics.median(honest.values()):.1f} s", flush=True)
    return 0 if failures == 0 else 1


def _recover_and_compare(up: UpCluster, profile: Path, before: object) -> list[str]:
    problems = []
    recovered = up.firedrill("recover", "--kubeconfig", str(up.kubeconfig), "--profile", str(profile))
    if recovered.returncode != 0:
        problems.append(f"recover exited {recovered.returncode}: {recovered.stdout[-400:]} {recovered.stderr[-400:]}")
    try:
        wait_for(lambda: cluster_state(up) == before, 60, "the cluster as before")
    except AssertionError:
        problems.append(f"not as before after 60 s: {cluster_state(up)}")
    return problems


if __name__ == "__main__":
    raise SystemExit(main())
