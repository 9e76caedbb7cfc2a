"""The Ray driver's bad input and unreachable cluster: a clear error naming what and where (drills.ray.driver);
a job's log read once for two readers. Its reads and acts against a real Ray cluster are
tests/realray/test_driver.py; here a loopback HTTP server stands in for the dashboard's log answer."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from drills.ray.driver import RayDriver
from drills.ray.state import RayError


def test_an_address_that_is_not_a_url_is_refused_saying_how_to_write_it() -> None:
    with pytest.raises(RayError, match=r"'10.0.0.1:8265' is not an http\(s\) URL: write it as http://HOST:8265"):
        RayDriver("10.0.0.1:8265")


def test_a_dashboard_that_is_not_there_names_the_request_and_what_to_check() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    driver = RayDriver(f"http://127.0.0.1:{port}/", timeout=2)
    try:
        with pytest.raises(RayError, match=rf"GET http://127.0.0.1:{port}/api/v0/nodes\?detail=1.*is the Ray head up"):
            driver.nodes()
    finally:
        driver.close()


@pytest.fixture
def log_server() -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering GET /api/jobs/<id>/logs with a log that grows by a line per request."""
    asked: list[str] = []

    class Logs(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.path)
            body = json.dumps({"logs": "".join(f"line {i}\n" for i in range(len(asked)))}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Logs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_job_log_read_a_moment_ago_answers_a_reader_that_allows_it_and_no_other(
        log_server: tuple[str, list[str]]) -> None:
    url, asked = log_server
    now = [100.0]
    driver = RayDriver(url, clock=lambda: now[0])
    try:
        first = driver.job_logs("canary-fd000001")  # the drill's read: always asks
        now[0] += 0.3
        assert driver.job_logs("canary-fd000001", max_age=0.5) == first  # the watch's, 0.3 s later: reused
        assert len(asked) == 1
        assert driver.job_logs("canary-fd000001") == first + "line 1\n"  # the drill asks again
        now[0] += 0.6
        assert driver.job_logs("canary-fd000001", max_age=0.5).count("\n") == 3  # 0.6 s old: asked anew
        assert driver.job_logs("gang-a-fd000001", max_age=0.5).startswith("line 0")  # another job: its own read
        assert asked == ["/api/jobs/canary-fd000001/logs"] * 3 + ["/api/jobs/gang-a-fd000001/logs"]
    finally:
        driver.close()
