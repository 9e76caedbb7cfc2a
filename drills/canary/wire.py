"""The canary's wire protocol: length-prefixed frames over non-blocking TCP connections.

A frame is a 13-byte header (kind: 1 byte, step: 8 bytes, payload length: 4
bytes, network byte order) and the payload.  ``HELLO`` and ``WELCOME`` carry
JSON; ``CONTRIBUTION`` (a rank to rank 0) and ``RESULT`` (rank 0 to a rank)
carry one step's all-reduce bytes.
"""

from __future__ import annotations

import enum
import json
import socket
import struct
from dataclasses import dataclass
from typing import Any

from drills.canary.errors import CanaryError, ProtocolError

__all__ = ["Conn", "ConnectionLost", "Frame", "Kind", "LossReason"]

HEADER = struct.Struct("!BQI")
MAX_FRAME = (1 << 30) + 4096
RECV_CHUNK = 1 << 20


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

    def __init__(self, sock: socket.socket, peer: int | str) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.peer = peer
        self._rbuf = bytearray()
        self._wbuf = bytearray()

    def queue(self, data: bytes) -> None:
        self._wbuf += data

    @property
    def pending_write(self) -> bool:
        return bool(self._wbuf)

    def flush(self) -> bool:
        """Send what the socket takes now; True when nothing is left to send."""
        while self._wbuf:
            try:
                sent = self.sock.send(self._wbuf)
            except BlockingIOError:
                return False
            except (BrokenPipeError, ConnectionResetError):
                raise ConnectionLost(self.peer, LossReason.RESET) from None
            del self._wbuf[:sent]
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
        self._rbuf += data

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
        return Frame(kind, step, payload)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
