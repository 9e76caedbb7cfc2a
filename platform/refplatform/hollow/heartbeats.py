"""Renew the Leases of many nodes from a few threads, spread over the heartbeat interval.

A :class:`HeartbeatWheel` holds one :class:`~refplatform.agent.heartbeat.NodeHeartbeat` per node and calls
its ``beat()`` when due.  Node ``i`` of ``n`` first beats at ``i/n`` of the interval (plus a random jitter
of up to one slot), so a thousand nodes renew at an even ``n / interval`` Leases a second instead of all at
once; each later beat is one interval after the previous one was due, jittered by up to
:data:`JITTER` of the interval either way (the kubelet jitters its renewals the same way), and a beat that
falls behind (a slow server) is rescheduled one interval from now rather than fired in a burst.

The clock and the sleep are injected (``monotonic``, ``wait``), so the spreading is unit-tested without
waiting.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

__all__ = ["JITTER", "Beater", "HeartbeatWheel", "first_offsets"]

log = logging.getLogger(__name__)

JITTER = 0.04
"""Each renewal lands up to this share of the interval early or late."""


class Beater(Protocol):
    """What the wheel needs of a node's heartbeat."""

    def beat(self) -> bool: ...


def first_offsets(count: int, interval: float, rng: random.Random) -> list[float]:
    """Seconds from the start at which each of ``count`` nodes first beats: evenly spread over one
    ``interval``, each jittered within its own slot (so no two collide and the order is kept)."""
    if count <= 0:
        return []
    slot = interval / count
    return [i * slot + rng.uniform(0.0, slot) for i in range(count)]


class HeartbeatWheel:
    """Calls each node's ``beat()`` every ``interval`` seconds from ``workers`` threads."""

    def __init__(self, beaters: Sequence[Beater], interval: float, *, workers: int = 4,
                 monotonic: Callable[[], float] = time.monotonic, rng: random.Random | None = None,
                 stop_event: threading.Event | None = None) -> None:
        if interval <= 0:
            raise ValueError("the heartbeat interval must be > 0 seconds")
        self.beaters = list(beaters)
        self.interval = interval
        self.monotonic = monotonic
        self.rng = rng or random.Random()
        self.stop_event = stop_event or threading.Event()
        self.beats = 0
        self.failures = 0
        self.late = 0
        """Beats that were due more than one interval before they could start (the fleet is overloaded)."""
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int]] = []
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="hollow-beat")
        self._thread: threading.Thread | None = None

    def schedule(self, start: float) -> None:
        """Put every node on the wheel, the first beats spread over one interval from ``start``."""
        offsets = first_offsets(len(self.beaters), self.interval, self.rng)
        with self._lock:
            self._heap = [(start + off, i) for i, off in enumerate(offsets)]
            heapq.heapify(self._heap)

    def due(self, now: float) -> list[tuple[float, int]]:
        """Take the nodes whose beat is due at ``now`` off the wheel, as ``(when due, node index)`` (they go
        back on when they have beaten)."""
        out = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                out.append(heapq.heappop(self._heap))
        return out

    def next_due(self) -> float | None:
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def reschedule(self, index: int, was_due: float, now: float) -> float:
        """Put node ``index`` back on the wheel one (jittered) interval after ``was_due``; one interval from
        ``now`` if that is already past.  Returns when it is due next."""
        nxt = was_due + self.interval * (1.0 + self.rng.uniform(-JITTER, JITTER))
        if nxt <= now:
            self.late += 1
            nxt = now + self.interval
        with self._lock:
            heapq.heappush(self._heap, (nxt, index))
        return nxt

    def _beat(self, index: int, was_due: float) -> None:
        try:
            ok = self.beaters[index].beat()
        except Exception:  # noqa: BLE001 - one node's bug must not stop the others' heartbeats
            log.exception("heartbeat of node #%d failed", index)
            ok = False
        with self._lock:
            self.beats += 1
            self.failures += 0 if ok else 1
        if not self.stop_event.is_set():
            self.reschedule(index, was_due, self.monotonic())

    def start(self) -> None:
        self.schedule(self.monotonic())
        self._thread = threading.Thread(target=self._run, name="hollow-wheel", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.stop_event.is_set():
            now = self.monotonic()
            for was_due, index in self.due(now):
                # The time it was due is what the next beat is counted from (no drift).
                self._pool.submit(self._beat, index, was_due)
            nxt = self.next_due()
            self.stop_event.wait(0.05 if nxt is None else min(0.05, max(0.0, nxt - self.monotonic())))

    def stop(self) -> None:
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)
