"""The shell walkthrough in docs/EVIDENCE.md verifies envelopes with nothing but openssl and coreutils."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from drills.records.evidence.archive import SealResult, seal
from drills.records.evidence.canonical import sha256_hex
from drills.records.evidence.signing import Signer
from drills.records.evidence.verify import verify
from tests.unit.evidence.conftest import NOW, make_record, make_run_dir
from tests.unit.evidence.test_verify import _flip_in_field

DOC = Path(__file__).resolve().parents[3] / "docs" / "EVIDENCE.md"


def _blocks() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Verify one envelope with openssl"):]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def _openssl() -> str:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: the walkthrough needs it")
    version = subprocess.run([openssl, "version"], capture_output=True, text=True).stdout
    if not re.match(r"OpenSSL [3-9]", version):
        pytest.skip(f"{version.strip()}: pkeyutl -rawin needs OpenSSL 3.0 or later")
    return openssl


def _run(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_walkthrough_verifies_every_envelope_and_writes_nothing(sealed: SealResult) -> None:
    _openssl()
    script = _blocks()[0]
    assert "openssl pkeyutl -verify -pubin -inkey public-key.pem -rawin" in script
    for envelope in sealed.envelopes:
        out = _run(script, sealed.run_dir, ENVELOPE=envelope)
        assert out.returncode == 0, (envelope, out.stdout, out.stderr)
        assert "Signature Verified Successfully" in out.stdout
        assert ("manifest.json is the signed manifest" in out.stdout) == (envelope == "manifest.dsse.json")
    default = _run(script, sealed.run_dir)  # evidence/run.dsse.json
    assert default.returncode == 0 and "Signature Verified Successfully" in default.stdout
    assert verify(sealed.run_dir).ok  # the walkthrough left nothing in the archive


@pytest.mark.parametrize("field", ["payload", "sig"])
def test_walkthrough_rejects_a_changed_envelope(sealed: SealResult, field: str) -> None:
    _openssl()
    _flip_in_field(sealed.run_dir / "evidence/run.dsse.json", field, 30)
    out = _run(_blocks()[0], sealed.run_dir)
    assert out.returncode != 0
    assert "Signature Verified Successfully" not in out.stdout


def test_walkthrough_rejects_another_public_key(sealed: SealResult) -> None:
    _openssl()
    (sealed.run_dir / "public-key.pem").write_bytes(Signer.generate_ephemeral().public_pem)
    out = _run(_blocks()[0], sealed.run_dir)
    assert out.returncode == 1 and "is not public-key.pem's" in out.stderr


def test_manifest_and_ledger_snippets(reports: Path, signer: Signer) -> None:
    _openssl()
    ledger = reports / "ledger.jsonl"
    seal(make_run_dir(reports, "run-1"), make_record("run-1"), signer, ledger, now=NOW)
    second = seal(make_run_dir(reports, "run-2"), make_record("run-2"), signer, ledger, now=NOW)
    file_check, ledger_check = _blocks()[1:3]
    out = _run(file_check, second.run_dir)
    digest = sha256_hex((second.run_dir / "report.html").read_bytes())
    assert out.returncode == 0 and out.stdout.count(digest) == 2, out
    out = _run(ledger_check, second.run_dir)
    first_line = ledger.read_bytes().splitlines(keepends=True)[0]
    assert out.returncode == 0 and out.stdout.count(sha256_hex(first_line)) == 2, out


def test_walkthrough_rejects_a_changed_manifest(sealed: SealResult) -> None:
    _openssl()
    manifest = sealed.run_dir / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"size":', b'"size":1', 1))
    out = _run(_blocks()[0], sealed.run_dir, ENVELOPE="manifest.dsse.json")
    assert out.returncode != 0 and "Signature Verified Successfully" in out.stdout  # the signature holds ...
    assert "manifest.json is the signed manifest" not in out.stdout  # ... but not over this manifest.json
