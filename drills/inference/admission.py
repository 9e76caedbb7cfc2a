"""Who generates now and who waits: the bounded batch and the bounded FIFO queue, a pure state machine.

It reads no clock: every call that can change a wait takes ``now`` (seconds on
any monotonic clock), so tests drive it with made-up instants.  The server
wraps it in one lock (``drills/inference/server.py``).
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from dataclasses import dataclass

__all__ = ["Admission", "Decision", "Ticket"]


class Decision(enum.Enum):
    """What became of an arriving request."""

    RUN = "run"
    """A batch slot was free: it runs at once."""
    WAIT = "wait"
    """Every slot is taken: it waits in the queue, first come first served."""
    FULL = "full"
    """Every slot is taken and the queue holds ``max_queue``: it is turned away (HTTP 429)."""


@dataclass(frozen=True)
class Ticket:
    """One request's place; distinct per arrival even when two requests carry the same id."""

    serial: int
    request_id: str
    arrived: float


class Admission:
    """At most ``max_batch`` tickets run and at most ``max_queue`` wait; a finished ticket's slot goes to the
    oldest waiting one."""

    def __init__(self, max_batch: int, max_queue: int) -> None:
        if max_batch < 1 or max_queue < 0:
            raise ValueError(f"max_batch must be >= 1 and max_queue >= 0, got {max_batch} and {max_queue}")
        self.max_batch = max_batch
        self.max_queue = max_queue
        self._serials = itertools.count(1)
        self._waiting: deque[Ticket] = deque()
        self._running: dict[int, float] = {}
        """serial -> the instant it was admitted to the batch."""

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def idle(self) -> bool:
        """Nothing runs and nothing waits."""
        return not self._waiting and not self._running

    def arrive(self, request_id: str, now: float) -> tuple[Decision, Ticket | None]:
        """Place a new request; the ticket is None when the decision is FULL."""
        if len(self._running) < self.max_batch and not self._waiting:
            ticket = Ticket(next(self._serials), request_id, now)
            self._running[ticket.serial] = now
            return Decision.RUN, ticket
        if len(self._waiting) >= self.max_queue:
            return Decision.FULL, None
        ticket = Ticket(next(self._serials), request_id, now)
        self._waiting.append(ticket)
        return Decision.WAIT, ticket

    def is_running(self, ticket: Ticket) -> bool:
        return ticket.serial in self._running

    def queued_seconds(self, ticket: Ticket) -> float:
        """How long a running ticket waited for its slot."""
        try:
            return self._running[ticket.serial] - ticket.arrived
        except KeyError:
            raise ValueError(f"request {ticket.request_id!r} (ticket {ticket.serial}) is not running") from None

    def finish(self, ticket: Ticket, now: float) -> list[Ticket]:
        """``ticket`` leaves (done, or its client went away while it waited); returns the tickets that now run."""
        if self._running.pop(ticket.serial, None) is None:
            try:
                self._waiting.remove(ticket)
            except ValueError:
                raise ValueError(f"request {ticket.request_id!r} (ticket {ticket.serial}) is neither running "
                                 f"nor waiting") from None
        promoted: list[Ticket] = []
        while self._waiting and len(self._running) < self.max_batch:
            nxt = self._waiting.popleft()
            self._running[nxt.serial] = now
            promoted.append(nxt)
        return promoted
