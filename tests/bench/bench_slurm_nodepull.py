"""Node pull on a real Slurm: the node-pull drill's phases with Slurm's upstream defaults and with tuned settings,
beside Kubernetes' figures in docs/BENCHMARKS.md (issue 47, Done-when 3).

Run on demand (not part of the test suite), from the repository root, on a machine with the Debian packages
slurmctld, slurmd, slurm-client and munge:

    python tests/bench/bench_slurm_nodepull.py                  # 3 pulls on tuned settings (about 3 minutes)
    python tests/bench/bench_slurm_nodepull.py --defaults       # and 3 on upstream defaults (about 25 minutes)

Each pull is one ``firedrill run --profile`` of scenario 5.1 of the shipped node-pull feature (the run of
``tests/realslurm/test_nodepull.py``) against a fresh cluster of this machine (``tests/realslurm/cluster.py``: three
slurmd of 4 simulated GPUs each): the canary as a batch job of 2 tasks x 4 GPUs (0.1 s steps, a checkpoint every
5), the node of rank 0 killed (SIGKILL of its slurmd, step daemons and tasks), its windows widened so that every
phase is measured however long it takes.

- tuned: ``SlurmdTimeout=1``, ``MessageTimeout=1``, ``AuthInfo=cred_expire=5`` (the least slurmctld accepts),
  ``SchedulerParameters=bf_interval=1,sched_interval=1``; the scenario runs UNEDITED (its shipped windows: detect
  5 s, evict 5 s, replace 10 s, total 20 s), so each pull's verdict says whether the shipped promise holds;
- defaults: upstream's ``SlurmdTimeout=300``, ``MessageTimeout=10``, ``cred_expire`` 120 s, and its scheduling
  loops (backfill every 30 s, the main loop every 60 s), with windows wide enough to measure every phase.

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

from tests.realslurm.cluster import SlurmClusterSpec, running  # noqa: E402
from tests.realslurm.drill import firedrill_run, scenario  # noqa: E402
from tests.realslurm.test_cluster import TUNED  # noqa: E402

PHASES = ("detect", "evict", "replace", "resume", "total")
SETTINGS = {"tuned": TUNED,
            "defaults": {"slurmd_timeout": 300, "message_timeout": None, "cred_expire": None,
                         "scheduler_parameters": None}}
WIDE_WINDOWS = {"detects the failure within {} seconds": 900,
                "off the failed node within {} seconds of detection": 900,
                "runs again on healthy nodes within {} seconds of eviction": 900,
                "the whole recovery takes at most {} seconds": 2400,
                "back in service within {} seconds": 120}


def pull(name: str, work: Path) -> dict[str, Any]:
    with running(SlurmClusterSpec(work / "slurm", nodes=3, gpus_per_node=4, **SETTINGS[name])) as cluster:
        windows = None if name == "tuned" else WIDE_WINDOWS
        proc, (result,) = firedrill_run(cluster, work, scenario("node_pull.feature", "5.1", windows), timeout=2400)
    measured: dict[str, Any] = {m["name"]: m["value"] for m in result["measurements"]}
    measured["verdict"] = result["verdict"]
    print(f"  {name}: {result['verdict']}, " + ", ".join(f"{p} {measured.get(p) or 0:.2f} s" for p in PHASES)
          + f", lost steps {measured.get('lost steps')}", flush=True)
    if result["verdict"] != "PASS":
        print(proc.stdout[-3000:], proc.stderr[-2000:])
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pulls", type=int, default=3)
    parser.add_argument("--defaults", action="store_true", help="also pull on upstream's defaults (slow)")
    args = parser.parse_args()
    rows = []
    for name in ("tuned", "defaults") if args.defaults else ("tuned",):
        print(f"{name}: {SETTINGS[name]}", flush=True)
        runs = []
        for i in range(args.pulls):
            with tempfile.TemporaryDirectory(prefix=f"fd-slurm-bench-{name}-{i}-") as tmp:
                runs.append(pull(name, Path(tmp)))
        medians = {p: statistics.median(r[p] for r in runs if r.get(p) is not None)
                   for p in (*PHASES, "lost steps") if any(r.get(p) is not None for r in runs)}
        rows.append((name, len(runs), medians, sum(r["verdict"] == "PASS" for r in runs)))
    print("\n| settings | pulls | PASS | " + " | ".join(PHASES) + " | lost steps |")
    print("|---|---|---|" + "---|" * (len(PHASES) + 1))
    for name, count, med, passed in rows:
        print(f"| {name} | {count} (median) | {passed} | " + " | ".join(f"{med[p]:.2f} s" if p in med else "never"
                                                                         for p in PHASES)
              + f" | {med.get('lost steps', float('nan')):g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
