"""A GPU that fails while its node lives (issue 26): detect and the whole recovery, medians over runs.

    python tests/bench/bench_gpu_fault.py [--runs 5]

Runs the shipped ``features/gpu_fault.feature`` ``--runs`` times with ``firedrill run`` on the embedded reference
platform (tuned healing, as a user types it) and prints, for each scenario, the median and range of every phase
it measured (from the run record) and of its wall time. Budget (issue 26): the Xid 79 and 48 scenarios' detect
<= 3 s and total <= 15 s, medians. The figures go to docs/BENCHMARKS.md, "GPU fault".
"""

from __future__ import annotations

import argparse

from feature_medians import report, run_feature

BUDGET = {"detect": 3.0, "total": 15.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    values, verdicts = run_feature("gpu_fault.feature", parser.parse_args().runs)
    over = report(values, verdicts, lambda scenario, name: None if "application" in scenario else BUDGET.get(name))
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
