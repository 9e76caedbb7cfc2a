"""How long after a worker node's raylet is SIGKILLed the GCS marks the node DEAD, default vs tuned settings.

    .venv-ray/bin/python tests/realray/detect_times.py [--runs 3] [--tuned-only | --default-only] [--fault hang]

Starts a small loopback cluster per setting (tests/realray/cluster.py), kills one worker node per run (every
process of it, SIGKILL) or, with `--fault hang`, freezes it (SIGSTOP: the raylet's health-check RPCs then time
out instead of being refused; the node is SIGKILLed once it is marked dead), polls the state API every 0.1 s,
and prints each run and the median. Not a test: numbers for docs/RAY.md.
"""

import argparse
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import TUNED, RayCluster  # noqa: E402



def measure(name: str, system_config: dict, runs: int, fault: str = "kill") -> list[float]:
    times = []
    with RayCluster(workers=runs, gpus_per_worker=8, system_config=system_config) as c:
        time.sleep(1.0)  # past the first check being scheduled: a node killed at once waits initial_delay too
        for i in range(1, runs + 1):
            node = c.nodes[f"w{i}"]
            t0 = time.monotonic()
            if fault == "hang":
                node.signal(signal.SIGSTOP)
            else:
                c.kill(node.name)
            dead = c.wait_node_state(node.node_id, "DEAD", timeout=c.detect_bound_s() * 2 + 30)
            dt = time.monotonic() - t0
            times.append(dt)
            if fault == "hang":
                node.signal(signal.SIGKILL)
            print(f"{name} {fault}: run {i}: DEAD after {dt:.2f} s ({dead.get('state_message')})", flush=True)
    print(f"{name} {fault}: {c.health_check()} median {statistics.median(times):.2f} s of {runs}", flush=True)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tuned-only", action="store_true")
    ap.add_argument("--default-only", action="store_true")
    ap.add_argument("--fault", choices=["kill", "hang"], default="kill")
    a = ap.parse_args()
    if not a.tuned_only:
        measure("default", {}, a.runs, a.fault)
    if not a.default_only:
        measure("tuned", TUNED, a.runs, a.fault)


if __name__ == "__main__":
    main()
