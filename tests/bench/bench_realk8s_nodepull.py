"""Node pull on the real upstream controllers: the node-pull drill's phases on kube-controller-manager with
tuned flags and with the upstream defaults, beside the reference platform's figures in docs/BENCHMARKS.md.

Run on demand (not part of the test suite), from the repository root, once ``tests/realk8s/build.sh`` has
built (or finds cached) Kubernetes v1.37.2 and etcd:

    python tests/bench/bench_realk8s_nodepull.py                 # 3 pulls on tuned flags
    python tests/bench/bench_realk8s_nodepull.py --pulls 5
    python tests/bench/bench_realk8s_nodepull.py --defaults      # also one pull on upstream defaults (~6 min)

Each pull is one ``firedrill run`` of scenario 5.1 of the shipped node-pull feature (the same run as
``tests/realk8s/test_native_nodepull.py``) against a fresh control plane with four refplatform agents as
kubelets (8 simulated GPUs each): the canary as a batch/v1 Indexed Job of 2 ranks x 4 GPUs, the node of
rank 0 killed (SIGKILL of its agent's process group), the phases measured by the harness.

- tuned: ``--node-monitor-grace-period=4s --node-monitor-period=1s`` and both default tolerations 2 s;
- defaults: the upstream values (grace 50 s, monitor period 5 s, tolerations 300 s).

Medians of the tuned pulls are printed; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.realk8s.test_native_nodepull import firedrill_run, start_pull_cluster  # noqa: E402

PHASES = ("detect", "evict", "replace", "resume", "total")
#: Upstream kube-controller-manager and kube-apiserver defaults (v1.37).
DEFAULTS = {"grace": 50.0, "period": 5.0, "toleration": 300}
WIDE_WINDOWS = {"detects the failure within {} seconds": 120,
                "off the failed node within {} seconds of detection": 600,
                "runs again on healthy nodes within {} seconds of eviction": 120,
                "the whole recovery takes at most {} seconds": 900}


def bin_dir() -> Path:
    proc = subprocess.run(["bash", str(REPO / "tests/realk8s/build.sh")], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"tests/realk8s/build.sh failed (exit {proc.returncode}); build it first:\n{proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def pull(bins: Path, work: Path, windows: dict[str, int] | None, timeout: float, **flags: float) -> dict[str, float]:
    made = start_pull_cluster(bins, work / "cluster", (), **flags)  # type: ignore[arg-type]
    try:
        proc, scenario = firedrill_run(made, work / "run", windows=windows, timeout=timeout)
    finally:
        made.agents.close()
        made.cluster.stop()
    got = {m["name"]: m["value"] for m in scenario["measurements"] if m["value"] is not None}
    print(f"  {scenario['verdict']}: " + ", ".join(f"{p} {got[p]:.2f} s" for p in PHASES if p in got)
          + (f", lost steps {got['lost steps']:.0f}" if "lost steps" in got else ""), flush=True)
    if proc.returncode not in (0, 1):
        print(proc.stdout[-3000:] + proc.stderr[-2000:])
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pulls", type=int, default=3, help="pulls on tuned flags (default 3)")
    ap.add_argument("--defaults", action="store_true", help="also one pull on the upstream defaults (~6 min)")
    args = ap.parse_args()
    bins = bin_dir()
    tuned: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="firedrill-bench-realk8s-") as tmp:
        print(f"tuned flags (grace 4 s, monitor period 1 s, tolerations 2 s): {args.pulls} pulls", flush=True)
        for i in range(args.pulls):
            tuned.append(pull(bins, Path(tmp) / f"tuned-{i}", None, 300))
        print("median  " + ", ".join(f"{p} {statistics.median(r[p] for r in tuned if p in r):.2f} s"
                                     for p in PHASES if any(p in r for r in tuned)))
        if args.defaults:
            print("upstream defaults (grace 50 s, monitor period 5 s, tolerations 300 s): 1 pull", flush=True)
            pull(bins, Path(tmp) / "defaults", WIDE_WINDOWS, 1200, **DEFAULTS)
    return 0 if all("total" in r for r in tuned) else 1


if __name__ == "__main__":
    sys.exit(main())
