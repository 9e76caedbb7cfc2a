"""Tampering: every kind of change to a sealed archive or the ledger is caught and named."""

from __future__ import annotations

import base64
import io
import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from drills.records.evidence.archive import SealResult, make_tarball, seal
from drills.records.evidence.errors import VerifyReadError
from drills.records.evidence.signing import Signer, generate_keypair
from drills.records.evidence.verify import VerifyReport, verify
from tests.unit.evidence.conftest import NOW, make_record, make_run_dir

RUN = "evidence/run.dsse.json"
PULL = "evidence/node-pull-a-dead-node-heals-by-itself.dsse.json"


def _swap_char(text: str, index: int) -> str:
    """Change one character to another of the same kind (hex stays hex, base64 stays base64)."""
    c = text[index]
    repl = {"0": "1", "a": "b", "A": "B", "+": "/", "/": "+"}.get(c) or ("0" if c != "0" else "1")
    if c.isalpha():
        repl = "b" if c != "b" else "c"
    elif c.isdigit():
        repl = "1" if c != "1" else "2"
    return text[:index] + repl + text[index + 1:]


def _flip_in_field(path: Path, field: str, offset: int = 10) -> None:
    """Change one character inside a JSON string field of a canonical JSON file."""
    text = path.read_text()
    start = text.index(f'"{field}":"') + len(field) + 4
    path.write_text(_swap_char(text, start + offset))


def _flip_byte(path: Path, needle: bytes) -> None:
    data = path.read_bytes()
    i = data.index(needle)
    path.write_bytes(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:])


def _problems(report: VerifyReport) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in report.problems:
        out.setdefault(p.where, []).append(p.message)
    return out


def test_the_untouched_archive_verifies(sealed: SealResult) -> None:
    assert verify(sealed.run_dir).ok


TAMPERS: list[tuple[str, Callable[[Path], None], str, str]] = [
    # (case, tamper, file named, words in its message)
    ("envelope payload", lambda d: _flip_in_field(d / RUN, "payload", 200), RUN, "signature"),
    ("scenario envelope payload", lambda d: _flip_in_field(d / PULL, "payload", 40), PULL, "signature"),
    ("signature", lambda d: _flip_in_field(d / RUN, "sig", 5), RUN, "signature"),
    ("manifest signature", lambda d: _flip_in_field(d / "manifest.dsse.json", "sig", 5), "manifest.dsse.json",
     "signature"),
    ("manifest", lambda d: _flip_in_field(d / "manifest.json", "sha256", 3), "manifest.json", "differs from the manifest signed"),
    ("timeline", lambda d: _flip_byte(d / "timeline.jsonl", b"gang-0"), "timeline.jsonl", "SHA-256"),
    ("report", lambda d: _flip_byte(d / "report.html", b"FAIL"), "report.html", "SHA-256"),
    ("junit", lambda d: _flip_byte(d / "junit.xml", b"failures"), "junit.xml", "SHA-256"),
    ("allure result", lambda d: _flip_byte(d / "allure-results/0a1b-result.json", b"gang"),
     "allure-results/0a1b-result.json", "SHA-256"),
    ("record", lambda d: _flip_byte(d / "record.json", b'"verdict":"FAIL"'), "record.json", "SHA-256"),
    ("signer", lambda d: (d / "signer.json").write_text((d / "signer.json").read_text().replace("true", "false")),
     "signer.json", "SHA-256"),
    ("grown report", lambda d: (d / "report.html").write_bytes((d / "report.html").read_bytes() + b" "),
     "report.html", "size"),
    ("added file", lambda d: (d / "notes.txt").write_text("hi"), "notes.txt", "not listed in manifest.json"),
    ("added envelope", lambda d: shutil.copy(d / RUN, d / "evidence/extra.dsse.json"), "evidence/extra.dsse.json",
     "not listed"),
    ("removed report", lambda d: (d / "report.html").unlink(), "report.html", "listed in manifest.json but missing"),
    ("removed envelope", lambda d: (d / PULL).unlink(), PULL, "missing"),
    ("removed run envelope", lambda d: (d / RUN).unlink(), RUN, "missing"),
    ("removed manifest signature", lambda d: (d / "manifest.dsse.json").unlink(), "manifest.dsse.json",
     "not signed"),
    ("removed manifest", lambda d: (d / "manifest.json").unlink(), "manifest.json", "missing"),
    ("removed public key", lambda d: (d / "public-key.pem").unlink(), "public-key.pem", "missing"),
    ("symlink", lambda d: (d / "link").symlink_to(d / "report.html"), "link", "not a regular file"),
]


@pytest.mark.parametrize(("case", "tamper", "where", "words"), TAMPERS, ids=[t[0] for t in TAMPERS])
def test_tampering_is_detected_and_named(sealed: SealResult, case: str, tamper: Callable[[Path], None], where: str,
                                         words: str) -> None:
    tamper(sealed.run_dir)
    report = verify(sealed.run_dir)
    assert not report.ok
    problems = _problems(report)
    assert where in problems, report.lines()
    assert any(words in m for m in problems[where]), problems[where]
    assert report.summary().endswith(")") and "DOES NOT VERIFY" in report.summary()
    assert any(line.startswith(f"FAIL {where}: ") for line in report.lines())


def test_a_changed_file_also_breaks_the_statements_subjects(sealed: SealResult) -> None:
    _flip_byte(sealed.run_dir / "timeline.jsonl", b"gang-0")
    problems = _problems(verify(sealed.run_dir))
    assert any("subject timeline.jsonl" in m for m in problems[RUN])
    assert any("subject timeline.jsonl" in m for m in problems[PULL])


def test_resealed_with_another_key_passes_integrity_but_not_identity(reports: Path) -> None:
    """Whoever rewrites an archive can re-seal it with a key of their own: the archive's own key then
    proves nothing about who sealed it; the signer's published key does."""
    private, public = generate_keypair(reports.parent / "keys")
    honest = seal(make_run_dir(reports), make_record(), Signer.from_key_file(private), reports / "ledger.jsonl",
                  now=NOW)
    assert verify(honest.run_dir, public).ok
    forged = make_run_dir(reports.parent / "forger")
    (forged / "report.html").write_text("<p>PASS</p>")
    seal(forged, make_record(verdict="PASS"), Signer.generate_ephemeral(), reports.parent / "forger-ledger.jsonl")
    assert verify(forged).ok  # integrity only
    report = verify(forged, public)
    problems = _problems(report)
    assert "not the given key" in problems["public-key.pem"][0]
    assert any("not the verifying key" in m for m in problems[RUN])
    # and the honest ledger knows nothing of it
    report = verify(forged, None, reports / "ledger.jsonl")
    assert any("manifest_sha256" in m for m in _problems(report)[f"{reports / 'ledger.jsonl'} line 1"])


@pytest.fixture
def three_runs(reports: Path, signer: Signer) -> Path:
    ledger = reports / "ledger.jsonl"
    for i in (1, 2, 3):
        seal(make_run_dir(reports, f"run-{i}"), make_record(f"run-{i}"), signer, ledger, now=NOW)
    for i in (1, 2, 3):
        assert verify(reports / f"run-{i}", None, ledger).ok
    return ledger


def _lines(ledger: Path) -> list[bytes]:
    return ledger.read_bytes().splitlines(keepends=True)


def test_ledger_line_edited(three_runs: Path, reports: Path) -> None:
    lines = _lines(three_runs)
    lines[0] = lines[0].replace(b'"verdict":"FAIL"', b'"verdict":"PASS"')
    three_runs.write_bytes(b"".join(lines))
    report = verify(reports / "run-3", None, three_runs)
    assert list(_problems(report)) == [f"{three_runs} line 2"]
    assert "changed at or before line 1" in report.problems[0].message
    report = verify(reports / "run-1", None, three_runs)
    assert any("verdict 'PASS' is not record.json's 'FAIL'" in m for m in _problems(report)[f"{three_runs} line 1"])


def test_ledger_run_line_one_byte_changed(three_runs: Path, reports: Path) -> None:
    lines = _lines(three_runs)
    i = lines[2].index(b'"manifest_sha256":"') + len(b'"manifest_sha256":"')
    lines[2] = lines[2][:i] + bytes([lines[2][i] ^ 0x01]) + lines[2][i + 1:]
    three_runs.write_bytes(b"".join(lines))
    problems = _problems(verify(reports / "run-3", None, three_runs))
    assert list(problems) == [f"{three_runs} line 3"]
    assert "manifest_sha256" in problems[f"{three_runs} line 3"][0]


def test_ledger_line_deleted(three_runs: Path, reports: Path) -> None:
    lines = _lines(three_runs)
    three_runs.write_bytes(lines[0] + lines[2])
    report = verify(reports / "run-3", None, three_runs)
    assert list(_problems(report)) == [f"{three_runs} line 2"]
    assert "deleted, inserted, reordered or changed" in report.problems[0].message
    assert report.chain_length == 2 and report.ledger_line == 2


def test_first_ledger_line_deleted(three_runs: Path, reports: Path) -> None:
    three_runs.write_bytes(b"".join(_lines(three_runs)[1:]))
    report = verify(reports / "run-3", None, three_runs)
    assert list(_problems(report)) == [f"{three_runs} line 1"]
    assert "first line's prev must be null" in report.problems[0].message


def test_ledger_lines_reordered(three_runs: Path, reports: Path) -> None:
    lines = _lines(three_runs)
    three_runs.write_bytes(lines[0] + lines[2] + lines[1])
    problems = _problems(verify(reports / "run-1", None, three_runs))
    assert f"{three_runs} line 2" in problems and f"{three_runs} line 3" in problems


def test_ledger_without_the_run_or_not_json(three_runs: Path, reports: Path) -> None:
    lines = _lines(three_runs)
    three_runs.write_bytes(lines[0])
    assert "no line for run run-3" in _problems(verify(reports / "run-3", None, three_runs))[str(three_runs)][0]
    three_runs.write_bytes(lines[0] + b"{not json\n" + lines[2])
    problems = _problems(verify(reports / "run-3", None, three_runs))
    assert "not valid JSON" in problems[f"{three_runs} line 2"][0]
    assert "prev" in problems[f"{three_runs} line 3"][0]


def test_tampered_tarball_member(sealed: SealResult, reports: Path, tmp_path: Path) -> None:
    tarball = make_tarball(sealed.run_dir)
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(tarball) as src, tarfile.open(evil, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("/report.html"):
                data = data.replace(b"FAIL", b"PASS")
            dst.addfile(member, None if data is None else io.BytesIO(data))
    problems = _problems(verify(evil))
    assert "report.html" in problems and "SHA-256" in problems["report.html"][0]


def test_unsafe_tarball_paths_are_problems(sealed: SealResult, tmp_path: Path) -> None:
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(make_tarball(sealed.run_dir)) as src, tarfile.open(evil, "w:gz") as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        info = tarfile.TarInfo("../escape.txt")
        info.size = 2
        dst.addfile(info, io.BytesIO(b"hi"))
    report = verify(evil)
    assert "unsafe path" in _problems(report)["../escape.txt"][0]
    assert not (tmp_path.parent / "escape.txt").exists()


def test_cannot_read(tmp_path: Path, sealed: SealResult) -> None:
    with pytest.raises(VerifyReadError, match="no such file or directory"):
        verify(tmp_path / "missing")
    (tmp_path / "plain.txt").write_text("not an archive")
    with pytest.raises(VerifyReadError, match="not a run directory or a .tar.gz"):
        verify(tmp_path / "plain.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(VerifyReadError, match="not a Firedrill archive"):
        verify(tmp_path / "empty")
    with pytest.raises(VerifyReadError, match="nokey.pub: cannot read the public key"):
        verify(sealed.run_dir, tmp_path / "nokey.pub")
    with pytest.raises(VerifyReadError, match="noledger.jsonl: cannot read the ledger"):
        verify(sealed.run_dir, None, tmp_path / "noledger.jsonl")


def test_unreadable_json_inside_an_archive_is_a_failure_naming_it(sealed: SealResult) -> None:
    (sealed.run_dir / RUN).write_text("{broken")
    problems = _problems(verify(sealed.run_dir))
    assert any("not a JSON DSSE envelope" in m for m in problems[RUN])


def test_envelope_payload_swapped_between_envelopes(sealed: SealResult) -> None:
    """A validly signed statement moved into another envelope file still verifies as a signature, but the
    manifest no longer matches."""
    (sealed.run_dir / PULL).write_bytes((sealed.run_dir / RUN).read_bytes())
    problems = _problems(verify(sealed.run_dir))
    assert list(problems) == [PULL]


def test_report_lines_name_the_key_and_each_signature(sealed: SealResult) -> None:
    lines = verify(sealed.run_dir).lines()
    assert lines[1].startswith("key: the archive's own public-key.pem (keyid ")
    assert "EPHEMERAL" in lines[2] and "not identity" in lines[2]
    assert sum(1 for line in lines if line.startswith("  ok  ")) == 5
    assert "not checked (pass --ledger" in "\n".join(lines)


def test_signed_payload_decodes_to_the_statement(sealed: SealResult) -> None:
    envelope = json.loads((sealed.run_dir / RUN).read_text())
    assert json.loads(base64.b64decode(envelope["payload"]))["_type"] == "https://in-toto.io/Statement/v1"
