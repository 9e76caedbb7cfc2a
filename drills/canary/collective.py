"""The step's all-reduce through rank 0, over the rendezvous' TCP star, with stall detection and peer loss.

Each rank sends its contribution to rank 0, rank 0 sums them (byte lanes,
modulo 256) and sends the sum back to every rank.  Every rank checks the sum
against the one it expects, so a collective that completes really moved every
rank's bytes.

A collective that has waited ``--stall-after`` seconds logs ``stalled`` (once)
and tells the device ``idle``; when it completes it logs ``unstalled``.  A
broken connection logs ``peer_lost``; rank 0 then closes every connection (an
abort, as NCCL's), so every survivor notices.  A survivor does not exit: it
stays in the collective, stalled, until SIGTERM or until the collective has
waited ``--peer-timeout`` seconds, which raises :class:`PeerTimeout` (a peer
that stayed silent that long is first logged lost with reason ``timeout``).

A paced connection (:attr:`drills.canary.wire.Conn.rate`) is written only when its pacing lets the next piece
out: the waits sleep until then instead of polling a socket that is writable all along.  After each
all-reduce, :attr:`Collective.arrivals` holds how each peer's frame of it reached this rank (the bytes and
seconds of the ``step`` line's ``recv``: the bandwidth this rank's links really gave it).
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Sequence

from drills.canary.device import Device, DeviceState
from drills.canary.errors import PeerTimeout, ProtocolError
from drills.canary.interrupts import Interrupts
from drills.canary.log import Event, EventLog
from drills.canary.rendezvous import World
from drills.canary.wire import Arrival, Conn, ConnectionLost, Kind, LossReason, encode

__all__ = ["Collective", "contribution", "reduce_sum"]


@functools.lru_cache(maxsize=8)
def _lane_masks(length: int) -> tuple[int, int]:
    even = int.from_bytes(bytes(0xFF if i % 2 == 0 else 0 for i in range(length)), "little")
    odd = int.from_bytes(bytes(0 if i % 2 == 0 else 0xFF for i in range(length)), "little")
    return even, odd


def reduce_sum(buffers: Sequence[bytes]) -> bytes:
    """The byte-wise sum modulo 256 of equally long buffers.

    Done on two big integers, the even and the odd bytes, so each lane's carry
    falls into an empty neighbour byte and is masked off: no per-byte Python loop.
    """
    length = len(buffers[0])
    if any(len(b) != length for b in buffers):
        raise ProtocolError(f"all-reduce buffers differ in length: {[len(b) for b in buffers]}")
    even_mask, odd_mask = _lane_masks(length)
    even = odd = 0
    for buffer in buffers:
        value = int.from_bytes(buffer, "little")
        even = (even + (value & even_mask)) & even_mask
        odd = (odd + (value & odd_mask)) & odd_mask
    return (even | odd).to_bytes(length, "little")


@functools.lru_cache(maxsize=4)
def _pattern(length: int) -> bytes:
    return bytes(range(256)) * (length // 256 + 2)


def contribution(rank: int, step: int, length: int) -> bytes:
    """What ``rank`` contributes to step ``step``: a byte ramp shifted by rank and step (every rank can
    compute every other's, so the expected sum is known)."""
    shift = (rank * 37 + step) % 256
    return _pattern(length)[shift:shift + length]


class _Wait:
    """One collective's clock: when it stalls, when it gives up."""

    def __init__(self, step: int, on: str, log: EventLog, device: Device, stall_after: float,
                 peer_timeout: float, clock: Callable[[], float]) -> None:
        self.step, self.on, self.log, self.device, self.clock = step, on, log, device, clock
        self.started = clock()
        self.stall_at = self.started + stall_after
        self.give_up_at = self.started + peer_timeout
        self.stalled_at: float | None = None

    def timeout(self) -> float:
        """Seconds until the next thing this wait must do on its own."""
        due = self.give_up_at if self.stalled_at is not None else min(self.stall_at, self.give_up_at)
        return max(0.0, due - self.clock())

    def tick(self) -> bool:
        """Log ``stalled`` when due; True when the collective must give up."""
        now = self.clock()
        if self.stalled_at is None and now >= self.stall_at:
            self.stalled_at = now
            self.log.emit(Event.STALLED, step=self.step, waited_s=round(now - self.started, 6), on=self.on)
            self.device.send(DeviceState.IDLE)
        return now >= self.give_up_at

    def done(self) -> None:
        if self.stalled_at is not None:
            self.log.emit(Event.UNSTALLED, step=self.step, stalled_s=round(self.clock() - self.stalled_at, 6))


def _writes(conns: Sequence[Conn], timeout: float) -> tuple[list[socket.socket], float]:
    """The sockets of ``conns`` to wait on for writing (those with bytes their pacing lets out now) and the wait's
    timeout, cut short to the moment the next paced piece is due."""
    writable, due = [], timeout
    for conn in conns:
        if conn.pending_write:
            delay = conn.pace_delay()
            if delay > 0:
                due = min(due, delay)
            else:
                writable.append(conn.sock)
    return writable, due


class Collective:
    """The all-reduce of one rank of a formed :class:`World`."""

    def __init__(self, world: World, rank: int, world_size: int, log: EventLog, device: Device,
                 interrupts: Interrupts, stall_after: float, peer_timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.world, self.rank, self.world_size = world, rank, world_size
        self.log, self.device, self.interrupts = log, device, interrupts
        self.stall_after, self.peer_timeout, self.clock = stall_after, peer_timeout, clock
        self.lost: ConnectionLost | None = None
        self.arrivals: dict[int, Arrival] = {}
        """Peer rank -> how its frame of the last all-reduce arrived here (rank 0: every other rank's
        contribution; another rank: rank 0's result)."""

    def moved_bytes(self, payload: int) -> int:
        """Payload bytes this rank sends plus receives in one all-reduce."""
        return 2 * payload * (self.world_size - 1 if self.rank == 0 else (1 if self.world_size > 1 else 0))

    def all_reduce(self, step: int, mine: bytes) -> bytes:
        """The sum of every rank's ``mine`` for ``step``; blocks (stalled) while a peer is frozen or lost."""
        if self.world_size == 1:
            return mine
        wait = _Wait(step, "peers" if self.rank == 0 else "master", self.log, self.device,
                     self.stall_after, self.peer_timeout, self.clock)
        try:
            result = self._root(step, mine, wait) if self.rank == 0 else self._leaf(step, mine, wait)
        except ConnectionLost as lost:
            self._lose(lost)
            self._hold(wait)
        wait.done()
        return result

    def _root(self, step: int, mine: bytes, wait: _Wait) -> bytes:
        got: dict[int, bytes] = {}
        conns = self.world.conns
        self.arrivals = {}
        for conn in conns.values():
            conn.begin_receive()
        self._take(conns, got, Kind.CONTRIBUTION, step, len(mine))
        while len(got) < len(conns):
            waiting = [c for r, c in conns.items() if r not in got]
            writes, timeout = _writes(waiting, wait.timeout())
            readable, writable = self.interrupts.wait([c.sock for c in waiting], writes, timeout)
            for conn in waiting:
                if conn.sock in writable:
                    conn.flush()
                if conn.sock in readable:
                    conn.fill()
            self._take(conns, got, Kind.CONTRIBUTION, step, len(mine))
            if len(got) < len(conns) and wait.tick():
                self._silent([r for r in conns if r not in got])
        result = reduce_sum([mine, *(got[r] for r in sorted(got))])
        frame = encode(Kind.RESULT, step, result)
        for conn in conns.values():
            conn.queue(frame)
        while True:
            unsent = [c for c in conns.values() if not c.flush()]
            if not unsent:
                return result
            writes, timeout = _writes(unsent, wait.timeout())
            _, _ = self.interrupts.wait([], writes, timeout)
            if wait.tick():
                self._silent([int(c.peer) for c in unsent])

    def _leaf(self, step: int, mine: bytes, wait: _Wait) -> bytes:
        conn = self.world.conns[0]
        got: dict[int, bytes] = {}
        self.arrivals = {}
        conn.begin_receive()
        conn.queue(encode(Kind.CONTRIBUTION, step, mine))
        while True:
            conn.flush()
            self._take({0: conn}, got, Kind.RESULT, step, len(mine))
            if got:
                return got[0]
            writes, timeout = _writes([conn], wait.timeout())
            readable, _ = self.interrupts.wait([conn.sock], writes, timeout)
            if readable:
                conn.fill()
            if not conn.frame_ready() and wait.tick():
                self._silent(["master"])

    def _take(self, conns: dict[int, Conn], got: dict[int, bytes], want: Kind, step: int, length: int) -> None:
        """Every frame of ``want`` for ``step`` now complete in the buffers of ``conns`` not yet in ``got``, with
        how it arrived."""
        for rank, conn in conns.items():
            if rank in got:
                continue
            frame = conn.frame()
            if frame is not None:
                got[rank] = self._payload(frame.kind, frame.step, frame.payload, want, step,
                                          "master" if want is Kind.RESULT else conn.peer, length)
                if conn.last_arrival is not None:
                    self.arrivals[rank] = conn.last_arrival

    @staticmethod
    def _payload(kind: Kind, got_step: int, payload: bytes, want: Kind, step: int, peer: int | str,
                 length: int) -> bytes:
        if kind is not want or got_step != step or len(payload) != length:
            raise ProtocolError(f"{peer} sent {kind.name} for step {got_step} ({len(payload)} bytes) where "
                                f"{want.name} for step {step} ({length} bytes) was due")
        return payload

    def _silent(self, peers: Sequence[int | str]) -> None:
        for peer in peers:
            self.log.emit(Event.PEER_LOST, peer=peer, reason=LossReason.TIMEOUT.value)
        raise PeerTimeout(f"waited {self.peer_timeout:g} s for {', '.join(map(str, peers))} "
                          f"(no answer: frozen or cut off)")

    def _lose(self, lost: ConnectionLost) -> None:
        self.log.emit(Event.PEER_LOST, peer=lost.peer, reason=lost.reason.value)
        self.device.send(DeviceState.IDLE)
        self.lost = lost
        self.world.close()  # rank 0 aborts the world so every survivor notices; a leaf has nothing left

    def _hold(self, wait: _Wait) -> None:
        """Stay stalled after a loss: until SIGTERM (raised by the wait) or the peer timeout."""
        assert self.lost is not None
        while not wait.tick():
            self.interrupts.wait([], [], wait.timeout())
        who = self.lost.peer if isinstance(self.lost.peer, str) else f"rank {self.lost.peer}"
        raise PeerTimeout(f"waited {self.peer_timeout:g} s after losing {who} ({self.lost.reason.value})")
