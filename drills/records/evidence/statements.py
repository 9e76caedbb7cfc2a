"""in-toto Statement v1 for a run: one Firedrill scenario statement per scenario, one test-result statement per run.

A statement (https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md) is::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "junit.xml", "digest": {"sha256": "..."}}, ...],
     "predicateType": "<URI>",
     "predicate": {...}}

The subjects of every statement of a run are the run's artifacts (:data:`ARTIFACTS` plus every file under
``allure-results/``), named by their path relative to the run directory.  Two predicate types:

- :data:`SCENARIO_PREDICATE_TYPE`, Firedrill's own, versioned in its URI (the shape changes only with the
  version): what one scenario established; see :func:`scenario_predicate` for the fields.
- :data:`TEST_RESULT_PREDICATE_TYPE`, in-toto's generic test result
  (https://github.com/in-toto/attestation/blob/main/spec/predicates/test-result.md): ``result``
  PASSED/WARNED/FAILED, ``configuration`` (resource descriptors of the feature files, the contract and the
  target), optional ``url``, and the scenario names in ``passedTests``/``warnedTests``/``failedTests``.

Everything here is pure: no I/O, no clock.  The archive writer computes the subjects and signs the bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drills.records.evidence.canonical import canonical_digest, canonical_json
from drills.records.evidence.errors import EnvelopeError, EvidenceError
from drills.records.evidence.record import RunRecord, ScenarioRecord

__all__ = [
    "ARTIFACTS",
    "ALLURE_DIR",
    "SCENARIO_PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "TEST_RESULT_PREDICATE_TYPE",
    "Statement",
    "Subject",
    "contract_digest",
    "run_predicate",
    "run_statement",
    "scenario_predicate",
    "scenario_statement",
    "scenario_test_name",
    "overall_result",
    "timeline_jsonl",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SCENARIO_PREDICATE_TYPE = "https://firedrill.dev/attestation/scenario/v0.1"
"""Firedrill's per-scenario predicate; the version in the URI changes whenever its shape does."""
TEST_RESULT_PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"

ARTIFACTS = ("junit.xml", "report.html", "timeline.jsonl", "fingerprint.json", "record.json", "fault-journal.jsonl")
"""The run's artifacts that every statement names as subjects (those present), beside ``allure-results/``."""
ALLURE_DIR = "allure-results"

HARNESS_NAME = "firedrill"
_SHA256 = re.compile(r"[0-9a-f]{64}")

PASSED_VERDICTS = frozenset({"PASS"})
WARNED_VERDICTS = frozenset({"INCONCLUSIVE"})
"""An INCONCLUSIVE scenario made no claim either way: a warning, not a pass."""
FAILED_VERDICTS = frozenset({"FAIL", "ERROR", "ABORTED"})
"""ERROR (the harness failed) and ABORTED (the abort guard stopped the run) are no claim about the platform, but
the run did not establish the promise."""


@dataclass(frozen=True)
class Subject:
    """One artifact a statement is about: its path relative to the run directory and its SHA-256."""

    name: str
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "digest": {"sha256": self.sha256}}


@dataclass(frozen=True)
class Statement:
    """An in-toto Statement v1."""

    subject: tuple[Subject, ...]
    predicate_type: str
    predicate: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"_type": STATEMENT_TYPE, "subject": [s.to_dict() for s in self.subject],
                "predicateType": self.predicate_type, "predicate": self.predicate}

    def to_bytes(self) -> bytes:
        """The canonical JSON bytes: what a DSSE envelope carries as its payload."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "Statement":
        """Parse and check the shape of a statement; ``where`` names its file in any :class:`EnvelopeError`."""
        try:
            d = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise EnvelopeError(f"{where}: the payload is not JSON ({exc})") from None
        if not isinstance(d, dict):
            raise EnvelopeError(f"{where}: the statement is not a JSON object")
        if d.get("_type") != STATEMENT_TYPE:
            raise EnvelopeError(f"{where}: _type is {d.get('_type')!r}, not {STATEMENT_TYPE}")
        subjects = d.get("subject")
        if not isinstance(subjects, list) or not subjects:
            raise EnvelopeError(f"{where}: the statement has no subject list")
        out: list[Subject] = []
        for i, s in enumerate(subjects):
            digest = s.get("digest") if isinstance(s, dict) else None
            sha = digest.get("sha256") if isinstance(digest, dict) else None
            if not isinstance(s.get("name"), str) or not isinstance(sha, str) or not _SHA256.fullmatch(sha):
                raise EnvelopeError(f"{where}: subject {i} needs a name and a sha256 digest of 64 hex digits")
            out.append(Subject(s["name"], sha))
        if not isinstance(d.get("predicateType"), str) or not isinstance(d.get("predicate"), dict):
            raise EnvelopeError(f"{where}: the statement needs a predicateType string and a predicate object")
        return cls(tuple(out), d["predicateType"], d["predicate"])


def timeline_jsonl(timeline: Iterable[Mapping[str, Any]]) -> bytes:
    """``timeline.jsonl``: one canonical JSON object per observation, each ending in ``\\n``."""
    return b"".join(canonical_json(dict(entry)) + b"\n" for entry in timeline)


def contract_digest(features: Mapping[str, str]) -> str:
    """The digest of the contract (the features directory): SHA-256 of the canonical JSON of
    ``{feature file relative path: SHA-256 of its bytes}``.  Equal for the same files with the same names."""
    return canonical_digest(dict(features))


def scenario_test_name(scenario: ScenarioRecord) -> str:
    """The name a scenario has in the test-result predicate: ``<feature file> > <scenario>`` (``[run N]``
    added for repeats after the first)."""
    name = f"{scenario.feature_file} > {scenario.scenario}"
    return f"{name} [run {scenario.repeat}]" if scenario.repeat > 1 else name


def _bucket(verdict: str, where: str) -> str:
    if verdict in PASSED_VERDICTS:
        return "PASSED"
    if verdict in WARNED_VERDICTS:
        return "WARNED"
    if verdict in FAILED_VERDICTS:
        return "FAILED"
    raise EvidenceError(f"{where} has verdict {verdict!r}; expected PASS, INCONCLUSIVE, FAIL or ERROR")


def overall_result(record: RunRecord) -> str:
    """PASSED, WARNED or FAILED: the worst of the scenarios' buckets and of the run's own verdict."""
    buckets = {_bucket(s.verdict, f"scenario {scenario_test_name(s)!r}") for s in record.scenarios}
    buckets.add(_bucket(record.verdict, f"run {record.run_id}"))
    return next(b for b in ("FAILED", "WARNED", "PASSED") if b in buckets)


def _harness(record: RunRecord) -> dict[str, Any]:
    return {"name": HARNESS_NAME, "version": record.harness_version, "commit": record.harness_commit}


def scenario_predicate(record: RunRecord, scenario: ScenarioRecord, *, timeline_sha256: str) -> dict[str, Any]:
    """Firedrill's scenario predicate (:data:`SCENARIO_PREDICATE_TYPE`).

    Fields: ``runId``, ``started``/``finished`` (the run's, RFC 3339), ``scenario`` (feature, name, slug,
    tags, drill, repeat, seconds), ``clauses`` (from the ``@clause:`` tags), ``featureFile`` (path relative
    to the features directory and its SHA-256), ``thresholds``, ``measurements`` (``harness`` value, the
    ``platform``'s own value when it has one, and the ``error`` between them), ``judgements`` (threshold
    name, measured value, verdict, message), ``verdict``, ``findings``, ``error``, ``details`` (the drill's
    JSON-safe specifics), ``timeline`` (``timeline.jsonl``'s digest and entry count, plus ``excerpt``: the
    entries tagged with this scenario's slug in their ``scenario`` field, when the run tags them),
    ``target`` (kind, description, fingerprint and its digest, and ``defects``: the zoo's defects the
    reference platform ran with, docs/DEFECTS.md, present only when there were any) and ``harness`` (name,
    version, commit).
    """
    slug = scenario.slug  # a property (a regex): once, not per timeline entry (55 scenarios x 15,000 entries)
    excerpt = [dict(e) for e in record.timeline if e.get("scenario") == slug]
    timeline: dict[str, Any] = {"name": "timeline.jsonl", "digest": {"sha256": timeline_sha256},
                                "entries": len(record.timeline)}
    if excerpt:
        timeline["excerpt"] = excerpt
    feature_sha = record.features.get(scenario.feature_file)
    return {
        "runId": record.run_id,
        "started": record.started,
        "finished": record.finished,
        "scenario": {"feature": scenario.feature, "name": scenario.scenario, "slug": scenario.slug,
                     "tags": list(scenario.tags), "drill": scenario.drill, "repeat": scenario.repeat,
                     "seconds": scenario.seconds},
        "clauses": list(scenario.clauses),
        "featureFile": {"path": scenario.feature_file,
                        "digest": {"sha256": feature_sha} if feature_sha else {}},
        "thresholds": [{"name": j.threshold.name, "limit": j.threshold.limit, "unit": j.threshold.unit,
                        "comparison": j.threshold.comparison} for j in scenario.judgements],
        "measurements": [{"name": m.name, "unit": m.unit, "harness": m.value, "platform": m.platform,
                          "error": m.error, "note": m.note} for m in scenario.measurements],
        "judgements": [{"threshold": j.threshold.name, "measured": j.measured, "verdict": j.verdict,
                        "message": j.message} for j in scenario.judgements],
        "verdict": scenario.verdict,
        "findings": list(scenario.findings),
        "error": scenario.error,
        "details": dict(scenario.details),
        "timeline": timeline,
        "target": {"kind": record.target.kind, "description": record.target.description,
                   "fingerprint": dict(record.target.fingerprint),
                   "fingerprintDigest": {"sha256": record.target.fingerprint_digest},
                   **({"defects": list(record.target.defects)} if record.target.defects else {})},
        "harness": _harness(record),
    }


def scenario_statement(record: RunRecord, scenario: ScenarioRecord, subjects: Iterable[Subject], *,
                       timeline_sha256: str) -> Statement:
    return Statement(tuple(subjects), SCENARIO_PREDICATE_TYPE,
                     scenario_predicate(record, scenario, timeline_sha256=timeline_sha256))


def run_predicate(record: RunRecord, *, url: str | None = None) -> dict[str, Any]:
    """The test-result predicate (:data:`TEST_RESULT_PREDICATE_TYPE`) for the whole run.

    ``configuration`` holds one resource descriptor per feature file (name = path relative to the features
    directory), one for the contract as a whole (``contract``, digest per :func:`contract_digest`), one for
    the target profile (``target-profile``, digest = ``record.profile_digest``) and one for the target
    fingerprint (``fingerprint.json``); each carries a ``firedrill.dev/role`` annotation.
    """
    role = "firedrill.dev/role"
    configuration: list[dict[str, Any]] = [
        {"name": path, "digest": {"sha256": digest}, "annotations": {role: "feature"}}
        for path, digest in sorted(record.features.items())]
    configuration += [
        {"name": "contract", "digest": {"sha256": contract_digest(record.features)},
         "annotations": {role: "contract",
                         "firedrill.dev/digest": "sha256 of the canonical JSON of {feature file: sha256}"}},
        {"name": "target-profile", "digest": {"sha256": record.profile_digest},
         "annotations": {role: "target-profile"}},
        {"name": "fingerprint.json", "digest": {"sha256": record.target.fingerprint_digest},
         "annotations": {role: "target-fingerprint", "firedrill.dev/target-kind": record.target.kind}},
    ]
    tests: dict[str, list[str]] = {"PASSED": [], "WARNED": [], "FAILED": []}
    for s in record.scenarios:
        tests[_bucket(s.verdict, f"scenario {scenario_test_name(s)!r}")].append(scenario_test_name(s))
    predicate: dict[str, Any] = {"result": overall_result(record), "configuration": configuration,
                                 "passedTests": tests["PASSED"], "warnedTests": tests["WARNED"],
                                 "failedTests": tests["FAILED"]}
    if url:
        predicate["url"] = url
    return predicate


def run_statement(record: RunRecord, subjects: Iterable[Subject], *, url: str | None = None) -> Statement:
    return Statement(tuple(subjects), TEST_RESULT_PREDICATE_TYPE, run_predicate(record, url=url))
