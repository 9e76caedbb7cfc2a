"""Who gets the CPU while node pull's gang restarts under ``--parallel N``: run-queue wait and run time per process.

    python tests/bench/bench_cpu_wait.py [--parallel 4] [--reports DIR] [--scenario "needs every working"]
                                         [--gc-over-ms 5]

Runs ``firedrill run --parallel N --no-live`` over features/ and samples ``/proc/<pid>/schedstat`` (time on the
CPU, time runnable but waiting for one) of every firedrill process about every 10 ms. Each process also logs
its garbage collections longer than ``--gc-over-ms`` (a ``sitecustomize`` on ``PYTHONPATH`` with
``gc.callbacks``). Then, for the node pull scenario named by ``--scenario``, it prints node pull's phase errors
and, for the window from the new ranks' creation to the harness's replace instant (from ``timeline.jsonl``), each
process's run and wait in ms, the ones that started inside the window included, and the collections that ended
in the window. Last it prints the longest collections per role over the whole run, start-up and shutdown
included. The sampler takes some CPU itself.

``--reports`` should hold earlier archives of every feature (``bench_parallel.py --reports``), so the plan has
its estimates; the run's archive is added there. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCENARIO_PREFIX = "node-pull-"
MARKERS = ("refplatform", "firedrill", "drills")

GC_LOGGER = '''
import gc, os, sys, time
_dir, _over = os.environ["FD_GC_LOG_DIR"], float(os.environ["FD_GC_OVER_MS"]) / 1000
_start = [0.0]
def _log(phase, info):
    if phase == "start":
        _start[0] = time.perf_counter()
        return
    took = time.perf_counter() - _start[0]
    if took > _over:
        with open(os.path.join(_dir, f"{os.getpid()}.gc"), "a") as f:
            f.write(f"{time.time():.3f} {info['generation']} {took * 1000:.1f} {' '.join(sys.orig_argv)[:160]}\\n")
gc.callbacks.append(_log)
'''


def sample(out: list[tuple[float, dict[int, tuple[int, int]]]], names: dict[int, str], stop: threading.Event) -> None:
    """Append (wall time, {pid: (run ns, wait ns)}) about every 10 ms until ``stop``."""
    while not stop.is_set():
        row: dict[int, tuple[int, int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                if pid not in names:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    names[pid] = cmd if any(m in cmd for m in MARKERS) else ""
                if names[pid]:
                    run, wait, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
                    row[pid] = (int(run), int(wait))
            except OSError:
                continue
        out.append((time.time(), row))
        stop.wait(0.01)


def window(archive: Path, scenario: str) -> tuple[float, float, list[str]]:
    """Wall-clock window (first new rank created after the eviction, replace instant) and the phase errors."""
    record = json.loads((archive / "record.json").read_text())
    matches = [s for s in record["scenarios"] if s["feature_file"].endswith("node_pull.feature")
               and scenario.lower() in s["scenario"].lower()]
    if not matches:
        raise SystemExit(f"no node pull scenario matching {scenario!r} in {archive}/record.json")
    errors = [f"{m['name']} {m['error'] * 1000:+.1f} ms" for m in matches[0]["measurements"] if m.get("error") is not None]
    rows = [json.loads(line) for line in (archive / "timeline.jsonl").read_text().splitlines()]
    rows = [r for r in rows if str(r.get("scenario", "")).startswith(SCENARIO_PREFIX)
            and scenario.lower().replace(" ", "-") in str(r.get("scenario"))]
    evict = next(r["wall"] for r in rows if r["event"] == "t_evict")
    replace = next(r["wall"] for r in rows if r["event"] == "t_replace")
    created = min((r["wall"] for r in rows if r["kind"] == "Pod" and r["event"] == "ADDED" and r["wall"] > evict),
                  default=evict)
    return created, replace, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--reports", type=Path, default=REPO / "reports")
    parser.add_argument("--scenario", default="needs every working",
                        help="words of the node pull scenario's name (default: %(default)s)")
    parser.add_argument("--gc-over-ms", type=float, default=5.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="firedrill-cpu-wait-"))
    (work / "sitecustomize.py").write_text(GC_LOGGER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(work), os.environ.get("PYTHONPATH")])),
               FD_GC_LOG_DIR=str(work), FD_GC_OVER_MS=str(args.gc_over_ms))
    args.reports.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in args.reports.iterdir()}
    samples: list[tuple[float, dict[int, tuple[int, int]]]] = []
    names: dict[int, str] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(samples, names, stop), daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "from drills.cli import main; main()", "run", "--features",
                           str(REPO / "features"), "--reports", str(args.reports), "--no-live", "--parallel",
                           str(args.parallel)], cwd=REPO, env=env, capture_output=True, text=True)
    stop.set()
    sampler.join()
    print(f"firedrill run --parallel {args.parallel}: {time.perf_counter() - t0:.1f} s wall, exit {proc.returncode}")
    archive = next(p for p in args.reports.iterdir() if p.is_dir() and p.name not in before)
    start, end, errors = window(archive, args.scenario)
    print(f"{args.scenario!r} ({archive.name}): {', '.join(errors)}")
    inside = [(t, row) for t, row in samples if start <= t <= end]
    if len(inside) < 2:
        print(f"only {len(inside)} sample(s) in the {1000 * (end - start):.0f} ms window")
        return 1
    first, last = inside[0][1], inside[-1][1]
    print(f"window: new ranks created to replace, {1000 * (end - start):.0f} ms; {len(inside)} samples")
    usage = sorted(((w1 - first.get(pid, (0, 0))[1]) / 1e6, (r1 - first.get(pid, (0, 0))[0]) / 1e6, pid)
                   for pid, (r1, w1) in last.items())
    for wait, run, pid in reversed(usage):
        if wait + run >= 1.0:
            new = "" if pid in first else " (started in the window)"
            print(f"  wait {wait:6.1f}  run {run:6.1f}  {pid}{new}  {names[pid][:110]}")
    collections = [line.split(" ", 3) for f in work.glob("*.gc") for line in f.read_text().splitlines()]
    during = [f"gen{c[1]} {c[2]} ms in {c[3][:80]}" for c in collections if start <= float(c[0]) <= end]
    print(f"collections over {args.gc_over_ms:g} ms ending in the window: {during or 'none'}")
    for role in ("refplatform.api", "refplatform.controllers", "refplatform.agent", "worker_main"):
        mine = sorted((float(c[2]) for c in collections if role in c[3]), reverse=True)
        print(f"collections over {args.gc_over_ms:g} ms in {role}: {len(mine)}; longest {mine[:5]} ms")
    shutil.rmtree(work, ignore_errors=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
