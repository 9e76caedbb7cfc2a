"""Locust, run headless in its own process, against the real inference canary process and the real API server.

Issue 14, Done-when 2: locust's request total matches an independent count, the canary's own served count
(its /metrics counter and its ``served`` log lines), within 0.5 %, and every request locust sent carries an id
the canary logged. This test never imports locust: ``drills.load.run`` starts it as a subprocess.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from drills.load.run import LoadSpec, LoadUser, Outcome, run_load
from refplatform.cluster import Cluster, ManagedProcess, wait_until

pytestmark = pytest.mark.integration

TTFT_S, TPOT_S, MAX_TOKENS = 0.02, 0.004, 8


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[tuple[ManagedProcess, str]]:
    """``python -m drills.inference serve`` on a free loopback port, its JSON log in a file."""
    port_file = tmp_path / "port"
    proc = ManagedProcess.spawn("inference", [
        sys.executable, "-m", "drills.inference", "serve", "--host", "127.0.0.1", "--port", "0",
        "--port-file", str(port_file), "--ttft-seconds", str(TTFT_S), "--tpot-seconds", str(TPOT_S),
        "--max-batch", "16", "--max-queue", "64"], tmp_path / "inference.log")
    try:
        wait_until(lambda: port_file.is_file() or not proc.alive(), 20, "the inference canary's port file")
        assert proc.alive(), proc.tail()
        yield proc, f"http://127.0.0.1:{int(port_file.read_text())}"
    finally:
        proc.stop()


def served_total(url: str) -> int:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values = [float(m.group(1)) for m in
              re.finditer(r"^firedrill_inference_requests_served_total(?:\{[^}]*\})? (\S+)$", text, re.M)]
    assert values, f"no firedrill_inference_requests_served_total in /metrics:\n{text[:500]}"
    return int(sum(values))


def test_locust_total_matches_the_canarys_own_served_count(canary: tuple[ManagedProcess, str],
                                                           tmp_path: Path) -> None:
    proc, url = canary
    before = time.monotonic()
    result = run_load(LoadSpec(host=url, out_dir=tmp_path / "load", users=4, spawn_rate=4, duration_s=3,
                               max_tokens=MAX_TOKENS, user_classes=(LoadUser.INFERENCE,)))
    after = time.monotonic()
    served = served_total(url)
    assert proc.stop() == 143, proc.tail()  # SIGTERM: drained and exited as the contract says
    logged = set(served_lines(proc))

    # every request was answered: nothing failed, nothing lost, and the samples agree with locust's own totals
    assert result.exit_code == 0 and result.totals.sent > 50, result
    assert (result.totals.failed, result.totals.lost) == (0, 0), [s for s in result.samples if s.error][:3]
    assert result.locust.requests == result.totals.sent and result.locust.failures == 0
    # Done-when 2: locust's total against the canary's independent count, within 0.5 %
    assert abs(result.locust.requests - served) <= 0.005 * served, (result.locust.requests, served)
    assert len(logged) == served, "the canary's served lines and its counter disagree"
    missing = [s.request_id for s in result.samples if s.request_id not in logged]
    assert missing == [], f"{len(missing)} requests the canary never logged as served, e.g. {missing[:3]}"
    assert len({s.request_id for s in result.samples}) == len(result.samples), "request ids are not unique"
    # the samples' clock is this process's monotonic clock, so they line up with fault instants taken here
    assert all(before <= s.start_mono <= s.end_mono <= after for s in result.samples)
    # TTFT is the first streamed chunk, not the whole answer: at least the canary's TTFT, well under the latency
    inference = result.kind("inference")
    assert inference is not None and inference.ttft is not None and inference.latency is not None
    assert inference.ttft.p50 >= TTFT_S and inference.latency.p50 >= TTFT_S + (MAX_TOKENS - 1) * TPOT_S
    assert inference.ttft.p50 < inference.latency.p50
    assert result.locust.csv.requests <= result.locust.requests  # the CSV is rewritten once a second only


def served_lines(proc: ManagedProcess) -> dict[str, dict[str, object]]:
    events = [json.loads(line) for line in proc.log_path.read_text().splitlines() if line.startswith("{")]
    return {str(e["request_id"]): e for e in events if e.get("event") == "served"}


def test_client_ttft_is_the_canarys_own_ttft(canary: tuple[ManagedProcess, str], tmp_path: Path) -> None:
    """The TTFT locust measures is what the server did, not a transport artefact: per request, the client's time
    to the first chunk exceeds the canary's logged ttft_s by less than 10 ms (loopback, no queueing)."""
    proc, url = canary
    result = run_load(LoadSpec(host=url, out_dir=tmp_path / "load", users=2, spawn_rate=2, duration_s=2,
                               max_tokens=MAX_TOKENS))
    proc.stop()
    served = served_lines(proc)
    gaps = sorted(s.ttft_s - float(served[s.request_id]["ttft_s"]) for s in result.samples  # type: ignore[arg-type]
                  if s.ttft_s is not None and s.request_id in served)
    assert len(gaps) > 20
    assert gaps[len(gaps) // 2] < 0.010 and gaps[int(len(gaps) * 0.95)] < 0.020, gaps[-5:]


def test_a_run_stopped_early_lets_its_requests_finish_and_still_agrees_with_the_canary(
        canary: tuple[ManagedProcess, str], tmp_path: Path) -> None:
    """A drill that ends the load early (SIGTERM to locust) loses no request to the stop: users finish the
    request they are in (--stop-timeout), the samples and locust's JSON are complete, and the canary agrees."""
    from drills.load.run import LoadRun

    proc, url = canary
    with LoadRun(LoadSpec(host=url, out_dir=tmp_path / "load", users=4, spawn_rate=4, duration_s=60,
                          max_tokens=MAX_TOKENS)) as run:
        wait_until(lambda: len(run.samples()) >= 20, 20, "20 samples")
        run.stop()
        result = run.wait()
    assert result.wall_s < 30 and result.exit_code == 0
    assert (result.totals.lost, result.totals.failed) == (0, 0), [s.error for s in result.samples if s.error][:3]
    assert result.locust.requests == result.totals.sent == served_total(url) >= 20


def test_a_canary_that_dies_mid_run_shows_as_lost_requests(canary: tuple[ManagedProcess, str],
                                                           tmp_path: Path) -> None:
    """Killing the canary mid-stream turns in-flight and later requests into ``lost`` samples, counted by the
    samples (sent - answered - failed) and by locust as failures; the fault instant splits answered from lost."""
    from drills.load.run import LoadRun

    proc, url = canary
    with LoadRun(LoadSpec(host=url, out_dir=tmp_path / "load", users=3, spawn_rate=3, duration_s=3,
                          max_tokens=MAX_TOKENS, request_timeout_s=5)) as run:
        wait_until(lambda: sum(s.outcome is Outcome.ANSWERED for s in run.samples()) >= 10, 20,
                   "10 answered requests")
        fault = time.monotonic()
        proc.signal_group(signal.SIGKILL)
        result = run.wait()
    assert result.exit_code == 1  # locust's --exit-code-on-error: some requests failed
    assert result.totals.lost > 0 and result.totals.answered >= 10
    assert result.totals.lost == result.totals.sent - result.totals.answered - result.totals.failed
    assert result.locust.failures == result.totals.failed + result.totals.lost
    assert all(s.start_mono < fault for s in result.samples if s.outcome is Outcome.ANSWERED)
    assert all(s.end_mono >= fault for s in result.samples if s.outcome is Outcome.LOST)


def test_control_plane_user_writes_lists_and_watches_through_the_kubernetes_client(apiserver: Cluster,
                                                                                   tmp_path: Path) -> None:
    from kubernetes import client, config

    assert apiserver.kubeconfig is not None
    result = run_load(LoadSpec(host=apiserver.url, out_dir=tmp_path / "load", users=2, spawn_rate=2, duration_s=3,
                               user_classes=(LoadUser.CONTROL_PLANE,), kubeconfig=apiserver.kubeconfig,
                               k8s_object="pod", run_id="cp1"))
    kinds = {k.kind: k for k in result.by_kind}
    assert set(kinds) == {"k8s-create", "k8s-update", "k8s-list", "k8s-watch"}, kinds
    assert result.totals.failed == 0 and result.totals.lost == 0, [s.error for s in result.samples if s.error][:3]
    assert result.locust.requests == result.totals.sent
    watch = kinds["k8s-watch"]
    assert watch.ttft is not None and watch.ttft.max < 5, "a watch did not deliver its own fresh write"
    # every write the API acknowledged is found afterwards
    created = {s.object_name for s in result.samples if s.kind == "k8s-create" and s.outcome is Outcome.ANSWERED}
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(apiserver.kubeconfig)))
    found = {p.metadata.name for p in api.list_namespaced_pod("default", label_selector="firedrill.dev/load=cp1").items}
    assert created and created <= found, created - found


class IdleClosingHandler(BaseHTTPRequestHandler):
    """Streams a two-chunk answer on keep-alive connections and closes a connection idle for 0.2 s, as the
    canary does after its idle timeout and as load balancers do; counts what it answered."""

    protocol_version = "HTTP/1.1"
    timeout = 0.2
    answered: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for data in (b'data: {"choices":[{"text":"hi","index":0}]}\n\n', b"data: [DONE]\n\n", b""):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.answered.append(self.headers["X-Request-Id"])


def test_a_keep_alive_connection_the_server_closed_while_idle_is_reopened_not_counted_lost(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), IdleClosingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        result = run_load(LoadSpec(host=f"http://127.0.0.1:{server.server_address[1]}", out_dir=tmp_path / "load",
                                   users=2, spawn_rate=2, duration_s=2, wait_s=0.4))
    finally:
        server.shutdown()
        server.server_close()
    assert result.totals.sent >= 6  # each user waited past the idle timeout at least twice
    assert (result.totals.lost, result.totals.failed) == (0, 0), [s.error for s in result.samples if s.error][:3]
    assert sorted(s.request_id for s in result.samples) == sorted(IdleClosingHandler.answered)


class RefusingFirstHandler(BaseHTTPRequestHandler):
    """Refuses the first attempt of every request id (503, as a draining replica does, or a connection closed
    before any status line) and answers the second; records every attempt it saw."""

    protocol_version = "HTTP/1.1"
    seen: dict[str, int] = {}
    close_instead = False

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        rid = self.headers["X-Request-Id"]
        self.seen[rid] = self.seen.get(rid, 0) + 1
        if self.seen[rid] == 1:
            if self.close_instead:
                self.close_connection = True
                return
            body = b'{"error": {"message": "draining"}}'
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True
            return
        _stream_two_chunks(self)


def _stream_two_chunks(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    for data in (b'data: {"choices":[{"text":"hi","index":0}]}\n\n', b"data: [DONE]\n\n", b""):
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


def _refusing_server(close_instead: bool) -> tuple[ThreadingHTTPServer, type[RefusingFirstHandler]]:
    handler = type("Handler", (RefusingFirstHandler,), {"seen": {}, "close_instead": close_instead})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


@pytest.mark.parametrize("close_instead", [False, True], ids=["503", "closed-before-status"])
def test_the_retry_policy_sends_a_refused_request_again_and_keeps_its_first_start(tmp_path: Path,
                                                                                   close_instead: bool) -> None:
    server, handler = _refusing_server(close_instead)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        retried = run_load(LoadSpec(host=url, out_dir=tmp_path / "retry", users=2, spawn_rate=2, duration_s=1,
                                    retries=1, retry_backoff_s=0.05))
    finally:
        server.shutdown()
        server.server_close()
    assert retried.totals.sent >= 4 and (retried.totals.failed, retried.totals.lost) == (0, 0), \
        [s.error for s in retried.samples if s.error][:3]
    assert {s.attempts for s in retried.samples} == {2}
    assert all(handler.seen[s.request_id] == 2 for s in retried.samples)
    # the latency a user felt includes the refused attempt and the back-off
    assert min(s.latency_s for s in retried.samples) >= 0.05


def test_without_retries_a_refused_request_is_failed_or_lost(tmp_path: Path) -> None:
    server, _ = _refusing_server(False)
    try:
        result = run_load(LoadSpec(host=f"http://127.0.0.1:{server.server_address[1]}", out_dir=tmp_path / "once",
                                   users=1, spawn_rate=1, duration_s=1))
    finally:
        server.shutdown()
        server.server_close()
    assert result.totals.sent >= 2 and result.totals.answered == 0
    assert {(s.outcome, s.status, s.attempts) for s in result.samples} == {(Outcome.FAILED, 503, 1)}


class PortRecordingHandler(BaseHTTPRequestHandler):
    """Streams a two-chunk answer and records the client port each request came from."""

    protocol_version = "HTTP/1.1"
    ports: list[int] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.ports.append(self.client_address[1])
        _stream_two_chunks(self)


@pytest.mark.parametrize("keep_alive", [True, False], ids=["one-per-user", "one-per-request"])
def test_keep_alive_decides_whether_a_user_reuses_its_connection(tmp_path: Path, keep_alive: bool) -> None:
    handler = type("Handler", (PortRecordingHandler,), {"ports": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = run_load(LoadSpec(host=f"http://127.0.0.1:{server.server_address[1]}", out_dir=tmp_path / "ka",
                                   users=1, spawn_rate=1, duration_s=1, wait_s=0.05, keep_alive=keep_alive))
    finally:
        server.shutdown()
        server.server_close()
    # two requests tell one connection from one per request; a busy machine sends fewer than 20 in the second
    # (3 once, with the real-cluster suite beside it), so more are not required
    assert result.totals.answered == result.totals.sent >= 2, [s.error for s in result.samples if s.error]
    assert len(set(handler.ports)) == (1 if keep_alive else len(handler.ports)), handler.ports
