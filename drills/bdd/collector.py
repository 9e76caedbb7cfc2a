"""The harness's garbage collector, kept out of what the harness times.

Every instant the harness stamps is taken by one of its threads the moment a watch event or a log line arrives.
CPython's cyclic collector stops every thread while it runs, and a full collection walks every object the process
holds: the imported modules (the ``kubernetes`` client's models are most of them) and everything the run has kept
(each scenario's watch timeline and logs).  On a loaded 2-core machine one took 100 ms to 1 s of wall time, and
nothing reached the harness meanwhile: node pull's instants came that much late (docs/BENCHMARKS.md, issue 30).

So, as the API server does for its store (:func:`refplatform.api.server.tune_garbage_collector`):

- between scenarios, when nothing is timed, one full collection pays what the last one left; the first also
  freezes what start-up made (modules, the collected features), which no later collection walks again;
- while a scenario runs, only the young generations are collected on their own.  They hold the objects made
  since the last few collections, so each takes about a millisecond.  Whatever survives them waits for the next
  scenario's start, and a cycle that survives until then is freed there.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

NEVER = 2 ** 30
"""The oldest generation's threshold while a scenario runs: more young collections than any run makes."""

_frozen = False


def settle() -> None:
    """A full collection now (nothing is being timed); the first call also freezes what survives it."""
    global _frozen
    gc.collect()
    if not _frozen:
        gc.freeze()
        _frozen = True


@contextmanager
def young_only() -> Iterator[None]:
    """Within: no automatic full collection, young ones as before.  Settles first; the thresholds are restored
    on every exit path."""
    settle()
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], NEVER)
    try:
        yield
    finally:
        gc.set_threshold(*before)
