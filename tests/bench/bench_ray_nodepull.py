"""Node pull on a real Ray: the node-pull drill's phases with Ray's default GCS health check and with a tuned one,
beside Kubernetes' and Slurm's figures in docs/BENCHMARKS.md (issue 50, Done-when 3).

Run on demand (not part of the test suite), from the repository root, with the Ray suite's interpreter
(``tests/realray/setup.sh`` makes it):

    .venv-ray/bin/python tests/bench/bench_ray_nodepull.py              # 3 pulls on tuned settings (about 3 minutes)
    .venv-ray/bin/python tests/bench/bench_ray_nodepull.py --defaults   # and 3 on Ray's defaults (about 4 more)

Each pull is one ``firedrill run --profile`` of scenario 5.1 of the shipped node-pull feature (the run of
``tests/realray/test_drills.py``) against a fresh cluster of this machine (``tests/realray/cluster.py``: a head and
three worker nodes of 8 declared GPUs): the canary as a Ray Train job of 2 workers x 4 GPUs (0.1 s steps, a
checkpoint every 5, ``max_failures`` 2), the node of rank 0 killed (SIGKILL of every process of the node's
session: ``nodectl.py kill``).

- tuned: ``health_check_initial_delay_ms`` 1000, ``period_ms`` 1000, ``timeout_ms`` 1000, ``failure_threshold`` 3,
  and Ray Train's controller polling its workers every 0.5 s (``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``, default 2);
  the scenario runs UNEDITED (its shipped windows: detect 5 s, evict 5 s, replace 10 s, total 20 s), so each
  pull's verdict says whether the shipped promise holds;
- defaults: Ray 2.60's 5000, 3000, 10000 and 5 (a dead raylet refuses each check at once: about 15 s to DEAD) and
  Train's 2 s poll,
  with windows wide enough to measure every phase.

Medians of the pulls are printed; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.realray.cluster import TUNED, RayCluster  # noqa: E402
from tests.realray.drill import TRAIN_POLL_S, firedrill_run, scenario  # noqa: E402

PHASES = ("detect", "evict", "replace", "resume", "total")
SETTINGS: dict[str, dict[str, int]] = {"tuned": TUNED, "defaults": {}}
WIDE_WINDOWS = {"detects the failure within {} seconds": 120,
                "off the failed node within {} seconds of detection": 60,
                "runs again on healthy nodes within {} seconds of eviction": 120,
                "the whole recovery takes at most {} seconds": 300}


def pull(name: str, work: Path) -> dict[str, Any]:
    with RayCluster(workers=3, gpus_per_worker=8, system_config=SETTINGS[name]) as cluster:
        windows = None if name == "tuned" else WIDE_WINDOWS
        proc, (result,) = firedrill_run(cluster, work, scenario("node_pull.feature", "5.1", windows), timeout=900,
                                        train_poll_s=TRAIN_POLL_S if name == "tuned" else None)
    measured: dict[str, Any] = {m["name"]: m["value"] for m in result["measurements"]}
    measured["verdict"] = result["verdict"]
    print(f"  {name}: {result['verdict']}, " + ", ".join(f"{p} {measured.get(p) or 0:.2f} s" for p in PHASES)
          + f", lost steps {measured.get('lost steps')}, back in service {measured.get('back in service')}",
          flush=True)
    if result["verdict"] != "PASS":
        print(proc.stdout[-3000:], proc.stderr[-2000:])
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pulls", type=int, default=3)
    parser.add_argument("--defaults", action="store_true", help="also pull on Ray's default health check")
    args = parser.parse_args()
    rows = []
    for name in ("tuned", "defaults") if args.defaults else ("tuned",):
        print(f"{name}: {SETTINGS[name] or 'Ray 2.60 defaults'}", flush=True)
        runs = []
        for i in range(args.pulls):
            with tempfile.TemporaryDirectory(prefix=f"fd-ray-bench-{name}-{i}-") as tmp:
                runs.append(pull(name, Path(tmp)))
        medians = {p: statistics.median(r[p] for r in runs if r.get(p) is not None)
                   for p in (*PHASES, "lost steps") if any(r.get(p) is not None for r in runs)}
        rows.append((name, len(runs), medians, sum(r["verdict"] == "PASS" for r in runs)))
    print("\n| settings | pulls | PASS | " + " | ".join(PHASES) + " | lost steps |")
    print("|---|---|---|" + "---|" * (len(PHASES) + 1))
    for name, count, medians, passed in rows:
        cells = " | ".join(f"{medians[p]:.2f} s" if p in medians else "-" for p in PHASES)
        print(f"| {name} | {count} (median) | {passed} of {count} | {cells} | {medians.get('lost steps', '-')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
