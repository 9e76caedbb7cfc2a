"""``firedrill conformance RUN --version v1.37 OUT/``: a verified run archive in, a signed CNCF Kubernetes AI
Conformance submission folder out.

OUT is the program's ``v<X.Y>/<dir>/`` folder (its name is ``<dir>``, the product's short name, which the
evidence pointers in PRODUCT.yaml carry). It holds::

    PRODUCT.yaml          the self-assessment: each requirement's status, evidence and notes (artifacts.py)
    junit.xml             one test case per tagged scenario run, pointing at its signed statement
    e2e.log               the same, as go test -v prints it
    results.json          the same, as go test -json's events
    public-key.pem        the signer's public key
    signer.json           who signed, as the run archive has it
    manifest.json         path, SHA-256 and size of every file above, ``"kind": "conformance"`` and the source
                          run (id, manifest SHA-256, keyid)
    manifest.dsse.json    a DSSE envelope over manifest.json's bytes

``firedrill verify OUT/`` checks the signature and every digest as for a run archive, then the submission itself
(:mod:`drills.records.conformance.check`). Nothing is written unless the RUN verifies, is an honest run (no defect from
the zoo), and OUT is new or empty.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from enum import IntEnum
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from drills import __version__
from drills.records.conformance.artifacts import (
    E2E_LOG,
    JUNIT,
    PRODUCT,
    RESULTS,
    Source,
    e2e_log,
    junit_xml,
    product_yaml,
    results_json,
)
from drills.records.conformance.errors import ConformanceError, ConformanceUsageError, RunNotVerifiedError
from drills.records.conformance.judge import Judgement, ScenarioRun, judge
from drills.records.conformance.versions import METADATA_FIELDS, Checklist, checklist
from drills.records.evidence.archive import (
    EVIDENCE_DIR,
    MANIFEST,
    MANIFEST_PAYLOAD_TYPE,
    MANIFEST_SIGNATURE,
    MANIFEST_TYPE,
    PUBLIC_KEY,
    RECORD,
    SIGNER,
    read_tree,
)
from drills.records.evidence.canonical import canonical_json, sha256_hex
from drills.records.evidence.errors import ArchiveError, EnvelopeError, EvidenceError, VerifyReadError
from drills.records.evidence.signing import Envelope, Signer
from drills.records.evidence.statements import SCENARIO_PREDICATE_TYPE, Statement
from drills.records.evidence.verify import verify

__all__ = ["CONFORMANCE_KIND", "ConformanceExit", "Submission", "load_metadata", "read_run", "run_conformance",
           "write_submission"]

CONFORMANCE_KIND = "conformance"
"""manifest.json's ``kind`` for a conformance submission folder (a run archive's manifest has no ``kind``)."""


@dataclass(frozen=True)
class Submission:
    out: Path
    checklist: Checklist
    judgement: Judgement
    source: Source
    files: tuple[str, ...]
    keyid: str
    ephemeral: bool


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def load_metadata(path: Path | None, version: str) -> dict[str, str]:
    """The vendor's PRODUCT.yaml metadata from a YAML mapping (docs/CONFORMANCE.md); ``{}`` without a file."""
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConformanceUsageError(f"--metadata {path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ConformanceUsageError(f"--metadata {path}: not YAML ({exc})") from None
    if isinstance(data, dict) and isinstance(data.get("metadata"), dict):
        data = data["metadata"]  # a PRODUCT.yaml-shaped file works too
    if not isinstance(data, dict):
        raise ConformanceUsageError(f"--metadata {path}: expected a mapping of PRODUCT.yaml metadata fields "
                                    f"({', '.join(n for n, _, _ in METADATA_FIELDS)})")
    known = {n for n, _, _ in METADATA_FIELDS}
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise ConformanceUsageError(f"--metadata {path}: unknown field(s) {', '.join(unknown)}; the program's "
                                    f"fields are {', '.join(sorted(known))} (camelCase, as its template writes them)")
    bad = sorted(str(k) for k, v in data.items() if not isinstance(v, str) or not v.strip())
    if bad:
        raise ConformanceUsageError(f"--metadata {path}: field(s) {', '.join(bad)} must be non-empty strings")
    if "kubernetesVersion" in data and data["kubernetesVersion"] != version:
        raise ConformanceUsageError(f"--metadata {path}: kubernetesVersion is {data['kubernetesVersion']!r} but "
                                    f"--version is {version}; drop the field or make them agree")
    return {str(k): str(v) for k, v in data.items()}


def read_run(run: Path, key: Path | None = None,
             ledger: Path | None = None) -> tuple[list[ScenarioRun], Source, dict[str, Any]]:
    """Verify RUN (signatures, digests and, with ``ledger``, its place in the chain) and read its scenario runs
    from the signed statements. Raises :class:`ConformanceUsageError` when RUN is not a run archive and
    :class:`RunNotVerifiedError` when it does not verify."""
    if not run.is_dir():
        what = "no such directory" if not run.exists() else "not a directory (unpack a .tar.gz with tar xzf first)"
        raise ConformanceUsageError(f"RUN {run}: {what}; pass a sealed run archive folder, reports/<run-id>")
    try:
        report = verify(run, key, ledger)
    except VerifyReadError as exc:
        raise ConformanceUsageError(f"RUN {run}: {exc}; pass a sealed run archive folder, reports/<run-id>") from None
    try:
        files, _ = read_tree(run)
    except ArchiveError as exc:
        raise ConformanceUsageError(f"RUN {run}: {exc}") from None
    if report.archive_kind == CONFORMANCE_KIND:
        raise ConformanceUsageError(f"RUN {run}: a conformance submission folder, not a run archive; pass the run "
                                    "archive it was made from (reports/<run-id>)")
    if not report.ok:
        raise RunNotVerifiedError(
            f"RUN {run} does not verify ({len(report.problems)} problem(s)); a submission is made only from a "
            "verified run archive. Nothing was written.", tuple(str(p) for p in report.problems))
    runs: list[ScenarioRun] = []
    for path in sorted(p for p in files if p.startswith(f"{EVIDENCE_DIR}/") and p.endswith(".dsse.json")):
        try:
            statement = Statement.from_bytes(Envelope.from_json(files[path], path).payload, path)
        except EnvelopeError as exc:  # verify already checked every envelope; kept for safety
            raise RunNotVerifiedError(f"RUN {run}: {exc}") from None
        if statement.predicate_type == SCENARIO_PREDICATE_TYPE:
            runs.append(ScenarioRun.from_predicate(path, sha256_hex(files[path]), statement.predicate))
    try:
        record = json.loads(files[RECORD]) if RECORD in files else {}
    except ValueError:
        record = {}  # verify reported it already
    if not isinstance(record, dict):
        record = {}
    target = record.get("target") or {}
    runs.sort(key=lambda r: next((i for i, s in enumerate(record.get("scenarios") or [])
                                  if s.get("scenario") == r.name and s.get("feature_file") == r.feature_file
                                  and s.get("repeat", 1) == r.repeat), len(runs)))
    source = Source(run_id=str(report.run_id or run.name), started=str(record.get("started", "")),
                    finished=str(record.get("finished", "")), manifest_sha256=sha256_hex(files[MANIFEST]),
                    keyid=str(report.keyid or ""), harness=f"firedrill {record.get('harness_version') or __version__}",
                    target=f"{target.get('kind', '?')}: {target.get('description', '')}".rstrip(": "))
    return runs, source, record


def _check_out(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ConformanceUsageError(f"OUT {out}: exists and is not a directory; pass a new folder, "
                                    "e.g. submission/v1.37/<product>/")
    if out.is_dir() and any(out.iterdir()):
        raise ConformanceUsageError(f"OUT {out}: not empty; a submission is written into a new or empty folder and "
                                    "never over another")
    if not out.name or out.name in (".", ".."):
        raise ConformanceUsageError(f"OUT {out}: name the folder after the product (the program's v<X.Y>/<dir>/)")


def write_submission(run: Path, version: str, out: Path, signer: Signer, *, metadata: Path | None = None,
                     key: Path | None = None, ledger: Path | None = None,
                     now: datetime | None = None) -> Submission:
    """Verify RUN, judge each requirement of ``version``'s checklist from its tagged scenarios, and write the
    signed submission folder OUT (see the module docstring)."""
    chosen = checklist(version)
    meta = load_metadata(metadata, chosen.version)
    out = Path(os.path.normpath(out))
    _check_out(out)
    runs, source, record = read_run(run, key, ledger)
    defects = (record.get("target") or {}).get("defects") or []
    if defects:
        raise ConformanceUsageError(
            f"RUN {run}: ran the reference platform with defect(s) {', '.join(map(str, defects))} from the defect "
            "zoo (docs/DEFECTS.md); such a run tests the harness, not a platform, and is no conformance evidence")
    judgement = judge(chosen, runs, source.run_id)
    product_dir = out.name
    ours: dict[str, bytes] = {
        PRODUCT: product_yaml(judgement, chosen, meta, product_dir, source),
        JUNIT: junit_xml(judgement, source),
        E2E_LOG: e2e_log(judgement, source),
        RESULTS: results_json(judgement, source),
        PUBLIC_KEY: signer.public_pem,
        SIGNER: canonical_json(signer.info()),
    }
    manifest = canonical_json({
        "_type": MANIFEST_TYPE, "kind": CONFORMANCE_KIND, "runId": source.run_id,
        "sealed": _rfc3339(now or datetime.now(UTC)),
        "conformance": {"version": chosen.version, "product": product_dir, "template": chosen.template,
                        "source": {"runId": source.run_id, "manifestSha256": source.manifest_sha256,
                                   "keyid": source.keyid}},
        "files": [{"path": name, "sha256": sha256_hex(data), "size": len(data)} for name, data in sorted(ours.items())],
    })
    ours[MANIFEST] = manifest
    ours[MANIFEST_SIGNATURE] = signer.sign(MANIFEST_PAYLOAD_TYPE, manifest).to_json()
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in ours.items():
            (out / name).write_bytes(data)
    except OSError as exc:
        raise ConformanceUsageError(f"OUT {out}: cannot write ({exc.strerror or exc})") from None
    return Submission(out, chosen, judgement, source, tuple(sorted(ours)), signer.keyid, signer.ephemeral)



class ConformanceExit(IntEnum):
    """``firedrill conformance``'s exit codes."""

    WRITTEN = 0
    """The folder is written and signed."""
    NOT_VERIFIED = 1
    """RUN does not verify: nothing written."""
    USAGE = 2
    """Bad input: unknown --version, RUN not a run archive (or made with defects), OUT not empty, bad metadata or
    key file: nothing written."""


def run_conformance(run: Path, out: Path, version: str, metadata: Path | None, key: Path | None,
                    ledger: Path | None, sign_key: Path | None, console: Console, err: Console) -> ConformanceExit:
    """The CLI command: write the folder, print what each requirement got and where the folder is."""
    try:
        checklist(version)
        if sign_key is not None:
            signer = Signer.from_key_file(sign_key)
        else:
            err.print("WARNING: no signing key (--sign-key or FIREDRILL_SIGNING_KEY): the folder's manifest is signed "
                      "with a THROWAWAY key. It proves the folder was not altered, not who made it. Make a key with "
                      "`firedrill keygen`.")
            signer = Signer.generate_ephemeral()
        done = write_submission(run, version, out, signer, metadata=metadata, key=key, ledger=ledger)
    except RunNotVerifiedError as exc:
        for line in exc.problems:
            err.print(f"FAIL {line}")
        err.print(f"error: {exc}")
        return ConformanceExit.NOT_VERIFIED
    except (ConformanceError, EvidenceError) as exc:
        err.print(f"error: {exc}")
        return ConformanceExit.USAGE
    console.print(f"CNCF Kubernetes AI Conformance {done.checklist.version} from run {done.source.run_id}:")
    for outcome in done.judgement.outcomes:
        runs = f"{len(outcome.runs)} scenario run(s)" if outcome.runs else "no scenario"
        console.print(f"  {outcome.requirement.id:28} {outcome.requirement.level.value:6} "
                      f"{outcome.status.value:16} ({runs})")
    for rid, where in done.judgement.unknown.items():
        err.print(f"warning: @conformance:{rid} is not a requirement of {done.checklist.version}; ignored "
                  f"({'; '.join(where)})")
    console.print(f"wrote {done.out}: {', '.join(done.files)} (keyid {done.keyid[:16]}…"
                  f"{', ephemeral' if done.ephemeral else ''})")
    console.print(f"check it with `firedrill verify {done.out}`; fill PRODUCT.yaml's metadata with --metadata FILE")
    return ConformanceExit.WRITTEN
