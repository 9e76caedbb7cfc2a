"""From a finished run (scenario outcomes, the target, the inputs) to its :class:`RunRecord`.

Only allow-listed facts enter the record: verdicts, thresholds, measurements, drill details (which the
drills build from summaries), the timeline's summaries, the fingerprint's allow-listed labels, digests
of the inputs.  Paths are relative to the features directory; no kubeconfig, no token, no absolute path.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import subprocess
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from drills import __version__
from drills.records.evidence.record import (
    JudgementRecord, MeasurementRecord, RunRecord, ScenarioRecord, TargetRecord, ThresholdRecord,
)
from drills.records.verdict import DrillResult, Verdict


class Outcome(Protocol):
    """What the pytest plugin knows of one scenario (drills.bdd.plugin.ScenarioOutcome)."""

    feature: str
    feature_file: str
    scenario: str
    tags: list[str]
    verdict: Verdict | None
    result: DrillResult | None
    error: str
    seconds: float
    repeat: int
    timeline_span: tuple[int, int]
    """[start, end) indices of the run timeline observed during this scenario."""
    placement: dict[str, Any] | None
    """Where ``--parallel`` ran it (wave, pool, nodes, alone); None in a serial run."""


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def json_safe(value: Any) -> Any:
    """Tuples to lists, unknown types to strings, NaN and infinities to None: what canonical JSON can hold."""
    def finite(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, list):
            return [finite(x) for x in v]
        return v
    return finite(json.loads(json.dumps(value, default=str)))


def harness_commit() -> str | None:
    """The git commit of the harness's own source, when it runs from a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def scenario_record(o: Outcome) -> ScenarioRecord:
    r = o.result
    verdict = o.verdict.value if o.verdict is not None else "ERROR"
    judgements: tuple[JudgementRecord, ...] = ()
    measurements: tuple[MeasurementRecord, ...] = ()
    if r is not None:
        judgements = tuple(JudgementRecord(
            ThresholdRecord(j.threshold.name, j.threshold.limit, j.threshold.unit, j.threshold.comparison.value),
            None if j.measurement is None else j.measurement.value, j.verdict.value, j.message) for j in r.judgements)
        measurements = tuple(MeasurementRecord(m.name, _finite(m.value), m.unit, _finite(m.platform),
                                               _finite(m.error), m.note) for m in r.measurements.values())
    return ScenarioRecord(
        feature=o.feature, feature_file=o.feature_file, scenario=o.scenario, tags=tuple(o.tags),
        drill=r.drill if r is not None else "scenario", verdict=verdict, judgements=judgements,
        measurements=measurements, findings=tuple(r.findings) if r is not None else (),
        details=json_safe(r.details) if r is not None else {}, seconds=round(o.seconds, 3), error=o.error,
        repeat=o.repeat, placement=json_safe(placed) if (placed := getattr(o, "placement", None)) else None)


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def tag_timeline(timeline: list[dict[str, Any]], outcomes: Iterable[Outcome]) -> list[dict[str, Any]]:
    """Mark each observation with the scenario during which it was made (the statements' excerpts)."""
    for o in outcomes:
        slug = scenario_record(o).slug
        start, end = o.timeline_span
        for entry in timeline[start:end]:
            entry["scenario"] = slug
    return timeline


def worst(verdicts: Iterable[str]) -> str:
    order = ["PASS", "INCONCLUSIVE", "FAIL", "ERROR", "ABORTED"]
    return max(verdicts, key=order.index, default="PASS")


def build_record(*, run_id: str, started: datetime, finished: datetime, outcomes: Iterable[Outcome],
                 target_kind: str, target_description: str, fingerprint: dict[str, Any], fingerprint_digest: str,
                 features_dir: Path, feature_files: Iterable[Path], profile: dict[str, Any],
                 options: dict[str, Any], timeline: Iterable[dict[str, Any]],
                 leak_report: dict[str, Any] | None = None, target_defects: Iterable[str] = (),
                 signers: Iterable[dict[str, str]] = ()) -> RunRecord:
    outcomes = list(outcomes)
    scenarios = tuple(scenario_record(o) for o in outcomes)
    features = {p.resolve().relative_to(features_dir.resolve()).as_posix(): sha256_file(p)
                for p in sorted(feature_files)}
    profile_digest = hashlib.sha256(json.dumps(profile, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return RunRecord(
        run_id=run_id, started=rfc3339(started), finished=rfc3339(finished), harness_version=__version__,
        harness_commit=harness_commit(),
        target=TargetRecord(target_kind, target_description, json_safe(fingerprint), fingerprint_digest,
                            tuple(sorted(set(target_defects)))),
        features=features, profile=json_safe(profile), profile_digest=profile_digest, options=json_safe(options),
        scenarios=scenarios, verdict=worst(s.verdict for s in scenarios),
        timeline=tuple(tag_timeline(json_safe(list(timeline)), outcomes)),
        leak_report=json_safe(leak_report) if leak_report is not None else None, signers=tuple(signers))
