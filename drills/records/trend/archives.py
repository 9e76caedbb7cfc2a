"""Reading a reports folder for a trend: the ledger once, then every archive it names, each verified.

The ledger (``REPORTS/ledger.jsonl``) gives the runs and their order; its hash chain is checked once
(:func:`drills.records.evidence.verify.check_chain`). Each run's archive, ``REPORTS/<run-id>/`` or
``REPORTS/<run-id>.tar.gz``, is read once and verified with the same checks as ``firedrill verify`` (manifest
signature, every file's digest and size, every statement's signature and subjects) plus its ledger line
(manifest digest, keyid, verdict). Only a run that verifies enters the trend; one that does not is left out
and named, with its first problem. A ledger line whose archive is not in the folder (kept elsewhere, or past
a CI artifact's retention) is left out and counted, not treated as tampering: the chain still vouches for
its verdict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from drills.records.evidence.archive import EVIDENCE_DIR, LEDGER_NAME, RUN_ENVELOPE
from drills.records.evidence.errors import EnvelopeError, VerifyReadError
from drills.records.evidence.signing import Envelope
from drills.records.evidence.statements import SCENARIO_PREDICATE_TYPE
from drills.records.evidence.verify import (
    LedgerChain, Problem, VerifyReport, check_chain, check_files, check_ledger_entry, read_archive,
)
from drills.records.score import run_score, scored_from_predicate
from drills.records.trend.errors import TrendUsageError
from drills.records.trend.model import Run, Sample, ScenarioKey, ScenarioRun, Threshold

__all__ = ["Loaded", "load_runs", "parse_since", "run_from_statements"]

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass
class Loaded:
    """The runs of a reports folder that verified, in ledger order, and what was left out and why."""

    reports: Path
    ledger: Path
    chain: LedgerChain
    runs: list[Run] = field(default_factory=list)
    unverified: list[tuple[str, Problem, int]] = field(default_factory=list)
    """(run id, its first problem, how many problems) for each archive that does not verify."""
    missing: list[str] = field(default_factory=list)
    """Run ids in the ledger (and the window) whose archive is not in the folder."""
    before_since: int = 0
    """Ledger lines older than ``--since``."""

    @property
    def chain_ok(self) -> bool:
        return not self.chain.problems


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: an RFC 3339 / ISO 8601 date or time (UTC when no zone is given), or a span back from now:
    ``14 days``, ``36 hours``, ``2 weeks`` (also ``14d``, ``36h``, ``2w``)."""
    value = text.strip()
    span = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(d|days?|h|hours?|w|weeks?)", value, re.I)
    if span:
        amount, unit = float(span.group(1)), span.group(2)[0].lower()
        seconds = amount * {"h": 3600, "d": 86400, "w": 7 * 86400}[unit]
        return (now or datetime.now(UTC)).astimezone(UTC) - timedelta(seconds=seconds)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise TrendUsageError(f"--since {text!r}: not a date, a time or a span; write e.g. 2026-11-01, "
                              "2026-11-01T00:00:00Z or '14 days'") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _time(text: Any) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def _platform(target: Mapping[str, Any]) -> str:
    digest = target.get("fingerprintDigest")
    sha = str(digest.get("sha256") or "") if isinstance(digest, Mapping) else ""
    defects = sorted(str(d) for d in target.get("defects") or [])
    return (sha or "unknown") + "".join(f"+{d}" for d in defects)


def scenario_from_predicate(predicate: Mapping[str, Any]) -> ScenarioRun:
    """A :class:`ScenarioRun` from a Firedrill scenario predicate (already verified)."""
    scenario = predicate.get("scenario") if isinstance(predicate.get("scenario"), Mapping) else {}
    feature_file = predicate.get("featureFile") if isinstance(predicate.get("featureFile"), Mapping) else {}
    key = ScenarioKey(str(feature_file.get("path") or scenario.get("feature") or "?"),
                      str(scenario.get("name") or "?"))
    thresholds: dict[str, Threshold] = {}
    for t in predicate.get("thresholds") or []:
        if isinstance(t, Mapping) and isinstance(t.get("name"), str) and _num(t.get("limit")) is not None \
                and t.get("comparison") in ("<=", ">="):
            thresholds[t["name"]] = Threshold(float(t["limit"]), str(t["comparison"]), str(t.get("unit") or ""))
    judged = {str(j.get("threshold")): j for j in predicate.get("judgements") or [] if isinstance(j, Mapping)}
    samples: dict[str, Sample] = {}
    for m in predicate.get("measurements") or []:
        if not isinstance(m, Mapping) or not isinstance(m.get("name"), str):
            continue
        name = m["name"]
        j = judged.get(name)
        samples[name] = Sample(_num(m.get("harness")), str(m.get("unit") or ""),
                               str(j["verdict"]) if j is not None and j.get("verdict") else None,
                               str(m.get("note") or ""))
    for name, j in judged.items():  # a judged threshold the drill recorded no measurement for
        if name not in samples:
            unit = thresholds[name].unit if name in thresholds else ""
            samples[name] = Sample(_num(j.get("measured")), unit, str(j.get("verdict") or "") or None)
    target = predicate.get("target") if isinstance(predicate.get("target"), Mapping) else {}
    repeat = scenario.get("repeat")
    return ScenarioRun(key=key, feature=str(scenario.get("feature") or ""), verdict=str(predicate.get("verdict")),
                       repeat=repeat if isinstance(repeat, int) else 1, platform=_platform(target),
                       samples=samples, thresholds=thresholds, scored=scored_from_predicate(predicate))


def run_from_statements(run_id: str, time: str, line: int, verdict: str, files: Mapping[str, bytes]) -> Run:
    """A :class:`Run` from a verified archive's files: every scenario statement's predicate, in file order
    (the repeats of a scenario by their ``repeat``)."""
    scenarios: list[ScenarioRun] = []
    defects: tuple[str, ...] = ()
    for path in sorted(p for p in files if p.startswith(f"{EVIDENCE_DIR}/") and p.endswith(".dsse.json")):
        if path == RUN_ENVELOPE:
            continue
        try:
            statement = json.loads(Envelope.from_json(files[path], path).payload)
        except (EnvelopeError, UnicodeDecodeError, ValueError):
            continue  # verification already reported it; a run that does not verify never gets here
        if not isinstance(statement, dict) or statement.get("predicateType") != SCENARIO_PREDICATE_TYPE \
                or not isinstance(statement.get("predicate"), dict):
            continue
        scenario = scenario_from_predicate(statement["predicate"])
        scenarios.append(scenario)
        target = statement["predicate"].get("target")
        if isinstance(target, dict) and target.get("defects"):
            defects = tuple(sorted(str(d) for d in target["defects"]))
    scenarios.sort(key=lambda s: (s.key, s.repeat))
    return Run(run_id, time, line, verdict, tuple(scenarios), run_score(s.scored for s in scenarios), defects)


def _archive(reports: Path, run_id: str) -> Path | None:
    for candidate in (reports / run_id, reports / f"{run_id}.tar.gz"):
        if candidate.is_dir() or candidate.is_file():
            return candidate
    return None


def load_runs(reports: Path, *, since: datetime | None = None, key: Path | None = None) -> Loaded:
    """Every run of ``reports``'s ledger (sealed at or after ``since``) whose archive verifies, in ledger order.

    ``key``: the signer's public key; every archive must then be signed by it (identity), else its own
    ``public-key.pem`` is used (integrity only), as with ``firedrill verify``."""
    if not reports.is_dir():
        raise TrendUsageError(f"{reports}: no such folder; give the reports folder that `firedrill run --reports` "
                              "wrote (default ./reports)")
    ledger = reports / LEDGER_NAME
    if not ledger.is_file():
        raise TrendUsageError(f"{ledger}: no ledger, so there are no runs to follow; runs sealed by `firedrill run "
                              f"--reports {reports}` append to it")
    if key is not None and not key.is_file():
        raise TrendUsageError(f"--key {key}: no such file; give the signer's public key (firedrill-signing.pub)")
    try:
        chain = check_chain(ledger)
    except VerifyReadError as exc:
        raise TrendUsageError(str(exc)) from None
    loaded = Loaded(reports, ledger, chain)
    seen: set[str] = set()
    for n, entry in chain.entries:
        run_id = entry.get("run_id")
        if not isinstance(run_id, str) or not RUN_ID.match(run_id) or run_id in seen:
            what = "appears twice" if run_id in seen else "is not a run id"
            chain.problems.append(Problem(f"{ledger} line {n}", f"run_id {str(run_id)[:40]!r} {what}"))
            continue
        seen.add(run_id)
        moment = _time(entry.get("time"))
        if since is not None and (moment is None or moment < since):
            loaded.before_since += 1
            continue
        path = _archive(reports, run_id)
        if path is None:
            loaded.missing.append(run_id)
            continue
        report = VerifyReport(source=path, kind="directory")
        try:
            files = read_archive(path, report)
            check_files(files, report, key)
        except VerifyReadError as exc:
            loaded.unverified.append((run_id, Problem(str(path), str(exc)), 1))
            continue
        check_ledger_entry(chain, files, {"run_id": run_id, "verdict": report.verdict}, report)
        if report.run_id != run_id:
            report.problem(str(path), f"holds run {report.run_id}, not {run_id} as the ledger line {n} says")
        if not report.ok:
            loaded.unverified.append((run_id, report.problems[0], len(report.problems)))
            continue
        loaded.runs.append(run_from_statements(run_id, str(entry.get("time")), n, str(entry.get("verdict")), files))
    return loaded
