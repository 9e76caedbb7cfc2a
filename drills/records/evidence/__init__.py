"""Signed evidence: every run leaves an archive a skeptic can verify offline.

- :mod:`drills.records.evidence.record`: what a run established, as plain typed data (the input to everything else).
- :mod:`drills.records.evidence.canonical`: canonical JSON and SHA-256, the bytes every digest is over.
- :mod:`drills.records.evidence.statements`: in-toto statements (a Firedrill scenario predicate, the test-result one).
- :mod:`drills.records.evidence.signing`: DSSE envelopes, Ed25519 keys and keyids.
- :mod:`drills.records.evidence.archive`: ``seal`` a run directory, append it to the ledger, ``make_tarball``.
- :mod:`drills.records.evidence.verify`: check an archive and its place in the ledger, naming every mismatch.
- :mod:`drills.records.evidence.errors`: :class:`~drills.records.evidence.errors.EvidenceError` and its kinds.

See docs/EVIDENCE.md for the formats and a verification with openssl alone.
"""
