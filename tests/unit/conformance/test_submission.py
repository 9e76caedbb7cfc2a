"""`firedrill conformance` as a user runs it: the folder the CNCF Kubernetes AI Conformance program expects, from a
verified run, that `firedrill verify` covers; and every refusal."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from junitparser import JUnitXml
from typer.testing import CliRunner

from drills.cli import app
from drills.records.evidence.archive import seal
from drills.records.evidence.signing import Signer
from tests.unit.conformance.conftest import RUN_ID, tagged_record
from tests.unit.evidence.conftest import NOW, make_run_dir

runner = CliRunner()

# --- the program's facts (cncf/k8s-ai-conformance: docs/AIConformance-1.37.yaml, instructions.md, scripts/validate.go),
# written down here independently of drills.records.conformance so the check below is not the code checking itself.
V1_37 = {
    "accelerators": {"driver_runtime_management": "SHOULD", "gpu_sharing": "SHOULD",
                     "virtualized_accelerator": "SHOULD"},
    "networking": {"ai_inference": "MUST", "advanced_inference_ingress": "SHOULD",
                   "high_performance_networking": "SHOULD", "disaggregated_inference": "SHOULD"},
    "schedulingOrchestration": {"gang_scheduling": "MUST", "cluster_autoscaling": "MUST", "pod_autoscaling": "MUST"},
    "observability": {"accelerator_metrics": "MUST", "ai_service_metrics": "MUST"},
    "security": {"secure_accelerator_access": "MUST", "workload_sandboxing": "SHOULD"},
    "operator": {"robust_controller": "MUST"},
}
VALID_STATUSES = {"Implemented", "Not Implemented", "Partially Implemented", "N/A"}
REQUIRED_METADATA = {"kubernetesVersion", "platformName", "platformVersion", "vendorName", "websiteUrl",
                     "documentationUrl", "productLogoUrl", "description", "contactEmailAddress", "k8sConformanceUrl"}


def structural_problems(folder: Path, version: str = "v1.37") -> list[str]:
    """The program validator's structural rules (all but its network look-ups), applied to a submission folder."""
    doc = yaml.safe_load((folder / "PRODUCT.yaml").read_text())
    problems: list[str] = []
    meta = doc.get("metadata") or {}
    problems += [f"metadata {f} missing" for f in sorted(REQUIRED_METADATA) if not isinstance(meta.get(f), str)]
    if meta.get("kubernetesVersion") != version:
        problems.append("kubernetesVersion")
    spec = doc.get("spec") or {}
    for category, requirements in V1_37.items():
        entries = spec.get(category)
        if not isinstance(entries, list):
            problems.append(f"category {category} missing")
            continue
        ids = [e.get("id") for e in entries]
        for rid, level in requirements.items():
            if ids.count(rid) != 1:
                problems.append(f"{rid}: {ids.count(rid)} entries")
                continue
            entry = next(e for e in entries if e.get("id") == rid)
            if set(entry) != {"id", "description", "level", "status", "evidence", "notes"}:
                problems.append(f"{rid}: keys {sorted(entry)}")
            if entry["level"] != level or not entry["description"]:
                problems.append(f"{rid}: level/description")
            if level == "SHOULD" and entry["status"] == "" and not entry["evidence"]:
                continue
            if entry["status"] not in VALID_STATUSES:
                problems.append(f"{rid}: status {entry['status']!r}")
            if entry["status"] == "N/A" and not entry["notes"]:
                problems.append(f"{rid}: N/A without notes")
            for link in entry["evidence"]:
                if link.startswith(("http://", "https://")):
                    continue
                local = re.sub(rf"^file://{re.escape(version)}/{re.escape(folder.name)}/", "", link).split("#")[0]
                if not (folder / local).is_file():
                    problems.append(f"{rid}: evidence {link} not found")
        problems += [f"{category}: unknown id {i}" for i in ids if i not in requirements]
    problems += [f"unknown category {c}" for c in spec if c not in V1_37]
    return problems


def _entries(folder: Path) -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load((folder / "PRODUCT.yaml").read_text())
    return {e["id"]: e for entries in doc["spec"].values() for e in entries}


@pytest.fixture
def submission(sealed_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "submission" / "v1.37" / "acme-gpu"
    result = runner.invoke(app, ["conformance", str(sealed_run), str(out), "--version", "v1.37"])
    assert result.exit_code == 0, result.output
    assert "THROWAWAY" in result.stderr
    assert "@conformance:self_healing is not a requirement of v1.37" in result.stderr
    return out


def test_the_folder_holds_what_the_program_expects_and_passes_its_structural_rules(submission: Path) -> None:
    assert sorted(p.name for p in submission.iterdir()) == [
        "PRODUCT.yaml", "e2e.log", "junit.xml", "manifest.dsse.json", "manifest.json", "public-key.pem",
        "results.json", "signer.json"]
    assert structural_problems(submission) == []


def test_each_status_follows_from_the_tagged_scenarios(submission: Path) -> None:
    entries = _entries(submission)
    gang = entries["gang_scheduling"]
    assert gang["status"] == "Implemented"
    assert "every one PASS" in gang["notes"] and "[run 2]" in gang["notes"]
    sharing = entries["gpu_sharing"]
    assert sharing["status"] == "Not Implemented"
    assert "1 of 2" in sharing["notes"] and "FAIL: conformance.feature > A tenant over its share" in sharing["notes"]
    assert "every tenant on that GPU failed" in sharing["notes"]
    hpa = entries["pod_autoscaling"]
    assert hpa["status"] == "Not Implemented" and "INCONCLUSIVE" in hpa["notes"]
    assert "no autoscaling/v2 HorizontalPodAutoscaler" in hpa["notes"]
    for rid in ("secure_accelerator_access", "accelerator_metrics", "workload_sandboxing"):
        assert entries[rid]["status"] == "Not Implemented" and entries[rid]["evidence"] == []
        assert f"no scenario of Firedrill run {RUN_ID} is tagged @conformance:{rid}" in entries[rid]["notes"]
    assert {e["status"] for e in entries.values()} <= {"Implemented", "Not Implemented"}


def test_the_junit_parses_and_every_evidence_pointer_names_one_of_its_test_cases(submission: Path) -> None:
    xml = JUnitXml.fromfile(str(submission / "junit.xml"))
    cases = {case.name: case for suite in xml for case in suite}
    suites = {suite.name: suite for suite in xml}
    assert sorted(suites) == ["gang_scheduling", "gpu_sharing", "pod_autoscaling"]
    assert suites["gpu_sharing"].tests == 2 and suites["gpu_sharing"].failures == 1
    assert suites["pod_autoscaling"].skipped == 1
    gang = [c for n, c in cases.items() if n.startswith("gang_scheduling/")]
    assert len(gang) == 2 and all(c.is_passed for c in gang)
    assert next(c for n, c in cases.items() if "over-its-share" in n).is_failure
    assert next(c for n, c in cases.items() if n.startswith("pod_autoscaling/")).is_skipped
    pointers = [e for entry in _entries(submission).values() for e in entry["evidence"] if "#" in e]
    assert len(pointers) == 5
    for pointer in pointers:
        assert pointer.startswith("file://v1.37/acme-gpu/junit.xml#")
        assert pointer.split("#", 1)[1] in cases
    # each test case names the signed statement of the run it came from
    out = cases[gang[0].name].system_out
    assert re.search(r"evidence: evidence/conformance-a-gang-that-fits-is-placed-whole\.dsse\.json "
                     r"\(sha256 [0-9a-f]{64}\)", out), out


def test_results_json_is_go_test_json_events_and_e2e_log_reads_like_go_test_v(submission: Path) -> None:
    events = [json.loads(line) for line in (submission / "results.json").read_text().splitlines()]
    assert {e["Action"] for e in events} <= {"run", "output", "pass", "fail", "skip"}
    assert [e["Action"] for e in events if e.get("Test") is None] == ["fail"]
    log = (submission / "e2e.log").read_text()
    assert "=== RUN   gang_scheduling/conformance-a-gang-that-fits-is-placed-whole" in log
    assert re.search(r"--- FAIL: gpu_sharing/\S+ \(2\.50s\)", log)
    assert log.rstrip().endswith("FAIL")


def test_verify_covers_the_folder_and_its_source_runs_ledger_line(submission: Path, reports: Path) -> None:
    result = runner.invoke(app, ["verify", str(submission), "--ledger", str(reports / "ledger.jsonl")])
    assert result.exit_code == 0, result.output
    assert "(conformance submission)" in result.stdout and f"(run {RUN_ID})" in result.stdout
    assert "VERIFIED" in result.stdout


@pytest.mark.parametrize("name", ["PRODUCT.yaml", "junit.xml", "e2e.log", "results.json"])
def test_verify_fails_naming_the_file_that_was_changed(submission: Path, name: str) -> None:
    path = submission / name
    path.write_bytes(path.read_bytes().replace(b"Implemented", b"Implemented ", 1) + b"\n")
    result = runner.invoke(app, ["verify", str(submission)])
    assert result.exit_code == 1, result.output
    assert f"FAIL {name}: SHA-256" in result.stdout and "the file changed after sealing" in result.stdout


def test_verify_fails_on_an_added_file_and_a_forged_status(submission: Path) -> None:
    (submission / "extra.md").write_text("trust me\n")
    product = submission / "PRODUCT.yaml"
    product.write_text(product.read_text().replace("status: Not Implemented", "status: Implemented"))
    result = runner.invoke(app, ["verify", str(submission)])
    assert result.exit_code == 1
    assert "FAIL extra.md: not listed in manifest.json: added after sealing" in result.stdout
    assert "FAIL PRODUCT.yaml: SHA-256" in result.stdout
    # the structural check itself sees the forged Implemented over a failed test case
    assert re.search(r"FAIL PRODUCT\.yaml: gpu_sharing: Implemented, but its test case '\S+' in junit\.xml did not "
                     r"pass \(fail\)", result.stdout), result.stdout


def test_metadata_from_a_file_fills_product_yaml(sealed_run: Path, tmp_path: Path) -> None:
    meta = tmp_path / "meta.yaml"
    meta.write_text("vendorName: Yoyodyne\nplatformName: Turbo Encabulator\nrepoUrl: https://example.org/turbo\n")
    out = tmp_path / "v1.37" / "turbo"
    result = runner.invoke(app, ["conformance", str(sealed_run), str(out), "--metadata", str(meta)])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load((out / "PRODUCT.yaml").read_text())
    assert doc["metadata"]["vendorName"] == "Yoyodyne" and doc["metadata"]["repoUrl"] == "https://example.org/turbo"
    assert doc["metadata"]["platformVersion"] == "[Platform Version]"  # the template's placeholder: still to fill
    bad = tmp_path / "bad.yaml"
    bad.write_text("vendor_name: Yoyodyne\n")
    refused = runner.invoke(app, ["conformance", str(sealed_run), str(tmp_path / "x"), "--metadata", str(bad)])
    assert refused.exit_code == 2 and "unknown field(s) vendor_name" in refused.stderr


def test_refuses_an_unknown_version(sealed_run: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["conformance", str(sealed_run), str(tmp_path / "out"), "--version", "v1.99"])
    assert result.exit_code == 2
    assert "--version 'v1.99'" in result.stderr and "v1.37 only" in result.stderr
    assert not (tmp_path / "out").exists()


def test_refuses_a_run_that_does_not_verify_and_writes_nothing(sealed_run: Path, tmp_path: Path) -> None:
    (sealed_run / "junit.xml").write_text("<testsuite/>\n")
    out = tmp_path / "out"
    result = runner.invoke(app, ["conformance", str(sealed_run), str(out)])
    assert result.exit_code == 1, result.output
    assert "FAIL junit.xml: SHA-256" in result.stderr and "does not verify" in result.stderr
    assert not out.exists()


def test_refuses_what_is_not_a_run_archive(tmp_path: Path, submission: Path) -> None:
    (tmp_path / "plain").mkdir()
    for run, words in ((tmp_path / "missing", "no such directory"), (tmp_path / "plain", "not a Firedrill archive"),
                       (submission, "a conformance submission folder, not a run archive")):
        result = runner.invoke(app, ["conformance", str(run), str(tmp_path / "out")])
        assert result.exit_code == 2, result.output
        assert words in result.stderr, result.stderr


def test_refuses_a_run_with_defects_and_a_folder_that_is_not_empty(reports: Path, signer: Signer,
                                                                   tmp_path: Path, sealed_run: Path) -> None:
    defective = make_run_dir(reports, "defective")
    seal(defective, tagged_record("defective", defects=("partial-gang-bind",)), signer, reports / "ledger.jsonl",
         now=NOW)
    result = runner.invoke(app, ["conformance", str(defective), str(tmp_path / "out")])
    assert result.exit_code == 2 and "defect(s) partial-gang-bind" in result.stderr
    full = tmp_path / "full"
    full.mkdir()
    (full / "PRODUCT.yaml").write_text("mine\n")
    result = runner.invoke(app, ["conformance", str(sealed_run), str(full)])
    assert result.exit_code == 2 and "not empty" in result.stderr
    assert (full / "PRODUCT.yaml").read_text() == "mine\n"


def test_two_scenarios_of_one_name_get_two_test_cases(reports: Path, signer: Signer, tmp_path: Path) -> None:
    record = tagged_record("twins")
    twin = record.scenarios[0]
    record = dataclasses.replace(record, scenarios=(twin, dataclasses.replace(twin, verdict="FAIL")))
    run_dir = make_run_dir(reports, "twins")
    seal(run_dir, record, signer, reports / "ledger.jsonl", now=NOW)
    out = tmp_path / "v1.37" / "twins"
    assert runner.invoke(app, ["conformance", str(run_dir), str(out)]).exit_code == 0
    names = [c.name for suite in JUnitXml.fromfile(str(out / "junit.xml")) for c in suite]
    assert len(names) == len(set(names)) == 2
    assert _entries(out)["gang_scheduling"]["status"] == "Not Implemented"
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0
