"""The HTTP side: the shared serving state under one lock, and the request handler threads that use it.

:class:`Service` owns the admission state, the metrics and the phase
(warming up, ready, draining) behind one condition variable, and writes the
``served``/``rejected``/``aborted`` lines under the same lock that counts them,
so a scrape of ``/metrics`` never disagrees with the log.  Each connection
runs in its own thread (``ThreadingHTTPServer``); a request waits for its
batch slot on the condition, then sleeps until each token is due and writes it.
"""

from __future__ import annotations

import enum
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from drills.inference import protocol
from drills.inference.admission import Admission, Decision, Ticket
from drills.inference.config import MAX_TOKENS_LIMIT, Config
from drills.inference.device import Device, DeviceState
from drills.inference.errors import BadRequest
from drills.inference.log import Event, EventLog
from drills.inference.metrics import CONTENT_TYPE, Metrics

__all__ = ["Phase", "Refusal", "Service", "make_server"]

MAX_BODY = 1 << 20
CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class Phase(enum.Enum):
    """Where the server is in its life."""

    WARMING = "warming"
    """``--warmup-seconds`` have not passed (the model is loading): 503."""
    READY = "ready"
    """Completions are admitted."""
    DRAINING = "draining"
    """SIGTERM arrived: new requests get 503, admitted ones finish."""


class Refusal(enum.Enum):
    """Why a completion request was answered with an error (the ``reason`` of a ``rejected`` line)."""

    BAD_REQUEST = "bad_request"
    """400: the body or a header is wrong."""
    QUEUE_FULL = "queue_full"
    """429: the batch is busy and ``--max-queue`` requests already wait."""
    WARMING_UP = "warming_up"
    """503: the warm-up has not passed."""
    DRAINING = "draining"
    """503: the server is shutting down."""


STATUS = {Refusal.BAD_REQUEST: 400, Refusal.QUEUE_FULL: 429, Refusal.WARMING_UP: 503, Refusal.DRAINING: 503}
KIND = {Refusal.BAD_REQUEST: protocol.ErrorKind.INVALID_REQUEST, Refusal.QUEUE_FULL: protocol.ErrorKind.RATE_LIMIT,
        Refusal.WARMING_UP: protocol.ErrorKind.UNAVAILABLE, Refusal.DRAINING: protocol.ErrorKind.UNAVAILABLE}


@dataclass(frozen=True)
class Outcome:
    """What one finished request did, for its ``served`` line."""

    tokens: int
    stream: bool
    ttft_s: float
    total_s: float
    queued_s: float


class Service:
    """The serving state shared by every handler thread."""

    def __init__(self, cfg: Config, log: EventLog, device: Device,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.log = log
        self.clock = clock
        self._device = device
        self._cond = threading.Condition()
        self._admission = Admission(cfg.max_batch, cfg.max_queue)
        self.metrics = Metrics(cfg.model)
        self.phase = Phase.WARMING
        self.rejected = 0
        self.aborted = 0

    # -- phases -------------------------------------------------------------------------------------
    def ready(self, warmup_s: float) -> None:
        with self._cond:
            if self.phase is Phase.WARMING:
                self.phase = Phase.READY
                self.log.emit(Event.READY, warmup_s=round(warmup_s, 6))

    def drain(self) -> None:
        with self._cond:
            self.phase = Phase.DRAINING
            self.log.emit(Event.DRAINING, waiting=self._admission.waiting, running=self._admission.running)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing runs or waits; False when ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._admission.idle, timeout)

    def counts(self) -> dict[str, int]:
        """The ``exit`` line's numbers."""
        with self._cond:
            return {"served": self.metrics.served, "received": self.metrics.received, "rejected": self.rejected,
                    "aborted": self.aborted, "unfinished": self._admission.waiting + self._admission.running}

    def metrics_text(self) -> str:
        with self._cond:
            return self.metrics.render(self._admission.waiting, self._admission.running)

    # -- one request --------------------------------------------------------------------------------
    def receive(self) -> float:
        """Count an arriving completion request; returns its arrival instant."""
        with self._cond:
            self.metrics.received += 1
        return self.clock()

    def reject(self, request_id: str, refusal: Refusal) -> None:
        with self._cond:
            self.rejected += 1
            self.log.emit(Event.REJECTED, request_id=request_id, status=STATUS[refusal], reason=refusal.value)

    def enter(self, request_id: str, arrived: float) -> Ticket | Refusal:
        """A ticket (running or waiting), or why the request is turned away (the caller logs it)."""
        with self._cond:
            if self.phase is Phase.WARMING:
                return Refusal.WARMING_UP
            if self.phase is Phase.DRAINING:
                return Refusal.DRAINING
            before = self._admission.running
            decision, ticket = self._admission.arrive(request_id, arrived)
            if decision is Decision.FULL or ticket is None:
                return Refusal.QUEUE_FULL
            self._after_change(before)
            return ticket

    def wait_turn(self, ticket: Ticket) -> float:
        """Block until ``ticket`` runs; returns the seconds it waited for its slot."""
        with self._cond:
            self._cond.wait_for(lambda: self._admission.is_running(ticket))
            return self._admission.queued_seconds(ticket)

    def first_token(self, ttft_s: float) -> None:
        with self._cond:
            self.metrics.ttft.observe(ttft_s)

    def next_token(self, gap_s: float) -> None:
        with self._cond:
            self.metrics.tpot.observe(gap_s)

    def served(self, ticket: Ticket, outcome: Outcome) -> None:
        """The last token was sent: count it, log it and free the slot, in one step."""
        with self._cond:
            self.metrics.served += 1
            self.log.emit(Event.SERVED, request_id=ticket.request_id, tokens=outcome.tokens, stream=outcome.stream,
                          ttft_s=round(outcome.ttft_s, 6), total_s=round(outcome.total_s, 6),
                          queued_s=round(outcome.queued_s, 6))
            self._leave(ticket)

    def abandoned(self, ticket: Ticket, tokens_sent: int, reason: str) -> None:
        """The client went away before the last token."""
        with self._cond:
            self.aborted += 1
            self.log.emit(Event.ABORTED, request_id=ticket.request_id, tokens=tokens_sent, reason=reason)
            self._leave(ticket)

    def _leave(self, ticket: Ticket) -> None:
        before = self._admission.running
        self._admission.finish(ticket, self.clock())
        self._after_change(before)
        self._cond.notify_all()

    def _after_change(self, running_before: int) -> None:
        now = self._admission.running
        if running_before == 0 and now > 0:
            self._device.send(DeviceState.COMPUTE)
        elif running_before > 0 and now == 0:
            self._device.send(DeviceState.IDLE)


class Handler(BaseHTTPRequestHandler):
    """One connection's requests (HTTP/1.1, keep-alive)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """TCP_NODELAY: each token goes out when written, not held for the client's delayed ACK (which added
    20-40 ms to the time to first token a client measured on a keep-alive connection)."""
    server_version = "firedrill-inference"
    sys_version = ""
    timeout = 120
    """Seconds a connection may sit idle between requests, or a client may take to read a token, before the
    thread gives up on it (a stalled client cannot hold a batch slot for ever)."""
    service: Service  # set on the subclass make_server builds

    def log_message(self, format: str, *args: Any) -> None:  # the JSON log is the only output
        pass

    # -- plumbing -------------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self._connection_header()
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _connection_header(self) -> None:
        """While draining, or when this connection ends anyway, say so: the client reconnects elsewhere."""
        if self.close_connection or self.service.phase is Phase.DRAINING:
            self.send_header("Connection", "close")
            self.close_connection = True

    def _error(self, status: int, message: str, kind: protocol.ErrorKind, code: str,
               headers: dict[str, str] | None = None) -> None:
        self._send(status, protocol.error_body(message, kind, code), headers=headers)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")
        self.wfile.flush()

    # -- routes ---------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            phase = self.service.phase
            if phase is Phase.READY:
                self._send(200, b'{"status":"ok"}')
            else:
                body = json.dumps({"status": phase.value}, separators=(",", ":")).encode("ascii")
                self._send(503, body, headers={"Retry-After": "1"})
        elif path == "/metrics":
            self._send(200, self.service.metrics_text().encode("utf-8"), content_type=CONTENT_TYPE)
        elif path == "/v1/completions":
            self._error(405, "use POST", protocol.ErrorKind.INVALID_REQUEST, "method_not_allowed",
                        headers={"Allow": "POST"})
        else:
            self._error(404, f"no route {path}", protocol.ErrorKind.INVALID_REQUEST, "not_found")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != "/v1/completions":
            self._discard_body()
            self._error(404, f"no route {path}", protocol.ErrorKind.INVALID_REQUEST, "not_found")
            return
        svc = self.service
        arrived = svc.receive()
        request_id = (self.headers.get("X-Request-Id") or "").strip() or uuid.uuid4().hex
        try:
            if len(request_id) > protocol.MAX_REQUEST_ID:
                request_id = request_id[:protocol.MAX_REQUEST_ID]
                raise BadRequest(f"header X-Request-Id: longer than {protocol.MAX_REQUEST_ID} characters")
            request = protocol.parse_completion(self._read_body(), MAX_TOKENS_LIMIT)
        except BadRequest as exc:
            svc.reject(request_id, Refusal.BAD_REQUEST)
            self.close_connection = True  # the body may be unread
            self._error(400, str(exc), protocol.ErrorKind.INVALID_REQUEST, Refusal.BAD_REQUEST.value,
                        headers={"X-Request-Id": request_id})
            return
        placed = svc.enter(request_id, arrived)
        if isinstance(placed, Refusal):
            svc.reject(request_id, placed)
            message = {Refusal.QUEUE_FULL: f"the queue is full ({svc.cfg.max_queue} waiting)",
                       Refusal.WARMING_UP: "the model is still loading",
                       Refusal.DRAINING: "the server is shutting down"}[placed]
            self._error(STATUS[placed], message, KIND[placed], placed.value,
                        headers={"X-Request-Id": request_id, "Retry-After": "1"})
            return
        self._generate(placed, request, arrived)

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None:
            raise BadRequest("header Content-Length is required")
        try:
            size = int(length)
        except ValueError:
            raise BadRequest(f"header Content-Length: expected an integer, got {length!r}") from None
        if not 0 <= size <= MAX_BODY:
            raise BadRequest(f"header Content-Length: expected 0..{MAX_BODY} bytes, got {size}")
        return self.rfile.read(size)

    def _discard_body(self) -> None:
        try:
            size = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            size = -1
        if 0 <= size <= MAX_BODY:
            self.rfile.read(size)
        else:
            self.close_connection = True

    def _generate(self, ticket: Ticket, request: protocol.CompletionRequest, arrived: float) -> None:
        svc, cfg = self.service, self.service.cfg
        created = int(time.time())
        sent = 0
        try:
            if request.stream:  # headers go out at once; the client waits for the first event
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("X-Request-Id", ticket.request_id)
                self._connection_header()
                self.end_headers()
                self.wfile.flush()
            queued_s = svc.wait_turn(ticket)
            start = arrived + queued_s
            first_at = last_at = 0.0
            for index in range(request.max_tokens):
                _sleep_until(svc.clock, start + cfg.ttft_seconds + index * cfg.tpot_seconds)
                now = svc.clock()
                if request.stream:
                    last = index == request.max_tokens - 1
                    self._chunk(protocol.event(protocol.stream_chunk(ticket.request_id, cfg.model, created,
                                                                     index, last)))
                    if last:
                        self._chunk(protocol.DONE)
                        self._chunk(b"")
                sent = index + 1
                if index == 0:
                    first_at = now
                    svc.first_token(now - arrived)
                else:
                    svc.next_token(now - last_at)
                last_at = now
            if not request.stream:
                body = json.dumps(protocol.completion(ticket.request_id, cfg.model, created, request.prompt,
                                                      request.max_tokens), separators=(",", ":")).encode("utf-8")
                self._send(200, body, headers={"X-Request-Id": ticket.request_id})
        except CLIENT_GONE as exc:
            self.close_connection = True
            svc.abandoned(ticket, sent, f"client gone: {type(exc).__name__}")
            return
        except BaseException:
            svc.abandoned(ticket, sent, "server error")
            raise
        svc.served(ticket, Outcome(tokens=sent, stream=request.stream, ttft_s=first_at - arrived,
                                   total_s=svc.clock() - arrived, queued_s=queued_s))


def _sleep_until(clock: Callable[[], float], deadline: float) -> None:
    while True:
        remaining = deadline - clock()
        if remaining <= 0:
            return
        time.sleep(remaining)


class Server(ThreadingHTTPServer):
    """Threads per connection, daemonic: a drain that times out does not wait for them."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
    """The listen backlog: socketserver's default of 5 reset connections when many clients arrived at once
    (64 load users starting together lost requests the canary never saw)."""


def make_server(service: Service) -> Server:
    """Bind ``service.cfg.host:port`` (raises OSError when it cannot)."""
    cfg = service.cfg
    handler = type("BoundHandler", (Handler,), {"service": service})
    family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
    server = type("BoundServer", (Server,), {"address_family": family})
    return server((cfg.host, cfg.port), handler)
