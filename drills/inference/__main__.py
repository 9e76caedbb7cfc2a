"""``firedrill-inference`` / ``python -m drills.inference``: parse, serve until a signal, drain, log ``exit``."""

from __future__ import annotations

import enum
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from drills.inference.config import DRAIN_SECONDS, parse_config
from drills.inference.device import Device, DeviceState
from drills.inference.errors import StartupError, UsageError
from drills.inference.log import Event, EventLog
from drills.inference.server import Service, make_server

__all__ = ["main"]


class ExitReason(enum.Enum):
    """The ``reason`` of the ``exit`` line."""

    SIGTERM = "sigterm"
    """SIGTERM: drained (or the drain ran out of time).  Code 143."""
    SIGINT = "sigint"
    """Ctrl-C, for runs by hand: no drain.  Code 130."""
    ERROR = "error"
    """The server could not start, or a bug (traceback on stderr).  Code 1."""


EXIT_CODES = {ExitReason.SIGTERM: 143, ExitReason.SIGINT: 130, ExitReason.ERROR: 1}


class Signals:
    """The first SIGTERM or SIGINT, as a flag the main thread waits on (handlers only set it)."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.signum: int | None = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on)
        signal.signal(signal.SIGINT, self._on)

    def _on(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        self.arrived.set()

    def wait(self, seconds: float | None) -> bool:
        """True once a signal arrived, else after ``seconds`` (None: forever) False."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:  # short waits: the handler runs between them even where a long wait is not interrupted
            remaining = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if remaining <= 0:
                return self.arrived.is_set()
            if self.arrived.wait(remaining):
                return True


def write_port_file(path: Path, port: int) -> None:
    """``<port>\\n`` into ``path``, atomically (a reader never sees a partial file)."""
    try:
        directory = path.parent if str(path.parent) else Path(".")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(f"{port}\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise StartupError(f"--port-file {path}: {exc.strerror or exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = parse_config(sys.argv[1:] if argv is None else argv, os.environ)
    except UsageError as exc:
        print(f"{exc}\n(firedrill-inference serve --help lists the options and variables)", file=sys.stderr)
        return 2
    signals = Signals()
    signals.install()
    started = time.monotonic()
    log = EventLog(sys.stdout)
    device = Device(cfg.device_socket)
    service = Service(cfg, log, device)
    log.emit(Event.START, pid=os.getpid(), config=cfg.as_log(), gpus=None if cfg.gpus is None else list(cfg.gpus))
    device.send(DeviceState.IDLE)
    server = None
    try:
        try:
            server = make_server(service)
        except OSError as exc:
            raise StartupError(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc}") from None
        host, port = server.server_address[:2]
        if cfg.port_file is not None:
            write_port_file(cfg.port_file, port)
        log.emit(Event.LISTENING, host=host, port=port)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="http",
                         daemon=True).start()
        if not signals.wait(max(0.0, cfg.warmup_seconds - (time.monotonic() - started))):
            service.ready(time.monotonic() - started)
            signals.wait(None)
        if signals.signum == signal.SIGTERM:
            reason = ExitReason.SIGTERM
            service.drain()
            drained = service.wait_idle(DRAIN_SECONDS)
            message = "drained" if drained else f"drain cut short after {DRAIN_SECONDS:g} s"
        else:
            reason, message = ExitReason.SIGINT, "interrupted (SIGINT)"
    except StartupError as exc:
        print(f"firedrill-inference: {exc}", file=sys.stderr)
        reason, message = ExitReason.ERROR, str(exc)
    except Exception as exc:  # a bug: the traceback goes to stderr, the exit line still comes
        traceback.print_exc()
        reason, message = ExitReason.ERROR, f"{type(exc).__name__}: {exc}"
    if server is not None:
        server.shutdown()
        server.server_close()
    device.send(DeviceState.IDLE)
    device.close()
    code = EXIT_CODES[reason]
    log.emit(Event.EXIT, code=code, reason=reason.value, **service.counts(), message=message)
    return code


if __name__ == "__main__":
    sys.exit(main())
