"""Container logs: kept in memory and on disk, served over HTTP like the kubelet.

Each container's log is appended to ``<root>/<namespace>_<pod>_<container>.log``
(``<root>`` is ``DIR/logs/<node>``), one ``<RFC 3339 nano timestamp> <text>``
line per output line, so logs survive an agent restart.  The tail is also kept
in memory, where followers wait for new lines.

:class:`LogServer` answers the kubelet's
``GET /containerLogs/<namespace>/<pod>/<container>?tailLines=N&follow=true|false&timestamps=true|false``
with ``text/plain``; the API server proxies ``pods/<name>/log`` to it.  It also
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
import threading
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from refplatform.agent.clock import rfc3339_nano
from refplatform.agent.workload import LogLine

__all__ = ["ContainerLog", "HealthCheck", "LogServer", "LogStore"]

log = logging.getLogger(__name__)

# (timestamp prefix, text)
Entry = tuple[str, str]
HealthCheck = Callable[[], tuple[bool, str]]
"""``(healthy, message)``."""
MetricsSource = Callable[[], bytes]
"""The ``/metrics`` body (Prometheus text format 0.0.4)."""
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


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

    def __init__(self, address: tuple[str, int], store: LogStore, health: HealthCheck) -> None:
        self.store = store
        self.health = health
        self.metrics: MetricsSource | None = None
        self.stopping = threading.Event()
        super().__init__(address, _Handler)


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

    def _text(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if parts == ["healthz"]:
            try:
                healthy, message = self.server.health()
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
        query = parse_qs(url.query, keep_blank_values=True)
        try:
            follow = _flag(query, "follow")
            timestamps = _flag(query, "timestamps")
            tail_raw = (query.get("tailLines") or [""])[-1]
            tail = int(tail_raw) if tail_raw != "" else None
            if tail is not None and tail < 0:
                tail = None
        except ValueError as err:
            self._text(400, f"bad request: {err}\n")
            return
        clog = self.server.store.get(namespace, pod, container)
        if clog is None:
            self._text(404, f'container "{container}" in pod "{pod}" in namespace "{namespace}" not found on this node\n')
            return
        entries, seq = clog.snapshot(tail)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        if not follow:
            data = self._render(entries, timestamps)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(self._render(entries, timestamps))
            self.wfile.flush()
            while not self.server.stopping.is_set():
                new, seq, closed = clog.wait_new(seq, 0.5)
                if new:
                    self.wfile.write(self._render(new, timestamps))
                    self.wfile.flush()
                elif closed:
                    return
                elif self._client_gone():
                    return
        except (BrokenPipeError, ConnectionResetError):
            return

    @staticmethod
    def _render(entries: list[Entry], timestamps: bool) -> bytes:
        if timestamps:
            return "".join(f"{stamp} {text}\n" for stamp, text in entries).encode()
        return "".join(f"{text}\n" for _, text in entries).encode()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except (OSError, ValueError):
            return True


class LogServer:
    """The kubelet-style log endpoint of one node, on 127.0.0.1."""

    def __init__(self, store: LogStore, host: str = "127.0.0.1", port: int = 0, *, health: HealthCheck | None = None) -> None:
        """``health``: answers ``/healthz`` (default: always healthy)."""
        self._server = _Server((host, port), store, health or (lambda: (True, "ok")))
        self._thread: threading.Thread | None = None

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

