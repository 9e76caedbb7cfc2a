"""Failing fast, per feature: how long each shipped feature takes on the honest reference platform, and with each
defect of the zoo that breaks it (issue 25: a broken platform must end about as fast as an honest one passes).

    python tests/bench/bench_fail_fast.py [--features node_pull.feature ...] [--defects gpu-double-book ...] [--runs 3]

For every feature named (default: every feature the defect matrix of tests/integration/test_defect_zoo.py
covers), it runs the whole feature ``--runs`` times on the honest platform and ``--runs`` times with each defect
whose matrix entry is in that feature, with ``firedrill run`` exactly as a user types it, and prints the median
wall time of each (the sum of the scenarios' seconds in the run record), its verdicts and the ratio to the honest
median. Budget (issue 25): every ratio <= 2. The medians go to docs/BENCHMARKS.md, "Failing fast".
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.integration.test_defect_zoo import MATRIX  # noqa: E402 - the matrix is the list of what breaks what

BUDGET = 2.0


def run_feature(feature: str, defect: str | None, work: Path) -> tuple[float, str]:
    """One `firedrill run` of one shipped feature: its scenarios' total seconds and their verdicts."""
    features, reports = Path(tempfile.mkdtemp(dir=work)), Path(tempfile.mkdtemp(dir=work))
    shutil.copy(REPO / "features" / feature, features / feature)
    command = [sys.executable, "-c", "from drills.cli import main; main()", "run", "--features", str(features),
               "--reports", str(reports)]
    if defect:
        command += ["--defect", defect]
    subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    (record,) = reports.glob("*/record.json")
    scenarios = json.loads(record.read_text())["scenarios"]
    verdicts = Counter(s["verdict"] or "ERROR" for s in scenarios)
    return sum(s["seconds"] for s in scenarios), " ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", nargs="*", default=sorted({c.feature for c in MATRIX}))
    parser.add_argument("--defects", nargs="*", default=None, help="only these defects (default: every one whose "
                        "matrix entry is in the feature)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    over = 0
    with tempfile.TemporaryDirectory(prefix="firedrill-bench-failfast-") as tmp:
        work = Path(tmp)
        for feature in args.features:
            defects = sorted({c.defect for c in MATRIX if c.feature == feature
                              and (args.defects is None or c.defect in args.defects)})
            honest = [run_feature(feature, None, work) for _ in range(args.runs)]
            base = statistics.median(s for s, _ in honest)
            print(f"{feature}: honest {base:.1f} s ({honest[-1][1]})")
            for defect in defects:
                runs = [run_feature(feature, defect, work) for _ in range(args.runs)]
                median = statistics.median(s for s, _ in runs)
                ratio = median / base if base else float("inf")
                over += ratio > BUDGET
                print(f"  --defect {defect:20} {median:7.1f} s  {ratio:4.2f}x  ({runs[-1][1]})"
                      + ("  OVER BUDGET" if ratio > BUDGET else ""))
    print(f"budget: every ratio <= {BUDGET:g}; {over} over")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
