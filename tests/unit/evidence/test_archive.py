"""Sealing: what the archive holds, the ledger chain, the secrets guard, the tarball."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import math
import tarfile
from pathlib import Path

import pytest

from drills.records.evidence.archive import SealResult, make_tarball, read_tree, seal
from drills.records.evidence.canonical import canonical_json, sha256_hex
from drills.records.evidence.errors import ArchiveError, CanonicalError, SecretLeakError
from drills.records.evidence.record import RunRecord
from drills.records.evidence.signing import Envelope, Signer, generate_keypair
from drills.records.evidence.statements import Statement
from drills.records.evidence.verify import verify
from tests.unit.evidence.conftest import NOW, make_record, make_run_dir

OURS = {"record.json", "timeline.jsonl", "fingerprint.json", "public-key.pem", "signer.json", "manifest.json",
        "manifest.dsse.json", "evidence/run.dsse.json", "evidence/gang-a-gang-gets-all-its-gpus-or-none.dsse.json",
        "evidence/gang-two-gangs-do-not-deadlock.dsse.json",
        "evidence/node-pull-a-dead-node-heals-by-itself.dsse.json"}
CALLERS = {"junit.xml", "report.html", "allure-results/0a1b-result.json"}


def test_sealed_archive_holds_everything_and_verifies(sealed: SealResult, reports: Path) -> None:
    files, irregular = read_tree(sealed.run_dir)
    assert set(files) == OURS | CALLERS and not irregular
    assert set(sealed.files) == set(files)
    manifest = json.loads(files["manifest.json"])
    assert manifest["_type"] == "https://firedrill.dev/manifest/v0.1" and manifest["sealed"] == "2026-05-01T12:00:00.000Z"
    assert {f["path"] for f in manifest["files"]} == set(files) - {"manifest.json", "manifest.dsse.json"}
    for entry in manifest["files"]:
        assert entry["sha256"] == sha256_hex(files[entry["path"]]) and entry["size"] == len(files[entry["path"]])
    assert files["manifest.json"] == canonical_json(manifest)
    assert Envelope.from_json(files["manifest.dsse.json"], "m").payload == files["manifest.json"]
    assert json.loads(files["signer.json"]) == {"algorithm": "ed25519", "ephemeral": True, "keyid": sealed.keyid,
                                                "keyidEncoding": "sha256 of the DER SubjectPublicKeyInfo",
                                                "publicKey": "public-key.pem"}
    report = verify(sealed.run_dir, None, reports / "ledger.jsonl")
    assert report.ok, report.lines()
    assert report.summary() == (f"14 files, 5 of 5 signatures valid (keyid {sealed.keyid[:16]}…, ephemeral), "
                                "chain of 1 run: VERIFIED")
    assert any("not identity" in line for line in report.lines())


def test_statement_subjects_are_the_artifacts(sealed: SealResult) -> None:
    files, _ = read_tree(sealed.run_dir)
    statement = Statement.from_bytes(Envelope.from_json(files["evidence/run.dsse.json"], "r").payload, "r")
    assert [s.name for s in statement.subject] == ["junit.xml", "report.html", "timeline.jsonl", "fingerprint.json",
                                                  "record.json", "allure-results/0a1b-result.json"]
    assert all(s.sha256 == sha256_hex(files[s.name]) for s in statement.subject)
    scenario = Statement.from_bytes(Envelope.from_json(
        files["evidence/node-pull-a-dead-node-heals-by-itself.dsse.json"], "s").payload, "s")
    assert scenario.predicate["timeline"]["digest"]["sha256"] == sha256_hex(files["timeline.jsonl"])
    assert scenario.subject == statement.subject


def test_record_fingerprint_and_timeline_files(sealed: SealResult) -> None:
    record = make_record()
    files, _ = read_tree(sealed.run_dir)
    assert RunRecord.from_dict(json.loads(files["record.json"])) == record
    assert sha256_hex(files["fingerprint.json"]) == record.target.fingerprint_digest
    assert [json.loads(line) for line in files["timeline.jsonl"].splitlines()] == list(record.timeline)


def test_two_seals_chain_in_the_ledger(reports: Path) -> None:
    ledger = reports / "ledger.jsonl"
    key_private, key_public = generate_keypair(reports.parent / "keys")
    signer = Signer.from_key_file(key_private)
    first = seal(make_run_dir(reports, "run-1"), make_record("run-1"), signer, ledger, now=NOW)
    second = seal(make_run_dir(reports, "run-2"), make_record("run-2", verdict="INCONCLUSIVE"), signer, ledger)
    lines = ledger.read_bytes().splitlines(keepends=True)
    assert (first.ledger_line, second.ledger_line, len(lines)) == (1, 2, 2)
    one, two = json.loads(lines[0]), json.loads(lines[1])
    assert set(one) == {"run_id", "time", "manifest_sha256", "verdict", "keyid", "prev"}
    assert one["prev"] is None and two["prev"] == sha256_hex(lines[0])
    assert lines[1] == canonical_json(two) + b"\n"
    assert (two["run_id"], two["verdict"], two["keyid"]) == ("run-2", "INCONCLUSIVE", signer.keyid)
    assert two["manifest_sha256"] == sha256_hex((reports / "run-2" / "manifest.json").read_bytes())
    for run, line in (("run-1", 1), ("run-2", 2)):
        report = verify(reports / run, key_public, ledger)
        assert report.ok, report.lines()
        assert (report.ledger_line, report.chain_length, report.ephemeral) == (line, 2, False)
        assert "persistent key" in report.summary() and "chain of 2 runs: VERIFIED" in report.summary()


def test_seal_refuses_a_sealed_directory_and_a_symlink(sealed: SealResult, reports: Path, signer: Signer) -> None:
    with pytest.raises(ArchiveError, match="is sealed already"):
        seal(sealed.run_dir, make_record(), signer, reports / "ledger.jsonl")
    run_dir = make_run_dir(reports, "linked")
    (run_dir / "extra").symlink_to("/etc/hostname")
    with pytest.raises(ArchiveError, match="^extra: not a regular file"):
        seal(run_dir, make_record("linked"), signer, reports / "ledger.jsonl")
    with pytest.raises(ArchiveError, match="not a directory"):
        seal(reports / "nowhere", make_record(), signer, reports / "ledger.jsonl")
    assert len((reports / "ledger.jsonl").read_bytes().splitlines()) == 1


TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2VuLWZvci10ZXN0cw.sig-XYZ"


@pytest.mark.parametrize(("where", "plant"), [
    ("junit.xml", lambda run_dir, record: ((run_dir / "junit.xml").write_text(f"<x>Bearer {TOKEN}</x>"), record)[1]),
    ("allure-results/0a1b-result.json",
     lambda run_dir, record: ((run_dir / "allure-results" / "0a1b-result.json").write_text(TOKEN), record)[1]),
    ("record.json", lambda run_dir, record: dataclasses.replace(record, options={"token": TOKEN})),
    ("timeline.jsonl", lambda run_dir, record: dataclasses.replace(
        record, timeline=({"kind": "Event", "summary": {"message": f"auth {TOKEN}"}},))),
])
def test_seal_refuses_a_secret_and_names_the_file(reports: Path, signer: Signer, where: str, plant) -> None:
    run_dir = make_run_dir(reports)
    record = plant(run_dir, make_record())
    with pytest.raises(SecretLeakError, match=rf"appears in .*{where} \(secret #2\)") as caught:
        seal(run_dir, record, signer, reports / "ledger.jsonl", secrets=["", TOKEN, "another-secret-value"])
    assert where in caught.value.files and TOKEN not in str(caught.value)
    assert not (run_dir / "manifest.json").exists() and not (run_dir / "record.json").exists()
    assert not (reports / "ledger.jsonl").exists()


def test_secret_found_json_escaped(reports: Path, signer: Signer) -> None:
    secret = 'pass"word/with\\escapes'
    record = dataclasses.replace(make_record(), options={"note": secret})
    with pytest.raises(SecretLeakError, match=r"appears in record.json \(secret #1 \(JSON-escaped\)\)"):
        seal(make_run_dir(reports), record, signer, reports / "ledger.jsonl", secrets=[secret])


def test_seal_without_secrets_found_succeeds(reports: Path, signer: Signer) -> None:
    result = seal(make_run_dir(reports), make_record(), signer, reports / "ledger.jsonl",
                  secrets=["not-in-any-file-0123456789"])
    assert result.ledger_line == 1


def test_nan_in_the_record_refused_before_writing(reports: Path, signer: Signer) -> None:
    run_dir = make_run_dir(reports)
    record = dataclasses.replace(make_record(), options={"rate": math.nan})
    with pytest.raises(CanonicalError, match=r"\$\.options\.rate"):
        seal(run_dir, record, signer, reports / "ledger.jsonl")
    assert not (run_dir / "record.json").exists()


def test_tarball_is_deterministic_relative_and_verifies(sealed: SealResult, reports: Path) -> None:
    tarball = make_tarball(sealed.run_dir)
    assert tarball == reports / "20260501T120000Z-abcd.tar.gz"
    first = tarball.read_bytes()
    assert make_tarball(sealed.run_dir).read_bytes() == first
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        members = tar.getmembers()
    assert names == sorted(names) and names[0] == "20260501T120000Z-abcd"
    assert all(n.startswith("20260501T120000Z-abcd") and not n.startswith("/") for n in names)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", int(NOW.timestamp()))}
    assert gzip.GzipFile(fileobj=io.BytesIO(first)).read()  # plain gzip
    report = verify(tarball, None, reports / "ledger.jsonl")
    assert report.ok and report.kind == "tarball" and report.run_id == "20260501T120000Z-abcd", report.lines()
    out = make_tarball(sealed.run_dir, reports.parent / "elsewhere")
    assert out.read_bytes() == first


def test_tarball_needs_a_sealed_directory(reports: Path) -> None:
    with pytest.raises(ArchiveError, match="seal the run before packing"):
        make_tarball(make_run_dir(reports))
