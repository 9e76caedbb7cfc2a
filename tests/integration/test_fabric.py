"""features/fabric.feature as shipped, on the honest embedded platform: every GPU node advertises its 8 GPUs, and the
canary's own collective reaches its floor on every node with none behind (docs/FABRIC.md).  The ``slow-link`` FAIL
is the defect zoo's (tests/integration/test_defect_zoo.py); the judgement's cases are tests/unit/drills."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIREDRILL = [sys.executable, "-c", "from drills.cli import main; main()"]


def test_the_shipped_fabric_feature_passes_on_the_honest_platform_measured_by_the_canary(tmp_path: Path) -> None:
    features = tmp_path / "features"
    features.mkdir()
    shutil.copy(REPO / "features" / "fabric.feature", features)
    reports = tempfile.mkdtemp(prefix="firedrill-test-reports-")
    out = subprocess.run([*FIREDRILL, "run", "--features", str(features), "--reports", reports],
                         capture_output=True, text=True, timeout=180, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed, 0 failed" in out.stdout, out.stdout
    (run_dir,) = re.findall(r"^Evidence: (\S+) ", out.stdout, re.M)
    inventory, collective = json.loads((Path(run_dir) / "record.json").read_text())["scenarios"]
    assert {n["node"]: (n["inventory"], n["allocatable"]) for n in inventory["details"]["inventory"]} == {
        f"gpu-node-{i}": (8, 8) for i in range(5)}
    details = collective["details"]
    assert details["source"].startswith("the training canary's own all-reduce")
    assert sorted(details["nodes"]) == [f"gpu-node-{i}" for i in range(4)]
    assert all(6e6 <= bw <= 10.5e6 for bw in details["nodes"].values()), details["nodes"]  # stated 10 MB/s
    assert len(details["links"]) == 3 and all(link["frames"] >= 20 for link in details["links"]), details["links"]
    shutil.rmtree(reports, ignore_errors=True)
