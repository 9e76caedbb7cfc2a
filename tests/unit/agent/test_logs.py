"""Container log files and the kubelet-style log server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from refplatform.agent.clock import VirtualClock
from refplatform.agent.logs import LogServer, LogStore
from refplatform.agent.workload import LogLine


@pytest.fixture
def store(tmp_path: Path) -> LogStore:
    return LogStore(tmp_path / "logs" / "n1")


@pytest.fixture
def server(store: LogStore) -> Iterator[str]:
    srv = LogServer(store)
    srv.start()
    try:
        yield f"http://127.0.0.1:{srv.port}"
    finally:
        srv.stop()


def lines(clock: VirtualClock, *texts: str) -> list[LogLine]:
    out = []
    for t in texts:
        clock.advance(1)
        out.append(LogLine(clock.now(), t))
    return out


def get(url: str, timeout: float = 5.0) -> urllib3.BaseHTTPResponse:
    return urllib3.request("GET", url, timeout=timeout, retries=False)


def test_logs_go_to_a_file_per_container_and_survive_a_new_store(store: LogStore, tmp_path: Path) -> None:
    clock = VirtualClock()
    log = store.open("default", "p", "main", fresh=True)
    log.append(lines(clock, "one", "two"))
    path = tmp_path / "logs" / "n1" / "default_p_main.log"
    assert path.read_text().splitlines() == ["2026-11-30T00:00:01.000000000Z one", "2026-11-30T00:00:02.000000000Z two"]
    again = LogStore(tmp_path / "logs" / "n1").get("default", "p", "main")
    assert again is not None and again.snapshot()[0] == [("2026-11-30T00:00:01.000000000Z", "one"), ("2026-11-30T00:00:02.000000000Z", "two")]
    assert LogStore(tmp_path / "logs" / "n1").get("default", "other", "main") is None
    # A restart appends; a new pod under the same name starts empty.
    store.open("default", "p", "main", fresh=False).append(lines(clock, "three"))
    assert len(path.read_text().splitlines()) == 3
    store.open("default", "p", "main", fresh=True)
    assert path.read_text() == ""


def test_tail_beyond_the_memory_reads_the_file(tmp_path: Path) -> None:
    from refplatform.agent.logs import ContainerLog

    clock = VirtualClock()
    log = ContainerLog(tmp_path / "x.log", keep=3)
    log.append(lines(clock, *[f"l{i}" for i in range(10)]))
    assert [t for _, t in log.snapshot(2)[0]] == ["l8", "l9"]
    assert [t for _, t in log.snapshot(5)[0]] == ["l5", "l6", "l7", "l8", "l9"]
    assert len(log.snapshot()[0]) == 10 and log.snapshot()[1] == 10
    assert log.snapshot(0)[0] == [] and len(log.snapshot(50)[0]) == 10


def test_server_answers_tail_and_timestamps_and_404(store: LogStore, server: str) -> None:
    clock = VirtualClock()
    log = store.open("default", "p", "main", fresh=True)
    log.append(lines(clock, "a", "b", "c"))
    log.close()
    r = get(f"{server}/containerLogs/default/p/main")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
    assert r.data == b"a\nb\nc\n"
    assert get(f"{server}/containerLogs/default/p/main?tailLines=2").data == b"b\nc\n"
    assert get(f"{server}/containerLogs/default/p/main?tailLines=1&timestamps=true").data == b"2026-11-30T00:00:03.000000000Z c\n"
    assert get(f"{server}/containerLogs/default/p/main?follow=true").data == b"a\nb\nc\n"  # stopped: ends at once
    missing = get(f"{server}/containerLogs/default/nope/main")
    assert missing.status == 404 and b"nope" in missing.data
    assert get(f"{server}/containerLogs/default/p/main?tailLines=x").status == 400
    assert get(f"{server}/other").status == 404
    assert get(f"{server}/healthz").data == b"ok"


def test_follow_streams_new_lines_until_the_container_stops(store: LogStore, server: str) -> None:
    clock = VirtualClock()
    log = store.open("default", "p", "main", fresh=True)
    log.append(lines(clock, "first"))
    r = urllib3.request("GET", f"{server}/containerLogs/default/p/main?follow=true", preload_content=False, timeout=10, retries=False)
    got: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        while chunk := r.read1(64):
            got.append(chunk)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 5
    while b"".join(got) != b"first\n" and time.monotonic() < deadline:
        done.wait(0.02)
    log.append(lines(clock, "second"))
    while b"".join(got) != b"first\nsecond\n" and time.monotonic() < deadline:
        done.wait(0.02)
    assert not done.is_set()
    log.close()
    assert done.wait(5), "follow did not end when the container stopped"
    assert b"".join(got) == b"first\nsecond\n"


def test_follow_ends_when_the_client_goes_away(store: LogStore, server: str) -> None:
    log = store.open("default", "p", "main", fresh=True)
    port = int(server.rsplit(":", 1)[1])
    before = threading.active_count()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /containerLogs/default/p/main?follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.0 200")
        assert threading.active_count() == before + 1  # the handler thread follows
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before, "the follower did not notice the client left"
    assert not log.closed


def test_healthz_answers_the_agents_health(store: LogStore) -> None:
    state = {"health": (True, "ok")}
    srv = LogServer(store, health=lambda: state["health"])
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}/healthz"
        ok = get(url)
        assert (ok.status, ok.data) == (200, b"ok")
        state["health"] = (False, "partitioned for 1.0s: no API traffic")
        bad = get(url)
        assert (bad.status, bad.data) == (503, b"partitioned for 1.0s: no API traffic")

        def broken() -> tuple[bool, str]:
            raise RuntimeError("boom")

        srv._server.health = broken
        assert get(url).status == 503
    finally:
        srv.stop()


def test_healthz_defaults_to_healthy(server: str) -> None:
    resp = get(server + "/healthz")
    assert (resp.status, resp.data) == (200, b"ok")
