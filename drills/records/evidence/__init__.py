"""Signed evidence: every run leaves an archive a skeptic can verify offline.

- :mod:`drills.evidence.record`: what a run established, as plain typed data (the input to everything else).
- :mod:`drills.evidence.canonical`: canonical JSON and SHA-256, the bytes every digest is over.
- :mod:`drills.evidence.statements`: in-toto statements (a Firedrill scenario predicate, the test-result one).
- :mod:`drills.evidence.signing`: DSSE envelopes, Ed25519 keys and keyids.
- :mod:`drills.evidence.archive`: ``seal`` a run directory, append it to the ledger, ``make_tarball``.
- :mod:`drills.evidence.verify`: check an archive and its place in the ledger, naming every mismatch.
- :mod:`drills.evidence.errors`: :class:`~drills.evidence.errors.EvidenceError` and its kinds.

See docs/EVIDENCE.md for the formats and a verification with openssl alone.
"""
