"""Issue 49, Done-when 2: a customer's own remediation contract, written from docs/STEPS.md alone (another world
size and GPU layout, another Xid, other times and another count of reporting nodes than the shipped
features/remediation.feature), runs on the embedded platform without a line of Python.

One ``firedrill run`` of three scenarios: a GPU of a rank of three fails, is repaired, comes back within 3 s of its
burn-in, fails again a second later and, repaired again, stays out; two nodes away from the job report a fatal
fault at once and the platform takes out at most one, says it stopped and leaves the job alone; a node running
three single-GPU pods reports a fault that clears at the first eviction, and its drain stops.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIREDRILL = [sys.executable, "-c", "from drills.cli import main; main()"]
OWN_WORDS = """\
Feature: A broken GPU comes back only when proven, and a noisy alarm does not empty our cluster
  Scenario: A GPU that flaps a second after it came back is kept out
    Given a canary training job of 3 workers with 2 GPUs each, checkpointing every 4 steps
    And the job has written a checkpoint within 60 seconds
    When the GPU of worker 2 fails with Xid 48
    Then the platform detects the failure within 4 seconds
    When the GPU is repaired
    Then the GPU returns to service within 3 seconds of its burn-in passing
    When the GPU fails again with Xid 48 1 second after its return
    And the GPU is repaired
    Then the GPU stays out of service for 5 seconds
    And no pod is given the failed GPU while it is out of order

  Scenario: Two nodes reporting the same fault at once take out at most one
    Given a canary training job of 3 workers with 2 GPUs each, checkpointing every 4 steps
    And the job has written a checkpoint within 60 seconds
    When 2 nodes away from the job report a fatal GPU fault at once
    Then the platform quarantines at most 1 of them
    And the platform says it stopped acting within 4 seconds
    And the job trains on undisturbed for 6 seconds
    And every node the fault touched is back in service within 8 seconds

  Scenario: A drain stops at the first eviction when the fault goes away
    Given a canary training job of 3 workers with 2 GPUs each, checkpointing every 4 steps
    And the job has written a checkpoint within 60 seconds
    Given 3 single-GPU pods run on a node away from the job
    When that node reports a fatal GPU fault that clears after its first eviction
    Then the platform stops draining it within 3 seconds of the fault clearing
    And at least 1 of its pods run on undisturbed
    And the node is schedulable again within 4 seconds of the fault clearing
"""


def test_a_remediation_contract_in_the_customers_own_numbers_runs_unchanged(tmp_path: Path) -> None:
    features = tmp_path / "features"
    features.mkdir()
    (features / "our_remediation.feature").write_text(OWN_WORDS)
    reports = tmp_path / "reports"
    proc = subprocess.run([*FIREDRILL, "run", "--features", str(features), "--reports", str(reports)],
                          capture_output=True, text=True, timeout=240, cwd=REPO, env={**os.environ, "COLUMNS": "1000"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    record = json.loads(next(reports.glob("*/record.json")).read_text())
    by = {s["scenario"]: s for s in record["scenarios"]}
    flap = next(s for name, s in by.items() if "flaps" in name)
    fleet = next(s for name, s in by.items() if "Two nodes" in name)
    measured = {m["name"]: m["value"] for m in flap["measurements"]}
    assert flap["details"]["fault"]["rank"] == 2 and flap["details"]["fault"]["xid"] == 48
    assert 0 <= measured["return after its burn-in"] <= 3, measured
    assert 1 <= measured["second fault after the return"] < 3, measured  # a second after the return, not before
    assert measured["returns before a person cleared it"] == 0, measured
    assert len(flap["details"]["way_back"]["repairs"]) == 2, flap["details"]["way_back"]
    counted = {m["name"]: m["value"] for m in fleet["measurements"]}
    assert len(fleet["details"]["fault"]["nodes"]) == 2, fleet["details"]["fault"]
    assert counted["nodes quarantined"] <= 1 and counted["stopped-acting notice"] <= 4, counted
    assert counted["job pods disturbed"] == 0, counted
    drain = next(s for name, s in by.items() if "drain stops" in name)
    kept = {m["name"]: m["value"] for m in drain["measurements"]}
    assert len(drain["details"]["drain"]["pods"]) == 3 and drain["verdict"] == "PASS", drain["details"]
    assert kept["pods spared"] >= 1 and kept["drain stop"] <= 3 and kept["schedulable again"] <= 4, kept
