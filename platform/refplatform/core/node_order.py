"""A fixed order of nodes drawn from a seed, for ``TieBreak.ORDER``.

Each node's place is a keyed hash of its name (BLAKE2b, the seed as key), so the
order is the same in every snapshot of the same cluster, a new node slots in
without reshuffling the others, and two seeds give unrelated orders.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


def order_keys(names: Sequence[str], seed: int) -> np.ndarray:
    """One ``uint64`` key per node; the node with the smallest key comes first."""
    key = str(int(seed)).encode()
    return np.array([int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8, key=key).digest(), "big")
                     for name in names], dtype=np.uint64)
