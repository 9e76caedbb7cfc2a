"""A real `firedrill run` leaves a sealed archive: it verifies, openssl alone checks an envelope, no secret
of the target is in it, and its JUnit and Allure results read back.  The target here is the reference
platform reached through a kubeconfig and a profile, the same path as a customer's cluster."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from refplatform.cluster import Cluster, ClusterSpec
from tests.unit.evidence.test_openssl_walkthrough import _blocks, _openssl, _run

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIREDRILL = [sys.executable, "-c", "from drills.cli import main; main()"]
SECRET_VALUE = "customer-registry-token-7f3a9c"
"""A Secret's value in the drilled namespaces: it must reach neither the archive nor the console."""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Cluster, subprocess.CompletedProcess[str]]]:
    work = tmp_path_factory.mktemp("evidence")
    cluster = Cluster(ClusterSpec(work / "cluster", nodes=4, profile="tuned", spares=0))
    cluster.start()
    cluster.wait_ready(60)
    with cluster.http_client() as http:
        http.post("/api/v1/namespaces", json={"metadata": {"name": "firedrill"}}).raise_for_status()
        for ns in ("firedrill", "default"):  # what a customer's cluster holds where the drills run (issue 28)
            http.post(f"/api/v1/namespaces/{ns}/secrets", json={
                "metadata": {"name": "registry-credentials"}, "stringData": {"token": SECRET_VALUE}}).raise_for_status()
    profile = yaml.safe_load((REPO / "examples" / "profile-volcano.yaml").read_text())
    # The reference platform serves no PersistentVolumeClaims: its shared storage is its own nfs export.
    profile.update(name="reference-via-kubeconfig", canary_image="firedrill.dev/simulated:latest",
                   canary={"command": ["firedrill-canary"],
                           "shared_volume": {"nfs": {"server": "refplatform-nfs", "path": "/firedrill"}}})
    (work / "profile.yaml").write_text(yaml.safe_dump(profile))
    features = work / "features"
    features.mkdir()
    (features / "gang_submission.feature").write_text((REPO / "features" / "gang_submission.feature").read_text())
    reports = work / "reports"
    try:
        out = subprocess.run([*FIREDRILL, "run", "--kubeconfig", str(cluster.kubeconfig), "--profile",
                              str(work / "profile.yaml"), "--features", str(features), "--reports", str(reports)],
                             capture_output=True, text=True, timeout=240, cwd=work)
        yield reports, cluster, out
    finally:
        cluster.stop()


def run_dir(reports: Path) -> Path:
    dirs = [p for p in reports.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_the_run_passes_and_its_archive_verifies(run) -> None:
    reports, _, out = run
    assert out.returncode == 0, out.stdout + out.stderr
    assert "THROWAWAY" in out.stderr, "an unsigned run must say loudly that its key is ephemeral"
    verified = subprocess.run([*FIREDRILL, "verify", str(run_dir(reports)), "--ledger", str(reports / "ledger.jsonl")],
                              capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "VERIFIED" in verified.stdout


def test_openssl_alone_verifies_one_envelope_of_the_run(run) -> None:
    _openssl()
    reports, _, _ = run
    envelope = next((run_dir(reports) / "evidence").glob("gang-submission-*.dsse.json"))
    out = _run(_blocks()[0], run_dir(reports), ENVELOPE=str(envelope.relative_to(run_dir(reports))))
    assert out.returncode == 0 and "Signature Verified Successfully" in out.stdout, out.stdout + out.stderr


def test_no_secret_of_the_target_is_in_the_archive(run) -> None:
    reports, cluster, _ = run
    kubeconfig = yaml.safe_load(cluster.kubeconfig.read_text())
    # Every identity's token (admin, controllers, scheduler, nodes, tenants, the kubelet client), not only the
    # one the run used.
    secrets = [*cluster.secrets(), kubeconfig["users"][0]["user"]["token"], str(cluster.kubeconfig),
               str(cluster.data_dir)]
    assert len(secrets) >= 12
    secrets += [SECRET_VALUE, base64.b64encode(SECRET_VALUE.encode()).decode()]
    for path in [*run_dir(reports).rglob("*"), reports / "ledger.jsonl"]:
        if path.is_file():
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, f"{path.name} contains {secret[:6]}..."


def test_no_secret_value_is_in_the_console_output(run) -> None:
    _, cluster, out = run
    for secret in (SECRET_VALUE, base64.b64encode(SECRET_VALUE.encode()).decode(), *cluster.secrets()):
        assert secret not in out.stdout + out.stderr, f"the console shows {secret[:6]}..."


def test_junit_and_allure_results_read_back(run) -> None:
    reports, _, _ = run
    root = ET.parse(run_dir(reports) / "junit.xml").getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {"test_a_gang_that_fits_is_placed_whole",
                          "test_two_gangs_that_each_need_more_than_half_of_the_free_gpus",
                          "test_a_gang_that_must_wait_for_gpus_holds_none_while_it_waits"}
    assert all(c.find("failure") is None and c.find("error") is None for c in cases.values())
    results = [json.loads(p.read_text()) for p in (run_dir(reports) / "allure-results").glob("*-result.json")]
    by_name = {r["name"]: r for r in results}
    assert set(by_name) == {"A gang that fits is placed whole",
                            "Two gangs that each need more than half of the free GPUs",
                            "A gang that must wait for GPUs holds none while it waits"}
    fits = by_name["A gang that fits is placed whole"]
    assert fits["status"] == "passed"
    assert [s["name"] for s in fits["steps"]] == [
        "Given the cluster has at least 4 schedulable GPU nodes with 8 free GPUs each",
        "When I submit a gang of 8 workers with 4 GPUs each",
        "Then all workers are running within 30 seconds",
        "And partial-hold GPU-seconds stay at or below 0"]
    assert all(s["status"] == "passed" for s in fits["steps"])
    assert {"name": "feature", "value": "Gang submission"} in fits["labels"]
