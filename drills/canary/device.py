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

The same file speaks for the node's checkpoint storage (:class:`StorageState`):
``"storage_stalled_until": <epoch seconds>`` (the storage answers nothing until
then: a checkpoint write waits before its next chunk) and ``"atomic_rename":
false`` (the storage does not keep the rename promise: a checkpoint is written
straight under its final name).  Read afresh at each question; a missing or
unreadable file is storage that answers and keeps its promise.
"""

from __future__ import annotations

import enum
import json
import math
import os
import socket
from dataclasses import dataclass
from typing import Any

__all__ = ["Device", "DeviceState", "StorageState"]


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
    CHECKPOINT = "checkpoint"
    """Rank 0 writes a checkpoint: no kernel runs, the job waits on its storage."""


@dataclass(frozen=True)
class StorageState:
    """What the node's driver file says of the checkpoint storage at one reading."""

    stalled_until: float | None = None
    """The storage answers nothing until this instant (epoch seconds); None: it answers."""
    atomic_rename: bool = True
    """The storage keeps the rename promise (a renamed file is whole); False: a checkpoint is written straight
    under its final name, so a writer that dies mid-write leaves a torn file there."""

    def stall_left(self, now: float) -> float:
        """Seconds the storage still answers nothing at the epoch instant ``now`` (0: it answers)."""
        return 0.0 if self.stalled_until is None else max(0.0, self.stalled_until - now)


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

    def _driver_file(self) -> dict[str, Any]:
        """The clocks file's object, read now ({} when unset, missing, unreadable or not an object)."""
        if not self._clocks:
            return {}
        try:
            with open(self._clocks, encoding="ascii") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def speed(self) -> tuple[float, float]:
        """(the speed of this process's slowest GPU, 0 < s <= 1; the extra input seconds per step)."""
        doc = self._driver_file()
        gpus: dict[str, Any] = doc["gpus"] if isinstance(doc.get("gpus"), dict) else {}
        speeds = [gpus[g] for g in self._gpus if _fraction(gpus.get(g))]
        delay = doc.get("input_delay_s")
        delay = float(delay) if isinstance(delay, int | float) and not isinstance(delay, bool) and delay > 0 else 0.0
        return min(speeds, default=1.0), delay

    def storage(self) -> StorageState:
        """The checkpoint storage as the driver file says it is now (a nonsense value counts as absent)."""
        doc = self._driver_file()
        until: Any = doc.get("storage_stalled_until")
        stalled = float(until) if _number(until) and math.isfinite(until) else None
        return StorageState(stalled_until=stalled, atomic_rename=doc.get("atomic_rename") is not False)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fraction(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1
