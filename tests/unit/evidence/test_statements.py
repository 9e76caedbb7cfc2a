"""in-toto statements: the scenario predicate and the run's test-result predicate."""

from __future__ import annotations

import dataclasses
import json

import pytest

from drills.records.evidence import statements as st
from drills.records.evidence.canonical import canonical_digest, sha256_hex
from drills.records.evidence.errors import EnvelopeError, EvidenceError
from tests.unit.evidence.conftest import FINGERPRINT, make_record

SUBJECTS = [st.Subject("junit.xml", "a" * 64), st.Subject("report.html", "b" * 64)]


def test_scenario_statement_shape() -> None:
    record = make_record()
    pull = record.scenarios[2]
    d = st.scenario_statement(record, pull, SUBJECTS, timeline_sha256="c" * 64).to_dict()
    assert d["_type"] == "https://in-toto.io/Statement/v1"
    assert d["subject"] == [{"name": "junit.xml", "digest": {"sha256": "a" * 64}},
                            {"name": "report.html", "digest": {"sha256": "b" * 64}}]
    assert d["predicateType"] == "https://firedrill.dev/attestation/scenario/v0.1"
    p = d["predicate"]
    assert p["clauses"] == ["4.2"]
    assert p["featureFile"] == {"path": "healing/node-pull.feature",
                                "digest": {"sha256": record.features["healing/node-pull.feature"]}}
    assert p["thresholds"] == [{"name": "detect", "limit": 5.0, "unit": "s", "comparison": "<="},
                               {"name": "total", "limit": 10.0, "unit": "s", "comparison": "<="}]
    assert p["measurements"][1] == {"name": "total", "unit": "s", "harness": 12.5, "platform": 12.4,
                                    "error": 0.1, "note": "victim node-2"}
    assert p["judgements"][1]["verdict"] == "FAIL" and p["verdict"] == "FAIL"
    assert p["target"] == {"kind": "embedded", "description": "reference platform, 4 x 8 H100",
                           "fingerprint": FINGERPRINT, "fingerprintDigest": {"sha256": canonical_digest(FINGERPRINT)}}
    assert p["harness"] == {"name": "firedrill", "version": "0.1.0", "commit": record.harness_commit}
    assert p["timeline"] == {"name": "timeline.jsonl", "digest": {"sha256": "c" * 64}, "entries": 2}
    assert p["details"] == {"fault": {"method": "agent-kill", "node": "node-2"}}
    assert p["scenario"]["slug"] == "node-pull-a-dead-node-heals-by-itself"


def test_timeline_excerpt_holds_the_scenarios_tagged_entries() -> None:
    record = make_record()
    p = st.scenario_predicate(record, record.scenarios[0], timeline_sha256="c" * 64)
    assert [e["name"] for e in p["timeline"]["excerpt"]] == ["gang-0"]


def test_run_statement_is_a_test_result() -> None:
    record = make_record()
    d = st.run_statement(record, SUBJECTS).to_dict()
    assert d["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    p = d["predicate"]
    assert p["result"] == "FAILED"
    assert p["passedTests"] == ["gang.feature > A gang gets all its GPUs or none"]
    assert p["warnedTests"] == ["gang.feature > Two gangs do not deadlock"]
    assert p["failedTests"] == ["healing/node-pull.feature > A dead node heals by itself"]
    assert "url" not in p
    config = {c["name"]: c for c in p["configuration"]}
    assert config["gang.feature"]["digest"]["sha256"] == record.features["gang.feature"]
    assert config["contract"]["digest"]["sha256"] == canonical_digest(record.features)
    assert config["target-profile"]["digest"]["sha256"] == record.profile_digest
    assert config["fingerprint.json"]["digest"]["sha256"] == record.target.fingerprint_digest
    assert {c["annotations"]["firedrill.dev/role"] for c in p["configuration"]} == \
        {"feature", "contract", "target-profile", "target-fingerprint"}
    assert st.run_predicate(record, url="https://ci.example/run/7")["url"] == "https://ci.example/run/7"


@pytest.mark.parametrize(("verdicts", "run_verdict", "result"), [
    (["PASS", "PASS"], "PASS", "PASSED"),
    (["PASS", "INCONCLUSIVE"], "INCONCLUSIVE", "WARNED"),
    (["PASS", "ERROR"], "ERROR", "FAILED"),
    (["INCONCLUSIVE", "FAIL"], "FAIL", "FAILED"),
    ([], "PASS", "PASSED"),
])
def test_overall_result(verdicts: list[str], run_verdict: str, result: str) -> None:
    base = make_record()
    scenarios = tuple(dataclasses.replace(base.scenarios[0], verdict=v, repeat=i + 1) for i, v in enumerate(verdicts))
    record = dataclasses.replace(base, scenarios=scenarios, verdict=run_verdict)
    assert st.overall_result(record) == result
    p = st.run_predicate(record)
    assert len(p["passedTests"]) + len(p["warnedTests"]) + len(p["failedTests"]) == len(verdicts)


def test_repeats_get_distinct_test_names() -> None:
    s = make_record().scenarios[0]
    assert st.scenario_test_name(dataclasses.replace(s, repeat=2)).endswith("[run 2]")


def test_unknown_verdict_refused() -> None:
    record = make_record()
    record = dataclasses.replace(record, scenarios=(dataclasses.replace(record.scenarios[0], verdict="MAYBE"),))
    with pytest.raises(EvidenceError, match="verdict 'MAYBE'"):
        st.run_predicate(record)


def test_statement_bytes_round_trip() -> None:
    record = make_record()
    statement = st.run_statement(record, SUBJECTS)
    data = statement.to_bytes()
    assert b" " not in data.split(b'"predicate"')[0]  # canonical: no whitespace
    assert st.Statement.from_bytes(data, "x") == statement


@pytest.mark.parametrize("doc", [
    {"_type": "https://in-toto.io/Statement/v0.1", "subject": [], "predicateType": "x", "predicate": {}},
    {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "a", "digest": {"sha256": "zz"}}],
     "predicateType": "x", "predicate": {}},
    {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "a", "digest": {"sha256": "a" * 64}}],
     "predicateType": "x"},
])
def test_statement_shape_checked(doc: dict) -> None:
    with pytest.raises(EnvelopeError, match="^evidence/x.dsse.json: "):
        st.Statement.from_bytes(json.dumps(doc).encode(), "evidence/x.dsse.json")


def test_timeline_jsonl_is_canonical_lines() -> None:
    data = st.timeline_jsonl(make_record().timeline)
    lines = data.split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    assert lines[0].startswith(b'{"event":"ADDED","kind":"Pod"')
    assert sha256_hex(data) == sha256_hex(st.timeline_jsonl(json.loads(json.dumps(make_record().timeline))))
