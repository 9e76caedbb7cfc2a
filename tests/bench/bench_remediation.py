"""Remediation you can trust (issue 49): each scenario of the shipped ``features/remediation.feature``, medians over
runs.

    python tests/bench/bench_remediation.py [--runs 3]

Runs the feature ``--runs`` times with ``firedrill run`` on the embedded reference platform and prints, per scenario,
the median and range of its wall time and of each measurement in seconds (the GPU's return after its burn-in, the
platform's stopped-acting notice, the drain's stop and the node schedulable again, detect, back in
service). Budget: each measurement's median within the threshold
the feature states for it. The figures go to docs/BENCHMARKS.md, "Remediation".
"""

from __future__ import annotations

import argparse

from feature_medians import report, run_feature

FEATURE = "remediation.feature"
BUDGET = {"detect": 3.0, "return after its burn-in": 5.0, "stopped-acting notice": 5.0, "back in service": 10.0,
          "drain stop": 2.0, "schedulable again": 3.0}
"""The thresholds features/remediation.feature states, by measurement."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    values, verdicts = run_feature(FEATURE, parser.parse_args().runs)
    return 1 if report(values, verdicts, lambda scenario, name: BUDGET.get(name)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
