"""``firedrill trend`` over 1,000 archived runs: budget 10 s on the development machine (issue 16, Done-when 5).

    python tests/bench/bench_trend.py [--runs 1000] [--repeats 3] [--keep DIR]

Generates ``--runs`` nightly runs in the real archive format, each sealed by ``drills.records.evidence.archive.seal``
(signed statements, manifest and its signature, one ledger line each, one signing key), so the trend verifies
every one of them exactly as ``firedrill verify`` would. Each run is shaped like a real nightly run of the two
scenarios recorded in ``tests/unit/trend/honest_runs.json`` (a node pull and a gang placement): their recorded
values in turn with a little noise, a timeline of 120 observations (70 of them in the node pull's signed
excerpt), ``junit.xml``, and a ``report.html`` rendered once by the real renderer (its 37 KB are hashed like any
file). The last two runs are slow at detecting a lost node, so the trend has a regression to find and draw.

Then runs ``firedrill trend DIR`` as a user would (a fresh interpreter: imports included), ``--repeats`` times,
and prints each wall time, the median, and the archive sizes. Exit 1 when the median misses the budget or the
trend does not exit 6 (REGRESSED).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "platform")]

from drills.records.evidence.record import RunRecord, ScenarioRecord, TargetRecord  # noqa: E402
from drills.records.evidence.report import SignatureStatus, render_report  # noqa: E402
from drills.records.evidence.signing import Signer  # noqa: E402
from tests.unit.trend.synthetic import (  # noqa: E402
    from_fixture, honest_fixture, night, run_id, seal_run,
)

BUDGET_S = 10.0
JUNIT = (b'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="firedrill" errors="0" failures="0" '
         b'skipped="0" tests="2" time="9.1"><testcase classname="drills.bdd.test_contract" name="test_survives" '
         b'time="5.1"/><testcase classname="drills.bdd.test_contract" name="test_placed" time="0.4"/></testsuite>'
         b'</testsuites>')


def _timeline(slug: str, rng: random.Random) -> list[dict]:
    entries = []
    for k in range(120):
        entries.append({"mono": 100.0 + k * 0.05, "wall": 1.79e9 + k * 0.05, "server": 1.79e9 + k * 0.05 - 0.003,
                        "kind": "Pod" if k % 3 else "Node", "event": "MODIFIED", "namespace": "firedrill",
                        "name": f"canary-{k % 4}", "summary": {"phase": "Running", "node": f"gpu-node-{k % 5}",
                                                                "ready": str(bool(k % 2)), "noise": rng.random()},
                        **({"scenario": slug} if 30 <= k < 100 else {})})
    return entries


def _noisy(s: ScenarioRecord, rng: random.Random, slow: bool) -> ScenarioRecord:
    measurements = []
    for m in s.measurements:
        value = m.value
        if value is not None and m.unit == "s":
            value = value * rng.uniform(0.9, 1.1)
        if slow and m.name in ("detect", "total"):
            value = (value or 0.0) + 27.0
        measurements.append(replace(m, value=value))
    values = {m.name: m.value for m in measurements}
    judgements = tuple(replace(j, measured=values.get(j.threshold.name, j.measured),
                               verdict="FAIL" if (values.get(j.threshold.name) or 0) > j.threshold.limit else "PASS")
                       for j in s.judgements)
    verdict = "FAIL" if any(j.verdict == "FAIL" for j in judgements) else "PASS"
    return replace(s, measurements=tuple(measurements), judgements=judgements, verdict=verdict,
                   details={"fault": {"method": "kill", "node": "gpu-node-2"}, "instants": {"fault": 1.0}})


def generate(reports: Path, runs: int) -> None:
    rng = random.Random(16)
    fixture = honest_fixture()["runs"]
    signer = Signer.generate_ephemeral()
    first = [from_fixture(s) for s in fixture[0]["scenarios"]]
    record = RunRecord(run_id(0), "2026-11-01T02:00:00Z", "2026-11-01T02:00:10Z", "0.1.0", None,
                       TargetRecord("embedded", "reference platform", {}, ""), {}, {}, "", {}, tuple(first), "PASS")
    html = render_report(record, SignatureStatus(signer.keyid, True, None)).encode()  # one real rendering
    for i in range(runs):
        scenarios = [_noisy(from_fixture(s), rng, slow=i >= runs - 2) for s in fixture[i % len(fixture)]["scenarios"]]
        pull = next(s for s in scenarios if s.drill == "node-pull")
        seal_run(reports, run_id(i), night(i), scenarios, signer=signer, files={"junit.xml": JUNIT, "report.html": html},
                 timeline=_timeline(pull.slug, rng))
        if (i + 1) % 200 == 0:
            print(f"  sealed {i + 1} runs", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="generate into (or reuse) this folder and keep it")
    args = parser.parse_args()
    tmp = None
    if args.keep is not None:
        reports = args.keep
    else:
        tmp = Path(tempfile.mkdtemp(prefix="bench-trend-"))
        reports = tmp / "reports"
    try:
        if not (reports / "ledger.jsonl").is_file():
            started = time.perf_counter()
            print(f"sealing {args.runs} runs into {reports} ...", flush=True)
            generate(reports, args.runs)
            print(f"  {time.perf_counter() - started:.1f} s to seal them (not timed by the budget)")
        files = [p for p in reports.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        print(f"archives: {len(list(reports.glob('*/manifest.json')))} runs, {len(files)} files, "
              f"{size / 1e6:.1f} MB ({size / max(1, args.runs) / 1e3:.0f} KB a run)")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform"),
                                                             os.environ.get("PYTHONPATH", "")])}
        walls = []
        code = None
        for k in range(args.repeats):
            started = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", "from drills.cli import main; main()", "trend", str(reports),
                                  "--html", str(reports.parent / "trend.html")], capture_output=True, text=True,
                                 env=env, cwd=REPO)
            walls.append(time.perf_counter() - started)
            code = out.returncode
            print(f"  firedrill trend, try {k + 1}: {walls[-1]:.2f} s wall, exit {out.returncode}")
            if k == 0:
                print("\n".join("    " + line for line in out.stdout.splitlines() if line.startswith(("REGRESSION",
                                                                                                     "trend:"))))
        median = statistics.median(walls)
        page = (reports.parent / "trend.html").stat().st_size
        print(f"firedrill trend over {args.runs} archived runs: median {median:.2f} s of {args.repeats} "
              f"(budget {BUDGET_S:.0f} s); trend.html {page / 1e3:.0f} KB")
        ok = median <= BUDGET_S and code == 6
        print("PASS" if ok else f"MISSED (median {median:.2f} s, exit {code})")
        return 0 if ok else 1
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
