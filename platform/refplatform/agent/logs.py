"""Container logs: kept in memory and on disk, served over HTTP like the kubelet.

Each container's log is appended to ``<root>/<namespace>_<pod>_<container>.log``
(``<root>`` is ``DIR/logs/<node>``), one ``<RFC 3339 nano timestamp> <text>``
line per output line, so logs survive an agent restart.  The tail is also kept
in memory, where followers wait for new lines.

:class:`LogServer` answers the kubelet's
``GET /containerLogs/<namespace>/<pod>/<container>`` with ``text/plain``, with the query a real
kube-apiserver sends (:class:`LogQuery`): ``follow``, ``timestamps``, ``tailLines``, ``sinceSeconds`` or
``sinceTime``, ``limitBytes``, ``previous`` and ``stream``; the API server proxies ``pods/<name>/log`` to
it.  As the kubelet does, ``tailLines`` picks the last lines first, ``sinceSeconds``/``sinceTime`` then
drop those older than the bound, and ``limitBytes`` ends the answer (mid-line if need be) once that many
bytes were sent, following or not.  ``previous=true`` is a 400 (the agent keeps no previous container's
log), and so is ``stream=Stdout``/``Stderr`` (stdout and stderr share one log).

With :class:`ServingTLS` the server speaks HTTPS (a real kube-apiserver reaches a kubelet at
``https://<InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>``), and with a client CA it asks every
client for a certificate: ``/containerLogs`` then answers only a client whose certificate that CA
signed (401 otherwise; kube-apiserver presents ``--kubelet-client-certificate``), while ``/healthz`` and
``/metrics`` stay open to any client.  With an :class:`~refplatform.agent.access.EndpointGuard` (the embedded
cluster always gives one) every path needs an accepted caller: a bearer token the allow-list names for that
endpoint, or that client certificate for the logs (401 or 403 otherwise, each refusal in the agent's audit log).  The TLS handshake runs on the request's own thread, so a slow
client never holds up the others.  It also
answers ``GET /healthz``: ``200 ok`` while the agent is healthy (heartbeating,
not partitioned, its pod sync loop alive), ``503 <why>`` otherwise; the healer
checks a node this way before reusing it.  (A frozen agent does not answer at
all, which a caller's timeout reads as unhealthy too.)  And ``GET /metrics``:
DCGM-exporter-style GPU metrics in Prometheus text format
(:mod:`refplatform.agent.metrics`), 404 when the agent serves none.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from refplatform.agent.access import EndpointGuard, endpoint_of
from refplatform.agent.access import Request as AccessRequest
from refplatform.agent.clock import Clock, SystemClock, rfc3339_nano
from refplatform.agent.workload import LogLine

__all__ = ["ContainerLog", "HealthCheck", "LogQuery", "LogServer", "LogStore", "ServingTLS", "parse_log_time"]

log = logging.getLogger(__name__)

# (timestamp prefix, text)
Entry = tuple[str, str]
HealthCheck = Callable[[], tuple[bool, str]]
"""``(healthy, message)``."""
MetricsSource = Callable[[], bytes]
"""The ``/metrics`` body (Prometheus text format 0.0.4)."""
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
HANDSHAKE_TIMEOUT = 10.0
"""Seconds a client gets to finish the TLS handshake."""
STREAMS = ("All", "Stdout", "Stderr")
"""``stream`` values kube-apiserver may send (PodLogsQuerySplitStreams)."""


def parse_log_time(stamp: str) -> datetime | None:
    """A log line's RFC 3339 timestamp (nanoseconds cut to microseconds); None when it is not one."""
    text = stamp.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:min(digits, 6)].ljust(6, '0')}{rest[digits:]}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LogQuery:
    """What a ``/containerLogs`` request asks for (the kubelet's query parameters)."""

    follow: bool = False
    timestamps: bool = False
    tail: int | None = None
    """The last N lines (None: all)."""
    since: datetime | None = None
    """Only lines stamped at or after this instant (from ``sinceSeconds`` or ``sinceTime``)."""
    limit_bytes: int | None = None
    """End the answer after this many bytes."""

    @classmethod
    def parse(cls, query: dict[str, list[str]], now: datetime, container: str, pod: str) -> LogQuery:
        """The query of a request at ``now``; ValueError naming the parameter for a bad or unsupported one."""
        def last(key: str) -> str:
            return (query.get(key) or [""])[-1]

        def integer(key: str, minimum: int) -> int | None:
            raw = last(key)
            if raw == "":
                return None
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"{key}={raw!r} is not an integer") from None
            if value < minimum:
                raise ValueError(f"{key}={raw!r} must be at least {minimum}")
            return value

        if _flag(query, "previous"):
            raise ValueError(f'previous terminated container "{container}" in pod "{pod}" not found '
                             "(the agent keeps no previous container's log)")
        stream = last("stream") or "All"
        if stream not in STREAMS:
            raise ValueError(f"stream={stream!r} is not one of {', '.join(STREAMS)}")
        if stream != "All":
            raise ValueError(f"stream={stream}: this node keeps stdout and stderr in one log; ask for All")
        tail_raw = last("tailLines")
        try:
            tail = int(tail_raw) if tail_raw != "" else None
        except ValueError:
            raise ValueError(f"tailLines={tail_raw!r} is not an integer") from None
        if tail is not None and tail < 0:
            tail = None
        since_seconds = integer("sinceSeconds", 1)
        since_time = last("sinceTime")
        if since_seconds is not None and since_time:
            raise ValueError("sinceSeconds and sinceTime may not both be given")
        since = None
        if since_seconds is not None:
            since = now - timedelta(seconds=since_seconds)
        elif since_time:
            since = parse_log_time(since_time)
            if since is None:
                raise ValueError(f"sinceTime={since_time!r} is not an RFC 3339 time")
        return cls(follow=_flag(query, "follow"), timestamps=_flag(query, "timestamps"), tail=tail, since=since,
                   limit_bytes=integer("limitBytes", 1))

    def keep(self, entries: list[Entry]) -> list[Entry]:
        """The entries this query shows (``tail`` was applied by the snapshot; this is ``since``)."""
        if self.since is None:
            return entries
        since = self.since
        return [e for e in entries if (at := parse_log_time(e[0])) is None or at >= since]


@dataclass(frozen=True)
class ServingTLS:
    """HTTPS for the log server: its certificate and key, and optionally the CA whose client certificates
    may read logs (the kubelet's ``--tls-cert-file``, ``--tls-private-key-file``, ``--client-ca-file``)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def context(self) -> ssl.SSLContext:
        """The server-side context (TLS 1.2 or later); OSError/SSLError for unreadable or mismatched files."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        if self.client_ca_file is not None:
            ctx.load_verify_locations(cafile=str(self.client_ca_file))
            ctx.verify_mode = ssl.CERT_OPTIONAL  # asked for; /containerLogs requires one, /healthz does not
        return ctx


class ContainerLog:
    """One container's log: an append-only file plus an in-memory tail.  Thread-safe."""

    def __init__(self, path: Path, *, keep: int = 10_000) -> None:
        self.path = path
        self._cond = threading.Condition()
        self._tail: deque[Entry] = deque(maxlen=keep)
        self._count = 0  # lines ever written (sequence number of the next line)
        self.closed = True
        self.owner: str | None = None
        if path.exists():
            for entry in self._read_file():
                self._tail.append(entry)
                self._count += 1

    def _read_file(self) -> list[Entry]:
        out: list[Entry] = []
        try:
            with self.path.open(encoding="utf-8", errors="replace") as f:
                for raw in f:
                    raw = raw.rstrip("\n")
                    stamp, _, text = raw.partition(" ")
                    out.append((stamp, text))
        except FileNotFoundError:
            pass
        return out

    def reset(self) -> None:
        """Forget every line (a new pod under the same name) and reopen."""
        with self._cond:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("", encoding="utf-8")
            self._tail.clear()
            self._count = 0
            self.closed = False
            self._cond.notify_all()

    def reopen(self) -> None:
        """Accept lines again (a container restart appends to its log)."""
        with self._cond:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.closed = False

    def close(self) -> None:
        """The container stopped: followers drain and end."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def append(self, lines: Iterable[LogLine]) -> None:
        entries = [(rfc3339_nano(line.time), line.text) for line in lines]
        if not entries:
            return
        with self._cond:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write("".join(f"{stamp} {text}\n" for stamp, text in entries))
            self._tail.extend(entries)
            self._count += len(entries)
            self._cond.notify_all()

    def snapshot(self, tail: int | None = None) -> tuple[list[Entry], int]:
        """The last ``tail`` lines (all when ``None``) and the sequence number after them."""
        with self._cond:
            count = self._count
            in_memory = len(self._tail)
            from_file = in_memory < count and (tail is None or tail > in_memory)
            entries = [] if from_file else list(self._tail)
        if from_file:
            entries = self._read_file()[:count]
        if tail is not None:
            entries = entries[max(0, len(entries) - tail) :]
        return entries, count

    def wait_new(self, after: int, timeout: float) -> tuple[list[Entry], int, bool]:
        """Lines with sequence number >= ``after`` (waiting up to ``timeout`` for some), next number, closed."""
        with self._cond:
            if self._count <= after and not self.closed:
                self._cond.wait(timeout)
            count = self._count
            new = min(count - after, len(self._tail))
            entries = list(self._tail)[len(self._tail) - new :] if new > 0 else []
            return entries, count, self.closed


class LogStore:
    """The container logs of one node, by (namespace, pod, container)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, str, str], ContainerLog] = {}

    def path(self, namespace: str, pod: str, container: str) -> Path:
        return self.root / f"{namespace}_{pod}_{container}.log"

    def open(self, namespace: str, pod: str, container: str, *, fresh: bool, owner: str | None = None) -> ContainerLog:
        """The log a starting container writes to: emptied when ``fresh``, else appended to.

        ``owner`` (the pod uid) claims the log: :meth:`close_pod` and
        :meth:`forget_pod` with another owner leave it alone, so a pod
        recreated under the same name keeps its log while the old one retires.
        """
        clog = self._get(namespace, pod, container, create=True)
        assert clog is not None
        clog.owner = owner
        if fresh:
            clog.reset()
        else:
            clog.reopen()
        return clog

    def get(self, namespace: str, pod: str, container: str) -> ContainerLog | None:
        """A container's log, from memory or from a file a previous agent left; ``None`` if unknown."""
        return self._get(namespace, pod, container, create=False)

    def _get(self, namespace: str, pod: str, container: str, *, create: bool) -> ContainerLog | None:
        key = (namespace, pod, container)
        with self._lock:
            clog = self._logs.get(key)
            if clog is None:
                path = self.path(namespace, pod, container)
                if not create and not path.exists():
                    return None
                clog = self._logs[key] = ContainerLog(path)
            return clog

    def _pod_logs(self, namespace: str, pod: str, owner: str | None) -> list[tuple[str, str, str]]:
        return [
            k for k, c in self._logs.items()
            if k[0] == namespace and k[1] == pod and (owner is None or c.owner in (None, owner))
        ]

    def close_pod(self, namespace: str, pod: str, owner: str | None = None) -> None:
        """The pod's containers stopped (only the logs ``owner`` holds, when given)."""
        with self._lock:
            logs = [self._logs[k] for k in self._pod_logs(namespace, pod, owner)]
        for clog in logs:
            clog.close()

    def forget_pod(self, namespace: str, pod: str, owner: str | None = None) -> None:
        """Close a deleted pod's logs and drop them from memory (the files stay, readable later)."""
        with self._lock:
            logs = [self._logs.pop(k) for k in self._pod_logs(namespace, pod, owner)]
        for clog in logs:
            clog.close()

    def close_all(self) -> None:
        with self._lock:
            logs = list(self._logs.values())
        for clog in logs:
            clog.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], store: LogStore, health: HealthCheck, clock: Clock,
                 tls: ServingTLS | None = None, guard: EndpointGuard | None = None,
                 api_probe: HealthCheck | None = None) -> None:
        self.guard = guard
        self.store = store
        self.health = health
        self.api_probe = api_probe or health
        self.clock = clock
        self.metrics: MetricsSource | None = None
        self.stopping = threading.Event()
        self.tls = tls
        self.ssl_context = tls.context() if tls is not None else None
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        if self.ssl_context is not None:
            sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def finish_request(self, request: Any, client_address: Any) -> None:
        """On the request's thread: the TLS handshake first (bounded), then the request."""
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(HANDSHAKE_TIMEOUT)
            try:
                request.do_handshake()
            except (ssl.SSLError, OSError) as err:
                log.debug("log server: TLS handshake with %s failed: %s", client_address, err)
                return
            request.settimeout(None)
        super().finish_request(request, client_address)


def _flag(query: dict[str, list[str]], key: str) -> bool:
    value = (query.get(key) or ["false"])[-1].lower()
    if value in ("true", "1", ""):
        return True
    if value in ("false", "0"):
        return False
    raise ValueError(f"{key}={value!r} is not a boolean")


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "firedrill-agent"
    disable_nagle_algorithm = True  # small writes (headers, then lines) must not wait for delayed ACKs

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        log.debug("log server: " + format, *args)

    def _text(self, code: int, body: str, headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self, parts: list[str]) -> bool:
        """With a guard: whether the caller may make this request (a refusal is answered and recorded)."""
        guard = self.server.guard
        if guard is None:
            return True
        decision = guard.check(AccessRequest(
            method=self.command, uri=self.path, endpoint=endpoint_of(parts),
            authorization=self.headers.get("Authorization"), source_ip=str(self.client_address[0]),
            user_agent=self.headers.get("User-Agent") or "",
            client_certificate=self.server.tls is not None and self.server.tls.client_ca_file is not None
            and self._client_verified()))
        if decision.allowed:
            return True
        if decision.code == 401:
            self._text(401, f"Unauthorized: {decision.reason}\n", {"WWW-Authenticate": 'Bearer realm="node agent"'})
        else:
            self._text(403, f"Forbidden: {decision.reason}\n")
        return False

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if not self._authorized(parts):
            return
        if parts in (["healthz"], ["healthz", "api"]):
            check = self.server.health if parts == ["healthz"] else self.server.api_probe
            try:
                healthy, message = check()
            except Exception as err:  # a broken check is an unhealthy agent, not a dead server
                healthy, message = False, f"health check failed: {err}"
            self._text(200 if healthy else 503, "ok" if healthy else message)
            return
        if parts == ["metrics"] and self.server.metrics is not None:
            try:
                body = self.server.metrics()
            except Exception as err:  # noqa: BLE001 - a broken collector must not kill the server
                log.exception("metrics collection failed")
                self._text(500, f"metrics collection failed: {err}\n")
                return
            self.send_response(200)
            self.send_header("Content-Type", METRICS_CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._text(404, f"404 page not found: {url.path}\n")
            return
        _, namespace, pod, container = parts
        if self.server.guard is None and self.server.tls is not None and self.server.tls.client_ca_file is not None \
                and not self._client_verified():
            self._text(401, "Unauthorized: a client certificate signed by this node's client CA is required\n")
            return
        try:
            q = LogQuery.parse(parse_qs(url.query, keep_blank_values=True), self.server.clock.now(), container, pod)
        except ValueError as err:
            self._text(400, f"bad request: {err}\n")
            return
        clog = self.server.store.get(namespace, pod, container)
        if clog is None:
            self._text(404, f'container "{container}" in pod "{pod}" in namespace "{namespace}" not found on this node\n')
            return
        entries, seq = clog.snapshot(q.tail)
        budget = _Budget(q.limit_bytes)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        if not q.follow:
            data = budget.take(self._render(q.keep(entries), q.timestamps))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(budget.take(self._render(q.keep(entries), q.timestamps)))
            self.wfile.flush()
            while not self.server.stopping.is_set() and not budget.spent:
                new, seq, closed = clog.wait_new(seq, 0.5)
                if new:
                    self.wfile.write(budget.take(self._render(q.keep(new), q.timestamps)))
                    self.wfile.flush()
                elif closed:
                    return
                elif self._client_gone():
                    return
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            return

    def _client_verified(self) -> bool:
        """Whether the TLS client presented a certificate the client CA verified."""
        conn = self.connection
        return isinstance(conn, ssl.SSLSocket) and bool(conn.getpeercert())

    @staticmethod
    def _render(entries: list[Entry], timestamps: bool) -> bytes:
        if timestamps:
            return "".join(f"{stamp} {text}\n" for stamp, text in entries).encode()
        return "".join(f"{text}\n" for _, text in entries).encode()

    def _client_gone(self) -> bool:
        conn = self.connection
        try:
            if isinstance(conn, ssl.SSLSocket) and conn.pending():
                return False
            readable, _, _ = select.select([conn], [], [], 0)
            if not readable:
                return False
            if isinstance(conn, ssl.SSLSocket):  # no MSG_PEEK over TLS: read (a follower sends nothing)
                timeout = conn.gettimeout()
                conn.settimeout(0)
                try:
                    return conn.recv(1) == b""
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    return False
                finally:
                    conn.settimeout(timeout)
            return bool(conn.recv(1, socket.MSG_PEEK) == b"")
        except (OSError, ValueError):
            return True


class _Budget:
    """What is left of ``limitBytes`` (None: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit

    @property
    def spent(self) -> bool:
        return self.left is not None and self.left <= 0

    def take(self, data: bytes) -> bytes:
        if self.left is None:
            return data
        out = data[: max(0, self.left)]
        self.left -= len(out)
        return out


class LogServer:
    """The kubelet-style log endpoint of one node, on 127.0.0.1."""

    def __init__(self, store: LogStore, host: str = "127.0.0.1", port: int = 0, *, health: HealthCheck | None = None,
                 clock: Clock | None = None, tls: ServingTLS | None = None, guard: EndpointGuard | None = None,
                 api_probe: HealthCheck | None = None) -> None:
        """``health``: answers ``/healthz`` (default: always healthy); ``api_probe``: answers ``/healthz/api``, does
        this node reach the API server now (default: ``health``); ``clock``: ``now`` of ``sinceSeconds``;
        ``tls``: serve HTTPS (plain HTTP without it); ``guard``: who may call which endpoint
        (:mod:`refplatform.agent.access`; None: open, except ``/containerLogs`` behind a client CA)."""
        self._server = _Server((host, port), store, health or (lambda: (True, "ok")), clock or SystemClock(), tls,
                               guard, api_probe)
        self._thread: threading.Thread | None = None

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``."""
        return "https" if self._server.ssl_context is not None else "http"

    def serve_metrics(self, source: MetricsSource) -> None:
        """Answer ``GET /metrics`` with what ``source`` returns."""
        self._server.metrics = source

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="log-server", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

