"""Scenarios shared out as the pools go (``firedrill run --parallel``): a pool that has run its share takes the last
unstarted scenario of the busiest other pool.

The plan (:func:`drills.bdd.parallel.make_plan`) spreads the wave's scenarios over the pools by their median
seconds. A scenario's real time varies by a second or two around its median, so planned shares end seconds apart.
A pool that finishes early would sit idle while another still has scenarios it has not begun.

Each scenario is therefore claimed before it runs. A claim is a file made with ``O_CREAT | O_EXCL`` in the wave's
folder, which the kernel grants to exactly one process. A worker runs its own share in order. It then takes, one
at a time, the last unclaimed scenario of the pool whose unclaimed scenarios add up to the most seconds. A
scenario is never begun twice, and none is begun later than its own pool would have begun it: the pool taking it
is idle now.

Pure apart from the claim files: :meth:`Claims.next_key` picks from what :meth:`Claims.is_claimed` reads.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Claims", "Share"]

Key = tuple[str, int, tuple[tuple[str, str], ...]]
"""A scenario's key, as :data:`drills.bdd.plugin.ScenarioKey` names it."""


@dataclass(frozen=True)
class Share:
    """One pool's planned scenarios, in the order it runs them, each with its expected seconds."""

    pool: str
    units: tuple[tuple[Key, float], ...]


@dataclass(frozen=True)
class Claims:
    """How the pools of one wave share its scenarios: the claim folder, this worker's pool, every pool's share."""

    folder: Path
    pool: str
    shares: tuple[Share, ...]

    def keys(self) -> frozenset[Key]:
        """Every scenario of the wave (the ones this worker may end up running)."""
        return frozenset(k for s in self.shares for k, _ in s.units)

    def _path(self, key: Key) -> Path:
        digest = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
        return self.folder / f"{digest}.claim"

    def claim(self, key: Key) -> bool:
        """Claim a scenario (every ``--repeat`` run of it) for this pool (the file names the pool, for a person
        looking); False when another pool had claimed it."""
        try:
            fd = os.open(self._path(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return False
        try:
            os.write(fd, self.pool.encode())
        finally:
            os.close(fd)
        return True

    def is_claimed(self, key: Key) -> bool:
        return self._path(key).exists()

    def next_key(self, claimed: Callable[[Key], bool], candidates: Iterable[Key] | None = None) -> Key | None:
        """The scenario to try next (pure, given ``claimed``): the first unclaimed of this pool's own share, else the
        last unclaimed of the other pool whose unclaimed scenarios add up to the most seconds (ties: the first pool);
        None when every one is claimed. ``candidates``: only these keys count (the ones this worker collected)."""
        allowed = None if candidates is None else set(candidates)
        open_units = {s.pool: [(k, sec) for k, sec in s.units
                               if (allowed is None or k in allowed) and not claimed(k)] for s in self.shares}
        own = open_units.get(self.pool, [])
        if own:
            return own[0][0]
        busiest = max((s.pool for s in self.shares if s.pool != self.pool and open_units[s.pool]),
                      key=lambda p: sum(sec for _, sec in open_units[p]), default=None)
        return None if busiest is None else open_units[busiest][-1][0]
