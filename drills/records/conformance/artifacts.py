"""The submission's files, as bytes (pure: no I/O, no clock): ``PRODUCT.yaml``, ``junit.xml``, ``e2e.log`` and
``results.json``.

The program's v1.37 "hybrid" verification expects the three test artifacts its upstream Go suite writes
(``go test -v | tee e2e.log``, ``go test -json > results.json``, gotestsum's ``junit.xml``). Firedrill writes the
same three shapes from the run's signed scenario statements:

- ``junit.xml``: ``<testsuites>``, one ``<testsuite>`` per requirement that a scenario speaks to, one
  ``<testcase>`` per tagged scenario run named ``<requirement id>/<scenario slug>`` (see
  :func:`~drills.records.conformance.judge.testcase_name`), with ``<failure>`` (FAIL), ``<error>`` (ERROR) or
  ``<skipped>`` (INCONCLUSIVE: no claim either way), and properties naming the signed statement it came from;
- ``e2e.log``: ``go test -v``'s layout (``=== RUN``, indented detail, ``--- PASS: name (1.23s)``);
- ``results.json``: ``go test -json``'s test2json events, one JSON object a line (``Time``, ``Action``,
  ``Package``, ``Test``, ``Output``, ``Elapsed``).

PRODUCT.yaml is the program's template with ``status``, ``evidence`` and ``notes`` filled: evidence entries are
the submission's own files (``junit.xml``, ``e2e.log``, ``results.json``, paths relative to the submission
folder, as the program's validator checks them) and one ``file://v<X.Y>/<dir>/junit.xml#<test case>`` per
tagged scenario run, the form the program's instructions give for pointing into the JUnit file.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from drills.records.conformance.judge import Judgement, RequirementOutcome, ScenarioRun
from drills.records.conformance.versions import METADATA_FIELDS, Checklist

__all__ = ["E2E_LOG", "JUNIT", "PRODUCT", "RESULTS", "Source", "e2e_log", "evidence_entries", "junit_xml",
           "product_yaml", "results_json"]

PRODUCT = "PRODUCT.yaml"
JUNIT = "junit.xml"
E2E_LOG = "e2e.log"
RESULTS = "results.json"
PACKAGE = "firedrill"
"""The ``Package`` of every results.json event (go test's package path has no counterpart here)."""


@dataclass(frozen=True)
class Source:
    """The verified run the submission is made from."""

    run_id: str
    started: str
    finished: str
    manifest_sha256: str
    keyid: str
    harness: str
    """``firedrill <version>``."""
    target: str
    """The target's kind and description, as the run recorded them."""


def _junit_status(run: ScenarioRun) -> str:
    return {"PASS": "pass", "FAIL": "fail", "ERROR": "fail"}.get(run.verdict, "skip")


def _detail_lines(run: ScenarioRun) -> list[str]:
    lines = [f"scenario: {run.feature_file} > {run.name}" + (f" [run {run.repeat}]" if run.repeat > 1 else ""),
             f"verdict: {run.verdict}", f"evidence: {run.evidence} (sha256 {run.evidence_sha256})"]
    lines += [f"clause: {c}" for c in run.clauses]
    for m in run.measurements:
        value = "no data" if m.get("harness") is None else f"{m['harness']:.6g} {m.get('unit', '')}".strip()
        lines.append(f"measured {m.get('name')}: {value}" + (f" ({m['note']})" if m.get("note") else ""))
    lines += [f"judged {j.get('threshold')}: {j.get('verdict')}: {j.get('message')}" for j in run.judgements]
    lines += [f"finding: {f}" for f in run.findings]
    if run.error:
        lines.append(f"error: {run.error}")
    return lines


def junit_xml(judgement: Judgement, source: Source) -> bytes:
    root = ET.Element("testsuites", name=f"firedrill conformance from run {source.run_id}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for outcome in judgement.outcomes:
        if not outcome.runs:
            continue
        counts = {"tests": len(outcome.runs), "failures": sum(r.verdict == "FAIL" for r in outcome.runs),
                  "errors": sum(r.verdict == "ERROR" for r in outcome.runs),
                  "skipped": sum(r.verdict not in ("PASS", "FAIL", "ERROR") for r in outcome.runs),
                  "time": sum(r.seconds for r in outcome.runs)}
        for k, v in counts.items():
            totals[k] += v
        suite = ET.SubElement(root, "testsuite", name=outcome.requirement.id, timestamp=source.started,
                              **{k: (f"{v:.3f}" if k == "time" else str(v)) for k, v in counts.items()})
        props = ET.SubElement(suite, "properties")
        for name, value in (("requirement.level", outcome.requirement.level.value),
                            ("requirement.status", outcome.status.value), ("firedrill.run", source.run_id),
                            ("firedrill.run.manifest.sha256", source.manifest_sha256)):
            ET.SubElement(props, "property", name=name, value=value)
        for run, name in zip(outcome.runs, outcome.testcases):
            case = ET.SubElement(suite, "testcase", name=name, classname=f"{PACKAGE}.{outcome.requirement.id}",
                                 time=f"{run.seconds:.3f}")
            case_props = ET.SubElement(case, "properties")
            for pname, value in (("scenario", f"{run.feature_file} > {run.name}"), ("verdict", run.verdict),
                                 ("evidence", run.evidence), ("evidence.sha256", run.evidence_sha256),
                                 *(("clause", c) for c in run.clauses)):
                ET.SubElement(case_props, "property", name=pname, value=value)
            if run.verdict == "FAIL":
                ET.SubElement(case, "failure", message=run.reason(), type="FAIL").text = run.reason()
            elif run.verdict == "ERROR":
                ET.SubElement(case, "error", message=run.reason(), type="ERROR").text = run.reason()
            elif run.verdict != "PASS":
                ET.SubElement(case, "skipped", message=f"{run.verdict}: {run.reason()}")
            ET.SubElement(case, "system-out").text = "\n".join(_detail_lines(run)) + "\n"
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", str(totals["errors"]))
    root.set("skipped", str(totals["skipped"]))
    root.set("time", f"{totals['time']:.3f}")
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


def _each_case(judgement: Judgement) -> list[tuple[RequirementOutcome, ScenarioRun, str]]:
    return [(o, r, n) for o in judgement.outcomes for r, n in zip(o.runs, o.testcases)]


def e2e_log(judgement: Judgement, source: Source) -> bytes:
    lines = [f"# {source.harness}: CNCF Kubernetes AI Conformance evidence from run {source.run_id} "
             f"({source.started} .. {source.finished})",
             f"# target: {source.target}",
             f"# run archive manifest sha256 {source.manifest_sha256}, signed by keyid {source.keyid}"]
    failed = False
    for outcome, run, name in _each_case(judgement):
        lines.append(f"=== RUN   {name}")
        lines += [f"    {line}" for line in _detail_lines(run)]
        word = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}[_junit_status(run)]
        failed |= word == "FAIL"
        lines.append(f"--- {word}: {name} ({run.seconds:.2f}s)")
    for outcome in judgement.outcomes:
        lines.append(f"# {outcome.requirement.id} ({outcome.requirement.level.value}): {outcome.status.value}")
    lines.append("FAIL" if failed else "PASS")
    return ("\n".join(lines) + "\n").encode("utf-8")


def results_json(judgement: Judgement, source: Source) -> bytes:
    events: list[dict[str, Any]] = []
    failed = False
    for _, run, name in _each_case(judgement):
        events.append({"Time": source.started, "Action": "run", "Package": PACKAGE, "Test": name})
        events += [{"Time": source.started, "Action": "output", "Package": PACKAGE, "Test": name,
                    "Output": f"    {line}\n"} for line in _detail_lines(run)]
        action = _junit_status(run)
        failed |= action == "fail"
        events.append({"Time": source.finished, "Action": action, "Package": PACKAGE, "Test": name,
                       "Elapsed": round(run.seconds, 3)})
    events.append({"Time": source.finished, "Action": "fail" if failed else "pass", "Package": PACKAGE,
                   "Elapsed": round(sum(r.seconds for _, r, _ in _each_case(judgement)), 3)})
    return b"".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
                    for e in events)


def evidence_entries(outcome: RequirementOutcome, checklist: Checklist, product_dir: str) -> list[str]:
    """The evidence list of a requirement: nothing when no scenario speaks to it; else the submission's test
    artifacts and one pointer into junit.xml per tagged scenario run."""
    if not outcome.runs:
        return []
    anchors = [f"file://{checklist.version}/{product_dir}/{JUNIT}#{name}" for name in outcome.testcases]
    return [JUNIT, E2E_LOG, RESULTS, *dict.fromkeys(anchors)]


def product_yaml(judgement: Judgement, checklist: Checklist, metadata: Mapping[str, str], product_dir: str,
                 source: Source) -> bytes:
    """PRODUCT.yaml: ``metadata`` (the vendor's values, placeholders where none was given) and ``spec`` with
    every requirement of the checklist once, under its category, in the template's order."""
    meta: dict[str, str] = {}
    for name, required, placeholder in METADATA_FIELDS:
        if name == "kubernetesVersion":
            meta[name] = checklist.version
        elif name in metadata:
            meta[name] = str(metadata[name])
        elif required:
            meta[name] = placeholder
    spec: dict[str, list[dict[str, Any]]] = {c: [] for c in checklist.categories}
    for outcome in judgement.outcomes:
        req = outcome.requirement
        spec[req.category].append({"id": req.id, "description": req.description, "level": req.level.value,
                                   "status": outcome.status.value,
                                   "evidence": evidence_entries(outcome, checklist, product_dir),
                                   "notes": outcome.note})
    header = (f"# CNCF Kubernetes AI Conformance self-assessment, {checklist.version} "
              f"(template {checklist.template} of cncf/k8s-ai-conformance).\n"
              f"# Written by {source.harness} from run {source.run_id} (run archive manifest sha256 "
              f"{source.manifest_sha256}).\n"
              "# status: Implemented only where every scenario tagged @conformance:<id> PASSed; otherwise Not "
              "Implemented, the notes say why.\n"
              "# N/A and Partially Implemented are the vendor's judgement: set them by hand, with a note.\n")
    body = yaml.safe_dump({"metadata": meta, "spec": spec}, sort_keys=False, allow_unicode=True, width=120)
    return (header + body).encode("utf-8")

