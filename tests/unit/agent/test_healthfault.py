"""Fleet fault injection: ``firedrill.dev/inject-health`` -> the Node condition ``GpuFault``, on a virtual clock."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from tenacity import wait_none

from refplatform.agent.clock import VirtualClock
from refplatform.agent.gpus import select_inventory
from refplatform.agent.healthfault import (
    HEALTH_ANNOTATION, HealthEntry, InjectedHealth, gpu_fault_condition, next_expiry, parse_health_entries, standing,
)
from refplatform.agent.heartbeat import NodeHeartbeat
from refplatform.agent.node import NodeConfig
from refplatform.client import STRATEGIC_MERGE_PATCH
from refplatform.patching import apply_patch

from .fakeapi import FakeApi

NODE = "/api/v1/nodes/gpu-node-0"
START = datetime(2026, 11, 30, tzinfo=UTC)
T0 = START.timestamp()
Obj = dict[str, Any]


class StrategicApi(FakeApi):
    """The fake API, but a strategic merge patch merges as the server does (conditions by type); every patch's
    content type is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.content_types: list[tuple[str, str]] = []

    def patch(self, path: str, body: Any, content_type: str = "", params: Any = None) -> Obj:
        self.content_types.append((path, content_type))
        if content_type != STRATEGIC_MERGE_PATCH:
            return super().patch(path, body, content_type, params)
        self._check("PATCH", path, body)
        base = path[: -len("/status")] if path.endswith("/status") else path
        return self.put_object(base, apply_patch(self.objects[base], body, content_type, "Node"))


def entry(ident: str = "f1", reason: str = "XidStorm", until: float | None = None, **kw: Any) -> dict[str, Any]:
    return {"id": ident, "reason": reason, "message": kw.pop("message", "Xid 79 on every GPU"), "until": until, **kw}


def test_entries_are_parsed_and_each_malformed_one_is_skipped_with_a_reason() -> None:
    raw = json.dumps([entry(), entry("f2", until=T0 + 5), {"reason": "XidStorm"}, entry("f3", reason="xid storm"),
                      entry("f4", until="soon"), entry("f5", until=True), "text", entry("f6", message=7)])
    entries, problems = parse_health_entries(raw)
    assert entries == [HealthEntry("f1", "XidStorm", "Xid 79 on every GPU"),
                       HealthEntry("f2", "XidStorm", "Xid 79 on every GPU", T0 + 5)]
    assert len(problems) == 6 and all(p.startswith(f"{HEALTH_ANNOTATION} entry ") for p in problems)
    assert "no id" in problems[0] and "CamelCase" in problems[1] and "until" in problems[2]
    assert parse_health_entries("{not json")[1][0].startswith(f"{HEALTH_ANNOTATION} is not JSON")
    assert parse_health_entries('"x"')[1] == [f"{HEALTH_ANNOTATION} must be a JSON list of entries"]
    assert parse_health_entries(json.dumps(entry()))[0][0].id == "f1"  # one object alone is a list of one
    assert parse_health_entries(None) == parse_health_entries("") == ([], [])


def test_an_entry_stands_until_its_until_and_the_first_standing_one_is_reported() -> None:
    a = HealthEntry("a", "XidStorm", "first", T0 + 10)
    b = HealthEntry("b", "EccStorm", "second")
    assert standing([a, b], T0 + 9.99) == a and standing([a, b], T0 + 10) == b and standing([a], T0 + 10) is None
    assert next_expiry([a, b], T0) == T0 + 10 and next_expiry([a, b], T0 + 10) is None


def test_the_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    fault = HealthEntry("a", "XidStorm", "Xid 79")
    first = gpu_fault_condition(fault, START)
    assert (first["type"], first["status"], first["reason"], first["message"]) == ("GpuFault", "True", "XidStorm",
                                                                                   "Xid 79")
    later = gpu_fault_condition(HealthEntry("b", "EccStorm", "ECC"), datetime.fromtimestamp(T0 + 5, UTC), [first])
    assert later["lastTransitionTime"] == "2026-11-30T00:00:00Z" and later["reason"] == "EccStorm"
    cleared = gpu_fault_condition(None, datetime.fromtimestamp(T0 + 9, UTC), [later])
    assert (cleared["status"], cleared["reason"], cleared["lastTransitionTime"]) == ("False", "NoFault",
                                                                                      "2026-11-30T00:00:09Z")


def heartbeat(api: FakeApi, clock: VirtualClock) -> tuple[NodeHeartbeat, InjectedHealth, list[int]]:
    config = NodeConfig("gpu-node-0", select_inventory("H100-80GB", 8, force_simulated=True))
    hb = NodeHeartbeat(api, config, clock, 1.0, status_every=100, register_wait=wait_none())  # type: ignore[arg-type]
    kicks: list[int] = []
    health = InjectedHealth("gpu-node-0", clock, on_change=lambda: kicks.append(1))
    hb.on_node = health.note_node
    hb.extra_state = health.state
    hb.extra_conditions = health.conditions
    return hb, health, kicks


def condition(api: FakeApi, ctype: str) -> Obj | None:
    return next((c for c in api.objects[NODE]["status"]["conditions"] if c["type"] == ctype), None)


def annotate(api: FakeApi, value: list[dict[str, Any]] | None) -> None:
    api.objects[NODE]["metadata"].setdefault("annotations", {})[HEALTH_ANNOTATION] = \
        None if value is None else json.dumps(value)


def test_the_agent_posts_gpu_fault_while_an_entry_stands_and_drops_it_at_until_without_touching_ready(
        caplog: pytest.LogCaptureFixture) -> None:
    api, clock = StrategicApi(), VirtualClock(START)
    hb, health, kicks = heartbeat(api, clock)
    try:
        hb.register()
        hb.beat()
        assert condition(api, "GpuFault") is None  # never had a fault: no condition at all
        annotate(api, [entry(until=T0 + 5), {"id": "bad"}])
        clock.advance(1)
        with caplog.at_level(logging.WARNING):
            hb.beat()  # reads the Node: the fault is noted and the heartbeat kicked
        assert kicks and "entry {'id': 'bad'} skipped" in caplog.text
        clock.advance(0.1)
        hb.beat()  # the kicked beat writes it
        fault = condition(api, "GpuFault")
        assert fault is not None and (fault["status"], fault["reason"], fault["message"]) == \
            ("True", "XidStorm", "Xid 79 on every GPU")
        assert condition(api, "Ready")["status"] == "True"  # type: ignore[index]
        # The until passes: nobody removed the entry, the condition drops by itself at the next beat.
        clock.advance(4)
        hb.beat()
        cleared = condition(api, "GpuFault")
        assert cleared is not None and (cleared["status"], cleared["reason"]) == ("False", "NoFault")
        assert condition(api, "Ready")["status"] == "True"  # type: ignore[index]
    finally:
        health.stop()


def test_the_expiry_wakes_the_heartbeat_by_itself() -> None:
    class Wall:
        def now(self) -> datetime:
            return datetime.now(UTC)

    woke: list[float] = []
    expired = threading.Event()

    def kick() -> None:
        woke.append(datetime.now(UTC).timestamp())
        if len(woke) == 2:
            expired.set()

    health = InjectedHealth("gpu-node-0", Wall(), on_change=kick)
    try:
        until = datetime.now(UTC).timestamp() + 0.2
        health.note_node({"metadata": {"annotations": {HEALTH_ANNOTATION: json.dumps([entry(until=until)])}}})
        assert health.state() == ("True", "XidStorm", "Xid 79 on every GPU") and len(woke) == 1
        assert expired.wait(5), "the expiry never kicked the heartbeat"
        assert woke[1] >= until
        assert health.state() == ("False", "NoFault", "no GPU fault reported")
    finally:
        health.stop()


def test_a_beat_never_wipes_a_condition_the_agent_does_not_own_and_a_restart_clears_a_stale_fault() -> None:
    api, clock = StrategicApi(), VirtualClock(START)
    hb, health, _ = heartbeat(api, clock)
    try:
        hb.register()
        api.objects[NODE]["status"]["conditions"].append(
            {"type": "RemediationHeld", "status": "True", "reason": "BudgetExhausted", "message": "held"})
        annotate(api, [entry()])
        for _ in range(3):
            clock.advance(1)
            hb.beat()
        assert condition(api, "GpuFault")["status"] == "True"  # type: ignore[index]
        assert condition(api, "RemediationHeld") is not None
        assert all(ct == STRATEGIC_MERGE_PATCH for p, ct in api.content_types if p.endswith("/status"))
    finally:
        health.stop()
    # The agent restarts after the injection was removed: its registration keeps both, its first beats clear
    # the fault the earlier process posted (it knows it from the Node).
    annotate(api, None)
    hb2, health2, _ = heartbeat(api, clock)
    try:
        hb2.register()
        assert condition(api, "RemediationHeld") is not None
        for _ in range(2):
            clock.advance(1)
            hb2.beat()
        assert condition(api, "GpuFault")["status"] == "False"  # type: ignore[index]
        assert condition(api, "RemediationHeld") is not None
    finally:
        health2.stop()
