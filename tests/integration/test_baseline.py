"""Baseline first, end to end on the embedded platform: `firedrill baseline` twice (a short window, the built-in
workload mix), then `firedrill compare` of the two (clauses judged with the uncertainty), of a tampered copy
(refused: the signature), and of a statement re-signed with another window (refused: the method, naming it);
and a feature that re-measures with the baseline's method inside `firedrill run`, whose archive `firedrill
compare` reads back.

The window is real time on the platform (its agents publish progress once a second), so it cannot be shortened by
a clock; it is kept to 6 s in 3 slices, and the second baseline and the run go at the same time. The arithmetic
on injected clocks is in tests/unit/drills/test_baseline*.py.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drills.cli import app
from drills.records.evidence.canonical import canonical_digest
from drills.records.evidence.signing import PAYLOAD_TYPE, Signer, generate_keypair

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIREDRILL = [sys.executable, "-c", "from drills.cli import main; main()"]
FEATURE = """Feature: Utilization over the signed baseline
  Scenario: The platform is measured again against its baseline
    Given the signed baseline "baselines/first.dsse.json"
    When the cluster is observed with the baseline's method
    Then allocated utilization improves by at least 0 points over the signed baseline
    And effective utilization improves by at least 50 points over the signed baseline
"""


def baseline_args(out: Path, key: Path) -> list[str]:
    return [*FIREDRILL, "baseline", "--window", "6 s", "--slices", "3", "--warmup", "2 s", "--out", str(out),
            "--sign-key", str(key)]


def compare(*args: str) -> "subprocess.CompletedProcess[str]":
    """`firedrill compare` in this process (it starts nothing): exit code, stdout and stderr."""
    result = CliRunner().invoke(app, ["compare", *args])
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def finished(proc: "subprocess.Popen[str]", timeout: float = 150) -> "subprocess.CompletedProcess[str]":
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path, Path]:
    """(first baseline, second baseline, private key, public key, the run archive of the feature)."""
    root = tmp_path_factory.mktemp("baseline")
    private, public = generate_keypair(root / "keys")
    features = root / "features"
    (features / "baselines").mkdir(parents=True)
    first, second = features / "baselines" / "first.dsse.json", root / "second.dsse.json"
    done = subprocess.run(baseline_args(first, private), capture_output=True, text=True, timeout=150, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    (features / "baseline.feature").write_text(FEATURE)
    # The second baseline and a run of the feature, each on its own embedded platform, at the same time.
    again = subprocess.Popen(baseline_args(second, private), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=REPO)
    run = subprocess.Popen([*FIREDRILL, "run", "--features", str(features), "--reports", str(root / "reports"),
                            "--sign-key", str(private)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=REPO)
    outs = [finished(again), finished(run)]
    for out, baseline in ((done, first), (outs[0], second)):
        assert out.returncode == 0, out.stdout + out.stderr
        assert "slice 1/3" in out.stdout and "slice 3/3" in out.stdout, out.stdout  # progress while observing
        assert f"Sealed: {baseline}" in out.stdout
    assert outs[1].returncode == 1, outs[1].stdout + outs[1].stderr  # effective +50 points cannot hold
    archive = next(p for p in (root / "reports").iterdir() if p.is_dir())
    return first, second, private, public, archive


def statement(path: Path) -> dict:
    return json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))


def test_a_baseline_seals_the_layers_holes_and_method_of_the_embedded_platform(baselines: tuple[Path, ...]) -> None:
    first = statement(baselines[0])
    pred = first["predicate"]
    assert first["predicateType"] == "https://firedrill.dev/attestation/baseline/v0.1"
    assert pred["method"]["window"] == {"seconds": 6.0, "slices": 3, "sliceSeconds": 2.0, "warmupSeconds": 2.0}
    assert pred["method"]["workload"]["mix"]["name"] == "default"
    assert pred["method"]["source"] == {"kind": "leak-report", "apiVersion": "firedrill.dev/v1alpha1"}
    layers = pred["summary"]["layers"]
    # The built-in mix holds 10 of the 40 GPUs (4 nodes and a spare of 8): allocated is a quarter of capacity;
    # its training computes 60 % of each step, so effective (x the simulated MFU 0.4) sits well below active.
    assert layers["allocated"]["share"] == pytest.approx(0.25, abs=0.02)
    assert 0 < layers["effective"]["share"] < layers["active"]["share"] < layers["allocated"]["share"]
    assert pred["summary"]["holes"]["dataPipeline"]["gpuHours"] > pred["summary"]["holes"]["communication"]["gpuHours"] > 0
    assert pred["target"]["kind"] == "embedded" and "127.0.0.1" not in json.dumps(pred["target"])


def test_compare_reports_each_change_with_its_uncertainty_and_judges_clauses(baselines: tuple[Path, ...]) -> None:
    first, second, _, public, _ = baselines
    out = compare(str(first), str(second), "--key", str(public), "--json",
                    "--clause", "allocated utilization improves by at least 0 points over the signed baseline",
                    "--clause", "effective utilization improves by at least 50 points over the signed baseline")
    assert out.returncode == 1, out.stdout + out.stderr  # the second clause FAILs: same platform, same mix
    doc = json.loads(out.stdout)
    rows = {r["name"]: r for r in doc["rows"]}
    assert set(rows) == {"allocated", "active", "effective", "dataPipeline", "communication", "fragmentation",
                         "faultTolerance"}
    assert all(isinstance(r["uncertainty"], float) and r["uncertainty"] >= 0 for r in rows.values())
    verdicts = [c["verdict"] for c in doc["clauses"]]
    assert verdicts == ["PASS", "FAIL"]
    text = compare(str(first), str(second), "--key", str(public))
    assert text.returncode == 0, text.stderr
    assert "effective utilization" in text.stdout and "the data pipeline hole" in text.stdout
    assert "Same method: leak-report source, workload mix, window 6 s in 3 slices" in text.stdout


def test_a_tampered_baseline_is_refused_before_any_number_is_read(baselines: tuple[Path, ...],
                                                                  tmp_path: Path) -> None:
    first, second, _, public, _ = baselines
    envelope = json.loads(first.read_text())
    doc = statement(first)
    doc["predicate"]["observation"]["slices"][0]["layers"]["effective"] *= 3
    envelope["payload"] = base64.b64encode(json.dumps(doc).encode()).decode()
    tampered = tmp_path / "tampered.dsse.json"
    tampered.write_text(json.dumps(envelope))
    out = compare(str(tampered), str(second))
    assert out.returncode == 5, out.stdout + out.stderr
    assert "does not verify" in out.stderr and "altered after it was signed" in out.stderr
    assert "utilization" not in out.stdout


def test_a_baseline_with_another_window_is_refused_naming_the_field(baselines: tuple[Path, ...],
                                                                    tmp_path: Path) -> None:
    first, second, private, public, _ = baselines
    doc = statement(second)
    pred = doc["predicate"]
    pred["method"]["window"]["seconds"] = 12.0
    doc["subject"][0]["digest"]["sha256"] = canonical_digest({"method": pred["method"],
                                                              "observation": pred["observation"]})
    other = tmp_path / "other-window.dsse.json"
    other.write_bytes(Signer.from_key_file(private).sign(PAYLOAD_TYPE, json.dumps(doc).encode()).to_json())
    out = compare(str(first), str(other), "--key", str(public))
    assert out.returncode == 4, out.stdout + out.stderr
    assert "different methods" in out.stderr and "window.seconds: 6.0 in the baseline" in out.stderr


def test_a_feature_re_measures_with_the_baselines_method_and_its_archive_compares(baselines: tuple[Path, ...]) -> None:
    first, _, _, public, archive = baselines
    record = json.loads((archive / "record.json").read_text())
    scenario = record["scenarios"][0]
    assert scenario["verdict"] == "FAIL" and scenario["drill"] == "baseline-comparison"
    judged = {j["threshold"]["name"]: j["verdict"] for j in scenario["judgements"]}
    assert judged == {"allocated utilization improvement minus uncertainty": "PASS",
                      "effective utilization improvement minus uncertainty": "FAIL"}
    assert scenario["details"]["baseline"]["method"] == statement(first)["predicate"]["method"]
    out = compare(str(first), str(archive), "--key", str(public),
                  "--clause", "allocated utilization improves by at least 0 points over the signed baseline")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "scenario 'The platform is measured again against its baseline'" in out.stdout
