"""The canary's wire protocol: length-prefixed frames over non-blocking TCP connections.

A frame is a 13-byte header (kind: 1 byte, step: 8 bytes, payload length: 4
bytes, network byte order) and the payload.  ``HELLO`` and ``WELCOME`` carry
JSON; ``CONTRIBUTION`` (a rank to rank 0) and ``RESULT`` (rank 0 to a rank)
carry one step's all-reduce bytes.

A connection may be paced (:attr:`Conn.rate`, bytes per second: the slower of its two ends' links, as the
rendezvous learns them from ``FIREDRILL_LINK_BANDWIDTH``): it sends no faster than that, in chunks of at
most :data:`PACE_CHUNK`, as a link of that speed would carry the bytes.  Every connection measures each frame
it receives (:attr:`Conn.last_arrival`): the bytes that arrived after its first read and the seconds between
that read and the one that completed the frame, so what a rank logs is the rate its peer's bytes reached it,
whoever paced them (a real fabric, or this pacing on the reference platform).  A frame that had begun to
arrive before the rank started waiting for it (:meth:`Conn.begin_receive`: the rank was computing, its bytes
piled up in the socket) is not timed: read in one gulp, it would say nothing of the link.
"""

from __future__ import annotations

import enum
import json
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drills.canary.errors import CanaryError, ProtocolError

__all__ = ["Arrival", "Conn", "ConnectionLost", "Frame", "Kind", "LossReason", "paced_rate"]

HEADER = struct.Struct("!BQI")
MAX_FRAME = (1 << 30) + 4096
RECV_CHUNK = 1 << 20
PACE_CHUNK = 16 << 10
"""A paced connection sends at most this many bytes ahead of its rate (its burst), and in pieces this large."""


class Kind(enum.IntEnum):
    """What a frame carries."""

    HELLO = 1
    """A rank to rank 0: ``{"rank", "world_size", "generation", "nonce"}``."""
    WELCOME = 2
    """Rank 0 to a rank: ``{"ok": true, "from_step", "checkpoint", "skipped", "state"}`` or ``{"ok": false,
    "error"}``."""
    CONTRIBUTION = 3
    """A rank's bytes for step ``step``'s all-reduce."""
    RESULT = 4
    """The sum of step ``step``'s contributions."""


class LossReason(enum.Enum):
    """Why a connection counts as lost (the ``reason`` of a ``peer_lost`` line)."""

    EOF = "eof"
    """The peer closed it (it exited, or rank 0 aborted the world)."""
    RESET = "reset"
    """The kernel reset it (the peer's host or process vanished mid-transfer)."""
    TIMEOUT = "timeout"
    """The peer said nothing for ``--peer-timeout`` seconds (frozen or cut off)."""


class ConnectionLost(CanaryError):
    """A connection broke; ``peer`` is a rank number or ``"master"``."""

    def __init__(self, peer: int | str, reason: LossReason) -> None:
        super().__init__(f"lost {'rank ' + str(peer) if isinstance(peer, int) else peer}: {reason.value}")
        self.peer = peer
        self.reason = reason


@dataclass(frozen=True)
class Arrival:
    """How one received frame arrived: ``bytes`` that came after the first read of it, over ``seconds`` from that
    read to the one that completed it (0 and 0 when one read brought it whole: too fast, or read late, to time)."""

    bytes: int
    seconds: float


def paced_rate(mine: object, peer: object) -> float | None:
    """The rate a connection between two links is paced to: the slower of the two stated (positive numbers of
    bytes per second), None when neither end states one (an unpaced connection: the fabric is what it is)."""
    rates = [float(r) for r in (mine, peer)
             if isinstance(r, int | float) and not isinstance(r, bool) and r > 0 and r != float("inf")]
    return min(rates) if rates else None


@dataclass(frozen=True)
class Frame:
    kind: Kind
    step: int
    payload: bytes

    def json(self) -> dict[str, Any]:
        try:
            value = json.loads(self.payload)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"{self.kind.name} frame is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ProtocolError(f"{self.kind.name} frame is not a JSON object")
        return value


def encode(kind: Kind, step: int, payload: bytes) -> bytes:
    return HEADER.pack(kind, step, len(payload)) + payload


def encode_json(kind: Kind, value: dict[str, Any]) -> bytes:
    return encode(kind, 0, json.dumps(value, separators=(",", ":")).encode())


class Conn:
    """One non-blocking TCP connection to ``peer``, with its read and write buffers."""

    def __init__(self, sock: socket.socket, peer: int | str, clock: Callable[[], float] = time.monotonic) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.peer = peer
        self.rate: float | None = None
        """Bytes per second this connection sends at most (None: as fast as the socket takes them)."""
        self.last_arrival: Arrival | None = None
        """How the last frame received arrived (None before the first)."""
        self._clock = clock
        self._rbuf = bytearray()
        self._wbuf = bytearray()
        self._burst_start = 0.0
        self._burst_sent = 0
        self._first_read: tuple[float, int] | None = None
        """(when, bytes) of the first read of the frame being received."""
        self._last_read = 0.0
        self._untimed = False
        """The frame being received began to arrive before this rank waited for it."""

    def queue(self, data: bytes) -> None:
        if not self._wbuf:  # the link was idle: its pacing starts over (idle time earns no credit)
            self._burst_start, self._burst_sent = self._clock(), 0
        self._wbuf += data

    @property
    def pending_write(self) -> bool:
        return bool(self._wbuf)

    def _allowed(self) -> int:
        """Bytes the pacing lets out now (everything, unpaced)."""
        if self.rate is None:
            return len(self._wbuf)
        return int(PACE_CHUNK + self.rate * (self._clock() - self._burst_start)) - self._burst_sent

    def pace_delay(self) -> float:
        """Seconds until the pacing lets the next piece out (0: now, or nothing to send)."""
        if self.rate is None or not self._wbuf:
            return 0.0
        piece = min(len(self._wbuf), PACE_CHUNK)
        due = self._burst_start + (self._burst_sent + piece - PACE_CHUNK) / self.rate
        return max(0.0, due - self._clock())

    def flush(self) -> bool:
        """Send what the socket (and the pacing) takes now; True when nothing is left to send."""
        while self._wbuf:
            limit = len(self._wbuf) if self.rate is None else min(len(self._wbuf), PACE_CHUNK)
            if self._allowed() < limit:  # paced: the next whole piece is not due yet (pace_delay says when)
                return False
            try:
                with memoryview(self._wbuf) as view:
                    sent = self.sock.send(view[:limit])
            except BlockingIOError:
                return False
            except (BrokenPipeError, ConnectionResetError):
                raise ConnectionLost(self.peer, LossReason.RESET) from None
            del self._wbuf[:sent]
            self._burst_sent += sent
        return True

    def fill(self) -> None:
        """Read what has arrived (call when the socket is readable)."""
        try:
            data = self.sock.recv(RECV_CHUNK)
        except BlockingIOError:
            return
        except ConnectionResetError:
            raise ConnectionLost(self.peer, LossReason.RESET) from None
        if not data:
            raise ConnectionLost(self.peer, LossReason.EOF)
        now = self._clock()
        if not self._rbuf:
            self._first_read = (now, len(data))
        self._last_read = now
        self._rbuf += data

    def begin_receive(self) -> None:
        """The rank starts waiting for the peer's next frame now: bytes of it already here (read now) came while
        it was not listening, so that frame's arrival is not timed (its :attr:`last_arrival` is 0 bytes, 0 s)."""
        self.fill()
        if self._rbuf:
            self._untimed = True

    def frame_ready(self) -> bool:
        """Whether a whole frame is read and waiting for :meth:`frame`."""
        if len(self._rbuf) < HEADER.size:
            return False
        return len(self._rbuf) >= HEADER.size + HEADER.unpack_from(self._rbuf)[2]

    def frame(self) -> Frame | None:
        """The next complete frame read, or None."""
        if len(self._rbuf) < HEADER.size:
            return None
        kind, step, length = HEADER.unpack_from(self._rbuf)
        if length > MAX_FRAME:
            raise ProtocolError(f"frame of {length} bytes from {self.peer} is over the limit")
        try:
            kind = Kind(kind)
        except ValueError:
            raise ProtocolError(f"unknown frame kind {kind} from {self.peer}") from None
        end = HEADER.size + length
        if len(self._rbuf) < end:
            return None
        payload = bytes(self._rbuf[HEADER.size:end])
        del self._rbuf[:end]
        first, first_bytes = self._first_read or (self._last_read, end)
        self.last_arrival = (Arrival(end - first_bytes, self._last_read - first)
                             if first_bytes < end and not self._untimed else Arrival(0, 0.0))
        self._first_read = (self._last_read, len(self._rbuf)) if self._rbuf else None
        self._untimed = bool(self._rbuf)  # the next frame's first bytes came with this one's
        return Frame(kind, step, payload)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
