"""``firedrill run --parallel 2`` on the embedded platform: the plan first, two fast scenarios side by side on
disjoint nodes, the control-plane scenario alone, one archive that verifies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIREDRILL = [sys.executable, "-c", "from drills.cli import main; main()"]
FAST = "falls_off or doublebit or control_plane"
"""The two fastest shipped scenarios (a GPU's Xid 79 and Xid 48: about 2 s each) and the control-plane one."""


def when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_two_scenarios_run_side_by_side_on_disjoint_nodes_and_the_control_plane_one_alone(tmp_path: Path) -> None:
    features = tmp_path / "features"
    features.mkdir()
    for name in ("gpu_fault.feature", "control_plane_under_chaos.feature"):
        shutil.copy(REPO / "features" / name, features / name)
    reports = tmp_path / "reports"
    env = {**os.environ, "CI": "1"}
    out = subprocess.run([*FIREDRILL, "run", "--features", str(features), "--reports", str(reports), "--parallel",
                          "2", "-k", FAST], capture_output=True, text=True, timeout=240, cwd=REPO, env=env)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    text = out.stdout
    plan_at = text.index("Parallel plan: 2 pool(s), 2 wave(s)")
    assert plan_at < text.index("wave 1: starting"), "the plan is printed before anything starts"
    assert "ALONE: it measures the API server's" in text
    assert "[pool-2]" in text  # the pools' progress lines, prefixed

    (run_dir,) = [p for p in reports.iterdir() if p.is_dir()]
    record = json.loads((run_dir / "record.json").read_text())
    assert record["options"]["parallel"] == 2
    by_name = {s["scenario"]: s for s in record["scenarios"]}
    assert len(by_name) == 3 and all(s["verdict"] == "PASS" for s in by_name.values())
    (cp,) = [s for s in by_name.values() if s["feature_file"] == "control_plane_under_chaos.feature"]
    pair = [s for s in by_name.values() if s is not cp]
    assert cp["placement"]["wave"] == 1 and cp["placement"]["alone"]
    a, b = (s["placement"] for s in pair)
    assert a["wave"] == b["wave"] == 2 and not a["alone"] and not b["alone"]
    assert a["pool"] != b["pool"] and not set(a["nodes"]) & set(b["nodes"]), "disjoint nodes"
    assert max(when(a["started"]), when(b["started"])) < min(when(a["finished"]), when(b["finished"])), \
        "the two scenarios overlapped in time"
    assert when(cp["placement"]["finished"]) <= min(when(a["started"]), when(b["started"])), \
        "nothing ran beside the control-plane scenario"
    # a pod of each scenario ran on its own pool's nodes
    for s in pair:
        prefix = s["placement"]["nodes"][0].rsplit("-", 1)[0]
        assert prefix in json.dumps(s["details"]), s["details"]

    verify = subprocess.run([*FIREDRILL, "verify", str(run_dir), "--ledger", str(reports / "ledger.jsonl")],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert verify.returncode == 0 and "VERIFIED" in verify.stdout, verify.stdout + verify.stderr
