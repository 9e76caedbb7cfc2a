"""The batch and the queue: at most max_batch run, at most max_queue wait, first come first served, and each
wait is measured on the caller's clock (no clock is read here)."""

from __future__ import annotations

import pytest

from drills.inference.admission import Admission, Decision


def test_the_batch_fills_then_the_queue_then_requests_are_turned_away() -> None:
    adm = Admission(max_batch=2, max_queue=2)
    decisions = [adm.arrive(f"r{i}", now=float(i))[0] for i in range(5)]
    assert decisions == [Decision.RUN, Decision.RUN, Decision.WAIT, Decision.WAIT, Decision.FULL]
    assert (adm.running, adm.waiting) == (2, 2)
    assert adm.arrive("r5", 5.0) == (Decision.FULL, None)


def test_a_freed_slot_goes_to_the_oldest_waiting_with_its_wait_measured() -> None:
    adm = Admission(max_batch=1, max_queue=3)
    _, first = adm.arrive("a", 10.0)
    _, second = adm.arrive("b", 10.5)
    _, third = adm.arrive("c", 11.0)
    assert first is not None and second is not None and third is not None
    assert adm.queued_seconds(first) == 0.0
    assert adm.finish(first, now=12.0) == [second]
    assert adm.is_running(second) and not adm.is_running(third)
    assert adm.queued_seconds(second) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="'c'.*not running"):
        adm.queued_seconds(third)
    assert adm.finish(second, now=12.25) == [third]
    assert adm.queued_seconds(third) == pytest.approx(1.25)
    assert adm.finish(third, 13.0) == [] and adm.idle


def test_a_waiting_request_that_leaves_frees_its_queue_place_without_running() -> None:
    adm = Admission(max_batch=1, max_queue=1)
    _, running = adm.arrive("a", 0.0)
    _, waiting = adm.arrive("b", 0.0)
    assert running is not None and waiting is not None
    assert adm.arrive("c", 0.0)[0] is Decision.FULL
    assert adm.finish(waiting, 1.0) == []
    assert (adm.running, adm.waiting) == (1, 0)
    assert adm.arrive("c", 1.0)[0] is Decision.WAIT


def test_a_new_arrival_never_jumps_the_queue() -> None:
    adm = Admission(max_batch=2, max_queue=5)
    _, a = adm.arrive("a", 0.0)
    adm.arrive("b", 0.0)
    _, c = adm.arrive("c", 0.0)
    assert a is not None and c is not None
    promoted = adm.finish(a, 1.0)
    assert promoted == [c]
    assert adm.arrive("d", 1.0)[0] is Decision.WAIT  # the batch is full again


def test_a_zero_queue_admits_only_into_free_slots() -> None:
    adm = Admission(max_batch=1, max_queue=0)
    assert adm.arrive("a", 0.0)[0] is Decision.RUN
    assert adm.arrive("b", 0.0)[0] is Decision.FULL


def test_the_same_request_id_twice_is_two_tickets() -> None:
    adm = Admission(max_batch=2, max_queue=0)
    _, one = adm.arrive("dup", 0.0)
    _, two = adm.arrive("dup", 0.0)
    assert one is not None and two is not None and one != two
    adm.finish(one, 1.0)
    assert adm.is_running(two) and adm.running == 1


def test_finishing_twice_or_bad_sizes_are_errors() -> None:
    adm = Admission(max_batch=1, max_queue=0)
    _, t = adm.arrive("a", 0.0)
    assert t is not None
    adm.finish(t, 1.0)
    with pytest.raises(ValueError, match="neither running nor waiting"):
        adm.finish(t, 2.0)
    with pytest.raises(ValueError, match="max_batch"):
        Admission(max_batch=0, max_queue=1)
