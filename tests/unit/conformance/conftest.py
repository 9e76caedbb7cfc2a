"""Sealed run archives with tagged scenarios of every verdict, for ``firedrill conformance``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from drills.records.evidence.archive import seal
from drills.records.evidence.record import JudgementRecord, RunRecord, ScenarioRecord, ThresholdRecord
from drills.records.evidence.signing import Signer
from tests.unit.evidence.conftest import NOW, make_record, make_run_dir

RUN_ID = "20260501T120000Z-conf"


def _scenario(name: str, tags: tuple[str, ...], verdict: str, repeat: int = 1, **kw: object) -> ScenarioRecord:
    return ScenarioRecord(feature="Conformance", feature_file="conformance.feature", scenario=name, tags=tags,
                          drill="gang-submission", verdict=verdict, seconds=2.5, repeat=repeat,
                          **kw)  # type: ignore[arg-type]


def tagged_record(run_id: str = RUN_ID, defects: tuple[str, ...] = ()) -> RunRecord:
    """gang_scheduling: two repeats, both PASS; gpu_sharing: one PASS, one FAIL; pod_autoscaling: INCONCLUSIVE;
    an id the program does not have; and an untagged scenario."""
    limit = ThresholdRecord("time until every worker runs", 30.0, "s", "<=")
    scenarios = (
        _scenario("A gang that fits is placed whole", ("clause:4.1", "conformance:gang_scheduling"), "PASS", 1),
        _scenario("A gang that fits is placed whole", ("clause:4.1", "conformance:gang_scheduling"), "PASS", 2),
        _scenario("Slices are schedulable", ("clause:7.2", "conformance:gpu_sharing"), "PASS"),
        _scenario("A tenant over its share hurts only itself", ("clause:7.1", "conformance:gpu_sharing"), "FAIL",
                  judgements=(JudgementRecord(limit, 41.0, "FAIL", "every tenant on that GPU failed, not only that "
                                                                    "tenant"),)),
        _scenario("A burst is absorbed by scaling out", ("clause:9.2", "conformance:pod_autoscaling"), "INCONCLUSIVE",
                  error="the cluster serves no autoscaling/v2 HorizontalPodAutoscaler"),
        _scenario("A node heals by itself", ("clause:5.1", "conformance:self_healing"), "PASS"),
        _scenario("Untagged", ("clause:1.1",), "PASS"),
    )
    base = make_record(run_id)
    return dataclasses.replace(base, scenarios=scenarios, verdict="FAIL",
                               target=dataclasses.replace(base.target, defects=defects))


@pytest.fixture
def signer() -> Signer:
    return Signer.generate_ephemeral()


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    path = tmp_path / "reports"
    path.mkdir()
    return path


@pytest.fixture
def sealed_run(reports: Path, signer: Signer) -> Path:
    """A sealed, verifying run archive (reports/<run-id>) with the ledger beside it."""
    run_dir = make_run_dir(reports, RUN_ID)
    seal(run_dir, tagged_record(), signer, reports / "ledger.jsonl", now=NOW)
    return run_dir
