"""The canary's log: one JSON object per line, flushed per line, numbered and stamped.

Every line carries ``seq`` (1, 2, 3, ... within this process), ``ts`` (the wall
clock when the line was written, RFC 3339 UTC with microseconds and ``Z``),
``event``, ``rank``, ``world_size`` and ``generation``, then the event's own
fields (``docs/WORKLOAD.md`` lists them).
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["Event", "EventLog", "rfc3339"]


class Event(enum.Enum):
    """The ``event`` of a line."""

    START = "start"
    """The process started: ``pid``, ``config``, ``gpus`` (the devices ``NVIDIA_VISIBLE_DEVICES`` names, or null)."""
    RENDEZVOUS = "rendezvous"
    """The world is complete: ``master`` ("addr:port", null for a world of one), ``seconds``."""
    RESUMED = "resumed"
    """The resume point is known: ``from_step``, ``checkpoint`` (file name or null), ``skipped``."""
    STEP = "step"
    """A step completed: ``step``, ``input_s``, ``compute_s``, ``comm_s``, ``wall_s``; in a world of more than one
    rank also ``recv``, ``{"<peer rank>": [bytes, seconds]}``: how each peer's frame of the all-reduce arrived."""
    CHECKPOINT_BEGIN = "checkpoint-begin"
    """Rank 0 starts writing a checkpoint: ``step``, ``file`` (the final file name; ``trigger`` "sigterm" for the
    one ``--checkpoint-on-sigterm`` writes).  Until its ``checkpoint`` line the job waits on its storage."""
    CHECKPOINT = "checkpoint"
    """Rank 0: a checkpoint is durable: ``step``, ``file``, ``digest`` (and ``trigger`` "sigterm" for the
    one ``--checkpoint-on-sigterm`` writes when SIGTERM arrives)."""
    STALLED = "stalled"
    """A collective waited longer than ``--stall-after``: ``step``, ``waited_s``, ``on``."""
    UNSTALLED = "unstalled"
    """The stalled collective completed: ``step``, ``stalled_s``."""
    PEER_LOST = "peer_lost"
    """A connection broke: ``peer`` (a rank or "master"), ``reason`` ("eof", "reset", "timeout")."""
    EXIT = "exit"
    """Just before exit: ``code``, ``reason``, ``step``, ``message``."""


def rfc3339(epoch_seconds: float) -> str:
    """``2026-11-30T10:00:00.123456Z``: UTC, microseconds."""
    instant = dt.datetime.fromtimestamp(epoch_seconds, tz=dt.timezone.utc)
    return instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventLog:
    """Writes the lines of one process to ``stream`` (stdout), with an injectable wall clock."""

    def __init__(self, stream: TextIO, rank: int, world_size: int, generation: str,
                 wall: Callable[[], float] = time.time) -> None:
        self._stream = stream
        self._wall = wall
        self._seq = 0
        self.broken = False
        """The stream refused a write (its reader is gone): later lines are dropped, training goes on."""
        self._identity = {"rank": rank, "world_size": world_size, "generation": generation}

    def emit(self, event: Event, **fields: Any) -> dict[str, Any]:
        """Write one line and return it as written."""
        self._seq += 1
        line: dict[str, Any] = {"seq": self._seq, "ts": rfc3339(self._wall()), "event": event.value}
        line.update(self._identity)
        line.update(fields)
        if not self.broken:
            try:
                self._stream.write(json.dumps(line, separators=(",", ":")) + "\n")
                self._stream.flush()
            except OSError:  # a log reader that went away must not stop the job's collectives
                self.broken = True
        return line
