"""The hollow fleet's heartbeat wheel: renewals spread over the interval, no drift, no burst after a stall."""

from __future__ import annotations

import random

import pytest

from refplatform.hollow.heartbeats import JITTER, HeartbeatWheel, first_offsets


class Counting:
    def __init__(self) -> None:
        self.beats = 0

    def beat(self) -> bool:
        self.beats += 1
        return True


def test_first_beats_are_spread_evenly_over_one_interval() -> None:
    offsets = first_offsets(1000, 10.0, random.Random(1))
    assert offsets == sorted(offsets)
    assert 0.0 <= offsets[0] < 0.01 and 9.99 <= offsets[-1] < 10.0
    per_second = [sum(1 for o in offsets if s <= o < s + 1) for s in range(10)]
    assert per_second == [100] * 10  # 1,000 nodes, 10 s: 100 renewals a second, never a stampede


def test_due_takes_only_what_is_due_and_reschedule_keeps_the_cadence() -> None:
    wheel = HeartbeatWheel([Counting() for _ in range(4)], 1.0, rng=random.Random(2))
    wheel.schedule(start=100.0)
    taken = wheel.due(100.5)
    assert [i for _, i in taken] == [0, 1]
    assert all(100.0 <= t <= 100.5 for t, _ in taken)
    was_due, index = taken[0]
    nxt = wheel.reschedule(index, was_due, now=was_due + 0.01)
    assert was_due + 1.0 * (1 - JITTER) <= nxt <= was_due + 1.0 * (1 + JITTER)  # from when it was due: no drift
    assert wheel.late == 0


def test_a_beat_that_fell_behind_is_put_one_interval_from_now_not_fired_in_a_burst() -> None:
    wheel = HeartbeatWheel([Counting()], 10.0, rng=random.Random(3))
    wheel.schedule(start=0.0)
    (was_due, index), = wheel.due(10.0)
    nxt = wheel.reschedule(index, was_due, now=was_due + 25.0)  # the server stalled 25 s
    assert nxt == pytest.approx(was_due + 35.0)
    assert wheel.late == 1


def test_a_zero_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval"):
        HeartbeatWheel([Counting()], 0.0)
