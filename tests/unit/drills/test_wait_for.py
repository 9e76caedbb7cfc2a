"""``wait_for``: the drills' one way to wait on their watches, with a deadline on the harness's clock."""

from __future__ import annotations

import threading

from drills.kube.timeline import SystemClock, wait_for


class SteppedClock:
    """A clock that moves 1 s each time it is read: the deadline passes without any real waiting."""

    def __init__(self) -> None:
        self.t = 0.0

    def mono(self) -> float:
        self.t += 1.0
        return self.t

    def wall(self) -> float:
        return self.t


def test_it_returns_as_soon_as_a_watch_makes_the_predicate_true() -> None:
    cond, seen = threading.Condition(), []

    def watch_event() -> None:
        with cond:
            seen.append("ADDED")
            cond.notify_all()
    threading.Timer(0.05, watch_event).start()
    assert wait_for(cond, lambda: bool(seen), timeout=30.0, clock=SystemClock()) is True


def test_it_gives_up_when_the_clock_passes_the_deadline() -> None:
    cond = threading.Condition()
    clock = SteppedClock()
    assert wait_for(cond, lambda: False, timeout=5.0, clock=clock, poll=0.001) is False
    assert clock.t <= 8.0  # it read the clock a few times, then stopped


def test_a_predicate_already_true_needs_no_wait() -> None:
    assert wait_for(threading.Condition(), lambda: True, timeout=0.0, clock=SteppedClock()) is True
