"""The canary's side of the node's (simulated) GPU driver: one datagram per state change, best effort.

``FIREDRILL_DEVICE_SOCKET`` names a UNIX datagram socket the node agent serves.
Each state change sends ``{"pid": <os pid>, "state": ..., "bytes": <int>}``
(ASCII JSON; ``bytes`` only for ``comm``: the bytes this rank moves in that
collective).  The device stamps each datagram on receipt.  Sending never
blocks and never fails the canary: a missing or full socket drops the datagram.
"""

from __future__ import annotations

import enum
import json
import os
import socket

__all__ = ["Device", "DeviceState"]


class DeviceState(enum.Enum):
    """What the (simulated) GPU is doing for this process."""

    INPUT = "input"
    """Waiting on the input pipeline: no kernel runs."""
    COMPUTE = "compute"
    """Kernels run."""
    COMM = "comm"
    """A collective runs: interconnect bytes move."""
    IDLE = "idle"
    """Nothing: rendezvous, stalled on a peer, or about to exit."""


class Device:
    """Sends state datagrams to ``path``; with ``path`` None it sends nothing."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._pid = os.getpid()
        self._sock: socket.socket | None = None
        if path is not None and hasattr(socket, "AF_UNIX"):
            try:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
            except OSError:
                self._sock = None

    def send(self, state: DeviceState, moved: int = 0) -> None:
        if self._sock is None:
            return
        message: dict[str, object] = {"pid": self._pid, "state": state.value}
        if state is DeviceState.COMM:
            message["bytes"] = moved
        try:
            self._sock.sendto(json.dumps(message, separators=(",", ":")).encode("ascii"), self._path)
        except OSError:
            pass

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
