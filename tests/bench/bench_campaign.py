"""Campaigns (issue 27): each mix's effective training time, and the harness's own CPU while it drills.

    python tests/bench/bench_campaign.py [--runs 3]

Runs ``examples/campaigns/goodput.feature``'s llama3-405b campaign (3 minutes) and its node-loss campaign on every
working node (1 minute) ``--runs`` times each with ``firedrill run`` on the embedded reference platform (tuned), and
prints per campaign the verdicts and the medians (min-max) of effective training time, faults injected, slowest
recovery and the steps lost; and the harness's CPU: the ``firedrill run`` process's own user + system time (the
platform's API server, controllers, agents and canaries are separate processes and are not counted), sampled from
/proc while it runs, over its wall time. Budget (issue 27): under 10 % of one core on average. The figures go to
docs/BENCHMARKS.md, "Campaign".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CAMPAIGNS = {"llama3-405b, 3 min": "interruption", "node-loss, 1 min": "every_working"}
TICK = os.sysconf("SC_CLK_TCK")


def own_cpu(pid: int) -> float | None:
    """utime + stime of the process alone (not its children), in seconds; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def run_once(keyword: str, reports: Path) -> tuple[dict, float, float]:
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", "from drills.cli import main; main()", "run", "--features",
                             str(REPO / "examples" / "campaigns"), "-k", keyword, "--reports", str(reports)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    cpu = 0.0
    while proc.poll() is None:
        cpu = own_cpu(proc.pid) or cpu
        time.sleep(0.5)
    wall = time.monotonic() - start
    (record,) = reports.glob("*/record.json")
    (scenario,) = json.loads(record.read_text())["scenarios"]
    return scenario, cpu, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    over = 0
    with tempfile.TemporaryDirectory(prefix="firedrill-bench-campaign-") as tmp:
        for name, keyword in CAMPAIGNS.items():
            values: dict[str, list[float]] = defaultdict(list)
            verdicts = []
            for i in range(args.runs):
                scenario, cpu, wall = run_once(keyword, Path(tmp) / f"{keyword}-{i}")
                verdicts.append(scenario["verdict"])
                values["harness CPU, % of one core"].append(100 * cpu / wall)
                for m in scenario["measurements"]:
                    if m.get("value") is not None:
                        values[m["name"]].append(m["value"])
            print(f"{name}: {' '.join(verdicts)}")
            for measure, xs in values.items():
                print(f"  {measure:32} median {statistics.median(xs):8.3f}  (min {min(xs):.3f}, max {max(xs):.3f}, "
                      f"n={len(xs)})")
            over += statistics.median(values["harness CPU, % of one core"]) >= 10
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
