"""`firedrill keygen`, `firedrill verify` and `firedrill archive` as a user runs them."""

from __future__ import annotations

import stat
from pathlib import Path

from typer.testing import CliRunner

from drills.cli import app
from drills.records.evidence.archive import SealResult, seal
from drills.records.evidence.signing import Signer
from tests.unit.evidence.conftest import NOW, make_record, make_run_dir

runner = CliRunner()


def test_keygen_then_refuses(tmp_path: Path) -> None:
    out = tmp_path / "keys"
    result = runner.invoke(app, ["keygen", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE((out / "firedrill-signing.key").stat().st_mode) == 0o600
    assert "keyid:" in result.stdout and "keep it secret" in result.stdout
    again = runner.invoke(app, ["keygen", "--out", str(out)])
    assert again.exit_code == 1 and "already exists" in again.stderr and "firedrill-signing.key" in again.stderr


def test_verify_sealed_with_a_key_and_ledger(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    assert runner.invoke(app, ["keygen", "--out", str(keys)]).exit_code == 0
    reports = tmp_path / "reports"
    ledger = reports / "ledger.jsonl"
    signer = Signer.from_key_file(keys / "firedrill-signing.key")
    for i in (1, 2, 3):
        seal(make_run_dir(reports, f"run-{i}"), make_record(f"run-{i}"), signer, ledger, now=NOW)
    result = runner.invoke(app, ["verify", str(reports / "run-2"), "--key", str(keys / "firedrill-signing.pub"),
                                 "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    assert f"14 files, 5 of 5 signatures valid (keyid {signer.keyid[:16]}…, persistent key), chain of 3 runs: " \
           "VERIFIED" in result.stdout
    assert "the given key" in result.stdout


def test_verify_ephemeral_says_integrity_not_identity(sealed: SealResult) -> None:
    result = runner.invoke(app, ["verify", str(sealed.run_dir)])
    assert result.exit_code == 0, result.output
    assert "ephemeral" in result.stdout and "not identity" in result.stdout and "VERIFIED" in result.stdout


def test_verify_tampered_exits_1_naming_the_file(sealed: SealResult) -> None:
    (sealed.run_dir / "report.html").write_text("<p>PASS</p>")
    result = runner.invoke(app, ["verify", str(sealed.run_dir)])
    assert result.exit_code == 1
    assert "FAIL report.html: " in result.stdout and "DOES NOT VERIFY" in result.stdout


def test_verify_cannot_read_exits_2(tmp_path: Path, sealed: SealResult) -> None:
    result = runner.invoke(app, ["verify", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such file or directory" in result.stderr
    result = runner.invoke(app, ["verify", str(sealed.run_dir), "--ledger", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 2 and "none.jsonl" in result.stderr


def test_archive_packs_and_the_tarball_verifies(sealed: SealResult, reports: Path) -> None:
    result = runner.invoke(app, ["archive", str(sealed.run_dir)])
    assert result.exit_code == 0, result.output
    tarball = reports / f"{sealed.run_dir.name}.tar.gz"
    assert tarball.is_file() and "VERIFIED" in result.stdout
    result = runner.invoke(app, ["verify", str(tarball), "--ledger", str(reports / "ledger.jsonl")])
    assert result.exit_code == 0 and "tarball" in result.stdout, result.output


def test_archive_refuses_a_run_that_does_not_verify(sealed: SealResult, reports: Path) -> None:
    (sealed.run_dir / "junit.xml").write_text("<x/>")
    result = runner.invoke(app, ["archive", str(sealed.run_dir)])
    assert result.exit_code == 1 and "not packing" in result.stderr
    assert not (reports / f"{sealed.run_dir.name}.tar.gz").exists()
    result = runner.invoke(app, ["archive", str(make_run_dir(reports, "unsealed"))])
    assert result.exit_code == 2 and "not a Firedrill archive" in result.stderr
