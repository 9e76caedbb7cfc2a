"""Pure disruption handling: when many nodes go quiet at once, stop evicting instead of evicting everything.

A node whose Lease goes stale is, most of the time, a dead node, and its pods
are evicted.  When *most* nodes go quiet together, the likelier cause is the
control plane or the network between them (a blip), and evicting every pod of
the cluster turns a blip into an outage.  Upstream Kubernetes learned this in
2016 (kubernetes/kubernetes#28832) and its ``NodeLifecycleController`` has
rated NoExecute tainting per zone by the zone's health ever since; this module
is that rule as functions of plain counts, so every case is unit-tested:

- :func:`zone_state`: a zone with no Ready node is in **full disruption**; one
  with more than 2 not-Ready nodes and at least ``unhealthy_zone_threshold`` of
  its nodes not Ready is in **partial disruption**; else it is **normal**.
- :func:`judge_disruption`: the eviction rate of each zone.  Normal and full
  disruption (a whole zone down while others live is a real zone failure):
  ``eviction_rate``.  Partial disruption: ``secondary_eviction_rate`` in a zone
  of more than ``large_cluster_size_threshold`` nodes, else 0 (stop).  When
  *every* zone is in full disruption the controller is in "master disruption
  mode": nothing is tainted NoExecute and the existing unreachable/not-ready
  NoExecute taints are lifted; when it leaves that mode every node gets a fresh
  grace period (upstream resets each node's probe timestamp to now), so a node
  whose agent has not renewed yet is not taken for dead the moment the others
  come back.
- :class:`TaintBucket`: the per-zone rate limit on NoExecute tainting (a token
  bucket of burst 1, as upstream's rate-limited timed queue): the first lost
  node is tainted at once, the next one ``1 / rate`` seconds later.

A node is counted quiet the moment its grace period ends, but tainted NoExecute
only ``settle`` seconds later: nodes cut off together go stale up to one Lease
renewal apart, and the first of them must not be judged a lone loss before the
others are counted.

The Ready condition and the NoSchedule taint are not rated: a quiet node gets
no new pods whatever the zone's state.  docs/HEALING.md sets these flags beside
upstream's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

__all__ = [
    "DisruptionPolicy", "DisruptionVerdict", "TaintBucket", "ZoneCount", "ZoneState", "judge_disruption",
    "zone_state",
]


class ZoneState(Enum):
    """A zone's health, as upstream names it."""

    NORMAL = "Normal"
    PARTIAL = "PartialDisruption"
    FULL = "FullDisruption"


@dataclass(frozen=True)
class DisruptionPolicy:
    """The node lifecycle controller's disruption flags (upstream kube-controller-manager's names in brackets)."""

    eviction_rate: float = 0.1
    """Nodes per second whose pods may be evicted in a healthy zone [``--node-eviction-rate``];
    ``math.inf``: no limit."""
    secondary_eviction_rate: float = 0.01
    """The same in a partially disrupted large zone [``--secondary-node-eviction-rate``]."""
    unhealthy_zone_threshold: float = 0.55
    """The fraction of not-Ready nodes (of more than 2) that makes a zone partially disrupted
    [``--unhealthy-zone-threshold``]."""
    large_cluster_size_threshold: int = 50
    """A zone of at most this many nodes stops evicting in partial disruption
    [``--large-cluster-size-threshold``]."""
    settle: float = 0.0
    """Seconds a node must have been quiet (past its grace period) before it may be tainted NoExecute, so that
    nodes that lost the control plane together, whose Leases expire up to one renewal interval apart, are
    counted together before the first of them is judged a lone loss.  The profiles set one heartbeat; upstream
    gets the same batching from its ``--node-monitor-period`` passes."""
    handled: bool = True
    """False: the ``evict-storm`` defect (docs/DEFECTS.md): every zone is treated as normal and evicted
    without a rate limit, whatever its disruption."""

    def __post_init__(self) -> None:
        for flag, rate in (("--node-eviction-rate", self.eviction_rate),
                           ("--secondary-node-eviction-rate", self.secondary_eviction_rate)):
            if not rate >= 0:
                raise ValueError(f"{flag} must be >= 0 nodes per second, got {rate:g}")
        if not 0 < self.unhealthy_zone_threshold <= 1:
            raise ValueError("--unhealthy-zone-threshold is a fraction of the zone's nodes in (0, 1], got "
                             f"{self.unhealthy_zone_threshold:g}")
        if not self.settle >= 0:
            raise ValueError(f"the disruption settle time must be >= 0 s, got {self.settle:g}")
        if self.large_cluster_size_threshold < 0:
            raise ValueError(f"--large-cluster-size-threshold must be >= 0 nodes, got "
                             f"{self.large_cluster_size_threshold}")


@dataclass(frozen=True)
class ZoneCount:
    """How many nodes of one zone are Ready and how many are not (Ready ``False`` or ``Unknown``)."""

    zone: str
    ready: int
    not_ready: int

    @property
    def size(self) -> int:
        return self.ready + self.not_ready


def zone_state(ready: int, not_ready: int, unhealthy_zone_threshold: float) -> ZoneState:
    """Full disruption when no node is Ready; partial when more than 2 are not and they are at least the threshold's
    fraction of the zone; else normal."""
    if ready == 0 and not_ready > 0:
        return ZoneState.FULL
    if not_ready > 2 and not_ready / (ready + not_ready) >= unhealthy_zone_threshold:
        return ZoneState.PARTIAL
    return ZoneState.NORMAL


@dataclass(frozen=True)
class ZoneVerdict:
    zone: str
    state: ZoneState
    rate: float
    """Nodes per second that may be tainted NoExecute in this zone now (0: none)."""
    count: ZoneCount


@dataclass(frozen=True)
class DisruptionVerdict:
    """The disruption decision for the whole cluster at one instant."""

    zones: Mapping[str, ZoneVerdict]
    master_disruption: bool
    """Every zone is in full disruption: no NoExecute taint may be added, existing condition NoExecute taints go."""

    def rate(self, zone: str) -> float:
        verdict = self.zones.get(zone)
        return 0.0 if verdict is None else verdict.rate

    def state(self, zone: str) -> ZoneState:
        verdict = self.zones.get(zone)
        return ZoneState.NORMAL if verdict is None else verdict.state

    def describe(self) -> str:
        parts = [f"zone {z or '(none)'}: {v.state.value}, {v.count.not_ready} of {v.count.size} not Ready, "
                 f"eviction rate {v.rate:g}/s" for z, v in sorted(self.zones.items())]
        mode = "master disruption mode (no evictions); " if self.master_disruption else ""
        return mode + "; ".join(parts)


def judge_disruption(counts: Iterable[ZoneCount], policy: DisruptionPolicy) -> DisruptionVerdict:
    """Each zone's state and eviction rate, and whether the controller is in master disruption mode."""
    zones: dict[str, ZoneVerdict] = {}
    for count in counts:
        if not policy.handled:
            zones[count.zone] = ZoneVerdict(count.zone, ZoneState.NORMAL, math.inf, count)
            continue
        state = zone_state(count.ready, count.not_ready, policy.unhealthy_zone_threshold)
        if state is ZoneState.PARTIAL:
            rate = policy.secondary_eviction_rate if count.size > policy.large_cluster_size_threshold else 0.0
        else:
            rate = policy.eviction_rate
        zones[count.zone] = ZoneVerdict(count.zone, state, rate, count)
    master = bool(zones) and policy.handled and all(v.state is ZoneState.FULL for v in zones.values())
    if master:
        zones = {z: ZoneVerdict(z, v.state, 0.0, v.count) for z, v in zones.items()}
    return DisruptionVerdict(zones, master)


@dataclass
class TaintBucket:
    """A token bucket of burst 1 per zone: may a node of ``zone`` be tainted NoExecute at ``now`` with ``rate``?

    State only (the instant each zone last spent its token); the caller passes the clock's ``now``.
    """

    _spent: dict[str, float] = field(default_factory=dict)

    def next_allowed(self, zone: str, rate: float) -> float | None:
        """The earliest instant a taint is allowed in ``zone`` (``None``: never while the rate is 0)."""
        if rate <= 0:
            return None
        last = self._spent.get(zone)
        if last is None or math.isinf(rate):
            return -math.inf
        return last + 1.0 / rate

    def take(self, zone: str, rate: float, now: float) -> bool:
        """Spend the zone's token if one is available at ``now``."""
        at = self.next_allowed(zone, rate)
        if at is None or now < at:
            return False
        self._spent[zone] = now
        return True
