"""The native flavor on the embedded platform (issue 28): the node-pull feature with the training canary as a
batch/v1 Indexed Job under the reference platform's Job controller PASSes, and FAILs with ``lose-checkpoint``
(training resumed from step 0).  The leak drill's fault-tolerance hole (issue 29) with the same canary: the
reference platform's leak report sees the replaced rank as the job's restart and sizes the hole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "examples" / "embedded" / "native.yaml"


def _run(reports: Path, *defects: str, keyword: str = "survives") -> tuple[subprocess.CompletedProcess[str], dict]:
    argv = [sys.executable, "-c", "from drills.cli import main; main()", "run", "--profile", str(PROFILE),
            "--features", str(REPO / "features"), "-k", keyword, "--reports", str(reports)]
    for d in defects:
        argv += ["--defect", d]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "COLUMNS": "1000"})
    (record,) = reports.glob("*/record.json")
    return out, json.loads(record.read_text())


def test_node_pull_passes_with_the_canary_as_an_indexed_job(tmp_path: Path) -> None:
    out, record = _run(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert record["profile"]["flavor"] == "native" and [s["verdict"] for s in record["scenarios"]] == ["PASS"]
    assert "simulated GPUs, native flavor" in out.stdout


def test_lose_checkpoint_fails_it(tmp_path: Path) -> None:
    out, record = _run(tmp_path, "lose-checkpoint")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "training resumed from step 0, but checkpoint" in out.stdout


def test_the_leak_reports_fault_tolerance_hole_is_sized_for_an_indexed_job(tmp_path: Path) -> None:
    out, record = _run(tmp_path, keyword="tolerance")
    assert out.returncode == 0, out.stdout + out.stderr
    (scenario,) = record["scenarios"]
    assert scenario["drill"] == "leak-identification" and scenario["verdict"] == "PASS", scenario["findings"]
    size = next(m for m in scenario["measurements"] if m["name"] == "hole size error")
    assert size["value"] <= 10, size
