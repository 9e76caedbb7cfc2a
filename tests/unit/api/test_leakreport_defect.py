"""The ``misranked-leaks`` defect (docs/DEFECTS.md): the served leak report swaps its two largest holes.

The API server is driven in-process through its ASGI app; the accounting underneath is a fixed report
(the accounting itself is tested in tests/unit/core/test_accounting.py), so the test sees only what the
server does to it on the way out.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from refplatform.api.app import ApiServer, ServerSettings
from refplatform.api.auth import Identity, Role, TokenAuthenticator
from refplatform.api.leakreport import LEAKREPORT_PATH, misrank
from refplatform.api.service import ApiService
from refplatform.api.usagelog import UsageRecorder
from refplatform.core.accounting import Hole, HoleAmount, Layer, LeakReport, Window
from refplatform.defects import Defect
from refplatform.store import Store

NOW = datetime(2027, 1, 15, 8, 0, 0, tzinfo=timezone.utc)
T0 = NOW.timestamp()
TOKENS = {"admin-token": Identity("admin", Role.CLUSTER_ADMIN)}
ADMIN = {"Authorization": "Bearer admin-token"}
REPORT = LeakReport(Window(T0 - 3600, T0), 8.0, Layer(6.0, 0.75), Layer(4.0, 0.5), Layer(2.0, 0.25), (
    HoleAmount(Hole.DATA_PIPELINE, 2.0, 0.25), HoleAmount(Hole.COMMUNICATION, 0.5, 0.0625),
    HoleAmount(Hole.FRAGMENTATION, 0.25, 0.03125), HoleAmount(Hole.FAULT_TOLERANCE, 0.0, 0.0)))


class FixedReport(UsageRecorder):
    """A recorder whose accounting always answers :data:`REPORT`."""

    def report(self, window: Window) -> LeakReport:
        return REPORT


def _get(app: object, path: str) -> httpx.Response:
    async def call() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]
                                     base_url="https://testserver") as c:
            return await c.get(path, headers=ADMIN)
    return asyncio.run(call())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path)
    yield s
    s.close()


def _served(store: Store, defects: frozenset[Defect]) -> dict[str, object]:
    usage = FixedReport(store, None, clock=lambda: T0)
    server = ApiServer(ApiService(store, clock=lambda: NOW), TokenAuthenticator(TOKENS),
                       ServerSettings(defects=defects), usage=usage)
    answer = _get(server.app, f"{LEAKREPORT_PATH}?start=2027-01-15T07:00:00Z")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_an_honest_server_serves_the_report_as_accounted(store: Store) -> None:
    body = _served(store, frozenset())
    assert body == json_of(REPORT)
    assert [(h["rank"], h["name"]) for h in body["holes"]][:2] == [(1, "dataPipeline"), (2, "communication")]
    assert body["largest"] == "dataPipeline"


def test_misranked_leaks_swaps_the_two_largest_holes_and_names_the_second_largest(store: Store) -> None:
    body = _served(store, frozenset({Defect.MISRANKED_LEAKS}))
    holes = body["holes"]
    assert isinstance(holes, list)
    assert [(h["rank"], h["name"], h["gpuHours"]) for h in holes] == [
        (1, "communication", 0.5), (2, "dataPipeline", 2.0), (3, "fragmentation", 0.25), (4, "faultTolerance", 0.0)]
    assert body["largest"] == "communication"
    assert body["summary"] == "The largest hole is communication: 0.5 GPU-hours, 6.25% of healthy capacity."
    assert body["layers"] == json_of(REPORT)["layers"]  # every amount is left as computed


def test_another_defect_leaves_the_report_alone(store: Store) -> None:
    assert _served(store, frozenset({Defect.NO_SPARE})) == json_of(REPORT)


def test_misrank_leaves_a_report_of_fewer_than_two_holes_alone() -> None:
    body = {"holes": [{"rank": 1, "name": "dataPipeline"}], "largest": "dataPipeline"}
    assert misrank(body) == body


def json_of(report: LeakReport) -> dict[str, object]:
    return json.loads(json.dumps(report.to_dict()))
