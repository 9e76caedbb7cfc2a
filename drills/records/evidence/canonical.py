"""Canonical JSON and SHA-256: the bytes every digest and signature in an archive is computed over.

Rules (the same as :meth:`drills.kube.fingerprint.Fingerprint.canonical_json`, so a fingerprint written
with :func:`canonical_json` hashes to the fingerprint's own digest):

- objects have their keys sorted by Unicode code point (Python's ``str`` order); every key is a string;
- no insignificant whitespace: ``,`` and ``:`` separators, no indentation, no trailing newline;
- UTF-8, with non-ASCII characters written as themselves (no ``\\uXXXX`` escapes except for control
  characters, ``"`` and ``\\``, which JSON requires to be escaped);
- numbers as Python writes them: integers in decimal, floats in their shortest round-trip form
  (``0.1``, ``1.0``, ``1e-07``); NaN and the infinities are refused (JSON has no such numbers);
- tuples are written as arrays; ``None``/``True``/``False`` as ``null``/``true``/``false``.

This is *not* RFC 8785 (JCS): floats are not re-formatted to ECMAScript's form and keys are not sorted by
UTF-16 code units.  For the ASCII keys and the values an archive holds the two orders agree; what matters
here is that Firedrill writes and re-reads the same bytes, which verification checks by digest, never by
re-serialising.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from drills.records.evidence.errors import CanonicalError

__all__ = ["canonical_json", "sha256_hex", "canonical_digest", "check_json_ready"]


def check_json_ready(value: Any, where: str = "$") -> None:
    """Raise :class:`CanonicalError` naming the JSON path of the first value canonical JSON cannot hold."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalError(f"{value!r} at {where}: canonical JSON has no NaN or infinity "
                                 "(record an unmeasured value as null)")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError(f"non-string key {key!r} at {where}: canonical JSON keys are strings")
            check_json_ready(item, f"{where}.{key}")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_json_ready(item, f"{where}[{i}]")
        return
    raise CanonicalError(f"{type(value).__name__} at {where} is not JSON (use str, int, float, bool, None, "
                         "list, tuple or dict)")


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON bytes (see the module docstring for the rules)."""
    check_json_ready(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` as 64 lowercase hex digits."""
    return hashlib.sha256(data).hexdigest()


def canonical_digest(value: Any) -> str:
    """``sha256_hex(canonical_json(value))``."""
    return sha256_hex(canonical_json(value))
