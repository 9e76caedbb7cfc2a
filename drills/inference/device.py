"""The inference canary's side of the node's (simulated) GPU driver: one datagram per state change, best effort.

The same socket and datagram as the training canary (``drills/canary/device.py``,
docs/WORKLOAD.md "The device socket"): ``FIREDRILL_DEVICE_SOCKET`` names a UNIX
datagram socket the node agent serves, and each change sends
``{"pid": <os pid>, "state": "compute" | "idle"}`` (ASCII JSON).  The server is
``compute`` while any request is admitted to the batch and ``idle`` otherwise.
Sending never blocks and never fails the server: a missing or full socket
drops the datagram.
"""

from __future__ import annotations

import enum
import json
import os
import socket

__all__ = ["Device", "DeviceState"]


class DeviceState(enum.Enum):
    """What the (simulated) GPU is doing for this process."""

    COMPUTE = "compute"
    """At least one request is in the running batch (prefill or decode kernels run)."""
    IDLE = "idle"
    """No request is running: warm-up, an empty queue, or about to exit."""


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

    def send(self, state: DeviceState) -> None:
        if self._sock is None:
            return
        message = {"pid": self._pid, "state": state.value}
        try:
            self._sock.sendto(json.dumps(message, separators=(",", ":")).encode("ascii"), self._path)
        except OSError:
            pass

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
