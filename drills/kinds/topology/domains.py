"""Where a gang runs, domain by domain: the topology drill's pure judgement (no I/O, no clock).

A *domain* is the set of nodes that share one value of a node label: a rack
(``cloud.provider.com/topology-rack``, the label Kueue's and KAI's topology
examples use), a block of racks, an NVLink domain (``nvidia.com/gpu.clique``,
as NVIDIA's GPU Feature Discovery labels GB200 nodes), a zone. The drill reads
each node's label from its own list of the cluster's nodes and each pod's node
from its own watch, and judges here: a gang inside one domain, or spread over
several (named, with which pod went where); and how many workers each domain
has room for, so that a scenario whose premise does not hold (no domain has
room, or one has when none should) is INCONCLUSIVE instead of a verdict on
the wrong question.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = ["Freed", "Level", "Placed", "Release", "Spread", "domain_room", "first_room", "parse_level", "spread"]

NO_DOMAIN = "(no label)"
"""How a node without the domain label is named in findings."""


class Level(Enum):
    """The kind of domain a sentence names; its default label is the one clusters commonly carry."""

    RACK = "rack"
    """Nodes under one top-of-rack switch: ``cloud.provider.com/topology-rack`` (Kueue's and KAI's examples)."""
    BLOCK = "block"
    """Racks under one spine: ``cloud.provider.com/topology-block``."""
    NVLINK_DOMAIN = "NVLink domain"
    """GPUs on one NVLink fabric (a GB200 NVL72 rack): ``nvidia.com/gpu.clique`` (GPU Feature Discovery)."""
    ZONE = "zone"
    """A failure zone: ``topology.kubernetes.io/zone``."""

    @property
    def default_label(self) -> str:
        return _LABELS[self]

    def counted(self, n: int) -> str:
        """``1 rack``, ``2 racks``, ``2 NVLink domains``."""
        return f"{n} {self.value}{'' if n == 1 else 's'}"


_LABELS = {Level.RACK: "cloud.provider.com/topology-rack", Level.BLOCK: "cloud.provider.com/topology-block",
           Level.NVLINK_DOMAIN: "nvidia.com/gpu.clique", Level.ZONE: "topology.kubernetes.io/zone"}


def parse_level(text: str) -> Level:
    """'rack', 'racks', 'NVLink domain', 'blocks', 'zone' -> the level (singular or plural, any case)."""
    words = " ".join(text.split()).lower()
    for level in Level:
        if words in (level.value.lower(), level.value.lower() + "s"):
            return level
    raise ValueError(f"{text!r} is no topology level; write one of " + ", ".join(l.value for l in Level))


LEVEL_PATTERN = r"[A-Za-z]+(?: domains?)?"
"""The text a level placeholder takes to the parser: one word, or a word and 'domain(s)' (so that a level the
parser does not know is reported as such, naming the known ones, instead of as an unknown sentence)."""


@dataclass(frozen=True, slots=True)
class Placed:
    """One pod of the gang bound to a node, and that node's domain (None: the node has no such label)."""

    pod: str
    node: str
    domain: str | None


@dataclass(frozen=True, slots=True)
class Spread:
    """The bound pods of one gang, by the domain of their node."""

    level: Level
    label: str
    placed: tuple[Placed, ...]

    def by_domain(self) -> dict[str, list[Placed]]:
        """Domain name -> its pods, domains in name order (a node without the label under :data:`NO_DOMAIN`)."""
        out: dict[str, list[Placed]] = {}
        for p in sorted(self.placed, key=lambda p: (p.domain is None, p.domain or "", p.pod)):
            out.setdefault(p.domain if p.domain is not None else NO_DOMAIN, []).append(p)
        return out

    @property
    def domains(self) -> list[str]:
        return list(self.by_domain())

    @property
    def inside_one(self) -> bool:
        """Every bound pod is on a node of one and the same domain (and at least one is bound)."""
        found = self.by_domain()
        return len(found) == 1 and NO_DOMAIN not in found

    def where(self) -> str:
        """``rack-0 holds gang-worker-0 on node-0, gang-worker-1 on node-1; rack-1 holds ...``."""
        parts = []
        for domain, pods in self.by_domain().items():
            who = ", ".join(f"{p.pod} on {p.node}" for p in pods)
            parts.append(f"nodes without {self.label} hold {who}" if domain == NO_DOMAIN else f"{domain} holds {who}")
        return "; ".join(parts)

    def widest(self, now: Spread) -> Spread:
        """For a finding: the gang as ``now`` spreads it, when that still crosses domains and names at least the pods
        this first crossing did (the rest bound since), else this first crossing."""
        return now if len(now.placed) >= len(self.placed) and not now.inside_one else self

    def crossing(self, gang: str) -> str:
        """The finding of a gang spread over more than one domain."""
        return (f"gang {gang} spans {self.level.counted(len(self.domains))} ({self.label}): {self.where()}; it "
                f"asked to stay inside one {self.level.value}")


def spread(level: Level, label: str, nodes_of: Mapping[str, str | None],
           domain_of: Mapping[str, str | None]) -> Spread:
    """The spread of pods ``nodes_of`` (pod -> its node, None while unbound) over the domains ``domain_of``
    (node -> its label value, None for a node without it)."""
    placed = tuple(Placed(pod, node, domain_of.get(node)) for pod, node in sorted(nodes_of.items()) if node)
    return Spread(level, label, placed)


def domain_room(free: Mapping[str, int], domain_of: Mapping[str, str | None], gpus_per_worker: int) -> dict[str, int]:
    """How many workers of ``gpus_per_worker`` GPUs each domain has room for, node by node (``free``: free GPUs of
    each node the drill's pods may use); nodes without the label belong to no domain."""
    room: dict[str, int] = {}
    for node, gpus in free.items():
        domain = domain_of.get(node)
        if domain is None:
            continue
        room[domain] = room.get(domain, 0) + (max(gpus, 0) // gpus_per_worker if gpus_per_worker else 0)
    return dict(sorted(room.items()))


@dataclass(frozen=True, slots=True)
class Release:
    """GPUs another job gave back: the instant its pod was seen ended (harness clock), its node, its GPUs."""

    at: float
    node: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Freed:
    """The first instant a domain had room for a whole gang, and that domain."""

    at: float
    domain: str


def first_room(free: Mapping[str, int], domain_of: Mapping[str, str | None], gpus_per_worker: int, workers: int,
               releases: Iterable[Release]) -> Freed | None:
    """The first instant some domain has room for ``workers`` workers of ``gpus_per_worker`` GPUs, counted node by
    node as :func:`domain_room` does: from ``free`` (free GPUs per usable node when the gang was submitted), adding
    back each release in the order of its instant.  None while no domain has.

    "A rack frees up", for a gang, is this instant: a gang of three 4-GPU workers in racks of two 8-GPU nodes that
    each lend 4 GPUs to another job has room as soon as ONE of the rack's holders ends, not when all have.  Only
    releases count (a domain with room at the start is the caller's broken premise); a release on a node that was
    not usable when the gang was submitted adds nothing."""
    now = dict(free)
    for release in sorted(releases, key=lambda r: (r.at, r.node)):
        if release.node not in now:
            continue
        now[release.node] += release.gpus
        domain = domain_of.get(release.node)
        if domain is not None and domain_room(now, domain_of, gpus_per_worker).get(domain, 0) >= workers:
            return Freed(release.at, domain)
    return None
