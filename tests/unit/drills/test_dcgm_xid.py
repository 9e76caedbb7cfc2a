"""What DCGM saw of an injected Xid, read through Prometheus's query API (the GPU fault drill's confirmation on a
real cluster). The answers are Prometheus's own JSON shapes, fed through the ``fetch`` seam: this tests the reading
of its answers and every way it can say nothing, not a live Prometheus (the leak drill's tests run one)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import urllib3

from drills.target.xid import dcgm_last_xid

UUID = "GPU-5f0e1c2a-0000-4000-8000-000000000001"


def answering(status: int, doc: object, seen: list[tuple[str, dict[str, str]]] | None = None):  # noqa: ANN201
    def fetch(url: str, fields: Mapping[str, str]) -> tuple[int, bytes]:
        if seen is not None:
            seen.append((url, dict(fields)))
        return status, json.dumps(doc).encode()
    return fetch


def vector(value: str) -> dict[str, object]:
    return {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1.0, value]}]}}


def test_the_last_xid_of_the_gpu_is_read_by_its_uuid() -> None:
    seen: list[tuple[str, dict[str, str]]] = []
    assert dcgm_last_xid("http://prom.example:9090/", UUID, fetch=answering(200, vector("79"), seen)) == (79, "")
    (url, fields), = seen
    assert url == "http://prom.example:9090/api/v1/query"
    assert fields["query"] == f'max(DCGM_FI_DEV_XID_ERRORS{{UUID="{UUID}"}})'


def test_every_way_of_not_knowing_says_why() -> None:
    assert dcgm_last_xid(None, UUID)[1].startswith("the target profile names no Prometheus (prometheus.url)")
    empty = {"status": "success", "data": {"resultType": "vector", "result": []}}
    assert "has no DCGM_FI_DEV_XID_ERRORS series for GPU" in dcgm_last_xid("http://p", UUID,
                                                                           fetch=answering(200, empty))[1]
    assert "answered 503" in dcgm_last_xid("http://p", UUID, fetch=answering(503, {"error": "x"}))[1]

    def down(url: str, fields: Mapping[str, str]) -> tuple[int, bytes]:
        raise urllib3.exceptions.NewConnectionError(None, "refused")  # type: ignore[arg-type]
    value, why = dcgm_last_xid("http://user:secret@p:9090", UUID, fetch=down)
    assert value is None and "cannot be reached" in why and "secret" not in why
