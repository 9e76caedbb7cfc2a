"""The simulated GPU observes the processes: a driver socket, and what it integrates.

A real GPU's counters (what DCGM reads) come from the hardware, never from
the program's own account of itself.  The stand-in here: each agent serves one
UNIX **datagram** socket (``FIREDRILL_DEVICE_SOCKET`` in every real-process
container).  A process sends ``{"pid": P, "state": "compute"|"comm"|"input"|"idle",
"bytes": N}`` at each state change (the canary's contract, docs/WORKLOAD.md).
The device:

- takes the sender's pid from the **kernel** (``SO_PASSCRED``), not from the
  datagram, and accepts a datagram only when that pid is the main process of a
  running container of a pod on this node, or a descendant of one, and the
  datagram names that same pid; anything else is ignored (counted);
- stamps it with the agent's injected clock at receipt: at the instant the
  **kernel** queued it on the socket (``SO_TIMESTAMPNS``), not when the agent
  got round to reading it, so an agent starved of CPU does not stretch the
  state before it (a datagram read 0.5 s late would credit that half second
  to the state it ended);
- integrates, per pod, the seconds spent in each state and the bytes moved by
  collectives (:class:`DeviceIntegrator`, pure and clock-driven).  A state holds
  until the next datagram of that pid, or until the process is gone (then
  idle).  When several processes of one pod report, the pod is in the busiest
  of their states (compute, then comm, then input, then idle).

With the ``stalls-as-compute`` defect, ``input`` is counted as ``compute``.
The agent derives its DCGM gauges and its accounting annotations from these
totals (:mod:`refplatform.agent.metrics`, :mod:`refplatform.agent.runtime`).
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import socket
import struct
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from refplatform.agent.clock import Clock
from refplatform.gpu.throttle import CLOCKS_FILE

__all__ = ["Device", "DeviceIntegrator", "DeviceShares", "DeviceState", "DeviceTotals", "PidRegistry",
           "parse_datagram", "socket_path_for"]

log = logging.getLogger(__name__)

_US = timedelta(microseconds=1)
MAX_DATAGRAM = 4096
MAX_QUEUE_WAIT = 5.0
"""The longest queue wait the device believes of the kernel's stamp (a wall clock stepped meanwhile could say
anything)."""
WINDOW_SECONDS = 1.0
"""The gauges' averaging window: the share of the last second spent in each state."""
_SUN_PATH_MAX = 107  # bytes in sockaddr_un.sun_path, less the terminating NUL
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux's option (and control message type) for the kernel's receive stamp, a ``struct timespec`` of the
real-time clock; Python's socket module does not name it."""


class DeviceState(enum.Enum):
    """What the device is doing for a process (the datagram's ``state``)."""

    COMPUTE = "compute"
    """Kernels run: engine active, tensor pipes busy (x the pod's MFU)."""
    COMM = "comm"
    """A collective moves data: engine active, tensor pipes idle."""
    INPUT = "input"
    """The process waits for its input pipeline: the GPU is allocated but idle."""
    IDLE = "idle"
    """Nothing (rendezvous, stalled on peers, or no process)."""


_RANK = {DeviceState.COMPUTE: 3, DeviceState.COMM: 2, DeviceState.INPUT: 1, DeviceState.IDLE: 0}
_AS = {"checkpoint": DeviceState.IDLE}
"""States a process may declare that the device counts as another: a checkpoint write (the canary's ``checkpoint``)
leaves the GPU idle while the host writes to storage."""


@dataclass(frozen=True)
class DeviceTotals:
    """Seconds per state and bytes moved, since the pod's container started, exact at ``at``."""

    at: datetime
    compute_s: float
    comm_s: float
    input_s: float
    idle_s: float
    comm_bytes: int

    @property
    def stepped_s(self) -> float:
        """Time in a step: compute + comm + input (the accounting's ``stepped-seconds``)."""
        return self.compute_s + self.comm_s + self.input_s


@dataclass(frozen=True)
class DeviceShares:
    """Shares of the last window spent in each state, and bytes per second moved."""

    compute: float = 0.0
    comm: float = 0.0
    input: float = 0.0
    bytes_per_s: float = 0.0

    @property
    def engine(self) -> float:
        return self.compute + self.comm


@dataclass
class _Pod:
    since: datetime
    cursor: datetime
    state: DeviceState = DeviceState.IDLE
    us: dict[DeviceState, int] | None = None
    comm_bytes: int = 0
    seen: bool = False
    pids: dict[int, tuple[int, DeviceState]] | None = None
    """State by reporting pid, with the main process of the container it runs in."""
    segments: deque[tuple[datetime, datetime, DeviceState]] | None = None
    transfers: deque[tuple[datetime, int]] | None = None

    def __post_init__(self) -> None:
        self.us = {s: 0 for s in DeviceState}
        self.pids = {}
        self.segments = deque()
        self.transfers = deque()


class DeviceIntegrator:
    """Per-pod time in each :class:`DeviceState`, driven by the instants it is given.  Not thread-safe."""

    def __init__(self, *, stalls_as_compute: bool = False, window: float = WINDOW_SECONDS) -> None:
        self.stalls_as_compute = stalls_as_compute
        self.window = timedelta(seconds=window)
        self._pods: dict[str, _Pod] = {}

    def attach(self, pod: str, at: datetime) -> None:
        """A pod's container started at ``at``: every counter starts from 0, idle."""
        self._pods[pod] = _Pod(since=at, cursor=at)

    def detach(self, pod: str, at: datetime) -> DeviceTotals | None:
        """The pod is gone: its final totals (``None`` if it was never attached)."""
        if pod not in self._pods:
            return None
        totals = self.totals(pod, at)
        del self._pods[pod]
        return totals

    def attached(self, pod: str) -> bool:
        return pod in self._pods

    def seen(self, pod: str) -> bool:
        """Whether any process of the pod has reported to the device."""
        p = self._pods.get(pod)
        return p is not None and p.seen

    def observe(self, pod: str, pid: int, state: DeviceState, nbytes: int, at: datetime, main: int | None = None) -> None:
        """``pid`` of ``pod`` entered ``state`` at ``at`` (moving ``nbytes`` when it is ``comm``).

        ``main``: the container's main process ``pid`` runs under (itself by default).
        """
        p = self._pods.get(pod)
        if p is None:
            return
        if self.stalls_as_compute and state is DeviceState.INPUT:
            state = DeviceState.COMPUTE  # the defect: waiting for input reads as kernels running
        at = self._advance(p, at)
        p.seen = True
        assert p.pids is not None and p.transfers is not None
        if state is DeviceState.IDLE:
            p.pids.pop(pid, None)
        else:
            p.pids[pid] = (pid if main is None else main, state)
        if state is DeviceState.COMM and nbytes > 0:
            p.comm_bytes += nbytes
            p.transfers.append((at, nbytes))
        p.state = self._effective(p)

    def process_gone(self, pod: str, pid: int, at: datetime) -> None:
        """``pid`` exited: neither it nor the processes that ran under it (if it was a main) keep the pod busy."""
        p = self._pods.get(pod)
        if p is None:
            return
        at = self._advance(p, at)
        assert p.pids is not None
        for other in [k for k, (main, _) in p.pids.items() if k == pid or main == pid]:
            del p.pids[other]
        p.state = self._effective(p)

    def reporting(self, pod: str) -> dict[int, int]:
        """The pids whose state counts for ``pod``, with the main process each runs under."""
        p = self._pods.get(pod)
        return {} if p is None or p.pids is None else {k: main for k, (main, _) in p.pids.items()}

    def thaw(self, at: datetime, frozen_seconds: float) -> None:
        """The node was frozen (SIGSTOP) for the ``frozen_seconds`` before ``at``: that time was idle.

        Time of ``[at - frozen_seconds, at]`` already credited to another state (a
        datagram handled just before the agent noticed the freeze) is moved to idle.
        """
        start = at - timedelta(seconds=max(0.0, frozen_seconds))
        for p in self._pods.values():
            at_p = self._advance(p, at)
            assert p.segments is not None and p.us is not None
            kept: list[tuple[datetime, datetime, DeviceState]] = []
            for a, b, s in p.segments:
                lo, hi = max(a, start), min(b, at_p)
                if s is DeviceState.IDLE or hi <= lo:
                    kept.append((a, b, s))
                    continue
                moved = (hi - lo) // _US
                p.us[s] -= moved
                p.us[DeviceState.IDLE] += moved
                if a < lo:
                    kept.append((a, lo, s))
                kept.append((lo, hi, DeviceState.IDLE))
                if hi < b:
                    kept.append((hi, b, s))
            p.segments = deque(kept)

    def totals(self, pod: str, at: datetime) -> DeviceTotals | None:
        p = self._pods.get(pod)
        if p is None:
            return None
        at = self._advance(p, at)
        assert p.us is not None
        us = p.us
        return DeviceTotals(at, us[DeviceState.COMPUTE] / 1e6, us[DeviceState.COMM] / 1e6, us[DeviceState.INPUT] / 1e6,
                            us[DeviceState.IDLE] / 1e6, p.comm_bytes)

    def shares(self, pod: str, at: datetime) -> DeviceShares | None:
        """What the pod's GPU did over the window ending ``at`` (``None`` if the pod is not attached)."""
        p = self._pods.get(pod)
        if p is None:
            return None
        at = self._advance(p, at)
        assert p.segments is not None and p.transfers is not None
        start = max(at - self.window, p.since)
        span = (at - start) / _US
        if span <= 0:
            return DeviceShares()
        in_state = {s: 0 for s in DeviceState}
        for a, b, s in p.segments:
            lo, hi = max(a, start), min(b, at)
            if hi > lo:
                in_state[s] += (hi - lo) // _US
        moved = sum(n for t, n in p.transfers if t >= start)
        return DeviceShares(in_state[DeviceState.COMPUTE] / span, in_state[DeviceState.COMM] / span,
                            in_state[DeviceState.INPUT] / span, moved / (span / 1e6))

    # -- internals -------------------------------------------------------------

    @staticmethod
    def _effective(p: _Pod) -> DeviceState:
        assert p.pids is not None
        return max((state for _, state in p.pids.values()), key=_RANK.__getitem__, default=DeviceState.IDLE)

    def _advance(self, p: _Pod, at: datetime) -> datetime:
        """Credit ``[cursor, at]`` to the current state; an instant before the cursor counts as the cursor."""
        if at <= p.cursor:
            return p.cursor
        assert p.us is not None and p.segments is not None and p.transfers is not None
        p.us[p.state] += (at - p.cursor) // _US
        if p.segments and p.segments[-1][1] == p.cursor and p.segments[-1][2] is p.state:
            a, _, s = p.segments.pop()
            p.segments.append((a, at, s))
        else:
            p.segments.append((p.cursor, at, p.state))
        p.cursor = at
        horizon = at - self.window
        while p.segments and p.segments[0][1] <= horizon:
            p.segments.popleft()
        while p.transfers and p.transfers[0][0] < horizon:
            p.transfers.popleft()
        return at


def parse_datagram(data: bytes) -> tuple[int, DeviceState, int] | None:
    """``(pid, state, bytes)`` of a well-formed datagram, else ``None``."""
    try:
        obj = json.loads(data.decode("ascii"))
        pid, state = obj["pid"], _AS.get(obj["state"]) or DeviceState(obj["state"])
        nbytes = obj.get("bytes", 0)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        nbytes = 0
    return pid, state, nbytes


def _stat(pid: int) -> tuple[int, int] | None:
    """``(ppid, starttime)`` from ``/proc/<pid>/stat``; ``None`` if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


class PidRegistry:
    """Which pod a process belongs to: the main processes of running containers, and their descendants.  Thread-safe."""

    MAX_DEPTH = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._main: dict[int, str] = {}
        self._cache: dict[int, tuple[int, tuple[str, int] | None]] = {}  # pid -> (starttime, (pod, main))

    def add(self, pid: int, pod: str) -> None:
        with self._lock:
            self._main[pid] = pod
            self._cache.clear()

    def remove(self, pid: int) -> None:
        with self._lock:
            self._main.pop(pid, None)
            self._cache.clear()

    def owner(self, pid: int) -> tuple[str, int] | None:
        """``(pod, main pid)`` of the container ``pid`` runs in, or ``None`` (not a container's process, or gone)."""
        stat = _stat(pid)
        if stat is None:
            return None
        with self._lock:
            cached = self._cache.get(pid)
            if cached is not None and cached[0] == stat[1]:
                return cached[1]
            mains = dict(self._main)
        found: tuple[str, int] | None = None
        current, info = pid, stat
        for _ in range(self.MAX_DEPTH):
            if current in mains:
                found = (mains[current], current)
                break
            if info is None or info[0] <= 1:
                break
            current = info[0]
            info = _stat(current)
        with self._lock:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[pid] = (stat[1], found)
        return found


def socket_path_for(data_dir: Path, node: str) -> Path:
    """``<data-dir>/nodes/<node>/device.sock``, or, when that is too long for a UNIX socket address,
    ``<tmp>/firedrill-dev-<hash>/device.sock`` (the hash of the long path)."""
    path = data_dir / "nodes" / node / "device.sock"
    if len(os.fsencode(str(path))) <= _SUN_PATH_MAX:
        return path
    digest = hashlib.sha256(os.fsencode(str(path.resolve()))).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"firedrill-dev-{digest}" / "device.sock"


class Device:
    """The node's simulated GPU driver: the socket, the pid check and the integrator.  ``start()``, ``stop()``.

    Every method is thread-safe: the socket thread observes, the pod sync
    thread attaches and reads totals, the metrics scrape reads shares.
    """

    def __init__(self, path: Path, clock: Clock, *, stalls_as_compute: bool = False,
                 window: float = WINDOW_SECONDS) -> None:
        self.path = path
        self.clock = clock
        self.pids = PidRegistry()
        self.integrator = DeviceIntegrator(stalls_as_compute=stalls_as_compute, window=window)
        self.accepted = 0
        self.ignored = 0
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -- the socket ------------------------------------------------------------

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.bind(str(self.path))
        sock.settimeout(0.2)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="device-socket", daemon=True)
        self._thread.start()

    @property
    def clocks_path(self) -> Path:
        """The node's clocks file (:mod:`refplatform.gpu.throttle`), beside the socket."""
        return self.path.parent / CLOCKS_FILE

    def write_clocks(self, document: dict[str, object]) -> None:
        """Replace the clocks file atomically: a container reading it sees the old content or the new."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.clocks_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(document, separators=(",", ":"), sort_keys=True), encoding="ascii")
        os.replace(tmp, self.clocks_path)

    def stop(self) -> None:
        self.clocks_path.unlink(missing_ok=True)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.path.unlink(missing_ok=True)
        if self.path.parent.name.startswith("firedrill-dev-"):  # the short fallback directory is ours
            try:
                self.path.parent.rmdir()
            except OSError:
                pass

    def _serve(self) -> None:
        assert self._sock is not None
        creds, stamp = struct.calcsize("3i"), struct.calcsize("2q")
        while not self._stop.is_set():
            try:
                data, ancdata, _flags, _addr = self._sock.recvmsg(
                    MAX_DATAGRAM, socket.CMSG_SPACE(creds) + socket.CMSG_SPACE(stamp))
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            read_at = time.time()
            sender, waited = None, 0.0
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= creds:
                    sender = struct.unpack("3i", payload[:creds])[0]
                elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= stamp:
                    sec, nsec = struct.unpack("2q", payload[:stamp])
                    waited = min(max(0.0, read_at - (sec + nsec / 1e9)), MAX_QUEUE_WAIT)
            try:
                self.receive(sender, data, self.clock.now() - timedelta(seconds=waited))
            except Exception:  # the driver must survive any datagram
                log.exception("device: datagram handling failed")

    def receive(self, sender: int | None, data: bytes, at: datetime) -> bool:
        """Handle one datagram from the process ``sender`` (the kernel's word), queued on the socket at ``at`` (the
        kernel's stamp on the agent's clock); True if it counted."""
        parsed = parse_datagram(data)
        if parsed is None or sender is None or parsed[0] != sender:
            self.ignored += 1
            return False
        pid, state, nbytes = parsed
        owner = self.pids.owner(pid)
        if owner is None:
            self.ignored += 1
            return False
        pod, main = owner
        with self._lock:
            if not self.integrator.attached(pod):
                self.ignored += 1
                return False
            self.integrator.observe(pod, pid, state, nbytes, at, main)
        self.accepted += 1
        return True

    # -- the agent's side ------------------------------------------------------

    def attach(self, pod: str, at: datetime) -> None:
        with self._lock:
            self.integrator.attach(pod, at)

    def detach(self, pod: str, at: datetime) -> DeviceTotals | None:
        with self._lock:
            return self.integrator.detach(pod, at)

    def add_process(self, pod: str, pid: int) -> None:
        self.pids.add(pid, pod)

    def process_gone(self, pod: str, pid: int, at: datetime) -> None:
        """A container's main process exited: it, and any descendant that reported, no longer count."""
        self.pids.remove(pid)
        with self._lock:
            self.integrator.process_gone(pod, pid, at)

    def sweep(self, pod: str, at: datetime) -> None:
        """Forget the reporting processes of ``pod`` that exited without saying so (a descendant killed)."""
        with self._lock:
            reporting = self.integrator.reporting(pod)
        for pid, main in reporting.items():
            if pid != main and _stat(pid) is None:
                with self._lock:
                    self.integrator.process_gone(pod, pid, at)

    def thaw(self, at: datetime, frozen_seconds: float) -> None:
        with self._lock:
            self.integrator.thaw(at, frozen_seconds)

    def seen(self, pod: str) -> bool:
        with self._lock:
            return self.integrator.seen(pod)

    def totals(self, pod: str, at: datetime) -> DeviceTotals | None:
        with self._lock:
            return self.integrator.totals(pod, at)

    def shares(self, pod: str, at: datetime) -> DeviceShares | None:
        with self._lock:
            return self.integrator.shares(pod, at)
