"""Compact JSON for the API server's hot paths (stored objects, answers, watch events), by orjson.

orjson writes the same JSON as ``json.dumps(obj, separators=(",", ":"))`` would read back, several
times faster; the few values it refuses (an integer beyond 64 bits, a non-string key) fall back to the
standard library, so whatever was accepted before is still written.  Two differences in the bytes, not
in what they mean: non-ASCII text is UTF-8 rather than ``\\u`` escapes, and NaN is ``null``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    """``obj`` as compact JSON bytes (keys sorted when asked: the store's canonical form)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(obj, separators=(",", ":"), sort_keys=sort_keys).encode()
