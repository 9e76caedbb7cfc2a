"""A second party's signature on a sealed run: ``firedrill witness RUN --key customer.key``.

On acceptance day the vendor's harness seals the run; the customer, having watched it, adds their own
signature so that the archive carries both names.  DSSE allows several signatures on one envelope, so the
witness signs the very payload the vendor signed in ``manifest.dsse.json``: ``manifest.json``'s bytes, which
list the SHA-256 of every file of the run, the in-toto statements included.  One signature over the manifest
therefore covers every statement, and nothing the manifest lists changes (the manifest's envelope is the one
file it does not list), so the vendor's signatures, the file digests and the ledger line all stay valid.

Before signing, the witness checks what it signs: the archive must verify (with the vendor's published key
when given, so the witness knows whose run it countersigns), must be a run directory (a ``.tar.gz`` is made
from one afterwards with ``firedrill archive``), and must not carry this key's signature already.

``firedrill verify RUN --signer vendor.pub --signer customer.pub`` then demands a valid manifest signature by
each named key, and names the one that is missing or does not match.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from drills.records.evidence.archive import MANIFEST_PAYLOAD_TYPE, MANIFEST_SIGNATURE
from drills.records.evidence.errors import EnvelopeError, EvidenceError
from drills.records.evidence.signing import Envelope, Signer
from drills.records.evidence.verify import verify

__all__ = ["WitnessError", "Witnessed", "witness"]


class WitnessError(EvidenceError):
    """The run cannot be witnessed: it does not verify, is not a run directory, or this key signed it already."""


@dataclass(frozen=True)
class Witnessed:
    """What was countersigned."""

    run_id: str
    verdict: str | None
    keyid: str
    signatures: int
    """Signatures on the manifest now, the witness's included."""
    vendor_checked: bool
    """Whether the vendor's published key was checked (else only the archive's own key: integrity)."""


def witness(run_dir: Path, signer: Signer, vendor_key: Path | None = None) -> Witnessed:
    """Add ``signer``'s signature to ``run_dir``'s ``manifest.dsse.json`` after checking the run verifies."""
    if not run_dir.is_dir():
        raise WitnessError(f"{run_dir}: not a run directory (witness the folder reports/<run-id>, then pack it "
                           "with `firedrill archive`)")
    report = verify(run_dir, vendor_key)
    if not report.ok:
        problems = "; ".join(str(p) for p in report.problems[:5])
        raise WitnessError(f"{run_dir} does not verify, so it is not signed: {problems}")
    path = run_dir / MANIFEST_SIGNATURE
    try:
        envelope = Envelope.from_json(path.read_bytes(), MANIFEST_SIGNATURE)
    except (OSError, EnvelopeError) as exc:
        raise WitnessError(f"{path}: cannot read ({exc})") from None
    if envelope.payload_type != MANIFEST_PAYLOAD_TYPE:
        raise WitnessError(f"{path}: payloadType {envelope.payload_type!r} is not a Firedrill manifest's")
    if any(s.keyid == signer.keyid for s in envelope.signatures):
        raise WitnessError(f"{run_dir} already carries a signature by keyid {signer.keyid[:16]}…")
    (mine,) = signer.sign(envelope.payload_type, envelope.payload).signatures
    signed = Envelope(envelope.payload_type, envelope.payload, (*envelope.signatures, mine))
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(signed.to_json())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WitnessError(f"{path}: cannot write ({exc.strerror or exc})") from None
    return Witnessed(report.run_id or run_dir.name, report.verdict, signer.keyid, len(signed.signatures),
                     vendor_key is not None)
