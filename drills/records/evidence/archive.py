"""Sealing a run directory into a signed archive, appending it to the ledger, and packing it as a tarball.

After ``firedrill run`` has written ``junit.xml``, ``allure-results/`` and ``report.html`` into
``reports/<run-id>/``, :func:`seal` adds::

    record.json                  the RunRecord, canonical JSON
    timeline.jsonl               the observations, one canonical JSON object a line
    fingerprint.json             the target fingerprint, canonical JSON (hashes to its fingerprint_digest)
    public-key.pem               the signer's public key (SubjectPublicKeyInfo PEM)
    signer.json                  {"algorithm": "ed25519", "keyid": ..., "ephemeral": ..., ...}
    evidence/<slug>.dsse.json    one signed in-toto statement per scenario (Firedrill scenario predicate)
    evidence/run.dsse.json       the signed in-toto test-result statement for the run
    manifest.json                path, SHA-256 and size of every other file in the directory
    manifest.dsse.json           a DSSE envelope whose payload is exactly manifest.json's bytes

and appends one line to the ledger (``reports/ledger.jsonl``)::

    {"keyid":...,"manifest_sha256":...,"prev":<SHA-256 of the previous line's bytes, newline included, or null>,
     "run_id":...,"time":...,"verdict":...}

Nothing is written unless everything can be: the secrets given to :func:`seal` are looked for in every file
(the caller's and ours, and the decoded envelope payloads) first, and a match refuses the seal, naming the
file (never the secret).
"""

from __future__ import annotations

import fcntl
import gzip
import html
import io
import json
import os
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from drills.records.evidence.canonical import canonical_json, sha256_hex
from drills.records.evidence.errors import ArchiveError, SecretLeakError
from drills.records.evidence.record import RunRecord
from drills.records.evidence.signing import PAYLOAD_TYPE, Signer
from drills.records.evidence.statements import (
    ALLURE_DIR,
    ARTIFACTS,
    Subject,
    run_statement,
    scenario_statement,
    timeline_jsonl,
)

__all__ = [
    "EVIDENCE_DIR",
    "FINGERPRINT",
    "LEDGER_NAME",
    "MANIFEST",
    "MANIFEST_PAYLOAD_TYPE",
    "MANIFEST_SIGNATURE",
    "MANIFEST_TYPE",
    "PUBLIC_KEY",
    "RECORD",
    "RUN_ENVELOPE",
    "SIGNER",
    "TIMELINE",
    "SealResult",
    "append_ledger",
    "make_tarball",
    "read_tree",
    "seal",
]

RECORD = "record.json"
TIMELINE = "timeline.jsonl"
FINGERPRINT = "fingerprint.json"
PUBLIC_KEY = "public-key.pem"
SIGNER = "signer.json"
EVIDENCE_DIR = "evidence"
RUN_ENVELOPE = f"{EVIDENCE_DIR}/run.dsse.json"
MANIFEST = "manifest.json"
MANIFEST_SIGNATURE = "manifest.dsse.json"
MANIFEST_TYPE = "https://firedrill.dev/manifest/v0.1"
MANIFEST_PAYLOAD_TYPE = "application/vnd.firedrill.manifest+json"
LEDGER_NAME = "ledger.jsonl"
"""The ledger's file name, beside the run directories: ``reports/ledger.jsonl``."""

UNLISTED = frozenset({MANIFEST, MANIFEST_SIGNATURE})
"""The only files of an archive that the manifest does not list (itself and its signature)."""


@dataclass(frozen=True)
class SealResult:
    run_dir: Path
    manifest_sha256: str
    keyid: str
    ephemeral: bool
    files: tuple[str, ...]
    """Every file of the archive, relative to ``run_dir``, manifest and its signature included."""
    envelopes: tuple[str, ...]
    """The DSSE envelopes written: the statements' and the manifest's."""
    ledger_path: Path
    ledger_line: int
    """1-based line number of this run in the ledger."""


def read_tree(root: Path) -> tuple[dict[str, bytes], list[str]]:
    """Every regular file under ``root`` as ``{relative POSIX path: bytes}`` (sorted), and the relative paths
    of anything else found there (symlinks, devices, sockets), which an archive must not hold."""
    files: dict[str, bytes] = {}
    irregular: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in list(dirnames):
            if (base / name).is_symlink():
                irregular.append((base / name).relative_to(root).as_posix())
                dirnames.remove(name)
        dirnames.sort()
        for name in sorted(filenames):
            path = base / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink() or not path.is_file():
                irregular.append(rel)
                continue
            try:
                files[rel] = path.read_bytes()
            except OSError as exc:
                raise ArchiveError(f"{rel}: cannot read ({exc.strerror or exc})") from None
    return dict(sorted(files.items())), sorted(irregular)


def _secret_forms(secret: str) -> list[tuple[bytes, str]]:
    """The ways a secret string could appear in the files: as is, JSON-escaped, HTML/XML-escaped."""
    forms = [(secret, ""), (json.dumps(secret, ensure_ascii=False)[1:-1], " (JSON-escaped)"),
             (json.dumps(secret)[1:-1], " (JSON-escaped)"), (html.escape(secret), " (HTML-escaped)"),
             (html.escape(secret, quote=False), " (HTML-escaped)")]
    seen: set[bytes] = set()
    out: list[tuple[bytes, str]] = []
    for text, how in forms:
        data = text.encode("utf-8")
        if data not in seen:
            seen.add(data)
            out.append((data, how))
    return out


def _scan_secrets(blobs: Iterable[tuple[str, bytes]], secrets: Iterable[str | bytes], run_dir: Path) -> None:
    wanted: list[tuple[int, bytes, str]] = []
    for i, secret in enumerate(secrets, 1):
        text = secret.decode("utf-8", "replace") if isinstance(secret, bytes) else secret
        if not text.strip():
            continue
        if isinstance(secret, bytes):
            wanted.append((i, secret, ""))
        wanted += [(i, data, how) for data, how in _secret_forms(text)]
    if not wanted:
        return
    hits: dict[str, list[str]] = {}
    for where, data in blobs:
        for i, needle, how in wanted:
            if needle in data:
                hits.setdefault(where, []).append(f"secret #{i}{how}")
    if hits:
        listing = "; ".join(f"{where} ({', '.join(dict.fromkeys(found))})" for where, found in hits.items())
        raise SecretLeakError(
            f"a secret given to seal (a credential of the target) appears in {listing}; refusing to seal "
            f"{run_dir}. The secrets are not printed; remove them from those files and check how they got "
            "there.", files=tuple(hits))


def _unique_slugs(slugs: Iterable[str]) -> list[str]:
    used = {"run"}
    out: list[str] = []
    for slug in slugs:
        base = slug or "scenario"
        name, n = base, 2
        while name in used:
            name, n = f"{base}-{n}", n + 1
        used.add(name)
        out.append(name)
    return out


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def seal(run_dir: Path, record: RunRecord, signer: Signer, ledger_path: Path, *,
         secrets: Iterable[str | bytes] = (), url: str | None = None, now: datetime | None = None) -> SealResult:
    """Seal ``run_dir`` (see the module docstring for what is written) and append it to ``ledger_path``.

    ``secrets``: strings that must not appear in any file (the kubeconfig's token, client key, password):
    if one does, :class:`SecretLeakError` names the file and nothing is written.  ``url`` goes into the
    test-result predicate.  ``now`` (default: the clock) stamps the manifest and the ledger line.
    Raises :class:`ArchiveError` if ``run_dir`` is not a directory, is already sealed, or holds a symlink.
    """
    if not run_dir.is_dir():
        raise ArchiveError(f"{run_dir}: not a directory; nothing to seal")
    ours_names = (RECORD, TIMELINE, FINGERPRINT, PUBLIC_KEY, SIGNER, EVIDENCE_DIR, MANIFEST, MANIFEST_SIGNATURE)
    for name in ours_names:
        if (run_dir / name).exists() or (run_dir / name).is_symlink():
            raise ArchiveError(f"{run_dir / name} already exists: {run_dir} is sealed already (or holds a file "
                               "seal writes); seal a fresh run directory")
    existing, irregular = read_tree(run_dir)
    if irregular:
        raise ArchiveError(f"{irregular[0]}: not a regular file (a symlink?) in {run_dir}; an archive holds "
                           "plain files only")
    moment = _rfc3339(now or datetime.now(UTC))

    ours: dict[str, bytes] = {
        RECORD: canonical_json(record.to_dict()),
        TIMELINE: timeline_jsonl(record.timeline),
        FINGERPRINT: canonical_json(dict(record.target.fingerprint)),
        PUBLIC_KEY: signer.public_pem,
        SIGNER: canonical_json(signer.info()),
    }
    tree = {**existing, **ours}
    subjects = [Subject(name, sha256_hex(tree[name])) for name in ARTIFACTS if name in tree]
    subjects += [Subject(name, sha256_hex(data)) for name, data in sorted(tree.items())
                 if name.startswith(f"{ALLURE_DIR}/")]
    timeline_sha = sha256_hex(ours[TIMELINE])

    payloads: list[tuple[str, bytes]] = []
    for slug, scenario in zip(_unique_slugs(s.slug for s in record.scenarios), record.scenarios):
        statement = scenario_statement(record, scenario, subjects, timeline_sha256=timeline_sha)
        payloads.append((f"{EVIDENCE_DIR}/{slug}.dsse.json", statement.to_bytes()))
    payloads.append((RUN_ENVELOPE, run_statement(record, subjects, url=url).to_bytes()))
    for name, payload in payloads:
        ours[name] = signer.sign(PAYLOAD_TYPE, payload).to_json()
    tree = {**existing, **ours}

    manifest = canonical_json({
        "_type": MANIFEST_TYPE, "runId": record.run_id, "sealed": moment,
        "files": [{"path": name, "sha256": sha256_hex(data), "size": len(data)} for name, data in sorted(tree.items())],
    })
    manifest_envelope = signer.sign(MANIFEST_PAYLOAD_TYPE, manifest).to_json()
    _scan_secrets([*tree.items(), *((f"{name} (its decoded payload)", p) for name, p in payloads),
                   (MANIFEST, manifest)], secrets, run_dir)

    ours[MANIFEST] = manifest
    ours[MANIFEST_SIGNATURE] = manifest_envelope
    for name, data in ours.items():
        path = run_dir / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        except OSError as exc:
            raise ArchiveError(f"{path}: cannot write ({exc.strerror or exc}); the archive is incomplete") from None
    manifest_sha = sha256_hex(manifest)
    line_no = append_ledger(ledger_path, {"run_id": record.run_id, "time": moment, "manifest_sha256": manifest_sha,
                                          "verdict": record.verdict, "keyid": signer.keyid})
    return SealResult(run_dir=run_dir, manifest_sha256=manifest_sha, keyid=signer.keyid,
                      ephemeral=signer.ephemeral, files=tuple(sorted({*tree, MANIFEST, MANIFEST_SIGNATURE})),
                      envelopes=(*(n for n, _ in payloads), MANIFEST_SIGNATURE),
                      ledger_path=ledger_path, ledger_line=line_no)


def append_ledger(ledger_path: Path, entry: Mapping[str, Any]) -> int:
    """Append ``entry`` plus ``prev`` (SHA-256 of the previous line's bytes, its newline included; null for
    the first line) as one canonical JSON line, under an exclusive lock; return its 1-based line number."""
    try:
        ledger_path.parent.mkdir(parents=True, exist_ok=True)
        with open(ledger_path, "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            data = f.read()
            if data and not data.endswith(b"\n"):
                raise ArchiveError(f"{ledger_path}: the last line has no newline (an interrupted write?); "
                                   "repair the ledger, then seal again")
            lines = data.splitlines(keepends=True)
            prev = sha256_hex(lines[-1]) if lines else None
            f.write(canonical_json({**entry, "prev": prev}) + b"\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise ArchiveError(f"{ledger_path}: cannot append to the ledger ({exc.strerror or exc}); "
                           "the archive is sealed but not in the ledger") from None
    return len(lines) + 1


def _sealed_epoch(manifest: bytes | None) -> int:
    try:
        sealed = json.loads(manifest or b"{}")["sealed"]
        return int(datetime.fromisoformat(sealed.replace("Z", "+00:00")).timestamp())
    except (ValueError, KeyError, TypeError, AttributeError):
        return 0


def make_tarball(run_dir: Path, out_dir: Path | None = None) -> Path:
    """Pack a sealed ``run_dir`` as ``<out_dir or its parent>/<run-id>.tar.gz`` and return the path.

    Deterministic: members sorted, every path under ``<run-id>/`` (never absolute), owner 0/0 without names,
    modes 0644/0755, every timestamp the manifest's ``sealed`` time, gzip header without name or time; the
    same archive always packs to the same bytes.  The ledger stays outside: verify with ``--ledger``."""
    if not (run_dir / MANIFEST).is_file():
        raise ArchiveError(f"{run_dir}: no {MANIFEST}; seal the run before packing it")
    files, irregular = read_tree(run_dir)
    if irregular:
        raise ArchiveError(f"{irregular[0]}: not a regular file in {run_dir}; an archive holds plain files only")
    run_id = run_dir.resolve().name
    mtime = _sealed_epoch(files.get(MANIFEST))
    dirs = sorted({"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)})
    members = sorted([(d, None) for d in dirs] + list(files.items()), key=lambda m: m[0])
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [(run_id, None), *members]:
            info = tarfile.TarInfo(name if name == run_id else f"{run_id}/{name}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    target = (out_dir or run_dir.resolve().parent) / f"{run_id}.tar.gz"
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(buffer.getvalue())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ArchiveError(f"{target}: cannot write the tarball ({exc.strerror or exc})") from None
    return target
