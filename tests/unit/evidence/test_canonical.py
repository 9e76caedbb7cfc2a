"""Canonical JSON: the bytes every digest and signature is computed over."""

from __future__ import annotations

import math

import pytest

from drills.errors import FiredrillError
from drills.kube.fingerprint import fingerprint
from drills.records.evidence.canonical import canonical_digest, canonical_json, sha256_hex
from drills.records.evidence.errors import CanonicalError, EvidenceError


def test_keys_sorted_no_whitespace_utf8() -> None:
    assert canonical_json({"b": [1, 2.5, None], "a": {"z": True, "é": "ü"}}) == \
        '{"a":{"z":true,"é":"ü"},"b":[1,2.5,null]}'.encode()


def test_tuples_are_arrays_and_floats_round_trip() -> None:
    assert canonical_json({"t": (1, "x"), "f": 0.1, "g": 1.0, "h": 1e-7}) == b'{"f":0.1,"g":1.0,"h":1e-07,"t":[1,"x"]}'


def test_escapes_only_what_json_requires() -> None:
    assert canonical_json({"s": 'a"b\\c\n/'}) == b'{"s":"a\\"b\\\\c\\n/"}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_refused_naming_the_path(bad: float) -> None:
    with pytest.raises(CanonicalError, match=r"\$\.scenarios\[1\]\.value"):
        canonical_json({"scenarios": [{"value": 1.0}, {"value": bad}]})


def test_non_string_key_and_unknown_type_refused() -> None:
    with pytest.raises(CanonicalError, match="non-string key 1"):
        canonical_json({1: "x"})
    with pytest.raises(CanonicalError, match=r"set at \$\.x"):
        canonical_json({"x": {1, 2}})


def test_errors_are_firedrill_errors() -> None:
    assert issubclass(CanonicalError, EvidenceError) and issubclass(EvidenceError, FiredrillError)


def test_sha256_hex_known_vector() -> None:
    assert sha256_hex(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert canonical_digest({"b": 1, "a": 2}) == sha256_hex(b'{"a":2,"b":1}')


def test_same_bytes_as_the_fingerprint_digest() -> None:
    fp = fingerprint({"major": "1", "minor": "31", "gitVersion": "v1.31.0"},
                     [{"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                       "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}],
                     {"scheduling.volcano.sh": ["v1beta1"]})
    assert canonical_json(fp.to_dict()) == fp.canonical_json()
    assert canonical_digest(fp.to_dict()) == fp.digest()
