"""Synthetic runs sealed as real archives (``drills.records.evidence.archive.seal``: signed statements, manifest, ledger
line), so ``firedrill trend`` verifies them exactly as it verifies a real run's.

Used by the trend tests and by ``tests/bench/bench_trend.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from drills.records.evidence.archive import seal
from drills.records.evidence.canonical import canonical_digest
from drills.records.evidence.record import (
    JudgementRecord, MeasurementRecord, RunRecord, ScenarioRecord, TargetRecord, ThresholdRecord,
)
from drills.records.evidence.signing import Signer

HERE = Path(__file__).resolve().parent
HONEST = HERE / "honest_runs.json"
FINGERPRINT = {"schema": "https://firedrill.dev/target-fingerprint/v1", "nodes": {"count": 5, "software": {}},
               "gpus": {"resource": "nvidia.com/gpu", "capacity": 40, "allocatable": 40, "models": []}}
START = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
NODE_PULL_THRESHOLDS = (("detect", 5.0, "s"), ("evict", 5.0, "s"), ("replace", 10.0, "s"), ("resume", 10.0, "s"),
                        ("total", 20.0, "s"), ("lost steps", 10.0, "steps"))


def night(i: int) -> datetime:
    """The i-th night's sealing time (02:00 UTC, one a day)."""
    return START + timedelta(days=i)


def scenario(feature: str, feature_file: str, name: str, thresholds: Sequence[tuple[str, float, str]],
             values: Mapping[str, float | None], *, verdict: str | None = None, tags: Sequence[str] = (),
             drill: str = "node-pull", repeat: int = 1, extra: Mapping[str, tuple[float | None, str]] = {},
             details: Mapping[str, Any] | None = None) -> ScenarioRecord:
    """A scenario record judged as the drills judge (``<=`` thresholds): a threshold is met when its value is
    measured and within it; the verdict is FAIL when one is missed, INCONCLUSIVE when one is not measured."""
    judgements, measurements = [], []
    for name_, limit, unit in thresholds:
        value = values.get(name_)
        t = ThresholdRecord(name_, limit, unit, "<=")
        v = "INCONCLUSIVE" if value is None else "PASS" if value <= limit else "FAIL"
        judgements.append(JudgementRecord(t, value, v, f"{name_}: {value}"))
        measurements.append(MeasurementRecord(name_, value, unit))
    for name_, (value, unit) in extra.items():
        measurements.append(MeasurementRecord(name_, value, unit))
    if verdict is None:
        found = {j.verdict for j in judgements}
        verdict = "FAIL" if "FAIL" in found else "INCONCLUSIVE" if "INCONCLUSIVE" in found else "PASS"
    return ScenarioRecord(feature=feature, feature_file=feature_file, scenario=name, tags=tuple(tags), drill=drill,
                          verdict=verdict, judgements=tuple(judgements), measurements=tuple(measurements),
                          details=dict(details or {}), seconds=5.0, repeat=repeat)


def node_pull(values: Mapping[str, float | None], **kw: Any) -> ScenarioRecord:
    return scenario("Node pull", "node_pull.feature", "A training job survives losing the node of one worker",
                    NODE_PULL_THRESHOLDS, values, tags=("clause:5.1",), **kw)


def from_fixture(s: Mapping[str, Any]) -> ScenarioRecord:
    """A scenario of ``honest_runs.json`` back as a record, with the thresholds, values and judgements it had."""
    judgements = tuple(JudgementRecord(ThresholdRecord(**j["threshold"]), j["measured"], j["verdict"],
                                       f"{j['threshold']['name']}: {j['measured']}") for j in s["judgements"])
    measurements = tuple(MeasurementRecord(m["name"], m["value"], m["unit"]) for m in s["measurements"])
    return ScenarioRecord(feature=s["feature"], feature_file=s["feature_file"], scenario=s["scenario"],
                          tags=tuple(s["tags"]), drill=s["drill"], verdict=s["verdict"], judgements=judgements,
                          measurements=measurements, seconds=5.0, repeat=s.get("repeat", 1))


def honest_fixture() -> dict[str, Any]:
    return json.loads(HONEST.read_text())


def seal_run(reports: Path, run_id: str, when: datetime, scenarios: Sequence[ScenarioRecord], *,
             signer: Signer | None = None, fingerprint: Mapping[str, Any] = FINGERPRINT,
             defects: Sequence[str] = (), files: Mapping[str, bytes] = {},
             timeline: Sequence[Mapping[str, Any]] = ()) -> Path:
    """Seal one run into ``reports/<run_id>/`` and append it to ``reports/ledger.jsonl`` at time ``when``.
    ``files``: what ``firedrill run`` would have written before sealing (junit.xml, report.html, ...);
    ``timeline``: observations (an entry whose ``scenario`` is a scenario's slug goes into its excerpt)."""
    run_dir = reports / run_id
    run_dir.mkdir(parents=True)
    for name, data in files.items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_bytes(data)
    order = ["PASS", "INCONCLUSIVE", "FAIL", "ERROR"]
    verdict = max((s.verdict for s in scenarios), key=order.index, default="PASS")
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    record = RunRecord(
        run_id=run_id, started=stamp, finished=stamp, harness_version="0.1.0", harness_commit=None,
        target=TargetRecord("embedded", "reference platform", dict(fingerprint), canonical_digest(dict(fingerprint)),
                            tuple(defects)),
        features={}, profile={}, profile_digest=canonical_digest({}), options={}, scenarios=tuple(scenarios),
        verdict=verdict, timeline=tuple(dict(t) for t in timeline))
    seal(run_dir, record, signer or Signer.generate_ephemeral(), reports / "ledger.jsonl", now=when)
    return run_dir


def run_id(i: int) -> str:
    return night(i).strftime("%Y%m%dT%H%M%SZ") + f"-{i:06x}"


def seal_nights(reports: Path, nights: Sequence[Sequence[ScenarioRecord]], *, signer: Signer | None = None,
                defects_from: int | None = None, defects: Sequence[str] = ()) -> list[Path]:
    """One sealed run per night, in order; from night ``defects_from`` on, with ``defects``."""
    signer = signer or Signer.generate_ephemeral()
    return [seal_run(reports, run_id(i), night(i), scenarios, signer=signer,
                     defects=defects if defects_from is not None and i >= defects_from else ())
            for i, scenarios in enumerate(nights)]
