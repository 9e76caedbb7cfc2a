"""The live view's HTTP server: loopback only, the standard library's ``http.server`` in a thread of the run.

- ``GET /``: the page; ``GET /live.js``, ``/live.css``, ``/favicon.svg``: its script, style and icon;
  ``GET /report.css``: report.html's own style sheet, so the charts look the same.
- ``GET /events``: the run's :class:`~drills.records.live.events.EventLog` as server-sent events
  (``text/event-stream``), each with its id. A new stream replays the log from its start (a reload reaches the
  same state); a reconnecting one that sends ``Last-Event-ID`` gets only what came after. One stream per page,
  pushed as events come: the page never polls. A comment every :data:`KEEPALIVE_S` finds a gone browser.

Served under the same strict Content-Security-Policy as the reference platform's dashboard: scripts, styles and
connections to this origin only, no inline script or style, so a name that slipped into markup could not run.
Bound to 127.0.0.1 and answering only a ``Host`` of 127.0.0.1 or localhost at its port (a page elsewhere that
rebinds a name of its own to 127.0.0.1 gets nothing). Only GET and HEAD.
"""

from __future__ import annotations

import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from drills.errors import FiredrillError
from drills.records.evidence.report import report_css
from drills.records.live.events import EventLog

HOST = "127.0.0.1"
KEEPALIVE_S = 15.0
"""Seconds between keep-alive comments on an idle stream."""
RETRY_MS = 2000
"""How long a browser waits before reconnecting a dropped stream (the SSE ``retry:`` field)."""
SOCKET_TIMEOUT_S = 10.0
"""A browser that stops reading for this long loses its stream (its thread ends; the run never waits on it)."""
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                           "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
STATIC = {"/": ("live.html", "text/html; charset=utf-8"), "/live.js": ("live.js", "text/javascript; charset=utf-8"),
          "/live.css": ("live.css", "text/css; charset=utf-8"), "/favicon.svg": ("favicon.svg", "image/svg+xml")}


class LiveServerError(FiredrillError):
    """The live view could not start (the port is taken, or not a port)."""


def static_file(name: str) -> bytes:
    """The packaged file ``drills/records/live/static/<name>`` (package data, so a wheel carries it)."""
    return resources.files("drills.records.live").joinpath("static", name).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    timeout = SOCKET_TIMEOUT_S
    server_version = "firedrill-live"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: the run's console is the drills' progress, not a request log."""

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._route(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._route(body=True)

    def _refuse(self, status: HTTPStatus, why: str) -> None:
        data = why.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in SECURITY_HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _route(self, *, body: bool) -> None:
        host = (self.headers.get("Host") or "").strip().lower()
        if host not in self.server.hosts:
            self._refuse(HTTPStatus.MISDIRECTED_REQUEST, f"this live view answers {self.server.url} only\n")
            return
        path = self.path.split("?", 1)[0]
        if path == "/events":
            self._stream(body=body)
        elif path in STATIC or path == "/report.css":
            name, media = STATIC.get(path, ("report.css", "text/css; charset=utf-8"))
            data = self.server.asset(name)
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(data)))
            for k, v in SECURITY_HEADERS.items():
                self.send_header(k, v)
            self.end_headers()
            if body:
                self.wfile.write(data)
        else:
            self._refuse(HTTPStatus.NOT_FOUND, "not found\n")

    def _stream(self, *, body: bool) -> None:
        last = self.headers.get("Last-Event-ID", "").strip()
        last_id = int(last) if last.isdigit() else 0
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        for k, v in SECURITY_HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        if not body:
            return
        log = self.server.log
        try:
            self.wfile.write(f"retry: {RETRY_MS}\n\n".encode())
            self.wfile.flush()
            while True:
                events, closed = log.wait(last_id, KEEPALIVE_S)
                if events:
                    self.wfile.write(b"".join(e.sse() for e in events))
                    last_id = events[-1].id
                elif closed:
                    return
                else:
                    self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
        except OSError:  # the browser went away (reload, tab closed) or stopped reading
            return


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True  # server_close() joins every stream's thread: none outlives the run
    allow_reuse_address = True

    def __init__(self, log: EventLog, port: int) -> None:
        super().__init__((HOST, port), _Handler)
        self.log = log
        self.port = int(self.server_address[1])
        self.url = f"http://{HOST}:{self.port}/"
        self.hosts = {f"{HOST}:{self.port}", f"localhost:{self.port}"}
        self._assets: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def asset(self, name: str) -> bytes:
        with self._lock:
            if name not in self._assets:
                self._assets[name] = report_css().encode() if name == "report.css" else static_file(name)
            return self._assets[name]


class LiveServer:
    """The live view of one run: :meth:`start` it, publish into :attr:`log`, :meth:`close` it when the run ends
    (every open page gets the last events first). A context manager."""

    def __init__(self, log: EventLog | None = None, port: int = 0) -> None:
        self.log = log or EventLog()
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lingering = threading.Event()
        self._url: str | None = None

    def start(self) -> "LiveServer":
        try:
            self._server = _Server(self.log, self.port)
        except OverflowError as exc:
            raise LiveServerError(f"--live-port {self.port}: {exc}") from None
        except OSError as exc:
            raise LiveServerError(f"the live view cannot listen on {HOST}:{self.port}: {exc.strerror or exc} "
                                  "(pick another --live-port, or 0 for any free one)") from None
        self._url = self._server.url
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="firedrill-live", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/`` (kept after :meth:`close`)."""
        if self._url is None:
            raise LiveServerError("the live view is not started")
        return self._url

    def linger(self, seconds: float) -> None:
        """Keep serving ``seconds`` more (the run's final state, to pages open or opened now); :meth:`interrupt`
        (or Ctrl-C) ends it early."""
        if seconds > 0:
            self._lingering.wait(seconds)

    def interrupt(self) -> None:
        self._lingering.set()

    def close(self) -> None:
        """End the log (each stream sends what it has not yet, then ends), stop listening, and join every thread
        the server started. Idempotent."""
        self.log.close()
        self._lingering.set()
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "LiveServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
