"""The harness's timing error: each node-pull phase instant as the harness observed it, minus the same
instant as the platform stamped it in its own Events (microsecond eventTime).

    python tests/bench/bench_timing.py [--pulls 5]

Runs the node-pull drill (the same code `firedrill run` uses) against the embedded reference platform,
``--pulls`` times, restoring the pulled node between pulls.  For every instant that both sides stamped
(t_detect: NodeNotReady; t_evict: over the pods on the pulled node, the last of each one's first
TaintManagerEviction/Evicted/Killing; t_replace: the last Started of the replacement ranks; t_resume: their first
Resumed) it prints harness wall time minus platform
stamp, then the median, p95 and max of their absolute values.  Budget (DESIGN.md): p95 <= 50 ms.
Harness and platform share this machine's clock, so the difference is the observation delay (API write,
watch delivery, the harness's own bookkeeping), which is what a drill's measurement error is made of.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from drills.kinds.nodepull.drill import NodePullDrill
from drills.records.verdict import DrillResult
from drills.target.connect import embedded_target
from drills.target.profile import FaultMethod

BUDGET_MS = 50.0
INSTANTS = ("detect", "evict", "replace", "resume")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pulls", type=int, default=5)
    args = parser.parse_args()
    target = embedded_target()
    errors: dict[str, list[float]] = {name: [] for name in INSTANTS}
    try:
        for i in range(args.pulls):
            result = DrillResult("node-pull")
            drill = NodePullDrill(target, result, f"fdtime{i}")
            try:
                drill.start_canary(2, 4, 5)
                drill.wait_checkpoint(60)
                drill.pull(0, FaultMethod.KILL)
                drill.observe_until("resume", 60)
            finally:
                drill.rollback()
                target.driver.stop_watches()
                assert target.embedded is not None
                target.embedded.cluster.wait_ready(60)  # the pulled node is back in the spare pool
            row = []
            for name in INSTANTS:
                stamp = result.details.get("instants", {}).get(name, {})
                if stamp.get("server") is not None:
                    err_ms = (stamp["wall"] - stamp["server"]) * 1e3
                    errors[name].append(err_ms)
                    row.append(f"{name} {err_ms:+7.1f} ms")
                else:
                    row.append(f"{name}    (no platform stamp)")
            total = result.measurements.get("total")
            print(f"pull {i + 1}: total {total.value if total and total.value is not None else float('nan'):.2f} s; "
                  + "; ".join(row), flush=True)
    finally:
        target.close()
    every = sorted(abs(e) for values in errors.values() for e in values)
    if not every:
        print("no instant had a platform stamp: FAIL")
        return 1
    for name in INSTANTS:
        if errors[name]:
            print(f"  {name:8} n={len(errors[name])} median {statistics.median(errors[name]):+.1f} ms, "
                  f"max |error| {max(abs(e) for e in errors[name]):.1f} ms")
    p95 = every[min(len(every) - 1, round(0.95 * (len(every) - 1)))]
    ok = p95 <= BUDGET_MS
    print(f"harness timing error over {len(every)} instants: median |error| {statistics.median(every):.1f} ms, "
          f"p95 {p95:.1f} ms, max {every[-1]:.1f} ms; budget p95 <= {BUDGET_MS:.0f} ms: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
