"""Every shipped feature, serial and ``--parallel N``: wall time, node pull's timing error, false verdicts.

    python tests/bench/bench_parallel.py [--runs 3] [--parallel 3] [--honest 5] [--only node_pull gang_submission]
                                         [--reports DIR] [--skip-serial]

Runs ``firedrill run`` over features/ (``--only``: those stems) on the honest embedded platform, ``--runs`` times
serially, then ``max(--runs, --honest)`` times with ``--parallel N``, all into one reports folder (so the parallel
plan's estimates come from the serial runs' archives; ``--reports DIR`` keeps them there, so a later
``--skip-serial`` run, say with another ``--parallel``, plans from them too).  Prints each run's wall time, exit
code and verdicts, then per mode: the median wall time, node pull's timing error p95 (|harness - platform stamp| over every node-pull
phase of every run, from record.json) and the false verdicts (any scenario not PASS on an honest platform).
Budgets (issue 30): parallel median <= 120 s for every shipped feature; timing error p95 <= 50 ms in both modes;
0 false verdicts over the parallel runs.  Exit 0 when every budget holds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # tests.bench lives in the repository, not in the installed packages
    sys.path.insert(0, str(REPO))

from tests.bench.bench_acceptance import chosen_features  # noqa: E402
from tests.bytecode import compile_packages  # noqa: E402

BUDGET_S = 120.0
ERROR_P95_S = 0.050
NODE_PULL = "node_pull.feature"


def p95(values: list[float]) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]


def one_run(features: Path, reports: Path, parallel: int) -> tuple[float, int, list[str], list[float]]:
    """Wall seconds, exit code, the verdicts, and node pull's |timing error| values of one run."""
    before = {p.name for p in reports.iterdir()} if reports.exists() else set()
    args = [sys.executable, "-c", "from drills.cli import main; main()", "run", "--features", str(features),
            "--reports", str(reports), "--no-live"] + (["--parallel", str(parallel)] if parallel > 1 else [])
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    new = [p for p in reports.iterdir() if p.is_dir() and p.name not in before]
    verdicts: list[str] = []
    errors: list[float] = []
    for run_dir in new:
        record = json.loads((run_dir / "record.json").read_text())
        for s in record["scenarios"]:
            verdicts.append(s["verdict"])
            if s["verdict"] != "PASS":  # name what missed, in the run's own words
                why = "; ".join(s.get("findings") or []) or s.get("error") or ""
                print(f"  {s['verdict']}: {Path(s['feature_file']).name}: {s['scenario']} ({run_dir.name}): "
                      f"{why[:400]}", flush=True)
            if s["feature_file"].endswith(NODE_PULL):
                errors += [abs(m["error"]) for m in s["measurements"] if m.get("error") is not None]
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-2000:])
    return wall, proc.returncode, verdicts, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--honest", type=int, default=5, help="parallel runs judged for false verdicts")
    parser.add_argument("--only", nargs="*", help="feature file stems (default: every shipped feature)")
    parser.add_argument("--skip-serial", action="store_true")
    parser.add_argument("--reports", type=Path, help="the reports folder to use and keep (default: a temporary one, "
                                                      "removed when every budget holds)")
    args = parser.parse_args()
    compile_packages()  # as an installed wheel runs: no process compiles the packages (tests/bytecode.py)
    work = Path(tempfile.mkdtemp(prefix="firedrill-bench-parallel-"))
    features = chosen_features(work, args.only)
    reports = args.reports.resolve() if args.reports else work / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    ok = True
    modes = ([] if args.skip_serial else [("serial", 1, args.runs)]) + \
        [(f"--parallel {args.parallel}", args.parallel, max(args.runs, args.honest))]
    for label, n, runs in modes:
        walls, false, errors = [], 0, []
        for i in range(runs):
            wall, code, verdicts, errs = one_run(features, reports, n)
            walls.append(wall)
            errors += errs
            bad = [v for v in verdicts if v != "PASS"]
            false += len(bad)
            print(f"{label} run {i + 1}: {wall:.1f} s wall, exit {code}, {len(verdicts)} scenarios, "
                  f"{len(bad)} not PASS {bad}", flush=True)
        err95 = p95(errors)
        median = statistics.median(walls)
        print(f"{label}: median {median:.1f} s wall over {runs} runs (min {min(walls):.1f}, max {max(walls):.1f}); "
              f"node pull timing error p95 {'-' if err95 is None else f'{err95 * 1000:.1f} ms'} over "
              f"{len(errors)} phases; {false} false verdict(s)", flush=True)
        ok = ok and (err95 is None or err95 <= ERROR_P95_S) and false == 0
        if n > 1 and not args.only:
            ok = ok and median <= BUDGET_S
    print(f"budgets (parallel <= {BUDGET_S:.0f} s for every feature, error p95 <= 50 ms, 0 false verdicts): "
          f"{'PASS' if ok else 'FAIL'}")
    if args.reports:
        print(f"the runs' archives are in {reports}")
    elif ok:
        shutil.rmtree(work, ignore_errors=True)
    else:  # the records of what missed (a false verdict's findings) are the next thing to read
        print(f"the runs' archives are kept in {reports}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
