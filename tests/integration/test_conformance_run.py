"""A real run of the embedded reference platform (one gang scenario) becomes a conformance submission folder that
passes the program's structural rules, whose JUnit a JUnit parser reads, and that `firedrill verify` covers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from tests.unit.conformance.test_submission import structural_problems

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIREDRILL = [sys.executable, "-c", "from drills.cli import main; main()"]


@pytest.fixture(scope="module")
def submission(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    work = tmp_path_factory.mktemp("conformance")
    features = work / "features"
    features.mkdir()
    (features / "gang_submission.feature").write_text((REPO / "features" / "gang_submission.feature").read_text())
    reports = work / "reports"
    ran = subprocess.run([*FIREDRILL, "run", "--features", str(features), "--reports", str(reports),
                          "-k", "fits"], capture_output=True, text=True, timeout=240, cwd=work)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (run_dir,) = [p for p in reports.iterdir() if p.is_dir()]
    out = work / "submission" / "v1.37" / "firedrill-reference"
    made = subprocess.run([*FIREDRILL, "conformance", str(run_dir), str(out), "--version", "v1.37",
                           "--ledger", str(reports / "ledger.jsonl")], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stdout + made.stderr
    yield out, reports


def test_gang_scheduling_is_implemented_from_the_tagged_scenario(submission: tuple[Path, Path]) -> None:
    out, _ = submission
    assert structural_problems(out) == []
    entries = {e["id"]: e for es in yaml.safe_load((out / "PRODUCT.yaml").read_text())["spec"].values() for e in es}
    gang = entries["gang_scheduling"]
    assert gang["status"] == "Implemented", gang["notes"]
    assert gang["evidence"][:3] == ["junit.xml", "e2e.log", "results.json"]
    (pointer,) = gang["evidence"][3:]
    cases = {c.name: c for suite in JUnitXml.fromfile(str(out / "junit.xml")) for c in suite}
    assert pointer == ("file://v1.37/firedrill-reference/junit.xml"
                       "#gang_scheduling/gang-submission-a-gang-that-fits-is-placed-whole")
    case = cases[pointer.split("#", 1)[1]]
    assert case.is_passed and case.time > 0
    out_text = case.system_out or ""
    assert "measured time to run whole: " in out_text and "judged partial-hold GPU-seconds: PASS" in out_text, out_text
    assert entries["secure_accelerator_access"]["status"] == "Not Implemented"


def test_verify_covers_the_folder_and_names_a_tampered_file(submission: tuple[Path, Path]) -> None:
    out, reports = submission
    ok = subprocess.run([*FIREDRILL, "verify", str(out), "--ledger", str(reports / "ledger.jsonl")],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "VERIFIED" in ok.stdout, ok.stdout + ok.stderr
    junit = out / "junit.xml"
    junit.write_text(junit.read_text().replace('time="', 'time="1', 1))
    bad = subprocess.run([*FIREDRILL, "verify", str(out)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "FAIL junit.xml: SHA-256" in bad.stdout, bad.stdout + bad.stderr
