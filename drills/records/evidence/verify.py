"""Verifying a sealed archive (a run directory or its ``.tar.gz``), offline, and its place in the ledger.

:func:`verify` checks, and reports every mismatch with the file (relative path) or ledger line it concerns:

1. the key: a given public key (``--key``: identity, if you trust that key) or the archive's own
   ``public-key.pem`` (integrity only: whoever sealed it could have made that key); ``signer.json`` names the
   same keyid;
2. ``manifest.dsse.json``: its signature, and that its payload is exactly ``manifest.json``'s bytes;
3. every file the manifest lists is there with its SHA-256 and size; nothing else is there (apart from the
   manifest and its signature); nothing is a symlink;
4. every ``evidence/*.dsse.json``: every signature (keyid, valid?), the payload is an in-toto Statement v1 of
   a known predicate type, and every subject's digest matches the file it names;
5. with a ledger: every line's ``prev`` is the SHA-256 of the line before (a deleted, inserted, reordered or
   edited line breaks the link at a named line), the run has a line, and that line's manifest digest,
   keyid and verdict match the archive.

A folder whose signed manifest says ``"kind": "conformance"`` is a CNCF Kubernetes AI Conformance submission
made by ``firedrill conformance`` from a run archive: checks 1-3 hold as they are, it has no statements of its own
(4), the submission itself is checked by :func:`drills.records.conformance.check.check_submission` (PRODUCT.yaml against
the program's checklist, the JUnit file, every evidence pointer), and with a ledger (5) the line checked is the
source run's, against the source manifest digest and keyid the signed manifest names.

:class:`VerifyReadError` (the CLI's exit 2) means the input could not be read at all: a missing path, a
file that is not a tarball, a directory with no manifest, an unreadable key or ledger file.
"""

from __future__ import annotations

import json
import tarfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from drills.records.evidence.archive import (
    EVIDENCE_DIR,
    FINGERPRINT,
    MANIFEST,
    MANIFEST_PAYLOAD_TYPE,
    MANIFEST_SIGNATURE,
    MANIFEST_TYPE,
    PUBLIC_KEY,
    RECORD,
    RUN_ENVELOPE,
    SIGNER,
    UNLISTED,
    read_tree,
)
from drills.records.evidence.canonical import sha256_hex
from drills.records.evidence.errors import ArchiveError, EnvelopeError, KeyFileError, VerifyReadError
from drills.records.evidence.signing import (
    PAYLOAD_TYPE,
    Envelope,
    keyid_of,
    load_public_key,
    public_key_from_pem,
    verify_envelope,
)
from drills.records.evidence.statements import SCENARIO_PREDICATE_TYPE, TEST_RESULT_PREDICATE_TYPE, Statement

__all__ = ["EnvelopeCheck", "LedgerChain", "Problem", "VerifyReport", "check_chain", "check_files",
           "check_ledger_entry", "read_archive", "verify"]

STATEMENT_TYPES = (SCENARIO_PREDICATE_TYPE, TEST_RESULT_PREDICATE_TYPE)


@dataclass(frozen=True)
class Problem:
    where: str
    """The file relative to the archive root (``report.html``, ``evidence/run.dsse.json``), or
    ``<ledger> line N``."""
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass(frozen=True)
class EnvelopeCheck:
    path: str
    keyid: str
    valid: bool
    reason: str = ""


@dataclass
class VerifyReport:
    source: Path
    kind: str
    """``directory`` or ``tarball``."""
    archive_kind: str = "run"
    """``run`` (a run archive) or the signed manifest's ``kind`` (``conformance``: a conformance submission)."""
    source_run: dict[str, Any] | None = None
    """A conformance submission's source run as its signed manifest names it (``runId``, ``manifestSha256``,
    ``keyid``): the ledger line checked is that run's."""
    run_id: str | None = None
    files: int = 0
    """Files in the archive (manifest and its signature included)."""
    keyid: str | None = None
    key_source: str = ""
    key_given: bool = False
    ephemeral: bool | None = None
    signatures: list[EnvelopeCheck] = field(default_factory=list)
    ledger: Path | None = None
    chain_length: int | None = None
    ledger_line: int | None = None
    verdict: str | None = None
    """The run's verdict as its ``record.json`` says (None when unreadable)."""
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def valid_signatures(self) -> int:
        return sum(1 for s in self.signatures if s.valid)

    def problem(self, where: str, message: str) -> None:
        self.problems.append(Problem(where, message))

    def summary(self) -> str:
        """One line, e.g. ``12 files, 4 signatures (keyid abcd…, ephemeral), chain of 3 runs: VERIFIED``."""
        key = f"keyid {self.keyid[:16]}…" if self.keyid else "no key"
        if self.ephemeral is not None:
            key += ", ephemeral" if self.ephemeral else ", persistent key"
        chain = "ledger not checked" if self.chain_length is None else \
            f"chain of {self.chain_length} run{'s' if self.chain_length != 1 else ''}"
        verdict = "VERIFIED" if self.ok else f"DOES NOT VERIFY ({len(self.problems)} problem" \
                                              f"{'s' if len(self.problems) != 1 else ''})"
        return (f"{self.files} files, {self.valid_signatures} of {len(self.signatures)} signatures valid ({key}), "
                f"{chain}: {verdict}")

    def lines(self) -> list[str]:
        """The full human report: what was checked with which key, every problem, then the summary."""
        what = "" if self.archive_kind == "run" else f" ({self.archive_kind} submission)"
        out = [f"{self.kind} {self.source}{what}" + (f" (run {self.run_id})" if self.run_id else "")]
        out.append(f"key: {self.key_source}")
        if self.key_given:
            out.append("  signatures made with this key: the archive is intact and was sealed by whoever holds "
                       "its private key")
        elif self.ephemeral:
            out.append("  the archive's own EPHEMERAL key: this proves integrity (nothing changed since sealing), "
                       "not identity (anyone can make such a key); pass --key to check who sealed it")
        else:
            out.append("  the archive's own key: this proves integrity, not identity; pass --key PUB with the "
                       "signer's published key to check who sealed it")
        for s in self.signatures:
            out.append(f"  {'ok ' if s.valid else 'BAD'} {s.path}: keyid {s.keyid[:16] or '(none)'}…"
                       + (f" ({s.reason})" if s.reason else ""))
        if self.ledger is not None:
            where = f", line {self.ledger_line}" if self.ledger_line else ""
            count = self.chain_length or 0
            out.append(f"ledger: {self.ledger} ({count} line{'s' if count != 1 else ''}{where})")
        else:
            out.append("ledger: not checked (pass --ledger reports/ledger.jsonl to check the chain)")
        out += [f"note: {n}" for n in self.notes]
        out += [f"FAIL {p}" for p in self.problems]
        out.append(self.summary())
        return out


# --- reading ------------------------------------------------------------------------------------------------


def _read_tarball(path: Path, report: VerifyReport) -> dict[str, bytes]:
    try:
        tar = tarfile.open(path, mode="r:*")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise VerifyReadError(f"{path}: not a run directory or a .tar.gz archive ({exc})") from None
    raw: dict[str, bytes] = {}
    try:
        with tar:
            for member in tar:
                name = member.name
                parts = PurePosixPath(name).parts
                if name.startswith("/") or ".." in parts:
                    report.problem(name, "unsafe path in the tarball (absolute or with ..)")
                    continue
                if member.isdir():
                    continue
                if not member.isfile():
                    report.problem(name, "not a regular file (a link or device) in the tarball")
                    continue
                if name in raw:
                    report.problem(name, "appears twice in the tarball")
                    continue
                handle = tar.extractfile(member)
                raw[name] = handle.read() if handle is not None else b""
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise VerifyReadError(f"{path}: the tarball is corrupt ({exc})") from None
    tops = {PurePosixPath(n).parts[0] for n in raw}
    if len(tops) == 1 and all(len(PurePosixPath(n).parts) > 1 for n in raw):
        top = tops.pop()
        report.run_id = top
        return {PurePosixPath(n).relative_to(top).as_posix(): d for n, d in raw.items()}
    return raw


def _read(path: Path, report: VerifyReport) -> dict[str, bytes]:
    if not path.exists():
        raise VerifyReadError(f"{path}: no such file or directory")
    if path.is_dir():
        try:
            files, irregular = read_tree(path)
        except ArchiveError as exc:
            raise VerifyReadError(f"{path}: {exc}") from None
        for rel in irregular:
            report.problem(rel, "not a regular file (a symlink?); an archive holds plain files only")
        return files
    report.kind = "tarball"
    return _read_tarball(path, report)


def _json(data: bytes, where: str, report: VerifyReport) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        report.problem(where, f"not valid JSON ({exc})")
        return None


# --- the checks ---------------------------------------------------------------------------------------------


def _resolve_key(files: dict[str, bytes], key: Path | None, report: VerifyReport) -> Ed25519PublicKey | None:
    archive_key: Ed25519PublicKey | None = None
    if PUBLIC_KEY in files:
        try:
            archive_key = public_key_from_pem(files[PUBLIC_KEY], PUBLIC_KEY)
        except KeyFileError as exc:
            report.problem(PUBLIC_KEY, str(exc).removeprefix(f"{PUBLIC_KEY}: "))
    else:
        report.problem(PUBLIC_KEY, "missing")
    if key is not None:
        try:
            given = load_public_key(key)
        except KeyFileError as exc:
            raise VerifyReadError(str(exc)) from None
        report.key_given, report.keyid = True, keyid_of(given)
        report.key_source = f"the given key {key} (keyid {report.keyid})"
        if archive_key is not None and keyid_of(archive_key) != report.keyid:
            report.problem(PUBLIC_KEY, f"keyid {keyid_of(archive_key)[:16]}… is not the given key's "
                                       f"{report.keyid[:16]}…: sealed by another key")
        return given
    if archive_key is None:
        report.key_source = "none: the archive's public-key.pem is missing or unreadable and no --key was given"
        return None
    report.keyid = keyid_of(archive_key)
    report.key_source = f"the archive's own {PUBLIC_KEY} (keyid {report.keyid})"
    return archive_key


def _check_signer(files: dict[str, bytes], report: VerifyReport) -> None:
    if SIGNER not in files:
        return  # reported by the manifest check if it was listed
    info = _json(files[SIGNER], SIGNER, report)
    if not isinstance(info, dict):
        return
    if isinstance(info.get("ephemeral"), bool):
        report.ephemeral = info["ephemeral"]
    archive_keyid = None
    if PUBLIC_KEY in files:
        try:
            archive_keyid = keyid_of(public_key_from_pem(files[PUBLIC_KEY], PUBLIC_KEY))
        except KeyFileError:
            pass
    if archive_keyid and info.get("keyid") != archive_keyid:
        report.problem(SIGNER, f"keyid {str(info.get('keyid'))[:16]}… is not public-key.pem's {archive_keyid[:16]}…")
    if info.get("algorithm") != "ed25519":
        report.problem(SIGNER, f"algorithm {info.get('algorithm')!r}, expected ed25519")


def _check_envelope(path: str, data: bytes, expected_type: str, key: Ed25519PublicKey | None,
                    report: VerifyReport, *, witnessed: bool = False) -> Envelope | None:
    """Check an envelope's signatures against ``key``.  ``witnessed`` (the manifest's envelope): once the sealing
    key has signed, a signature by another key is a witness's (``firedrill witness``), noted and left to
    ``--signer``; without the sealing key's signature every other one is still a problem."""
    try:
        envelope = Envelope.from_json(data, path)
    except EnvelopeError as exc:
        report.problem(path, str(exc).removeprefix(f"{path}: "))
        report.signatures.append(EnvelopeCheck(path, "", False, "unreadable envelope"))
        return None
    if envelope.payload_type != expected_type:
        report.problem(path, f"payloadType {envelope.payload_type!r}, expected {expected_type!r}")
    if key is None:
        for sig in envelope.signatures or ():
            report.signatures.append(EnvelopeCheck(path, sig.keyid, False, "no key to check it with"))
        report.problem(path, "signature not checked: no key")
        return envelope
    checks = verify_envelope(envelope, key)
    sealer = keyid_of(key)
    if witnessed and any(c.keyid == sealer for c in checks):
        for c in checks:
            if c.keyid != sealer:
                report.notes.append(f"{path} is also signed by keyid {c.keyid[:16] or '(none)'}… (a witness; "
                                    "check it with --signer PUB)")
        checks = [c for c in checks if c.keyid == sealer]
    for c in checks:
        report.signatures.append(EnvelopeCheck(path, c.keyid, c.valid, c.reason))
        if not c.valid:
            report.problem(path, f"signature by keyid {c.keyid[:16] or '(none)'}… is not valid: {c.reason}")
    return envelope


@dataclass(frozen=True)
class RequiredSigner:
    """A ``--signer`` key, read once for every check that needs it."""

    path: Path
    key: Ed25519PublicKey
    keyid: str


def _read_signers(signers: Sequence[Path]) -> list[RequiredSigner]:
    out: list[RequiredSigner] = []
    for path in signers:
        try:
            key = load_public_key(path)
        except KeyFileError as exc:
            raise VerifyReadError(str(exc)) from None
        out.append(RequiredSigner(path, key, keyid_of(key)))
    return out


def _check_required_signers(files: dict[str, bytes], signers: Sequence[RequiredSigner], report: VerifyReport) -> None:
    """Each of ``signers`` must have a valid signature on the manifest; name the one missing or wrong."""
    if not signers:
        return
    envelope: Envelope | None = None
    try:
        envelope = Envelope.from_json(files[MANIFEST_SIGNATURE], MANIFEST_SIGNATURE) \
            if MANIFEST_SIGNATURE in files else None
    except EnvelopeError:
        pass  # already a problem of the manifest check
    for signer in signers:
        who = f"the required signer {signer.path} (keyid {signer.keyid[:16]}…)"
        sigs = () if envelope is None else tuple(s for s in envelope.signatures if s.keyid in (signer.keyid, ""))
        valid = envelope is not None and bool(sigs) and any(
            c.valid for c in verify_envelope(Envelope(envelope.payload_type, envelope.payload, sigs), signer.key))
        if valid:
            report.signatures.append(EnvelopeCheck(MANIFEST_SIGNATURE, signer.keyid, True, f"signed by {signer.path}"))
        elif any(s.keyid == signer.keyid for s in sigs):
            report.signatures.append(EnvelopeCheck(MANIFEST_SIGNATURE, signer.keyid, False,
                                                   f"claims {signer.path}'s keyid"))
            report.problem(MANIFEST_SIGNATURE, f"the signature of {who} does not match the manifest")
        else:
            report.problem(MANIFEST_SIGNATURE, f"no signature by {who}: it has not signed this run "
                                               "(a witness signs with `firedrill witness RUN --key KEY`)")


def _check_contract(pinned: Any, signers: Sequence[RequiredSigner], report: VerifyReport) -> None:
    """The signed record's contract signers (``signers.yaml``): with --signer, one key per pinned party, and no
    key the contract does not name; without, a note saying whose signatures to check."""
    pins = [p for p in pinned if isinstance(p, dict) and isinstance(p.get("keyid"), str)] \
        if isinstance(pinned, list) else []
    if not pins:
        return
    names = ", ".join(f"{p.get('name', '?')} (keyid {p['keyid'][:16]}…)" for p in pins)
    if not signers:
        report.notes.append(f"the contract requires signatures by {names}: check them with --signer PUB for each")
        return
    given = {s.keyid: s.path for s in signers}
    for pin in pins:
        if pin["keyid"] not in given:
            report.problem(RECORD, f"the contract requires a signature by {pin.get('name', '?')} (keyid "
                                   f"{pin['keyid'][:16]}…): pass its public key with --signer")
    for keyid, path in given.items():
        if keyid not in {p["keyid"] for p in pins}:
            report.problem(RECORD, f"--signer {path} (keyid {keyid[:16]}…) is not a signer the contract names "
                                   f"({names})")


def _check_manifest(files: dict[str, bytes], key: Ed25519PublicKey | None,
                    report: VerifyReport) -> dict[str, Any] | None:
    """Check the manifest and every file it lists; return the manifest read (the signed one when its signature
    holds), or None when there is none to read."""
    signed: bytes | None = None
    signed_ok = False
    if MANIFEST_SIGNATURE not in files:
        report.problem(MANIFEST_SIGNATURE, "missing: the manifest is not signed")
    else:
        envelope = _check_envelope(MANIFEST_SIGNATURE, files[MANIFEST_SIGNATURE], MANIFEST_PAYLOAD_TYPE, key, report,
                                   witnessed=True)
        if envelope is not None:
            signed = envelope.payload
            checks = [c for c in report.signatures if c.path == MANIFEST_SIGNATURE]
            signed_ok = bool(checks) and all(c.valid for c in checks)
            if MANIFEST in files and files[MANIFEST] != signed:
                report.problem(MANIFEST, f"differs from the manifest signed in {MANIFEST_SIGNATURE}")
    if MANIFEST not in files:
        report.problem(MANIFEST, "missing")
    # the signed listing when its signature holds, else whatever manifest.json says
    listing = signed if signed is not None and signed_ok else files.get(MANIFEST, signed)
    if listing is None:
        return None
    manifest = _json(listing, MANIFEST, report)
    if not isinstance(manifest, dict) or manifest.get("_type") != MANIFEST_TYPE \
            or not isinstance(manifest.get("files"), list):
        if manifest is not None:
            report.problem(MANIFEST, f"not a Firedrill manifest ({MANIFEST_TYPE})")
        return None
    if isinstance(manifest.get("runId"), str):
        report.run_id = manifest["runId"]
    listed: set[str] = set()
    for i, entry in enumerate(manifest["files"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) \
                or not isinstance(entry.get("sha256"), str) or not isinstance(entry.get("size"), int):
            report.problem(MANIFEST, f"entry {i} needs path, sha256 and size")
            continue
        path = entry["path"]
        if path in listed:
            report.problem(MANIFEST, f"lists {path} twice")
        listed.add(path)
        if path not in files:
            report.problem(path, "listed in manifest.json but missing")
            continue
        data = files[path]
        if len(data) != entry["size"]:
            report.problem(path, f"size {len(data)} bytes, manifest.json says {entry['size']}")
        if sha256_hex(data) != entry["sha256"]:
            report.problem(path, f"SHA-256 {sha256_hex(data)[:16]}… does not match manifest.json's "
                                 f"{entry['sha256'][:16]}…: the file changed after sealing")
    for path in files:
        if path not in listed and path not in UNLISTED:
            report.problem(path, "not listed in manifest.json: added after sealing")
    return manifest


def _check_statements(files: dict[str, bytes], key: Ed25519PublicKey | None, report: VerifyReport, *,
                      require_run: bool = True) -> None:
    if require_run and RUN_ENVELOPE not in files:
        report.problem(RUN_ENVELOPE, "missing: no run statement")
    for path in sorted(p for p in files if p.startswith(f"{EVIDENCE_DIR}/") and p.endswith(".dsse.json")):
        envelope = _check_envelope(path, files[path], PAYLOAD_TYPE, key, report)
        if envelope is None:
            continue
        try:
            statement = Statement.from_bytes(envelope.payload, path)
        except EnvelopeError as exc:
            report.problem(path, str(exc).removeprefix(f"{path}: "))
            continue
        if statement.predicate_type not in STATEMENT_TYPES:
            report.problem(path, f"unknown predicateType {statement.predicate_type!r}")
        elif path == RUN_ENVELOPE and statement.predicate_type != TEST_RESULT_PREDICATE_TYPE:
            report.problem(path, f"the run statement's predicateType is {statement.predicate_type!r}")
        for subject in statement.subject:
            if subject.name not in files:
                report.problem(path, f"subject {subject.name} is not in the archive")
            elif sha256_hex(files[subject.name]) != subject.sha256:
                report.problem(path, f"subject {subject.name}: the file's SHA-256 "
                                     f"{sha256_hex(files[subject.name])[:16]}… is not the signed "
                                     f"{subject.sha256[:16]}…")


def _record_facts(files: dict[str, bytes], report: VerifyReport) -> dict[str, Any]:
    if RECORD not in files:
        return {}
    record = _json(files[RECORD], RECORD, report)
    if not isinstance(record, dict):
        return {}
    fingerprint_digest = (record.get("target") or {}).get("fingerprint_digest")
    if FINGERPRINT in files and fingerprint_digest and sha256_hex(files[FINGERPRINT]) != fingerprint_digest:
        report.notes.append(f"{FINGERPRINT} hashes to {sha256_hex(files[FINGERPRINT])[:16]}…, not the record's "
                            f"fingerprint_digest {str(fingerprint_digest)[:16]}… (both are signed as they are)")
    return record


@dataclass
class LedgerChain:
    """A ledger read once: its lines as JSON objects and every broken link, for one run or many."""

    path: Path
    length: int
    """Lines in the file."""
    entries: list[tuple[int, dict[str, Any]]]
    """(1-based line number, the line's object), for every line that is a JSON object."""
    problems: list[Problem]
    """Broken links, unreadable lines, a missing final newline; each names its line."""


def check_chain(ledger: Path) -> LedgerChain:
    """Read ``ledger`` and check every line's ``prev`` link.  Raises :class:`VerifyReadError` when the file
    cannot be read."""
    try:
        data = ledger.read_bytes()
    except OSError as exc:
        raise VerifyReadError(f"{ledger}: cannot read the ledger ({exc.strerror or exc})") from None
    lines = data.splitlines(keepends=True)
    chain = LedgerChain(ledger, len(lines), [], [])
    if lines and not data.endswith(b"\n"):
        chain.problems.append(Problem(f"{ledger} line {len(lines)}", "no newline at the end (an interrupted write?)"))
    for n, line in enumerate(lines, 1):
        where = f"{ledger} line {n}"
        try:
            entry = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            chain.problems.append(Problem(where, "not valid JSON (the line was changed)"))
            continue
        if not isinstance(entry, dict):
            chain.problems.append(Problem(where, "not a JSON object"))
            continue
        chain.entries.append((n, entry))
        expected = None if n == 1 else sha256_hex(lines[n - 2])
        prev = entry.get("prev")
        if prev != expected:
            if n == 1:
                chain.problems.append(Problem(where, f"prev is {str(prev)[:16]}…, but the first line's prev must "
                                                     "be null: lines before it were deleted"))
            else:
                chain.problems.append(Problem(
                    where, f"prev {str(prev)[:16]}… is not the SHA-256 of line {n - 1} ({str(expected)[:16]}…): "
                           f"a line was deleted, inserted, reordered or changed at or before line {n - 1}"))
    return chain


def check_ledger_entry(chain: LedgerChain, files: dict[str, bytes], record: dict[str, Any],
                       report: VerifyReport) -> None:
    """Check that the run of ``report`` has a line in ``chain`` whose manifest digest, keyid and verdict match
    the archive (``record``: its ``record.json``, or ``{"verdict": ...}``)."""
    ledger = chain.path
    run_id = report.run_id or record.get("run_id")
    mine = [(n, e) for n, e in chain.entries if e.get("run_id") == run_id]
    if not mine:
        report.problem(str(ledger), f"no line for run {run_id}")
        return
    n, entry = mine[-1]
    report.ledger_line = n
    where = f"{ledger} line {n}"
    if report.source_run is not None:  # a conformance submission: its source run's line
        for field_name, ours in (("manifest_sha256", "manifestSha256"), ("keyid", "keyid")):
            if entry.get(field_name) != report.source_run.get(ours):
                report.problem(where, f"{field_name} {str(entry.get(field_name))[:16]}… is not the source run's "
                                      f"{str(report.source_run.get(ours))[:16]}… that the signed manifest names")
        return
    if MANIFEST in files and entry.get("manifest_sha256") != sha256_hex(files[MANIFEST]):
        report.problem(where, f"manifest_sha256 {str(entry.get('manifest_sha256'))[:16]}… is not the SHA-256 of "
                              f"the archive's manifest.json ({sha256_hex(files[MANIFEST])[:16]}…)")
    if report.keyid and entry.get("keyid") != report.keyid:
        report.problem(where, f"keyid {str(entry.get('keyid'))[:16]}… is not the verifying key's "
                              f"{report.keyid[:16]}…")
    if record.get("verdict") is not None and entry.get("verdict") != record.get("verdict"):
        report.problem(where, f"verdict {entry.get('verdict')!r} is not record.json's {record.get('verdict')!r}")


def _check_ledger(ledger: Path, files: dict[str, bytes], record: dict[str, Any], report: VerifyReport) -> None:
    chain = check_chain(ledger)
    report.ledger = ledger
    report.chain_length = chain.length
    if not chain.length:
        report.problem(str(ledger), "empty: the run is not in it")
        return
    report.problems += chain.problems
    check_ledger_entry(chain, files, record, report)


def verify(path: Path, key: Path | None = None, ledger: Path | None = None,
           signers: Sequence[Path] = ()) -> VerifyReport:
    """Verify a run directory or its ``.tar.gz`` (see the module docstring).  Never raises on a mismatch:
    each goes into :attr:`VerifyReport.problems`; raises :class:`VerifyReadError` only when the input cannot
    be read at all.  ``signers``: public keys each of which must have signed the manifest (the vendor's, the
    customer's as a witness: ``firedrill witness``)."""
    report = VerifyReport(source=path, kind="directory")
    return check_files(read_archive(path, report), report, key, ledger, signers)


def read_archive(path: Path, report: VerifyReport) -> dict[str, bytes]:
    """Every file of a run directory or ``.tar.gz`` as ``{relative path: bytes}``; what cannot be an archive
    member (a symlink, an unsafe tar path) goes into ``report``.  Raises :class:`VerifyReadError` when ``path``
    cannot be read at all.  With :func:`check_files`, this is :func:`verify` for a caller that reads the
    archive's files afterwards (``firedrill trend``) without reading them twice."""
    return _read(path, report)


def check_files(files: dict[str, bytes], report: VerifyReport, key: Path | None = None,
                ledger: Path | None = None, signers: Sequence[Path] = ()) -> VerifyReport:
    """The checks of :func:`verify` on files already read by :func:`read_archive` into ``report``."""
    path = report.source
    if MANIFEST not in files and MANIFEST_SIGNATURE not in files:
        raise VerifyReadError(f"{path}: not a Firedrill archive (no {MANIFEST} or {MANIFEST_SIGNATURE})")
    report.files = len(files)
    public_key = _resolve_key(files, key, report)
    required = _read_signers(signers)
    _check_signer(files, report)
    manifest = _check_manifest(files, public_key, report) or {}
    _check_required_signers(files, required, report)
    if isinstance(manifest.get("kind"), str):
        report.archive_kind = manifest["kind"]
    if report.archive_kind == "run":
        _check_statements(files, public_key, report)
    elif report.archive_kind == "conformance":
        from drills.records.conformance.check import check_submission

        _check_statements(files, public_key, report, require_run=False)
        check_submission(files, manifest, report.problem)
        source = (manifest.get("conformance") or {}).get("source")
        report.source_run = source if isinstance(source, dict) else {}
    else:
        report.problem(MANIFEST, f"kind {report.archive_kind!r} is not one this Firedrill knows (a run archive has "
                                 "no kind; a conformance submission has kind 'conformance')")
    record = _record_facts(files, report)
    if report.run_id is None and isinstance(record.get("run_id"), str):
        report.run_id = record["run_id"]
    if isinstance(record.get("verdict"), str):
        report.verdict = record["verdict"]
    _check_contract(record.get("signers"), required, report)
    if ledger is not None:
        _check_ledger(ledger, files, record, report)
    return report
