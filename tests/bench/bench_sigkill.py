"""Every shipped feature, SIGKILLed at random instants against a cluster `firedrill up` runs (issue 45, Done-when 1).

    python tests/bench/bench_sigkill.py [--instants 20] [--seed 45] [--only node_pull gang_submission]

One `firedrill up --spares 0` runs the whole time. First every shipped feature file runs once, alone and whole (the
honest run, file after file); then the instants are drawn at random over that run's whole timeline, and for each a
fresh `firedrill run --kubeconfig ... --profile examples/embedded/up.yaml` of the file running at that instant is
SIGKILLed with its whole process group that far into it, as a CI runner's timeout would. Then, each time:

1. when the dead run left the cluster changed (a node out, a pod of its own) or a fault open in its journal, a
   `firedrill run` started before the recover must refuse it at once (exit 4, naming the leftovers and the
   recover command); a run killed before it touched anything leaves nothing to refuse;
2. `firedrill recover` must exit 0;
3. within 60 s the cluster must be as before the first run: every node Ready and schedulable, its taints, labels
   and allocatable GPUs as before, no pod labelled firedrill.dev/drill-run;
4. no load generator (locust) the dead run started may still run 5 s after the kill.

Prints one line per instant and the count of instants where any of the four failed; exit 0 when none did.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # tests.bench lives in the repository, not in the installed packages
    sys.path.insert(0, str(REPO))

from drills.load.run import LOCUSTFILE  # noqa: E402
from tests.integration.up_cluster import (ClusterState, UpCluster, cluster_state,  # noqa: E402
                                          journal_has_open_fault, kill_group, start_run, up_profile, wait_for)


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
        folders: dict[str, Path] = {}
        for feature in files:  # the honest run, file by file, whose timeline the instants are drawn over
            folders[feature.stem] = folder = root / f"features-{feature.stem}"
            folder.mkdir()
            (folder / feature.name).write_text(feature.read_text())
            started = time.monotonic()
            run = start_run(up, profile, folder, root / f"honest-{feature.stem}")
            run.wait(timeout=1800)
            honest[feature.stem] = time.monotonic() - started
            print(f"  {feature.stem}: honest run {honest[feature.stem]:.1f} s, exit {run.returncode}", flush=True)
            _recover_and_compare(up, profile, before)
        total = sum(honest.values())
        instants = sorted(rng.uniform(0.0, total) for _ in range(args.instants))
        print(f"honest run of every file: {total:.1f} s; {args.instants} instants drawn over it", flush=True)
        for i, instant in enumerate(instants):
            stem, at = _at(honest, instant)
            folder = folders[stem]
            reports = root / f"kill-{i:02d}"
            run = start_run(up, profile, folder, reports)
            time.sleep(at)  # the drawn instant is the point of the benchmark
            kill_group(run)
            problems = []
            loaders = _loaders_left()
            if loaders:  # what the run started in sessions of its own must die with it (refplatform.warden)
                problems.append(f"the dead run's load generator still runs: pids {', '.join(map(str, loaders))}")
            left = cluster_state(up) != before or journal_has_open_fault(up.state)
            refused = ""
            if left:  # a real run reads the cluster's own marks as well as the journals; it must stop at once
                again = up.firedrill("run", "--kubeconfig", str(up.kubeconfig), "--profile", str(profile),
                                     "--features", str(folder), "--reports", str(root / "refused"), "--no-live",
                                     timeout=120)
                refused = f"run exit {again.returncode}"
                if again.returncode != 4 or "firedrill recover" not in again.stderr:
                    problems.append(f"a run went ahead (exit {again.returncode}) on a cluster the dead run left "
                                    f"changed: {_difference(before, cluster_state(up))}")
            else:
                refused = "nothing left"
            started = time.monotonic()
            problems += _recover_and_compare(up, profile, before)
            print(f"{i:2d} {stem:<25} SIGKILL at {at:6.1f} s  {refused:<13} "
                  f"recovered in {time.monotonic() - started:5.1f} s  "
                  + ("OK" if not problems else "PROBLEM: " + "; ".join(problems)), flush=True)
            failures += bool(problems)
        print(f"\n{args.instants} instants, {failures} with a problem; honest run {total:.1f} s "
              f"(median file {statistics.median(honest.values()):.1f} s)", flush=True)
    return 0 if failures == 0 else 1


def _loaders_left(within: float = 5.0) -> list[int]:
    """Pids of locust processes of this checkout still running ``within`` seconds after a kill."""
    deadline = time.monotonic() + within
    while True:
        left = [p.pid for p in psutil.process_iter(["cmdline", "status"])
                if p.info["status"] != psutil.STATUS_ZOMBIE and str(LOCUSTFILE) in " ".join(p.info["cmdline"] or [])]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def _at(honest: dict[str, float], instant: float) -> tuple[str, float]:
    """The feature file running at ``instant`` seconds into the honest run of every file, and how far into it."""
    for stem, seconds in honest.items():
        if instant < seconds:
            return stem, instant
        instant -= seconds
    stem = list(honest)[-1]
    return stem, honest[stem]


def _difference(before: ClusterState, now: ClusterState) -> str:
    nodes = [f"{n}: {before.nodes.get(n)} -> {now.nodes.get(n)}" for n in sorted(set(before.nodes) | set(now.nodes))
             if before.nodes.get(n) != now.nodes.get(n)]
    pods = sorted(set(now.drill_pods) - set(before.drill_pods))
    return "; ".join(nodes + ([f"drill pods {', '.join(pods)}"] if pods else [])) or "nothing"


def _recover_and_compare(up: UpCluster, profile: Path, before: ClusterState) -> list[str]:
    problems = []
    recovered = up.firedrill("recover", "--kubeconfig", str(up.kubeconfig), "--profile", str(profile))
    if recovered.returncode != 0:
        problems.append(f"recover exited {recovered.returncode}: {recovered.stdout[-400:]} {recovered.stderr[-400:]}")
    try:
        wait_for(lambda: cluster_state(up) == before, 60, "the cluster as before")
    except AssertionError:
        problems.append(f"not as before after 60 s: {_difference(before, cluster_state(up))}")
    return problems


if __name__ == "__main__":
    raise SystemExit(main())
