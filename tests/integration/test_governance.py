"""The governance feature on the embedded reference platform (issue 15, Done-when 2).

- `firedrill run` on the shipped feature: every chain PASSes, and each refusal's record, found in the API
  server's audit log, is in the evidence by its SHA-256 (the scenario's details, a measurement's note and the
  timeline).
- In process, on a live platform: each digest is the SHA-256 of a line of the platform's own audit.log, and a
  node credential the profile names but cannot be loaded makes only the node's step INCONCLUSIVE, naming
  ``governance.node_kubeconfig``, while the tenant's attempts are still judged.

The defects that make the feature FAIL naming a chain are in tests/integration/test_defect_zoo.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.kinds.governance import Chain, GovernanceDrill
from drills.records.verdict import DrillResult, Verdict
from drills.target.connect import Target, embedded_target
from drills.target.profile import reference_profile
from tests.integration.test_run import REPO, features_copy, firedrill

pytestmark = pytest.mark.integration

CLUSTER = REPO / "platform" / "refplatform" / "cluster.py"
MISSING = [what for what, ok in (
    ("an audit log (platform/refplatform/api/audit.py)", (REPO / "platform/refplatform/api/audit.py").is_file()),
    ("tenant kubeconfigs in the data directory", CLUSTER.is_file() and "tenant-a.kubeconfig" in CLUSTER.read_text()),
) if not ok]
needs_platform = pytest.mark.skipif(bool(MISSING), reason="the reference platform lacks " + " and ".join(MISSING))
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _archive(out: str) -> Path:
    line = next(ln for ln in out.splitlines() if ln.startswith("Evidence: "))
    return Path(line.split("Evidence: ", 1)[1].split(" (", 1)[0])


@needs_platform
def test_every_chain_passes_and_each_record_s_digest_is_in_the_evidence(tmp_path: Path) -> None:
    features = features_copy(tmp_path, "governance.feature")
    out = firedrill("run", "--features", str(features), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 passed" in out.stdout, out.stdout
    archive = _archive(out.stdout)
    record = json.loads((archive / "record.json").read_text())
    timeline = [json.loads(ln) for ln in (archive / "timeline.jsonl").read_text().splitlines()]
    found = {e["summary"]["sha256"] for e in timeline if e["event"] == "audit record found"}
    recorded: Counter[str] = Counter()  # a chain may be crossed by more than one scenario (quota: alone, at once)
    for scenario in record["scenarios"]:
        assert scenario["verdict"] == "PASS" and scenario["drill"] == "governance", scenario
        details = scenario["details"]["governance"]
        assert details["audit_log"] == "the embedded platform's audit.log"
        (chain, tally), = details["chains"].items()
        recorded[chain] += tally["recorded"]
        attempts = [a for a in details["attempts"] if a["chain"] == chain]
        assert attempts and all(a["gate"] == "refused" and SHA256.match(a["record"]["sha256"]) for a in attempts)
        assert tally["records_sha256"] == [a["record"]["sha256"] for a in attempts]
        assert set(tally["records_sha256"]) <= found
        note = next(m["note"] for m in scenario["measurements"] if m["name"] == f"{chain}: refusals found in the "
                                                                                 "audit log")
        assert all(d in note for d in tally["records_sha256"])
    assert dict(recorded) == {"admission-and-quota": 3, "access": 4, "priority": 2, "change-control": 3}
    by_user = {a["record"]["user"] for s in record["scenarios"] for a in s["details"]["governance"]["attempts"]}
    assert {"tenant-a", "system:node:gpu-node-0"} <= by_user, by_user  # each refusal names who tried


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    t = embedded_target(nodes=2, spares=0)
    try:
        yield t
    finally:
        t.close()


@needs_platform
def test_each_digest_is_a_line_of_the_platform_s_audit_log(target: Target) -> None:
    result = DrillResult("scenario")
    drill = GovernanceDrill(target, result, "fdgov01")
    try:
        drill.prepare()
        drill.cordon()
        drill.delete_node()
        drill.judge(Chain.CHANGE_CONTROL)
    finally:
        drill.rollback()
    assert result.verdict is Verdict.PASS, result.findings
    assert target.embedded is not None and target.embedded.data_dir is not None
    lines = (Path(target.embedded.data_dir) / "audit.log").read_bytes().splitlines()
    digests = {hashlib.sha256(ln).hexdigest(): json.loads(ln) for ln in lines}
    for attempt in drill.attempts:
        assert attempt.record is not None
        event = digests[attempt.record.digest]
        assert event["user"]["username"] == "tenant-a" and event["responseStatus"]["code"] == 403
        assert event["objectRef"]["resource"] == "nodes" and event["verb"] in ("patch", "delete")


@needs_platform
def test_a_node_credential_that_cannot_be_loaded_makes_only_its_step_inconclusive(target: Target,
                                                                                   tmp_path: Path) -> None:
    governance = dataclasses.replace(reference_profile().governance, node_kubeconfig=str(tmp_path / "none"),
                                     node_name="gpu-node-0")
    target.profile = dataclasses.replace(target.profile, governance=governance)
    result = DrillResult("scenario")
    drill = GovernanceDrill(target, result, "fdgov02")
    try:
        drill.other_namespace()
        drill.node_lease()
        drill.judge(Chain.ACCESS)
    finally:
        drill.rollback()
        target.profile = reference_profile()
    assert result.verdict is Verdict.INCONCLUSIVE, result.findings
    (finding,) = [f for f in result.findings if "node" in f]
    assert finding.startswith("access: not tried: node gpu-node-0's identity could not write another node's Lease")
    assert "governance.node_kubeconfig" in finding
    judged = [a for a in drill.attempts if a.record is not None]
    assert len(judged) == 2 and all(a.record.user == "tenant-a" for a in judged)  # type: ignore[union-attr]
