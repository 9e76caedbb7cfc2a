"""A small RunRecord and a run directory as ``firedrill run`` leaves it before sealing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from drills.records.evidence.archive import SealResult, seal
from drills.records.evidence.canonical import canonical_digest, sha256_hex
from drills.records.evidence.record import (
    JudgementRecord,
    MeasurementRecord,
    RunRecord,
    ScenarioRecord,
    TargetRecord,
    ThresholdRecord,
)
from drills.records.evidence.signing import Signer

FEATURE = b"Feature: Gang scheduling\n  Scenario: A gang gets all its GPUs or none\n"
FINGERPRINT = {"schema": "https://firedrill.dev/target-fingerprint/v1", "nodes": {"count": 4, "software": {}},
               "gpus": {"resource": "nvidia.com/gpu", "capacity": 32, "allocatable": 32, "models": []}}
NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def make_record(run_id: str = "20260501T120000Z-abcd", verdict: str = "FAIL") -> RunRecord:
    detect = ThresholdRecord("detect", 5.0, "s", "<=")
    total = ThresholdRecord("total", 10.0, "s", "<=")
    pull = ScenarioRecord(
        feature="Node pull", feature_file="healing/node-pull.feature", scenario="A dead node heals by itself",
        tags=("clause:4.2", "drill:node-pull"), drill="node-pull", verdict=verdict,
        judgements=(JudgementRecord(detect, 3.1, "PASS", "detect 3.1 s <= 5 s"),
                    JudgementRecord(total, 12.5, verdict, "total 12.5 s > 10 s")),
        measurements=(MeasurementRecord("detect", 3.1, "s", platform=3.05, error=0.05),
                      MeasurementRecord("total", 12.5, "s", platform=12.4, error=0.1, note="victim node-2")),
        findings=("replacement joined late",), details={"fault": {"method": "agent-kill", "node": "node-2"}},
        seconds=14.2)
    gang = ScenarioRecord(
        feature="Gang scheduling", feature_file="gang.feature", scenario="A gang gets all its GPUs or none",
        tags=("clause:3.1", "conformance:gang_scheduling"), drill="gang-submission", verdict="PASS", seconds=2.0)
    unsure = ScenarioRecord(
        feature="Gang scheduling", feature_file="gang.feature", scenario="Two gangs do not deadlock",
        tags=("clause:3.2",), drill="gang-submission", verdict="INCONCLUSIVE", seconds=30.0,
        error="the second gang never became pending")
    features = {"gang.feature": sha256_hex(FEATURE), "healing/node-pull.feature": sha256_hex(b"Feature: Node pull\n")}
    profile = {"flavor": "volcano", "queue": "default"}
    return RunRecord(
        run_id=run_id, started="2026-05-01T11:58:00Z", finished="2026-05-01T12:00:00Z", harness_version="0.1.0",
        harness_commit="fa100b2212e9abcd8ae99f824297121d35bfac61",
        target=TargetRecord("embedded", "reference platform, 4 x 8 H100", FINGERPRINT, canonical_digest(FINGERPRINT)),
        features=features, profile=profile, profile_digest=canonical_digest(profile), options={"repeat": 1},
        scenarios=(gang, unsure, pull), verdict="FAIL" if verdict == "FAIL" else "INCONCLUSIVE",
        timeline=({"mono": 1.0, "wall": 1777636680.0, "server": None, "kind": "Pod", "event": "ADDED",
                   "namespace": "drill", "name": "gang-0", "summary": {"phase": "Pending"},
                   "scenario": "gang-a-gang-gets-all-its-gpus-or-none"},
                  {"mono": 2.5, "wall": 1777636681.5, "server": 1777636681.49, "kind": "Node",
                   "event": "MODIFIED", "namespace": None, "name": "node-2", "summary": {"ready": "False"}}))


def make_run_dir(reports: Path, run_id: str = "20260501T120000Z-abcd") -> Path:
    run_dir = reports / run_id
    (run_dir / "allure-results").mkdir(parents=True)
    (run_dir / "junit.xml").write_text('<?xml version="1.0"?><testsuite name="firedrill" tests="3" failures="1"/>\n')
    (run_dir / "report.html").write_text("<!doctype html><title>Firedrill run</title><p>FAIL</p>\n")
    (run_dir / "allure-results" / "0a1b-result.json").write_text('{"name": "A gang gets all its GPUs or none"}')
    return run_dir


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    path = tmp_path / "reports"
    path.mkdir()
    return path


@pytest.fixture
def signer() -> Signer:
    return Signer.generate_ephemeral()


@pytest.fixture
def sealed(reports: Path, signer: Signer) -> SealResult:
    run_dir = make_run_dir(reports)
    return seal(run_dir, make_record(), signer, reports / "ledger.jsonl", now=NOW)
