"""The structural check of a conformance submission folder, run by ``firedrill verify`` on such a folder.

Written from the program's own facts (its template ``docs/AIConformance-<X.Y>.yaml``, its instructions and its
validator, cncf/k8s-ai-conformance ``scripts/validate.go``), and from what Firedrill promises beyond them:

- PRODUCT.yaml: ``metadata`` with every required field a string and ``kubernetesVersion`` the checklist's;
  ``spec`` with every category of the checklist, every requirement exactly once under its category, ``id``,
  ``description`` and ``level`` unchanged, ``status`` one of the program's four (empty only for a SHOULD with no
  evidence), a note for N/A and for anything not Implemented, evidence entries that resolve: a file of the
  folder, or ``file://v<X.Y>/<dir>/junit.xml#<test case>`` naming this folder and a test case junit.xml has;
  an Implemented requirement's test cases all passed;
- junit.xml: well-formed JUnit (``testsuites``/``testsuite``/``testcase``), test case names unique;
- results.json: one go test -json event a line.

Each problem is reported through ``problem(where, message)`` with the file it concerns.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from drills.records.conformance.artifacts import E2E_LOG, JUNIT, PRODUCT, RESULTS
from drills.records.conformance.versions import CHECKLISTS, METADATA_FIELDS, Checklist, Level, Status

__all__ = ["ALLOWED_STATUSES", "GO_TEST_ACTIONS", "check_submission", "junit_cases"]

Problem = Callable[[str, str], None]

ALLOWED_STATUSES = frozenset(s.value for s in Status)
GO_TEST_ACTIONS = frozenset({"start", "run", "pause", "cont", "pass", "bench", "fail", "output", "skip"})
"""test2json's actions (go doc cmd/test2json)."""


def junit_cases(data: bytes, problem: Problem) -> dict[str, str] | None:
    """``{test case name: pass|fail|error|skipped}`` of a JUnit file, or None (with a problem) when it is not one."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        problem(JUNIT, f"not well-formed XML ({exc})")
        return None
    if root.tag not in ("testsuites", "testsuite"):
        problem(JUNIT, f"root element <{root.tag}>, expected <testsuites> or <testsuite>")
        return None
    cases: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = case.get("name")
        if not name:
            problem(JUNIT, "a <testcase> has no name")
            continue
        if name in cases:
            problem(JUNIT, f"test case {name!r} appears twice")
        outcome = next((tag for tag in ("failure", "error", "skipped") if case.find(tag) is not None), "pass")
        cases[name] = "fail" if outcome == "failure" else outcome
    return cases


def _check_results(data: bytes, problem: Problem) -> None:
    for n, line in enumerate(data.splitlines(), 1):
        try:
            event = json.loads(line)
        except ValueError:
            problem(RESULTS, f"line {n} is not JSON (go test -json writes one event a line)")
            return
        if not isinstance(event, dict) or event.get("Action") not in GO_TEST_ACTIONS:
            problem(RESULTS, f"line {n} is not a go test -json event (Action one of {sorted(GO_TEST_ACTIONS)})")
            return


def _check_metadata(meta: Any, chosen: Checklist, problem: Problem) -> None:
    if not isinstance(meta, dict):
        problem(PRODUCT, "no metadata mapping")
        return
    for name, required, _ in METADATA_FIELDS:
        value = meta.get(name)
        if value is None:
            if required:
                problem(PRODUCT, f"metadata.{name} is missing")
        elif not isinstance(value, str) or (required and not value.strip()):
            problem(PRODUCT, f"metadata.{name} must be a non-empty string")
    if meta.get("kubernetesVersion") != chosen.version:
        problem(PRODUCT, f"metadata.kubernetesVersion is {meta.get('kubernetesVersion')!r}, not {chosen.version}")


def _check_evidence(req_id: str, entry: Any, files: Mapping[str, bytes], product: str, version: str,
                    cases: dict[str, str] | None, problem: Problem) -> str | None:
    """Check one evidence entry; return the JUnit test case it points at, if any."""
    if not isinstance(entry, str) or not entry:
        problem(PRODUCT, f"{req_id}: an evidence entry is not a non-empty string")
        return None
    if entry.startswith(("http://", "https://")):
        return None  # a public URL: reachable or not is the reviewer's check, not an offline one
    if entry.startswith("file://"):
        path, _, case = entry.removeprefix("file://").partition("#")
        expected = f"{version}/{product}/"
        if not path.startswith(expected):
            problem(PRODUCT, f"{req_id}: evidence {entry!r} does not point into this folder ({expected})")
            return None
        path = path.removeprefix(expected)
    else:
        path, case = entry, ""
    if path not in files:
        problem(PRODUCT, f"{req_id}: evidence {entry!r} names {path}, which is not in the folder")
        return None
    if case:
        if path != JUNIT:
            problem(PRODUCT, f"{req_id}: evidence {entry!r} points into {path}; only {JUNIT} has test cases")
        elif cases is not None and case not in cases:
            problem(PRODUCT, f"{req_id}: evidence {entry!r} names test case {case!r}, which {JUNIT} does not have")
        return case
    return None


def _check_requirement(item: Any, category: str, chosen: Checklist, files: Mapping[str, bytes], product: str,
                       cases: dict[str, str] | None, seen: dict[str, str], problem: Problem) -> None:
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        problem(PRODUCT, f"spec.{category}: an entry without an id")
        return
    rid = item["id"]
    req = chosen.get(rid)
    if req is None:
        problem(PRODUCT, f"spec.{category}: {rid!r} is not a requirement of {chosen.version}")
        return
    if rid in seen:
        problem(PRODUCT, f"{rid}: listed twice (under {seen[rid]} and {category})")
        return
    seen[rid] = category
    if req.category != category:
        problem(PRODUCT, f"{rid}: under {category}, but the checklist has it under {req.category}")
    if item.get("description") != req.description:
        problem(PRODUCT, f"{rid}: description changed; the program requires it verbatim from its template")
    if item.get("level") != req.level.value:
        problem(PRODUCT, f"{rid}: level {item.get('level')!r}, the checklist says {req.level.value}")
    status, evidence, notes = item.get("status"), item.get("evidence"), item.get("notes")
    if not isinstance(evidence, list):
        problem(PRODUCT, f"{rid}: evidence must be a list")
        evidence = []
    if not isinstance(notes, str):
        problem(PRODUCT, f"{rid}: notes must be a string")
        notes = ""
    if status == "" and req.level is Level.SHOULD and not evidence:
        return  # the program's template leaves an unanswered SHOULD like this, and its validator accepts it
    if status not in ALLOWED_STATUSES:
        problem(PRODUCT, f"{rid}: status {status!r} is not one of {sorted(ALLOWED_STATUSES)}")
    if status != Status.IMPLEMENTED.value and not notes.strip():
        problem(PRODUCT, f"{rid}: status {status!r} needs a note saying why")
    anchored = [c for c in (_check_evidence(rid, e, files, product, chosen.version, cases, problem)
                            for e in evidence) if c]
    if status == Status.IMPLEMENTED.value and cases is not None:
        if not evidence:
            problem(PRODUCT, f"{rid}: Implemented with no evidence")
        for case in anchored:
            if cases.get(case, "pass") != "pass":
                problem(PRODUCT, f"{rid}: Implemented, but its test case {case!r} in {JUNIT} did not pass "
                                 f"({cases[case]})")


def check_submission(files: Mapping[str, bytes], manifest: Mapping[str, Any], problem: Problem) -> None:
    """Check a conformance submission folder's files (``{relative path: bytes}``) against the checklist its
    signed ``manifest`` names; report each problem as ``problem(file, message)``."""
    info = manifest.get("conformance") if isinstance(manifest.get("conformance"), dict) else {}
    version, product = info.get("version"), info.get("product")
    if version not in CHECKLISTS:
        problem("manifest.json", f"conformance.version {version!r} is not a checklist this Firedrill knows "
                                 f"({', '.join(CHECKLISTS)})")
        return
    if not isinstance(product, str) or not product:
        problem("manifest.json", "conformance.product (the submission folder's name) is missing")
        product = ""
    chosen = CHECKLISTS[version]
    for name in (PRODUCT, JUNIT, E2E_LOG, RESULTS):
        if name not in files:
            problem(name, "missing: a conformance submission holds PRODUCT.yaml, junit.xml, e2e.log and results.json")
    cases = junit_cases(files[JUNIT], problem) if JUNIT in files else None
    if RESULTS in files:
        _check_results(files[RESULTS], problem)
    if PRODUCT not in files:
        return
    try:
        doc = yaml.safe_load(files[PRODUCT])
    except yaml.YAMLError as exc:
        problem(PRODUCT, f"not YAML ({exc})")
        return
    if not isinstance(doc, dict):
        problem(PRODUCT, "not a mapping with metadata and spec")
        return
    _check_metadata(doc.get("metadata"), chosen, problem)
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        problem(PRODUCT, "no spec mapping")
        return
    seen: dict[str, str] = {}
    for category in chosen.categories:
        if not isinstance(spec.get(category), list):
            problem(PRODUCT, f"spec.{category} is missing (or not a list)")
    for category, items in spec.items():
        if category not in chosen.categories:
            problem(PRODUCT, f"spec.{category} is not a category of {chosen.version}")
            continue
        for item in items if isinstance(items, list) else []:
            _check_requirement(item, category, chosen, files, product, cases, seen, problem)
    for req in chosen.requirements:
        if req.id not in seen:
            problem(PRODUCT, f"{req.id} ({req.level.value}) is missing from spec.{req.category}")
