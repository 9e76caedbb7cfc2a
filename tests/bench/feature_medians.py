"""Shared by the benchmarks that run one shipped feature a few times with ``firedrill run`` on the embedded reference
platform (as a user types it) and print the median and range of every measurement in seconds, and of its wall time,
per scenario, against a budget."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

Values = dict[str, dict[str, list[float]]]
"""scenario -> measurement name -> one value per run."""


def run_feature(feature: str, runs: int, keyword: str | None = None) -> tuple[Values, dict[str, list[str]]]:
    """``runs`` runs of ``features/<feature>`` (only the scenarios ``-k keyword``): every measurement in seconds of
    every scenario, and its verdicts."""
    values: Values = defaultdict(lambda: defaultdict(list))
    verdicts: dict[str, list[str]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="firedrill-bench-") as tmp:
        for _ in range(runs):
            features, reports = Path(tempfile.mkdtemp(dir=tmp)), Path(tempfile.mkdtemp(dir=tmp))
            shutil.copy(REPO / "features" / feature, features / feature)
            argv = [sys.executable, "-c", "from drills.cli import main; main()", "run", "--features", str(features),
                    "--reports", str(reports), *(("-k", keyword) if keyword else ())]
            subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False, cwd=REPO)
            for record in reports.glob("*/record.json"):
                for s in json.loads(record.read_text())["scenarios"]:
                    verdicts[s["scenario"]].append(s["verdict"] or "ERROR")
                    values[s["scenario"]]["wall"].append(s["seconds"])
                    for m in s["measurements"]:
                        if m.get("value") is not None and m.get("unit") == "s":
                            values[s["scenario"]][m["name"]].append(m["value"])
    return values, verdicts


def report(values: Values, verdicts: dict[str, list[str]], budget: Callable[[str, str], float | None]) -> int:
    """Print each scenario's medians, flagging each measurement ``budget(scenario, name)`` bounds; the number of
    medians over their budget."""
    over = 0
    for scenario, measures in values.items():
        print(f"{scenario}: {' '.join(sorted(set(verdicts[scenario])))} x{len(verdicts[scenario])}")
        for name, xs in measures.items():
            median = statistics.median(xs)
            limit = budget(scenario, name)
            flag = "" if limit is None else (f"  within budget ({limit:g} s)" if median <= limit else
                                             f"  OVER BUDGET ({limit:g} s)")
            over += bool(limit is not None and median > limit)
            print(f"  {name:12} median {median:7.3f} s  (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)}){flag}")
    return over
