"""Record the measured values of real runs into a small fixture: ``honest_runs.json`` in this folder.

Not a test. Run it on a reports folder that ``firedrill run`` filled against an unchanged, honest platform::

    python tests/unit/trend/record_honest_runs.py REPORTS "how the runs were made" > tests/unit/trend/honest_runs.json

Each archive is verified first (``firedrill verify``'s checks); only what the trend reads is kept: per run its
id, sealing time and verdict, and per scenario its identity, tags, verdict, the target fingerprint's digest,
thresholds, measured values (the harness's) and judgements. Timelines, details and files are left out, so the
fixture stays small; ``tests/unit/trend/synthetic.py`` seals it again as archives in the real format.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from drills.records.evidence.verify import verify


def main(reports: Path, how: str) -> dict:
    runs = []
    for line in (reports / "ledger.jsonl").read_text().splitlines():
        entry = json.loads(line)
        archive = reports / entry["run_id"]
        report = verify(archive, ledger=reports / "ledger.jsonl")
        if not report.ok:
            raise SystemExit(f"{archive} does not verify: {report.problems[0]}")
        record = json.loads((archive / "record.json").read_text())
        runs.append({
            "run_id": record["run_id"], "time": entry["time"], "verdict": record["verdict"],
            "fingerprint_digest": record["target"]["fingerprint_digest"],
            "scenarios": [{
                "feature": s["feature"], "feature_file": s["feature_file"], "scenario": s["scenario"],
                "tags": s["tags"], "drill": s["drill"], "verdict": s["verdict"], "repeat": s["repeat"],
                "measurements": [{"name": m["name"], "unit": m["unit"], "value": m["value"]} for m in s["measurements"]],
                "judgements": [{"threshold": j["threshold"], "measured": j["measured"], "verdict": j["verdict"]}
                               for j in s["judgements"]],
            } for s in record["scenarios"]],
        })
    return {"recorded": how, "runs": runs}


if __name__ == "__main__":
    fixture = main(Path(sys.argv[1]), sys.argv[2])
    sys.stdout.write('{"recorded": ' + json.dumps(fixture["recorded"]) + ',\n "runs": [\n  '
                     + ",\n  ".join(json.dumps(r, sort_keys=True) for r in fixture["runs"]) + "\n]}\n")
