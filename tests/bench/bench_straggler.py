"""A slow GPU (issue 26): how soon the platform names its node, and when the job has its speed back; medians.

    python tests/bench/bench_straggler.py [--runs 5]

Runs the shipped ``features/straggler.feature`` ``--runs`` times with ``firedrill run`` on the embedded reference
platform (``tuned``, as a user types it), and prints per scenario its verdicts and the median, min and max of
each measurement in its run record, wall time included. Budget (issue 26): the throttled GPU's node named
<= 20 s after the fault, median. The figures go to docs/BENCHMARKS.md, "Straggler".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUDGET_NAMED_S = 20.0


def scenarios_of_one_run(tmp: Path, i: int) -> list[dict]:
    features, reports = tmp / f"features-{i}", tmp / f"reports-{i}"
    features.mkdir()
    (features / "straggler.feature").write_text((REPO / "features" / "straggler.feature").read_text())
    argv = [sys.executable, "-c", "from drills.cli import main; main()", "run", "--features", str(features),
            "--reports", str(reports)]
    subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False, cwd=REPO)
    return [s for record in reports.glob("*/record.json") for s in json.loads(record.read_text())["scenarios"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    seen: dict[str, dict[str, list[float]]] = {}
    verdicts: dict[str, list[str]] = {}
    units: dict[str, str] = {"wall": "s"}
    with tempfile.TemporaryDirectory(prefix="firedrill-bench-straggler-") as tmp:
        for i in range(runs):
            for s in scenarios_of_one_run(Path(tmp), i):
                verdicts.setdefault(s["scenario"], []).append(s["verdict"] or "ERROR")
                table = seen.setdefault(s["scenario"], {"wall": []})
                table["wall"].append(s["seconds"])
                for m in s["measurements"]:
                    if m.get("value") is not None:
                        table.setdefault(m["name"], []).append(m["value"])
                        units[m["name"]] = m.get("unit") or ""
    missed = False
    for scenario, table in seen.items():
        print(f"{scenario}: {', '.join(sorted(set(verdicts[scenario])))} x{len(verdicts[scenario])}")
        for name, xs in table.items():
            mid = statistics.median(xs)
            note = ""
            if name == "named":
                note = "  within budget" if mid <= BUDGET_NAMED_S else "  OVER BUDGET"
                missed |= mid > BUDGET_NAMED_S
            print(f"  {name:20} median {mid:8.3f} {units[name]:6} (min {min(xs):.3f}, max {max(xs):.3f}, "
                  f"n={len(xs)}){note}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
