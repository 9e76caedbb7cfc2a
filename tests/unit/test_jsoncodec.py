"""The API server's JSON encoder (refplatform.jsoncodec): what it writes reads back as what was given."""

from __future__ import annotations

import json

from refplatform import jsoncodec


def test_objects_read_back_unchanged_and_sorted_when_asked() -> None:
    pod = {"metadata": {"name": "train-0", "labels": {"b": "2", "a": "1"}, "annotations": {"note": "GPU é 😀"}},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}], "priority": -3},
           "status": {"ratio": 0.1, "big": 1e16, "none": None, "ok": True}}
    for sort in (False, True):
        data = jsoncodec.dumps(pod, sort_keys=sort)
        assert isinstance(data, bytes) and json.loads(data) == pod
    status = {k: v for k, v in pod["status"].items() if k != "big"}  # Python writes 1e+16, orjson 1e16
    assert jsoncodec.dumps({**pod, "status": status}) == json.dumps(
        {**pod, "status": status}, separators=(",", ":"), ensure_ascii=False).encode()
    assert jsoncodec.dumps({"b": 1, "a": {"d": 1, "c": 2}}, sort_keys=True) == b'{"a":{"c":2,"d":1},"b":1}'


def test_what_orjson_refuses_is_written_by_the_standard_library() -> None:
    huge = {"value": 2 ** 70, "list": [2 ** 65]}  # beyond 64 bits: valid JSON all the same
    assert json.loads(jsoncodec.dumps(huge)) == huge
    assert json.loads(jsoncodec.dumps({1: "one"}, sort_keys=True)) == {"1": "one"}


def test_loads_reads_what_the_standard_library_reads_and_fails_where_it_fails() -> None:
    assert jsoncodec.loads(b'{"a":[1,2.5,"\\u00e9",null]}') == {"a": [1, 2.5, "é", None]}
    assert jsoncodec.loads('{"n": 123456789012345678901234567890}') == {"n": 123456789012345678901234567890}
    nan = jsoncodec.loads('{"x": NaN}')["x"]
    assert nan != nan  # the standard library's NaN, which orjson refuses
    for bad in (b'{"a":', b"", b"\xff"):
        try:
            jsoncodec.loads(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was read")


def test_clone_is_a_deep_copy() -> None:
    obj = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c", "ports": [80]}]}}
    copy = jsoncodec.clone(obj)
    assert copy == obj
    copy["metadata"]["labels"]["a"] = "2"
    copy["spec"]["containers"][0]["ports"].append(81)
    assert obj == {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c", "ports": [80]}]}}
    odd = {"when": {1, 2}}  # not JSON: deep-copied all the same
    assert jsoncodec.clone(odd) == odd and jsoncodec.clone(odd)["when"] is not odd["when"]
