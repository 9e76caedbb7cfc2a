"""The accelerator metrics feature on the honest embedded platform (issue 31, item 2): ``firedrill run`` on the
shipped feature PASSes every scenario, reading each node agent's own ``/metrics``, with the GPU it judges named by
the canary's own start line and a utilization series that moved with the canary's load.

The ``stale-metrics`` defect's FAIL is the defect zoo's (tests/integration/test_defect_zoo.py); the judging
itself is unit-tested in tests/unit/drills/test_telemetry.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_run import features_copy, firedrill

pytestmark = pytest.mark.integration


def _archive(out: str) -> Path:
    line = next(ln for ln in out.splitlines() if ln.startswith("Evidence: "))
    return Path(line.split("Evidence: ", 1)[1].split(" (", 1)[0])


def test_every_promise_passes_on_the_honest_platform_judged_on_the_canary_s_gpu(tmp_path: Path) -> None:
    features = features_copy(tmp_path, "accelerator_metrics.feature")
    out = firedrill("run", "--features", str(features), timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 passed" in out.stdout, out.stdout
    record = json.loads((_archive(out.stdout) / "record.json").read_text())
    scenarios = {s["scenario"]: s for s in record["scenarios"]}
    assert len(scenarios) == 4
    for s in scenarios.values():
        assert s["verdict"] == "PASS" and s["drill"] == "accelerator-metrics", s
        telemetry = s["details"]["telemetry"]
        assert telemetry["source"] == "node-agents"
        assert all(n["answered"] == n["gpus"] > 0 for n in telemetry["nodes"].values()), telemetry["nodes"]
    inventory = scenarios["Every GPU of every node reports its utilization and memory"]["details"]["telemetry"]
    assert inventory["gaps"] == [] and len(inventory["nodes"]) == 5  # 4 nodes and the spare: every node has GPUs
    for name in ("A GPU we compute on shows it, and no other GPU does", "An Xid shows on the GPU it hit",
                 "Telemetry that answers but never moves is frozen"):
        canary = scenarios[name]["details"]["telemetry"]["canary"]
        assert len(canary["gpus"]) == 1 and canary["gpus"][0].startswith("GPU-"), canary  # the canary's own word
    xid = scenarios["An Xid shows on the GPU it hit"]["details"]["telemetry"]["xid"]
    assert xid["xid"] == 43 and xid["before"] != 43
    series = scenarios["Telemetry that answers but never moves is frozen"]["details"]["telemetry"]["series"]
    assert len({p["util"] for p in series if p["util"] is not None}) >= 2, series  # it moved with the load
