"""Compact JSON for the API server's hot paths (stored objects, answers, watch events), by orjson.

orjson writes the same JSON as ``json.dumps(obj, separators=(",", ":"))`` would read back, several
times faster; the few values it refuses (an integer beyond 64 bits, a non-string key) fall back to the
standard library, so whatever was accepted before is still written.  Two differences in the bytes, not
in what they mean: non-ASCII text is UTF-8 rather than ``\\u`` escapes, and NaN is ``null``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import orjson


def dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    """``obj`` as compact JSON bytes (keys sorted when asked: the store's canonical form)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(obj, separators=(",", ":"), sort_keys=sort_keys).encode()


_LONG_NUMBER = re.compile(rb"\d{19}")
"""19 digits in a row: maybe an integer orjson would read as a float (beyond 64 bits), maybe digits in a string."""


def loads(data: bytes | bytearray | memoryview | str, *,
          parse_constant: Callable[[str], Any] | None = None) -> Any:
    """JSON text to Python values, exactly as :func:`json.loads` reads them.  orjson reads them, except
    where the standard library must: a text with 19 digits in a row (orjson reads an integer beyond 64
    bits as a float), or one orjson refuses (NaN, which ``parse_constant`` may refuse too, as
    :func:`json.loads`'s does); a malformed text gets the standard library's ``ValueError``, which names
    what and where."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if _LONG_NUMBER.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw, parse_constant=parse_constant)


def clone(obj: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, strings, numbers, booleans, None) by a round trip
    through orjson, several times faster than :func:`copy.deepcopy`; anything else is deep-copied."""
    try:
        return orjson.loads(orjson.dumps(obj))
    except (TypeError, orjson.JSONEncodeError, orjson.JSONDecodeError):
        return copy.deepcopy(obj)
