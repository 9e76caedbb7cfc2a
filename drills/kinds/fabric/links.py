"""The bandwidth each node's links gave the collective, from the canary's own step lines, and who is to blame (pure).

Every rank of the training canary logs, with each ``step`` line, how its peers' frames of that step's
all-reduce reached it (``recv``: per peer rank, the bytes that arrived after its first read of the frame and the
seconds they took; docs/WORKLOAD.md).  The all-reduce runs through rank 0, so each rank's bytes cross one link:
the one between its node and rank 0's, in both directions.  A link's bandwidth is the bytes over the seconds of
every frame timed on it (a frame that had already arrived when its rank came to read it is not timed: 0 and 0).

A link runs no faster than its slower end, so a node whose links are all slow may be the slow one, and a node with
one fast link is not; :func:`blame` names, among the nodes none of whose links is fast, those on the most slow
links.  With one node slow that is the node: a slow leaf has one slow link (rank 0's node has fast ones); a slow
rank-0 node has every link slow, and it is the one on all of them.  Two nodes and one slow link cannot be told
apart: both are named, as the link.

Each node's figure (:func:`node_bandwidths`) is the fastest of its links: what its own link carried at least.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from drills.workloads.canarylog import CanaryEvent, CanaryLine

__all__ = ["Link", "LinkTotals", "blame", "describe", "links_of", "node_bandwidths", "shortfalls", "text"]

WARMUP_STEPS = 2
"""The first steps of a rank (the connections' first bytes, the rendezvous' last) are not timed."""


@dataclass(frozen=True)
class LinkTotals:
    """Every timed frame of one link, both directions."""

    bytes: int = 0
    seconds: float = 0.0
    frames: int = 0
    untimed: int = 0
    """Frames of the link that arrived whole before their rank read them (0 bytes, 0 seconds)."""

    def add(self, nbytes: int, seconds: float) -> LinkTotals:
        return LinkTotals(self.bytes + nbytes, self.seconds + seconds, self.frames + 1, self.untimed)

    def skip(self) -> LinkTotals:
        return LinkTotals(self.bytes, self.seconds, self.frames, self.untimed + 1)


@dataclass(frozen=True)
class Link:
    """The link between two nodes (sorted; the same node twice for two ranks on one node)."""

    a: str
    b: str
    totals: LinkTotals

    @property
    def nodes(self) -> tuple[str, str]:
        return self.a, self.b

    @property
    def bandwidth(self) -> float | None:
        """Bytes per second over every timed frame; None when none was timed, or when most of its frames arrived
        whole before their rank read them: such a link outruns the canary's timing, and the few frames it did time
        were split by the rank's own scheduling (a descheduled reader), which a figure would blame on the link."""
        t = self.totals
        if t.untimed > t.frames:
            return None
        return t.bytes / t.seconds if t.seconds > 0 and t.bytes > 0 else None

    def other(self, node: str) -> str:
        return self.b if node == self.a else self.a


def _recv(line: CanaryLine) -> Iterable[tuple[int, int, float]]:
    """(peer rank, bytes, seconds) of a step line's ``recv``; malformed entries are skipped."""
    recv = line.fields.get("recv")
    if not isinstance(recv, Mapping):
        return
    for peer, value in recv.items():
        if not str(peer).isdigit() or not isinstance(value, list) or len(value) != 2:
            continue
        nbytes, seconds = value
        if (isinstance(nbytes, int) and not isinstance(nbytes, bool) and nbytes >= 0
                and isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0):
            yield int(peer), nbytes, float(seconds)


def links_of(lines: Iterable[CanaryLine], *, warmup: int = WARMUP_STEPS) -> dict[tuple[str, str], Link]:
    """The links the step lines timed, by their sorted pair of nodes.  A rank's node is the one its pod was bound to
    when its line arrived (the harness's watch); a line whose rank or peer has no known node in its generation, or
    a step within the first ``warmup`` of its rank, is left out."""
    steps = [ln for ln in lines if ln.event is CanaryEvent.STEP]
    node_of = {(ln.generation, ln.rank): ln.node for ln in steps if ln.node}
    totals: dict[tuple[str, str], LinkTotals] = {}
    for ln in steps:
        if (ln.step or 0) <= warmup:
            continue
        for peer, nbytes, seconds in _recv(ln):
            here, there = node_of.get((ln.generation, ln.rank)), node_of.get((ln.generation, peer))
            if not here or not there:
                continue
            key = (min(here, there), max(here, there))
            if nbytes and seconds:
                totals[key] = totals.get(key, LinkTotals()).add(nbytes, seconds)
            else:
                totals[key] = totals.get(key, LinkTotals()).skip()
    return {k: Link(k[0], k[1], t) for k, t in sorted(totals.items())}


def node_bandwidths(links: Iterable[Link]) -> dict[str, float | None]:
    """Each node's figure: the fastest of its timed links (None: none of its links was timed)."""
    out: dict[str, float | None] = {}
    for link in links:
        for node in set(link.nodes):
            bw = link.bandwidth
            known = out.get(node)
            out[node] = bw if known is None else (known if bw is None else max(known, bw))
    return dict(sorted(out.items()))


def blame(links: Iterable[Link], slow: Callable[[Link], bool]) -> list[str]:
    """The nodes that explain the slow links: among the nodes on a slow link and on no fast one, those on the most
    slow links (a node with one fast link has a fast link itself: each link runs at its slower end)."""
    timed = [link for link in links if link.bandwidth is not None]
    slow_links = [link for link in timed if slow(link)]
    fast_nodes = {n for link in timed if not slow(link) for n in link.nodes}
    count: dict[str, int] = {}
    for link in slow_links:
        for node in set(link.nodes) - fast_nodes:
            count[node] = count.get(node, 0) + 1
    if not count:
        return []
    most = max(count.values())
    return sorted(n for n, c in count.items() if c == most)


def shortfalls(figures: Mapping[str, float | None]) -> tuple[float | None, dict[str, float]]:
    """The median of the nodes' figures and, per node, how far below it its figure is (a share: 0.25 = 25 %
    below; nodes at or above the median are 0)."""
    known = sorted(v for v in figures.values() if v is not None)
    if not known:
        return None, {}
    mid = len(known) // 2
    median = known[mid] if len(known) % 2 else (known[mid - 1] + known[mid]) / 2
    return median, {n: max(0.0, 1 - v / median) for n, v in figures.items() if v is not None and median > 0}


def text(bandwidth: float | None) -> str:
    """A bandwidth for people: ``2.49 MB/s``, ``152 GB/s`` (decimal units, as nccl-tests' GB)."""
    if bandwidth is None:
        return "never timed"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bandwidth >= scale:
            return f"{bandwidth / scale:.3g} {unit}"
    return f"{bandwidth:.3g} B/s"


def describe(node: str, links: Iterable[Link]) -> str:
    """``to gpu-node-0 2.49 MB/s, to gpu-node-1 9.8 MB/s``: a node's links, as the evidence shows them."""
    mine = [link for link in links if node in link.nodes]
    return ", ".join(f"to {'itself' if link.a == link.b else link.other(node)} {text(link.bandwidth)}"
                     for link in mine) or "no link timed"
