"""Both parties sign (issue 30): a witness countersigns a sealed run; verify demands every --signer and names the
missing or wrong one; nothing the vendor signed stops verifying."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drills.cli import app
from drills.records.evidence.archive import make_tarball, seal
from drills.records.evidence.contract import SIGNERS_FILE, ContractError, load_signers
from drills.records.evidence.record import RunRecord
from drills.records.evidence.report import SignatureStatus, render_report
from drills.records.evidence.signing import Envelope, Signer, generate_keypair
from drills.records.evidence.verify import verify
from drills.records.evidence.witness import WitnessError, witness
from tests.unit.evidence.conftest import NOW, make_record, make_run_dir

MANIFEST_ENVELOPE = "manifest.dsse.json"
REPO = Path(__file__).resolve().parents[3]


def keys(root: Path, who: str) -> tuple[Path, Path]:
    return generate_keypair(root / who)


@pytest.fixture
def parties(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    return {who: keys(tmp_path / "keys", who) for who in ("vendor", "customer", "stranger")}


@pytest.fixture
def run_dir(reports: Path, parties: dict[str, tuple[Path, Path]]) -> Path:
    vendor_private, _ = parties["vendor"]
    return seal(make_run_dir(reports), make_record(), Signer.from_key_file(vendor_private), reports / "ledger.jsonl",
                now=NOW).run_dir


def problems(report: object) -> list[str]:
    return [str(p) for p in report.problems]  # type: ignore[attr-defined]


def test_a_witnessed_run_verifies_with_both_signers_and_everything_else_still_holds(
        run_dir: Path, reports: Path, parties: dict[str, tuple[Path, Path]]) -> None:
    (vendor_private, vendor), (customer_private, customer) = parties["vendor"], parties["customer"]
    manifest_before = (run_dir / "manifest.json").read_bytes()
    done = witness(run_dir, Signer.from_key_file(customer_private), vendor)
    assert done.signatures == 2 and done.vendor_checked and done.verdict == "FAIL"
    assert (run_dir / "manifest.json").read_bytes() == manifest_before
    report = verify(run_dir, vendor, reports / "ledger.jsonl", (vendor, customer))
    assert report.ok, problems(report)
    assert any("also signed by keyid" in n for n in report.notes)  # the plain check notes the witness
    assert verify(run_dir).ok  # the archive's own key: integrity, as before the witness
    tarball = make_tarball(run_dir)
    assert verify(tarball, vendor, None, (vendor, customer)).ok


def test_a_missing_or_wrong_signer_is_named(run_dir: Path, parties: dict[str, tuple[Path, Path]]) -> None:
    (_, vendor), (customer_private, customer) = parties["vendor"], parties["customer"]
    stranger_private, _ = parties["stranger"]
    report = verify(run_dir, vendor, None, (vendor, customer))
    assert not report.ok
    assert [p for p in problems(report) if "customer.pub" in p or "firedrill-signing.pub" in p] == problems(report)
    (missing,) = problems(report)
    assert "no signature by the required signer" in missing and "has not signed this run" in missing

    witness(run_dir, Signer.from_key_file(stranger_private))  # the wrong party countersigned
    report = verify(run_dir, vendor, None, (vendor, customer))
    assert any("no signature by the required signer" in p for p in problems(report)), problems(report)

    # A signature that claims the customer's keyid but was not made by the customer's key is named as wrong.
    envelope = json.loads((run_dir / MANIFEST_ENVELOPE).read_text())
    customer_keyid = Signer.from_key_file(customer_private).keyid
    forged = Signer.from_key_file(stranger_private).sign(
        "application/vnd.firedrill.manifest+json", Envelope.from_json(
            (run_dir / MANIFEST_ENVELOPE).read_bytes(), MANIFEST_ENVELOPE).payload).signatures[0]
    envelope["signatures"].append({"keyid": customer_keyid, "sig": forged.to_dict()["sig"]})
    (run_dir / MANIFEST_ENVELOPE).write_text(json.dumps(envelope))
    report = verify(run_dir, vendor, None, (vendor, customer))
    assert any("does not match the manifest" in p and customer_keyid[:16] in p for p in problems(report))


def test_a_run_that_does_not_verify_or_was_signed_already_is_not_witnessed(
        run_dir: Path, parties: dict[str, tuple[Path, Path]]) -> None:
    (_, vendor), (customer_private, _) = parties["vendor"], parties["customer"]
    stranger_private, stranger = parties["stranger"]
    with pytest.raises(WitnessError, match="does not verify"):
        witness(run_dir, Signer.from_key_file(customer_private), stranger)  # not the stranger's run
    customer = Signer.from_key_file(customer_private)
    witness(run_dir, customer, vendor)
    with pytest.raises(WitnessError, match="already carries a signature"):
        witness(run_dir, customer, vendor)
    (run_dir / "report.html").write_text("<p>PASS</p>")
    with pytest.raises(WitnessError, match="report.html"):
        witness(run_dir, Signer.from_key_file(stranger_private), vendor)
    with pytest.raises(WitnessError, match="not a run directory"):
        witness(run_dir / "report.html", customer)


def test_the_cli_witnesses_and_verify_demands_each_signer(run_dir: Path,
                                                          parties: dict[str, tuple[Path, Path]]) -> None:
    (_, vendor), (customer_private, customer) = parties["vendor"], parties["customer"]
    runner = CliRunner()
    both = ["verify", str(run_dir), "--signer", str(vendor), "--signer", str(customer)]
    refused = runner.invoke(app, both)
    assert refused.exit_code == 1 and "no signature by the required signer" in refused.output
    signed = runner.invoke(app, ["witness", str(run_dir), "--key", str(customer_private), "--vendor-key", str(vendor)])
    assert signed.exit_code == 0, signed.output
    assert "witnessed run" in signed.output and "2 signatures on the manifest" in signed.output
    assert runner.invoke(app, both).exit_code == 0
    again = runner.invoke(app, ["witness", str(run_dir), "--key", str(customer_private)])
    assert again.exit_code == 1 and "already carries a signature" in again.output
    bad_key = runner.invoke(app, ["witness", str(run_dir), "--key", str(run_dir / "nope.key")])
    assert bad_key.exit_code == 2


def test_a_contract_pins_its_signers_and_verify_holds_the_run_to_them(
        tmp_path: Path, reports: Path, parties: dict[str, tuple[Path, Path]]) -> None:
    (vendor_private, vendor), (customer_private, customer) = parties["vendor"], parties["customer"]
    _, stranger = parties["stranger"]
    features = tmp_path / "features"
    features.mkdir()
    ids = {who: Signer.from_key_file(parties[who][0]).keyid for who in ("vendor", "customer")}
    (features / SIGNERS_FILE).write_text(
        f"signers:\n  - name: vendor\n    keyid: {ids['vendor']}\n  - name: customer\n    keyid: {ids['customer']}\n")
    pins = load_signers(features)
    assert [p.name for p in pins] == ["vendor", "customer"]
    record = dataclasses.replace(make_record(), signers=tuple(p.to_dict() for p in pins))
    assert RunRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    run_dir = seal(make_run_dir(reports, "pinned"), record, Signer.from_key_file(vendor_private),
                   reports / "ledger.jsonl", now=NOW).run_dir
    plain = verify(run_dir, vendor)
    assert plain.ok and any("the contract requires signatures by vendor" in n for n in plain.notes)
    only_vendor = verify(run_dir, vendor, None, (vendor,))
    assert any("requires a signature by customer" in p for p in problems(only_vendor))
    witness(run_dir, Signer.from_key_file(customer_private), vendor)
    assert verify(run_dir, vendor, None, (vendor, customer)).ok
    outsider = verify(run_dir, vendor, None, (vendor, customer, stranger))
    assert any("is not a signer the contract names" in p for p in problems(outsider))
    html = render_report(record, SignatureStatus(ids["vendor"], False, None))
    assert 'data-testid="contract-signers"' in html and ids["customer"][:16] in html


@pytest.mark.parametrize(("text", "message"), [
    ("signers: []\n", "non-empty list"),
    ("signers:\n  - keyid: " + "a" * 64 + "\n", r"signers\[0\] needs a name"),
    ("signers:\n  - name: vendor\n    keyid: ABC\n", r"signers\[0\] \(vendor\): keyid must be 64 lowercase hex"),
    ("signers:\n  - {name: a, keyid: " + "b" * 64 + "}\n  - {name: c, keyid: " + "b" * 64 + "}\n", "already pinned"),
    ("signers: [\n", "cannot read"),
])
def test_a_malformed_signers_file_is_refused_naming_the_entry(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / SIGNERS_FILE).write_text(text)
    with pytest.raises(ContractError, match=message):
        load_signers(tmp_path)
    assert load_signers(tmp_path / "elsewhere") == ()


def test_firedrill_run_refuses_a_malformed_signers_file_before_anything_moves(tmp_path: Path) -> None:
    features = tmp_path / "features"
    features.mkdir()
    (features / "gang.feature").write_text((REPO / "features" / "gang_submission.feature").read_text())
    (features / SIGNERS_FILE).write_text("signers:\n  - name: vendor\n    keyid: nope\n")
    result = CliRunner().invoke(app, ["run", "--features", str(features), "--dry-run",
                                      "--reports", str(tmp_path / "reports")])
    assert result.exit_code == 2, result.output
    assert "signers[0] (vendor): keyid must be 64 lowercase hex" in result.output
    assert not (tmp_path / "reports").exists()
