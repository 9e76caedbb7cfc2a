"""The simulated interconnect: the link each node of a reference cluster has to its peers (pure).

A real fabric moves a collective's bytes no faster than the slower end of each link allows.  Here every node's
agent is started with its link (``--link-bandwidth``, bytes per second) and tells each container it runs
(``FIREDRILL_LINK_BANDWIDTH``); the training canary's ranks exchange their links at the rendezvous and pace
every connection to the slower end's, so the bandwidth a collective measures over its sockets is the one the
fabric imposes (docs/FABRIC.md).  Nothing here reads a clock or does I/O.

Every node's inventory states :data:`LINK_BANDWIDTH`: 10 MB/s, slow beside a real GPU fabric's hundreds of
GB/s, so that the canary's own collective of a 256 KiB payload takes tens of milliseconds a step and a
measurement of twenty steps a few seconds, on any machine that runs the reference platform.

This is the one place the ``slow-link`` defect lives: with it the last working node's link runs at
:data:`SLOW_LINK_SHARE` of what its inventory states, and every collective that crosses it is paced down to that.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from refplatform.defects import Defect

__all__ = ["LINK_BANDWIDTH", "SLOW_LINK_SHARE", "node_link"]

LINK_BANDWIDTH = 10e6
"""Bytes per second every reference node's link is stated to carry (10 MB/s)."""
SLOW_LINK_SHARE = 0.25
"""With the ``slow-link`` defect, the share of its stated bandwidth the last working node's link carries."""


def node_link(node: str, working: Sequence[str], stated: float, defects: Collection[Defect]) -> float:
    """The bytes per second ``node``'s link really carries: ``stated``, or with ``slow-link`` a quarter of it on the
    last of the ``working`` nodes (spares and nodes started beyond the cluster's shape keep theirs)."""
    if Defect.SLOW_LINK in defects and working and node == working[-1]:
        return stated * SLOW_LINK_SHARE
    return stated
