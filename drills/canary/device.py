"""The canary's side of the node's (simulated) GPU driver: one datagram per state change, best effort.

``FIREDRILL_DEVICE_SOCKET`` names a UNIX datagram socket the node agent serves.
Each state change sends ``{"pid": <os pid>, "state": ..., "bytes": <int>}``
(ASCII JSON; ``bytes`` only for ``comm``: the bytes this rank moves in that
collective).  The device stamps each datagram on receipt.  Sending never
blocks and never fails the canary: a missing or full socket drops the datagram.

``FIREDRILL_DEVICE_CLOCKS`` names the driver's clocks file,
``{"gpus": {<uuid>: <speed 0..1>}, "input_delay_s": <seconds>}``: a GPU held
below its clock (thermal or power capping) runs every kernel ``1 / speed``
times longer, so the canary's compute is stretched by its slowest GPU's speed,
and its input waits the delay longer.  Read before each step; a missing or
unreadable file is full speed.
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
    """Sends state datagrams to ``path``; with ``path`` None it sends nothing.  ``clocks``: the clocks file,
    ``gpus``: this process's GPUs as ``NVIDIA_VISIBLE_DEVICES`` names them."""

    def __init__(self, path: str | None, clocks: str | None = None, gpus: tuple[str, ...] | None = None) -> None:
        self._path = path
        self._clocks = clocks
        self._gpus = gpus or ()
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

    def speed(self) -> tuple[float, float]:
        """(the speed of this process's slowest GPU, 0 < s <= 1; the extra input seconds per step)."""
        if not self._clocks:
            return 1.0, 0.0
        try:
            with open(self._clocks, encoding="ascii") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return 1.0, 0.0
        if not isinstance(doc, dict):
            return 1.0, 0.0
        gpus = doc.get("gpus") if isinstance(doc.get("gpus"), dict) else {}
        speeds = [gpus[g] for g in self._gpus if _fraction(gpus.get(g))]
        delay = doc.get("input_delay_s")
        delay = float(delay) if isinstance(delay, int | float) and not isinstance(delay, bool) and delay > 0 else 0.0
        return min(speeds, default=1.0), delay

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _fraction(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1
