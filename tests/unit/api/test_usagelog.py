"""The API server's usage recorder (commits -> tracker -> usage.sqlite3) and the leak report's window parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refplatform.api.errors import ApiError
from refplatform.api.leakreport import parse_window, render_metrics
from refplatform.api.usagelog import USAGE_FILE, UsageRecorder
from refplatform.core.accounting import Window
from refplatform.resources import NODES, PODS
from refplatform.store import Store

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def node(ready: str = "True") -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "4"},
                                                  "conditions": [{"type": "Ready", "status": ready}]}}


def pod(**extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "p", "namespace": "default"},
                           "spec": {"containers": [{"name": "main",
                                                    "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    obj["spec"].update(extra)
    return obj


def scenario(store: Store, clock: Clock) -> None:
    store.create(NODES.key, node(), now="x")
    created = store.create(PODS.key, pod(), now="x")
    clock.t = T0 + 10
    store.update(PODS.key, {**created, "spec": {**created["spec"], "nodeName": "n"}})
    clock.t = T0 + 30
    store.mutate(NODES.key, "", "n", lambda n: {**n, "status": {**n["status"], "conditions": [
        {"type": "Ready", "status": "False"}]}})
    clock.t = T0 + 40


def test_commits_become_layers_and_survive_a_restart(tmp_path: Path) -> None:
    store, clock = Store(tmp_path), Clock()
    rec = UsageRecorder(store, tmp_path, clock=clock, flush_interval=60).start()
    scenario(store, clock)
    report = rec.report(Window(T0, T0 + 40))
    # 4 healthy GPUs for 30 s; the pod holds 2 of them from 10 s until the node goes unhealthy at 30 s.
    assert report.capacity_gpu_hours * 3600 == pytest.approx(120.0)
    assert report.allocated.gpu_hours * 3600 == pytest.approx(40.0)
    rec.close()
    assert (tmp_path / USAGE_FILE).exists()

    again = UsageRecorder(store, tmp_path, clock=clock, flush_interval=60).start()
    try:
        assert again.report(Window(T0, T0 + 40)) == report
    finally:
        again.close()
        store.close()


def test_a_change_made_while_nobody_recorded_is_observed_at_start(tmp_path: Path) -> None:
    store, clock = Store(tmp_path), Clock()
    store.create(NODES.key, node(), now="x")
    clock.t = T0 + 20
    rec = UsageRecorder(store, None, clock=clock, flush_interval=60).start()
    try:
        clock.t = T0 + 50
        store.delete(NODES.key, "", "n")
        clock.t = T0 + 60
        assert rec.report(Window(T0, T0 + 60)).capacity_gpu_hours * 3600 == pytest.approx(4 * 30)
        assert b"firedrill_healthy_gpus 0.0" in render_metrics(rec)
    finally:
        rec.close()
        store.close()


@pytest.mark.parametrize(("start", "end", "expected"), [
    (None, None, (T0 - 8 * 3600, T0)),  # today 00:00 UTC to now
    ("2027-01-15T07:00:00Z", None, (T0 - 3600, T0)),
    ("2027-01-15T07:00:00Z", "2999-01-01T00:00:00Z", (T0 - 3600, T0)),  # clipped to now
    ("2027-01-15T08:00:00+01:00", "2027-01-15T07:30:00.500Z", (T0 - 3600, T0 - 1799.5)),
    (None, "2027-01-14T12:00:00Z", (T0 - 32 * 3600, T0 - 20 * 3600)),
])
def test_window_parameters(start: str | None, end: str | None, expected: tuple[float, float]) -> None:
    w = parse_window(start, end, T0)
    assert (w.start, w.end) == expected


@pytest.mark.parametrize(("start", "end", "named"), [
    ("yesterday", None, "start"), (None, "soon", "end"), ("2027-01-15T07:00:00", None, "start"),
    ("2027-01-15T08:00:00Z", "2027-01-15T07:00:00Z", "start"), ("2999-01-01T00:00:00Z", None, "start"),
])
def test_bad_window_parameters_are_400_naming_the_parameter(start: str | None, end: str | None, named: str) -> None:
    with pytest.raises(ApiError) as exc:
        parse_window(start, end, T0)
    assert exc.value.code == 400 and f"{named}=" in exc.value.message and "RFC 3339" in exc.value.message


def test_progress_only_changes_are_written_sparsely_and_replay_to_the_same_report(tmp_path: Path) -> None:
    import sqlite3
    from datetime import UTC, datetime

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    store, clock = Store(tmp_path), Clock()
    rec = UsageRecorder(store, tmp_path, clock=clock, flush_interval=60).start()
    store.create(NODES.key, node(), now="x")
    store.create(PODS.key, pod(nodeName="n"), now="x")
    store.mutate(PODS.key, "default", "p", lambda p: {**p, "status": {"phase": "Running", "containerStatuses": [
        {"name": "main", "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}}}]}})
    for k in range(1, 101):
        clock.t = T0 + k
        anns = {"firedrill.dev/progress-at": iso(T0 + k), "firedrill.dev/stepped-seconds": f"{k:.3f}",
                "firedrill.dev/input-stall-seconds": f"{0.5 * max(0, k - 50):.3f}",  # input stalls from 50 s on
                "firedrill.dev/comm-stall-seconds": "0.000",
                "firedrill.dev/step": str(10 * k)}
        store.mutate(PODS.key, "default", "p", lambda p: {**p, "metadata": {**p["metadata"], "annotations": anns}})
    clock.t = T0 + 120
    window = Window(T0 + 5.5, T0 + 95.5)
    report = rec.report(window)
    assert report.active.gpu_hours * 3600 == pytest.approx(2 * (44.5 + 0.5 * 45.5))  # 2 GPUs, all then half
    rec.close()
    db = sqlite3.connect(tmp_path / USAGE_FILE)
    try:
        rows = db.execute("SELECT COUNT(*) FROM observations WHERE resource = 'pods'").fetchone()[0]
    finally:
        db.close()
    assert rows <= 10  # created, bound+running, where the rates changed, one every 30 s, the last; not 100
    again = UsageRecorder(store, tmp_path, clock=clock, flush_interval=60).start()
    try:
        assert again.report(window) == report
    finally:
        again.close()
        store.close()
