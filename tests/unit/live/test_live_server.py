"""The live view's event log and its loopback server: the stream a page reads, replayed from the start on a reload
and resumed after ``Last-Event-ID`` on a reconnect; the page's files under a strict policy; nothing left running."""

from __future__ import annotations

import http.client
import io
import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import redirect_stderr
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from drills.bdd.run import ExitCode, RunOptions, live_by_default, run

from drills.records.live import (
    ChartsDrawn, EventKind, EventLog, LiveServer, LiveServerError, PhaseMeasured, RunFinished, RunStarted,
    ScenarioStarted, StepChanged, StepLine, StepState, VerdictGiven,
)
from drills.records.live.events import without_inline_style
from drills.records.live.server import CONTENT_SECURITY_POLICY

READ_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Sse:
    id: int
    event: str
    data: dict[str, Any]


def read_events(response: http.client.HTTPResponse, count: int | None) -> list[Sse]:
    """Read server-sent events from ``response`` until ``count`` of them came (None: until the stream ends)."""
    out: list[Sse] = []
    fields: dict[str, str] = {}
    while count is None or len(out) < count:
        line = response.readline()
        if not line:
            return out
        text = line.decode().rstrip("\n")
        if text == "":
            if "data" in fields:
                out.append(Sse(int(fields["id"]), fields["event"], json.loads(fields["data"])))
            fields = {}
        elif not text.startswith(":"):
            name, _, value = text.partition(": ")
            fields[name] = value
    return out


def stream(server: LiveServer, last_id: int | None = None) -> http.client.HTTPResponse:
    headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
    response = urllib.request.urlopen(urllib.request.Request(server.url + "events", headers=headers),
                                      timeout=READ_TIMEOUT_S)
    assert response.headers["Content-Type"].startswith("text/event-stream")
    return response


def scenario(key: str = "s1") -> ScenarioStarted:
    return ScenarioStarted(key, "Node pull", "A <b>job</b> survives", ("clause:5.1",),
                           (StepLine("Given", "a canary"), StepLine("When", "I pull"), StepLine("Then", "detect")))


@pytest.fixture
def live() -> Iterator[LiveServer]:
    with LiveServer() as server:
        yield server


def test_a_stream_replays_the_log_from_its_start_and_then_follows_it(live: LiveServer) -> None:
    log = live.log
    log.publish(RunStarted("20261202T000000Z-abc123", "embedded reference platform", "2026-12-02T00:00:00.000000Z",
                           "reports/20261202T000000Z-abc123"))
    log.publish(scenario())
    with stream(live) as first:
        got = read_events(first, 2)
        assert [(e.id, e.event) for e in got] == [(1, "run"), (2, "scenario")]
        assert got[1].data["name"] == "A <b>job</b> survives"  # as text: the page sets it with textContent
        assert got[1].data["steps"][1] == {"keyword": "When", "text": "I pull"}
        log.publish(StepChanged("s1", 0, StepState.PASSED, 1.25))
        log.publish(PhaseMeasured("s1", "detect", 2.3, "s", 2.29, "<= 5 s", "PASS", "detect: measured 2.300 s"))
        live_events = read_events(first, 2)
    assert [(e.id, e.event) for e in live_events] == [(3, "step"), (4, "phase")]
    assert live_events[0].data == {"scenario": "s1", "index": 0, "state": "passed", "seconds": 1.25}
    assert live_events[1].data["threshold"] == "<= 5 s" and live_events[1].data["verdict"] == "PASS"
    # a reload: a new stream, no Last-Event-ID, gets the same four events in the same order
    with stream(live) as again:
        assert read_events(again, 4) == [*got, *live_events]


def test_a_reconnect_with_last_event_id_gets_only_what_came_after(live: LiveServer) -> None:
    for i in range(3):
        live.log.publish(StepChanged("s1", i, StepState.RUNNING))
    with stream(live, last_id=2) as resumed:
        assert [e.id for e in read_events(resumed, 1)] == [3]
        live.log.publish(VerdictGiven("s1", "PASS", 12.5, "node-pull", ("detect: measured 2.300 s",)))
        assert [(e.id, e.event) for e in read_events(resumed, 1)] == [(4, "verdict")]


def test_a_replay_sends_only_the_latest_charts_of_a_scenario() -> None:
    log = EventLog()
    log.publish(scenario())
    log.publish(ChartsDrawn.of("s1", "<article>one</article>"))
    log.publish(ChartsDrawn.of("s2", "<article>other</article>"))
    log.publish(ChartsDrawn.of("s1", "<article>two</article>"))
    replay = log.since(0)
    assert [(e.id, e.kind) for e in replay] == [(1, EventKind.SCENARIO), (3, EventKind.CHART), (4, EventKind.CHART)]
    assert [e.data()["html"] for e in replay[1:]] == ["<article>other</article>", "<article>two</article>"]
    assert [e.id for e in log.since(1)] == [3, 4] and log.since(4) == []


def test_closing_sends_every_open_stream_its_last_events_then_ends_it_and_joins_every_thread() -> None:
    server = LiveServer().start()
    server.log.publish(scenario())
    response = stream(server)
    assert [e.event for e in read_events(response, 1)] == ["scenario"]
    server.log.publish(RunFinished(0, "1 passed, 0 failed, 0 inconclusive, 0 harness errors", "reports/r",
                                   "reports/r/report.html", "firedrill verify reports/r"))
    closer = threading.Thread(target=server.close)
    closer.start()
    rest = read_events(response, None)  # to the end of the stream: the server ends it
    closer.join(READ_TIMEOUT_S)
    response.close()
    assert not closer.is_alive()
    assert [(e.event, e.data["verify"]) for e in rest] == [("finished", "firedrill verify reports/r")]
    assert [t.name for t in threading.enumerate() if t.name == "firedrill-live"] == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1].strip("/"))), timeout=2).close()
    assert server.log.closed


def test_the_page_and_its_files_are_served_under_a_strict_policy_on_loopback_only(live: LiveServer) -> None:
    host, port = live.url.removeprefix("http://").strip("/").split(":")
    assert host == "127.0.0.1" and int(port) > 0
    for path, media in (("", "text/html"), ("live.js", "text/javascript"), ("live.css", "text/css"),
                        ("report.css", "text/css"), ("favicon.svg", "image/svg+xml")):
        with urllib.request.urlopen(live.url + path, timeout=READ_TIMEOUT_S) as response:
            body = response.read().decode()
            assert response.headers["Content-Type"].startswith(media), path
            assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
            assert response.headers["X-Content-Type-Options"] == "nosniff"
    page = urllib.request.urlopen(live.url, timeout=READ_TIMEOUT_S).read().decode()
    assert '<script src="live.js" defer></script>' in page and "<script>" not in page and "style=" not in page
    assert "svg.chart" in urllib.request.urlopen(live.url + "report.css", timeout=READ_TIMEOUT_S).read().decode()

    def status(path: str, method: str = "GET", host_header: str | None = None) -> int:
        conn = http.client.HTTPConnection(host, int(port), timeout=READ_TIMEOUT_S)
        try:
            conn.request(method, path, headers={"Host": host_header} if host_header else {})
            return conn.getresponse().status
        finally:
            conn.close()
    assert status("/nope") == 404
    assert status("/", "POST") == 501
    assert status("/", host_header=f"localhost:{port}") == 200
    assert status("/", host_header=f"evil.example:{port}") == 421  # a rebound name is not this page's origin
    assert status("/events", host_header=f"evil.example:{port}") == 421


def test_a_taken_port_is_an_error_that_says_what_to_do(live: LiveServer) -> None:
    port = int(live.url.rsplit(":", 1)[1].strip("/"))
    with pytest.raises(LiveServerError, match="--live-port"):
        LiveServer(port=port).start()


def test_inline_style_leaves_the_charts_for_a_strict_policy() -> None:
    html = ('<li><span class="sw bound" style="background: #2f6fb0"></span>gang</li>'
            '<col style="width: 6%"><span>style=&#34;x&#34;</span>')
    assert without_inline_style(html) == ('<li><span class="sw bound" data-swatch="#2f6fb0"></span>gang</li>'
                                           '<col><span>style=&#34;x&#34;</span>')


def test_on_by_default_only_at_a_terminal_that_no_ci_runs() -> None:
    assert live_by_default({}, interactive=True)
    assert not live_by_default({"CI": "true"}, interactive=True)
    assert not live_by_default({}, interactive=False)


def test_a_run_whose_live_port_is_taken_stops_before_it_starts_anything(live: LiveServer, tmp_path: Path) -> None:
    port = int(live.url.rsplit(":", 1)[1].strip("/"))
    out, err = io.StringIO(), io.StringIO()
    features = Path(__file__).resolve().parents[3] / "features"
    with redirect_stderr(err):
        code = run(RunOptions(features, reports=tmp_path / "reports", live=True, live_port=port),
                   Console(file=out, markup=False))
    assert code == ExitCode.USAGE
    assert "--live-port" in err.getvalue() and "Starting" not in out.getvalue()
    assert not (tmp_path / "reports").exists()


def test_run_help_says_what_the_live_view_is_and_when_it_is_on() -> None:
    from typer.testing import CliRunner

    from drills.cli import app

    text = " ".join(CliRunner().invoke(app, ["run", "--help"], terminal_width=200).output.split())
    assert "--live / --no-live" in text and "127.0.0.1" in text and "$CI is unset" in text
    assert "--live-port" in text and "--live-linger" in text


def test_lingering_keeps_the_final_state_served_until_its_time_or_an_interrupt(live: LiveServer) -> None:
    live.log.publish(RunFinished(1, "0 passed, 1 failed, 0 inconclusive, 0 harness errors"))
    lingering = threading.Thread(target=live.linger, args=(60.0,))
    lingering.start()
    with stream(live) as late:  # a page opened after the run ended still gets all of it
        assert [(e.event, e.data["exit_code"]) for e in read_events(late, 1)] == [("finished", 1)]
    assert lingering.is_alive()
    live.interrupt()
    lingering.join(READ_TIMEOUT_S)
    assert not lingering.is_alive()
