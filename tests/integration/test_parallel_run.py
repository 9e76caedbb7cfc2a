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

from drills.bdd.niceness import can_hold

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIREDRILL = [sys.executable, "-c", "from drills.cli import main; main()"]
FAST = "falls_off or doublebit or own_xid or control_plane"
"""The GPU-fault scenarios (Xid 79 and Xid 48: about 2 s each; an application's own Xid: about 7 s) and the
control-plane one.  With no history each is planned at 15 s: pool-1, up when the control-plane scenario ends,
carries on with two of them while pool-2 starts and runs the third beside one of them."""


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
    assert "pool-1 carries on into wave 2" in text
    assert text.index("[pool-1]") < text.index("wave 2: starting 1 worker(s): pool-2"), \
        "pool-2 starts only once the control-plane scenario is over"
    assert "firedrill-worker:" not in text  # the worker's signals are read, not shown
    if can_hold():  # pool-2 came up beside wave 1 at nice 19 and waited (docs/PARALLEL.md)
        assert "pool-2 start their platforms beside it at nice 19 and wait" in text, text[:3000]
        assert text.index("[pool-2] Target:") < text.index("wave 2: starting 1 worker(s): pool-2"), text[:3000]

    (run_dir,) = [p for p in reports.iterdir() if p.is_dir()]
    record = json.loads((run_dir / "record.json").read_text())
    assert record["options"]["parallel"] == 2
    by_name = {s["scenario"]: s for s in record["scenarios"]}
    assert len(by_name) == 4 and all(s["verdict"] == "PASS" for s in by_name.values())
    (cp,) = [s for s in by_name.values() if s["feature_file"] == "control_plane_under_chaos.feature"]
    rest = [s["placement"] for s in by_name.values() if s is not cp]
    assert cp["placement"]["wave"] == 1 and cp["placement"]["alone"] and cp["placement"]["pool"] == "pool-1"
    assert all(p["wave"] == 2 and not p["alone"] for p in rest)
    # The plan gives pool-1 two scenarios and pool-2 one; a pool done with its share takes the other's unstarted
    # one (drills/bdd/claims.py): pool-2 often takes pool-1's second while pool-1 rolls the control plane back.
    assert all(p["pool"] in ("pool-1", "pool-2") and p.get("taken_from") in (None, *{"pool-1", "pool-2"} - {p["pool"]})
               for p in rest), rest
    one = [p for p in rest if p["pool"] == "pool-1"]
    two = [p for p in rest if p["pool"] == "pool-2"]
    assert len(one) + len(two) == 3
    assert not any(set(a["nodes"]) & set(b["nodes"]) for a in one for b in two), "disjoint nodes"
    if can_hold():  # pool-2 is up when wave 2 begins: the two pools work side by side
        assert one and two
        assert any(max(when(a["started"]), when(b["started"])) < min(when(a["finished"]), when(b["finished"]))
                   for a in one for b in two), "scenarios of the two pools overlapped in time"
    assert when(cp["placement"]["finished"]) <= min(when(p["started"]) for p in rest), \
        "nothing ran beside the control-plane scenario"
    # a pod of each scenario ran on its own pool's nodes
    for s in by_name.values():
        if s is cp:
            continue
        prefix = s["placement"]["nodes"][0].rsplit("-", 1)[0]
        assert prefix in json.dumps(s["details"]), s["details"]

    verify = subprocess.run([*FIREDRILL, "verify", str(run_dir), "--ledger", str(reports / "ledger.jsonl")],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert verify.returncode == 0 and "VERIFIED" in verify.stdout, verify.stdout + verify.stderr
