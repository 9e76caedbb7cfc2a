"""A blip must not become an eviction storm (issue 26): evictions, steps lost, pauses and wall time, medians over runs.

    python tests/bench/bench_blip.py [--runs 5]

Runs the shipped ``features/blip.feature`` ``--runs`` times with ``firedrill run`` on the embedded reference
platform (tuned healing, as a user types it) and prints, for each scenario, its verdicts, the median and range of
every measurement it recorded and of its wall time. Budget (issue 26): in the two blip scenarios 0 job pods
evicted or restarted and 0 steps lost in every run (a rank that lost no pod and kept stepping through the outage
lost no step: the canary's step count only grows), medians of the longest pause within the scenario's 2 s. The
figures go to docs/BENCHMARKS.md, "Blip".
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FEATURE = "blip.feature"
ZERO = ("job pods evicted or restarted", "acknowledged writes lost")


def run_once(work: Path) -> list[dict]:
    features, reports = Path(tempfile.mkdtemp(dir=work)), Path(tempfile.mkdtemp(dir=work))
    shutil.copy(REPO / "features" / FEATURE, features / FEATURE)
    subprocess.run([sys.executable, "-c", "from drills.cli import main; main()", "run", "--features", str(features),
                    "--reports", str(reports)], capture_output=True, text=True, timeout=900, check=False)
    (record,) = reports.glob("*/record.json")
    return json.loads(record.read_text())["scenarios"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    units: dict[str, str] = {"wall": "s"}
    verdicts: dict[str, list[str]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="firedrill-bench-blip-") as tmp:
        for _ in range(args.runs):
            for s in run_once(Path(tmp)):
                verdicts[s["scenario"]].append(s["verdict"] or "ERROR")
                values[s["scenario"]]["wall"].append(s["seconds"])
                for m in s["measurements"]:
                    if m.get("value") is not None:
                        values[s["scenario"]][m["name"]].append(m["value"])
                        units[m["name"]] = m.get("unit") or ""
    over = 0
    for scenario, measures in values.items():
        print(f"{scenario}: {' '.join(sorted(set(verdicts[scenario])))} x{len(verdicts[scenario])}")
        for name, xs in measures.items():
            flag = ""
            if name in ZERO:
                flag = "  0 in every run" if max(xs) == 0 else "  NOT 0 IN EVERY RUN"
                over += max(xs) != 0
            print(f"  {name:30} median {statistics.median(xs):8.3f} {units.get(name, '')}  "
                  f"(min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)}){flag}")
    return 1 if over or any(v != "PASS" for vs in verdicts.values() for v in vs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
