"""The inference canary's log: one JSON object per line, flushed per line, numbered and stamped.

The conventions of the training canary's log (``drills/canary/log.py``): every
line carries ``seq`` (1, 2, 3, ... within this process), ``ts`` (the wall clock
when the line was written, RFC 3339 UTC with microseconds and ``Z``) and
``event``, then the event's own fields (``docs/WORKLOAD.md`` lists them).
Request threads write concurrently, so writing is serialised: ``seq`` order is
the order of the lines.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["Event", "EventLog", "rfc3339"]


class Event(enum.Enum):
    """The ``event`` of a line."""

    START = "start"
    """The process started: ``pid``, ``config``, ``gpus`` (the devices ``NVIDIA_VISIBLE_DEVICES`` names, or null)."""
    LISTENING = "listening"
    """The socket is bound: ``host``, ``port`` (the real one when ``--port 0``)."""
    READY = "ready"
    """The warm-up passed; completions are served from now on: ``warmup_s``."""
    SERVED = "served"
    """A request's last token was sent: ``request_id``, ``tokens``, ``stream``, ``ttft_s``, ``total_s``,
    ``queued_s``."""
    REJECTED = "rejected"
    """A completion request was answered with an error: ``request_id``, ``status``, ``reason``."""
    ABORTED = "aborted"
    """An admitted request's client went away before its last token: ``request_id``, ``tokens`` (sent),
    ``reason``."""
    DRAINING = "draining"
    """SIGTERM arrived; new requests get 503 while the admitted ones finish: ``waiting``, ``running``."""
    EXIT = "exit"
    """Just before exit: ``code``, ``reason``, ``served``, ``received``, ``rejected``, ``aborted``,
    ``unfinished``, ``message``."""


def rfc3339(epoch_seconds: float) -> str:
    """``2026-11-30T10:00:00.123456Z``: UTC, microseconds."""
    instant = dt.datetime.fromtimestamp(epoch_seconds, tz=dt.timezone.utc)
    return instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventLog:
    """Writes the lines of one process to ``stream`` (stdout), with an injectable wall clock; thread-safe."""

    def __init__(self, stream: TextIO, wall: Callable[[], float] = time.time) -> None:
        self._stream = stream
        self._wall = wall
        self._seq = 0
        self._lock = threading.Lock()
        self.broken = False
        """The stream refused a write (its reader is gone): later lines are dropped, serving goes on."""

    def emit(self, event: Event, **fields: Any) -> dict[str, Any]:
        """Write one line and return it as written."""
        with self._lock:
            self._seq += 1
            line: dict[str, Any] = {"seq": self._seq, "ts": rfc3339(self._wall()), "event": event.value}
            line.update(fields)
            if not self.broken:
                try:
                    self._stream.write(json.dumps(line, separators=(",", ":")) + "\n")
                    self._stream.flush()
                except OSError:  # a log reader that went away must not stop serving
                    self.broken = True
            return line
