"""From a verified run's signed scenario statements to a status per requirement (pure: no I/O, no clock).

A scenario speaks to a requirement when it carries the tag ``@conformance:<requirement id>`` in its feature file.
The rule, stated once here and in docs/CONFORMANCE.md:

- **Implemented** when at least one scenario run is tagged with the requirement and every such run PASSed
  (with ``--repeat N``, every repetition);
- **Not Implemented** otherwise, with a note that says why: which tagged runs FAILed, ERRORed or were
  INCONCLUSIVE (each with its first reason), or that no scenario of the run is tagged with it at all (then the
  run shows nothing either way, and the note asks for evidence of the vendor's own).

Firedrill never writes N/A or Partially Implemented: whether a requirement applies to a platform, or is half met,
is the vendor's judgement, not something a run can show.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drills.records.conformance.versions import Checklist, Requirement, Status

__all__ = ["Judgement", "RequirementOutcome", "ScenarioRun", "TAG_PREFIX", "judge", "testcase_name"]

TAG_PREFIX = "conformance:"
"""A scenario tag ``@conformance:gang_scheduling`` is recorded as ``conformance:gang_scheduling``."""


@dataclass(frozen=True)
class ScenarioRun:
    """One scenario run, as its signed statement (``evidence/<slug>.dsse.json`` of the run archive) says."""

    evidence: str
    """The statement's path in the run archive."""
    evidence_sha256: str
    """SHA-256 of that envelope file: the submission's JUnit names it, so each test case points at the signed
    statement it came from."""
    feature: str
    feature_file: str
    name: str
    slug: str
    tags: tuple[str, ...]
    verdict: str
    """PASS, FAIL, INCONCLUSIVE or ERROR."""
    seconds: float
    repeat: int
    clauses: tuple[str, ...] = ()
    judgements: tuple[Mapping[str, Any], ...] = ()
    measurements: tuple[Mapping[str, Any], ...] = ()
    findings: tuple[str, ...] = ()
    error: str = ""

    @property
    def requirement_ids(self) -> tuple[str, ...]:
        return tuple(t[len(TAG_PREFIX):] for t in self.tags if t.startswith(TAG_PREFIX))

    def reason(self) -> str:
        """Why it did not PASS, in one line: the error, else the first judgement that did not PASS, else a
        finding."""
        if self.error:
            return self.error
        for j in self.judgements:
            if j.get("verdict") != "PASS" and j.get("message"):
                return str(j["message"])
        return self.findings[0] if self.findings else f"verdict {self.verdict}"

    @classmethod
    def from_predicate(cls, evidence: str, evidence_sha256: str, predicate: Mapping[str, Any]) -> "ScenarioRun":
        """Read Firedrill's scenario predicate (``drills.records.evidence.statements.scenario_predicate``)."""
        scenario = predicate.get("scenario") or {}
        return cls(evidence=evidence, evidence_sha256=evidence_sha256, feature=str(scenario.get("feature", "")),
                   feature_file=str((predicate.get("featureFile") or {}).get("path", "")),
                   name=str(scenario.get("name", "")), slug=str(scenario.get("slug", "")),
                   tags=tuple(str(t) for t in scenario.get("tags") or ()), verdict=str(predicate.get("verdict", "")),
                   seconds=float(scenario.get("seconds") or 0.0), repeat=int(scenario.get("repeat") or 1),
                   clauses=tuple(str(c) for c in predicate.get("clauses") or ()),
                   judgements=tuple(predicate.get("judgements") or ()),
                   measurements=tuple(predicate.get("measurements") or ()),
                   findings=tuple(str(f) for f in predicate.get("findings") or ()),
                   error=str(predicate.get("error") or ""))


def testcase_name(requirement_id: str, run: ScenarioRun) -> str:
    """The JUnit test case name of a scenario run under a requirement: ``gang_scheduling/<statement>``, where
    ``<statement>`` is the name of the run's signed statement without ``.dsse.json`` (the scenario's slug, ``-runN``
    for repeats; the archive keeps those names unique). URL-fragment safe, so PRODUCT.yaml's evidence can point at
    it: ``junit.xml#<name>``."""
    stem = run.evidence.rsplit("/", 1)[-1].removesuffix(".dsse.json") or run.slug or run.name
    return f"{requirement_id}/{re.sub(r'[^A-Za-z0-9._-]+', '-', stem)}"


@dataclass(frozen=True)
class RequirementOutcome:
    requirement: Requirement
    status: Status
    runs: tuple[ScenarioRun, ...]
    """The scenario runs tagged with it, in run order."""
    note: str

    @property
    def testcases(self) -> tuple[str, ...]:
        return tuple(testcase_name(self.requirement.id, r) for r in self.runs)


@dataclass(frozen=True)
class Judgement:
    outcomes: tuple[RequirementOutcome, ...]
    unknown: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Tagged requirement ids that are not in the checklist -> the scenarios carrying them (a typo, or a
    requirement of another version): reported, never silently dropped."""


def _names(runs: Iterable[ScenarioRun]) -> str:
    return "; ".join(f"{r.feature_file} > {r.name}" + (f" [run {r.repeat}]" if r.repeat > 1 else "") for r in runs)


def _outcome(requirement: Requirement, runs: tuple[ScenarioRun, ...], run_id: str) -> RequirementOutcome:
    tag = f"@{TAG_PREFIX}{requirement.id}"
    if not runs:
        return RequirementOutcome(requirement, Status.NOT_IMPLEMENTED, runs, (
            f"Not shown: no scenario of Firedrill run {run_id} is tagged {tag}, so this run shows nothing about "
            "it either way. Attach evidence of your own (documentation, the upstream ai-conformance suite's "
            "junit.xml) and set the status yourself, or run a scenario that tests it."))
    failed = [r for r in runs if r.verdict != "PASS"]
    if not failed:
        return RequirementOutcome(requirement, Status.IMPLEMENTED, runs, (
            f"Shown by {len(runs)} scenario run(s) tagged {tag} in Firedrill run {run_id}, every one PASS: "
            f"{_names(runs)}. Each junit.xml test case names the signed statement of its run."))
    why = "; ".join(f"{r.verdict}: {_names([r])} ({r.reason()})" for r in failed)
    return RequirementOutcome(requirement, Status.NOT_IMPLEMENTED, runs, (
        f"Not shown: {len(failed)} of {len(runs)} scenario run(s) tagged {tag} in Firedrill run {run_id} did not "
        f"PASS. {why}"))


def judge(checklist: Checklist, runs: Iterable[ScenarioRun], run_id: str) -> Judgement:
    """Every requirement of ``checklist`` with its status, the runs tagged with it and a note (see the module
    docstring for the rule)."""
    runs = tuple(runs)
    outcomes = tuple(_outcome(req, tuple(r for r in runs if req.id in r.requirement_ids), run_id)
                     for req in checklist.requirements)
    unknown: dict[str, list[str]] = {}
    for r in runs:
        for rid in r.requirement_ids:
            if checklist.get(rid) is None:
                unknown.setdefault(rid, []).append(f"{r.feature_file} > {r.name}")
    return Judgement(outcomes, {k: tuple(dict.fromkeys(v)) for k, v in sorted(unknown.items())})
