"""The signed baseline statement: an in-toto Statement v1 in a DSSE envelope, Ed25519 (drills.records.evidence.signing).

Predicate type :data:`PREDICATE_TYPE` (versioned in its URI: the shape changes only with the version)::

    method        the method (drills.kinds.baseline.method): definitions, source, workload, window, estimator
    observation   window {start, end} (RFC 3339), source {kind, where}, slices [...] (drills.kinds.baseline.slices),
                  unmeasured {hole: why}, notes [...] (what changed in the workload during the window)
    summary       each layer's share and each hole's GPU-hours with standard errors (recomputed when read)
    target        what was observed: kind, description, fingerprint digest, nodes, GPUs (shown, never compared)
    harness       name, version, commit
    signer        algorithm, keyid, publicKey (PEM), ephemeral
    created       when it was sealed (RFC 3339)

Subjects: ``observation`` (SHA-256 of the canonical JSON of ``{"method", "observation"}``) and, when the target
was identified, ``target-fingerprint`` (the fingerprint's digest).

:func:`load` verifies before it reads a number: the signature over the DSSE pre-authentication encoding (with the
``--key`` given: also who signed; without: the statement's own public key, which proves integrity only), the
subject digest, then the shape.  Anything that does not verify raises :class:`NotVerified`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills import __version__
from drills.kinds.baseline.errors import BaselineUsageError, NotVerified
from drills.kinds.baseline.method import Method
from drills.kinds.baseline.slices import Slice, summary
from drills.records.evidence.canonical import canonical_digest
from drills.records.evidence.collect import harness_commit
from drills.records.evidence.errors import EnvelopeError, KeyFileError
from drills.records.evidence.signing import (ALGORITHM, PAYLOAD_TYPE, Envelope, Signer, keyid_of, load_public_key,
                                     public_key_from_pem, verify_envelope)
from drills.records.evidence.statements import HARNESS_NAME, Statement, Subject

__all__ = ["PREDICATE_TYPE", "Observed", "load", "observed_from_predicate", "predicate", "seal"]

PREDICATE_TYPE = "https://firedrill.dev/attestation/baseline/v0.1"
"""Firedrill's baseline predicate; the version in the URI changes whenever its shape does."""


@dataclass(frozen=True)
class Observed:
    """One observation, verified and read back: a baseline statement, a run archive's re-measurement or its
    whole-run leak report."""

    name: str
    """How messages name it: ``the baseline (FILE)``, ``RUN (DIR)``."""
    method: Method
    slices: tuple[Slice, ...]
    window: tuple[str, str]
    unmeasured: Mapping[str, str] = field(default_factory=dict)
    target: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    keyid: str = ""
    identity: str = ""
    """Who signed it, as far as it can say: ``key given`` (the --key), ``its own key (integrity only)``, ..."""


def predicate(method: Method, slices: Sequence[Slice], *, start: str, end: str, source_kind: str,
              source_where: str, unmeasured: Mapping[str, str], target: Mapping[str, Any], notes: Sequence[str],
              signer: Signer, created: str) -> dict[str, Any]:
    return {
        "method": method.to_dict(),
        "observation": {"window": {"start": start, "end": end},
                        "source": {"kind": source_kind, "where": source_where},
                        "slices": [s.to_dict() for s in slices], "unmeasured": dict(sorted(unmeasured.items())),
                        "notes": list(notes)},
        "summary": summary(slices),
        "target": dict(target),
        "harness": {"name": HARNESS_NAME, "version": __version__, "commit": harness_commit()},
        "signer": {"algorithm": ALGORITHM, "keyid": signer.keyid, "publicKey": signer.public_pem.decode("ascii"),
                   "ephemeral": signer.ephemeral},
        "created": created,
    }


def _observation_digest(pred: Mapping[str, Any]) -> str:
    return canonical_digest({"method": pred.get("method"), "observation": pred.get("observation")})


def seal(pred: Mapping[str, Any], signer: Signer, fingerprint_digest: str | None) -> bytes:
    """The statement file's bytes: a canonical DSSE envelope over the canonical in-toto statement."""
    subjects = [Subject("observation", _observation_digest(pred))]
    if fingerprint_digest:
        subjects.append(Subject("target-fingerprint", fingerprint_digest))
    statement = Statement(tuple(subjects), PREDICATE_TYPE, dict(pred))
    return signer.sign(PAYLOAD_TYPE, statement.to_bytes()).to_json()


def observed_from_predicate(pred: Mapping[str, Any], name: str, where: str) -> Observed:
    """An :class:`Observed` from a (verified) predicate's ``method`` and ``observation``."""
    method = Method.from_dict(pred.get("method"), f"{where}: predicate.method")
    obs = pred.get("observation")
    if not isinstance(obs, Mapping) or not isinstance(obs.get("slices"), list) or not obs["slices"]:
        raise BaselineUsageError(f"{where}: predicate.observation needs a non-empty list of slices")
    slices = tuple(Slice.from_dict(s, f"{where}: observation.slices[{i}]") for i, s in enumerate(obs["slices"]))
    if len(slices) != method.window.get("slices"):
        raise BaselineUsageError(f"{where}: {len(slices)} slices observed, but the method says "
                                 f"{method.window.get('slices')}")
    window = obs.get("window") if isinstance(obs.get("window"), Mapping) else {}
    unmeasured = obs.get("unmeasured") if isinstance(obs.get("unmeasured"), Mapping) else {}
    notes = obs.get("notes") if isinstance(obs.get("notes"), list) else []
    target = pred.get("target") if isinstance(pred.get("target"), Mapping) else {}
    return Observed(name=name, method=method, slices=slices,
                    window=(str(window.get("start", "")), str(window.get("end", ""))),
                    unmeasured={str(k): str(v) for k, v in unmeasured.items()}, target=dict(target),
                    notes=tuple(str(n) for n in notes))


def load(path: Path, key: Path | None = None, name: str | None = None) -> Observed:
    """Read and verify a baseline statement file; see the module docstring for the order of the checks.

    Raises :class:`BaselineUsageError` when the file cannot be read or is another kind of statement, and
    :class:`NotVerified` when it does not verify."""
    name = name or f"the baseline ({path})"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BaselineUsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        envelope = Envelope.from_json(data, str(path))
        if envelope.payload_type != PAYLOAD_TYPE:
            raise EnvelopeError(f"{path}: payloadType is {envelope.payload_type!r}, not {PAYLOAD_TYPE}")
        statement = Statement.from_bytes(envelope.payload, str(path))
    except EnvelopeError as exc:
        raise NotVerified(f"refused: {exc}; a baseline statement is a DSSE envelope written by `firedrill "
                          "baseline`, and it must be used exactly as written") from None
    pred = statement.predicate
    signer_info = pred.get("signer") if isinstance(pred.get("signer"), Mapping) else {}
    try:
        if key is not None:
            public_key = load_public_key(key)
            identity = f"the key given ({key})"
        else:
            pem = signer_info.get("publicKey")
            if not isinstance(pem, str):
                raise NotVerified(f"refused: {path} carries no public key to verify it with; pass --key")
            public_key = public_key_from_pem(pem.encode("ascii"), f"{path}: predicate.signer.publicKey")
            identity = "its own public key (integrity only: pass --key to prove who signed it)"
    except KeyFileError as exc:
        if key is not None:
            raise BaselineUsageError(f"--key: {exc}") from None
        raise NotVerified(f"refused: {exc}") from None
    checks = verify_envelope(envelope, public_key)
    bad = [c for c in checks if not c.valid]
    if bad:
        raise NotVerified(f"refused: {path} does not verify: {bad[0].reason} (keyid {bad[0].keyid[:16] or 'none'}). "
                          "The statement was altered after it was signed, or signed by another key; take the "
                          "baseline again or get the original file")
    keyid = keyid_of(public_key)
    if signer_info.get("keyid") not in (None, keyid):
        raise NotVerified(f"refused: {path} names signer keyid {str(signer_info.get('keyid'))[:16]}… but verifies "
                          f"with keyid {keyid[:16]}…")
    if statement.predicate_type != PREDICATE_TYPE:
        raise BaselineUsageError(f"{path}: a statement of type {statement.predicate_type}, not a baseline "
                                 f"({PREDICATE_TYPE}); give a file written by `firedrill baseline`")
    want = _observation_digest(pred)
    subject = next((s for s in statement.subject if s.name == "observation"), None)
    if subject is None or subject.sha256 != want:
        raise NotVerified(f"refused: {path}: the observation's digest does not match its subject "
                          f"({subject.sha256[:16] if subject else 'no observation subject'} vs {want[:16]})")
    if signer_info.get("ephemeral"):
        identity += "; signed with a throwaway key"
    observed = observed_from_predicate(pred, name, str(path))
    return Observed(**{**observed.__dict__, "keyid": keyid, "identity": identity})

