"""The harness's collector discipline (drills.bdd.collector): no full collection while a scenario is timed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from drills.bdd import collector


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """Counts the automatic and explicit collections of the oldest generation while the test runs; the
    collector's freeze and thresholds are put back afterwards."""
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    thresholds, frozen = gc.get_threshold(), collector._frozen
    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        collector._frozen = frozen


def _survivors(n: int) -> list[list[int]]:
    """``n`` small containers that live on: what makes the collector promote and, by default, walk them all."""
    return [[i] for i in range(n)]


def test_no_full_collection_while_a_scenario_runs(full_collections: list[int]) -> None:
    gc.set_threshold(700, 10, 10)
    with collector.young_only():
        settled = len(full_collections)
        assert settled == 1  # the debt of what came before, paid on entry
        assert gc.get_threshold() == (700, 10, collector.NEVER)
        kept = _survivors(400_000)
        assert len(full_collections) == settled
    assert gc.get_threshold() == (700, 10, 10)
    more = _survivors(400_000)  # the same allocation outside: the default thresholds walk the old generation
    assert len(full_collections) > settled
    del kept, more


def test_thresholds_come_back_when_a_scenario_raises(full_collections: list[int]) -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), collector.young_only():
        raise RuntimeError("a step failed")
    assert gc.get_threshold() == (700, 10, 10)


class _Marker:
    """An object the collector tracks (it has a ``__dict__``), so it lives in a generation or is frozen."""


def _tracked(obj: object) -> bool:
    """Whether ``obj`` sits in one of the collector's three generations (a frozen object sits in none)."""
    return any(o is obj for o in gc.get_objects())


def test_the_first_settle_freezes_what_start_up_made(full_collections: list[int]) -> None:
    # What the collector promises, read from objects of this test's own: the first settle freezes what lived
    # before it, a later one collects and freezes nothing.  The interpreter's whole frozen count is no measure:
    # objects that earlier tests left (a thread winding down, a client's pool) may die between two readings.
    collector._frozen = False
    gc.unfreeze()
    before = _Marker()
    collector.settle()
    assert gc.get_freeze_count() > 0
    assert not _tracked(before), "the first settle left an object made before it unfrozen"
    after = _Marker()
    collector.settle()  # later ones collect, and freeze nothing more
    assert _tracked(after), "a later settle froze an object made after the first"
    assert len(full_collections) == 2
