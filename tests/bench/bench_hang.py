"""A hung job (issue 48): how soon the platform names it, and the whole recovery; medians over runs.

    python tests/bench/bench_hang.py [--runs 5]

Runs scenario 19.1 of the shipped ``features/hung_job.feature`` (a rank stuck inside a step, the threshold 5 s)
``--runs`` times with ``firedrill run`` on the embedded reference platform and prints the median and range of each
phase (named, restart, resume, total) and of its wall time. Budget (issue 48): named within the stated threshold
+ 5 s, and resumed within 30 s of the restart, medians. The figures go to docs/BENCHMARKS.md, "Hung job".
"""

from __future__ import annotations

import argparse
import re

from feature_medians import REPO, report, run_feature

FEATURE = "hung_job.feature"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    threshold = float(re.search(r"makes no progress for (\d+) seconds",  # type: ignore[union-attr]
                                (REPO / "features" / FEATURE).read_text()).group(1))
    budget = {"named": threshold + 5.0, "resume": 30.0}
    values, verdicts = run_feature(FEATURE, parser.parse_args().runs, keyword="hung")
    return 1 if report(values, verdicts, lambda scenario, name: budget.get(name)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
