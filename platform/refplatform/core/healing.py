"""Pure healing decisions: is a node lost, when must a pod leave a tainted node, what the healer does.

Three functions, each a function of plain observations and a ``now`` in epoch
seconds (no clock is read here, no I/O is done), so every rule is unit-tested
on a virtual clock:

- :func:`judge_node`, the node lifecycle rule (kube-controller-manager's
  ``NodeLifecycleController``): a Lease older than the grace period makes
  Ready ``Unknown`` and taints the node ``node.kubernetes.io/unreachable``
  (``NoExecute`` and ``NoSchedule``); a node whose agent reports Ready=False
  itself is tainted ``node.kubernetes.io/not-ready``; a node whose Lease moves
  again gets Ready back and loses those taints only once its health check
  passes.
- :func:`eviction_time`, the taint eviction rule (upstream's
  ``TaintEvictionController``): a pod on a node with ``NoExecute`` taints is
  evicted at once when one of them is not tolerated, else when the shortest
  matching ``tolerationSeconds`` runs out (never when all are unbounded).
- :func:`plan_healing`, the healer: quarantine lost nodes, release a spare for
  each lost working node, return a quarantined node to the spare pool once it
  heartbeats and passes its health check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from refplatform.core.node import Taint, TaintEffect
from refplatform.core.pod import Toleration, TolerationOperator

__all__ = [
    "NOT_READY_TAINT", "OUT_OF_SERVICE_TAINT", "QUARANTINE_LABEL", "SPARE_ENROLLED_ANNOTATION", "SPARE_LABEL",
    "SPARE_TAINT", "UNREACHABLE_TAINT", "CONDITION_TAINT_KEYS",
    "HealAction", "HealStep", "NodeState", "NodeVerdict", "PoolNode", "Readiness", "TimedTaint",
    "TimedToleration", "eviction_time", "judge_node", "plan_healing", "spare_candidates", "with_default_tolerations",
]

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
"""Put on a node whose Lease went stale (upstream ``TaintNodeUnreachable``)."""
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
"""Put on a node whose agent reports Ready=False (upstream ``TaintNodeNotReady``)."""
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
"""Put on a quarantined node: pods there are evicted and force-deleted (upstream ``TaintNodeOutOfService``)."""
CONDITION_TAINT_KEYS = frozenset({UNREACHABLE_TAINT, NOT_READY_TAINT})
SPARE_LABEL = "firedrill.dev/spare"
SPARE_TAINT = "firedrill.dev/spare"
QUARANTINE_LABEL = "firedrill.dev/quarantine"
SPARE_ENROLLED_ANNOTATION = "firedrill.dev/spare-enrolled"
"""Set once the healer has put a configured spare into the pool, so a restart never re-enrolls it."""


class Readiness(Enum):
    """The status of a node's Ready condition."""

    TRUE = "True"
    """The agent posts that it is ready."""
    FALSE = "False"
    """The agent posts that it is not ready."""
    UNKNOWN = "Unknown"
    """Nobody has heard from the agent within the grace period (set by the node lifecycle controller)."""

    @classmethod
    def of(cls, value: str | None) -> Readiness:
        for r in cls:
            if r.value == value:
                return r
        return cls.UNKNOWN


class NodeState(Enum):
    """What :func:`judge_node` concluded about a node."""

    HEALTHY = "Healthy"
    """Lease fresh, Ready, no condition taint: nothing to do."""
    UNREACHABLE = "Unreachable"
    """Lease older than the grace period: Ready=Unknown, tainted unreachable."""
    NOT_READY = "NotReady"
    """Lease fresh but the agent reports Ready=False: tainted not-ready."""
    RECOVERING = "Recovering"
    """Lease fresh again but the health check has not passed (yet): taints kept."""
    RECOVERED = "Recovered"
    """Lease fresh and the health check passed: Ready=True, condition taints removed."""
    GRACE = "Grace"
    """Lease stale, but inside the fresh grace period every node got when the controller left master disruption
    mode (:mod:`refplatform.core.disruption`): nothing changes yet."""


@dataclass(frozen=True)
class NodeObservation:
    """What the node lifecycle controller knows of one node."""

    name: str
    heard_at: float
    """The Lease's ``renewTime`` (epoch seconds); the Node's creation time when it has no Lease."""
    ready: Readiness
    """The Ready condition as stored now."""
    taints: tuple[Taint, ...] = ()
    healthy: bool | None = None
    """The agent's ``/healthz`` answer, probed after the Lease moved again; ``None``: not probed."""


@dataclass(frozen=True)
class NodeVerdict:
    """The node lifecycle controller's decision for one node."""

    node: str
    state: NodeState
    ready: Readiness | None
    """The Ready status to write, or ``None`` to leave the condition alone."""
    taints: tuple[Taint, ...]
    """Every taint the node should carry."""
    probe: bool = False
    """A fresh ``/healthz`` answer is needed before the node can be trusted again."""
    next_check: float | None = None
    """When the verdict changes by the clock alone (the Lease's expiry), if it can."""

    def taints_changed(self, current: Iterable[Taint]) -> bool:
        return set(self.taints) != set(current)


def _condition_taints(key: str) -> tuple[Taint, Taint]:
    return Taint(key, "", TaintEffect.NO_EXECUTE), Taint(key, "", TaintEffect.NO_SCHEDULE)


def judge_node(obs: NodeObservation, now: float, grace: float, fresh_from: float | None = None) -> NodeVerdict:
    """The node lifecycle rule for one node at ``now`` with grace period ``grace`` seconds.

    ``fresh_from``: when the controller last left master disruption mode; a stale Lease is not judged until a
    grace period after it (upstream resets every node's probe timestamp then).  Only a renewal brings a node back.
    """
    others = tuple(t for t in obs.taints if t.key not in CONDITION_TAINT_KEYS)
    has_condition_taint = any(t.key in CONDITION_TAINT_KEYS for t in obs.taints)
    expiry = obs.heard_at + grace
    if now > expiry and fresh_from is not None and now <= fresh_from + grace:
        return NodeVerdict(obs.name, NodeState.GRACE, None, obs.taints, next_check=fresh_from + grace)
    if now > expiry:
        ready = None if obs.ready is Readiness.UNKNOWN else Readiness.UNKNOWN
        return NodeVerdict(obs.name, NodeState.UNREACHABLE, ready, others + _condition_taints(UNREACHABLE_TAINT))
    if obs.ready is Readiness.FALSE:
        return NodeVerdict(obs.name, NodeState.NOT_READY, None, others + _condition_taints(NOT_READY_TAINT),
                           next_check=expiry)
    if has_condition_taint or obs.ready is Readiness.UNKNOWN:
        if obs.healthy:
            ready = None if obs.ready is Readiness.TRUE else Readiness.TRUE
            return NodeVerdict(obs.name, NodeState.RECOVERED, ready, others, next_check=expiry)
        return NodeVerdict(obs.name, NodeState.RECOVERING, None, obs.taints, probe=True, next_check=expiry)
    return NodeVerdict(obs.name, NodeState.HEALTHY, None, obs.taints, next_check=expiry)


# ------------------------------------------------------------------ taint eviction
@dataclass(frozen=True)
class TimedTaint:
    """A node taint and when it was added (epoch seconds; ``None``: unknown, taken as now)."""

    taint: Taint
    added_at: float | None = None


@dataclass(frozen=True)
class TimedToleration:
    """A pod toleration and its ``tolerationSeconds`` (``None``: tolerates for ever)."""

    toleration: Toleration
    seconds: float | None = None


def with_default_tolerations(tolerations: Sequence[TimedToleration],
                             default_seconds: float) -> tuple[TimedToleration, ...]:
    """Add what the ``DefaultTolerationSeconds`` admission plugin adds: ``not-ready`` and
    ``unreachable`` (``Exists``, ``NoExecute``) for ``default_seconds``, each unless the pod
    already tolerates that taint."""
    out = list(tolerations)
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        taint = Taint(key, "", TaintEffect.NO_EXECUTE)
        if not any(t.toleration.tolerates(taint) for t in tolerations):
            out.append(TimedToleration(Toleration(key, TolerationOperator.EXISTS, "", TaintEffect.NO_EXECUTE),
                                       default_seconds))
    return tuple(out)


def eviction_time(taints: Sequence[TimedTaint], tolerations: Sequence[TimedToleration], now: float) -> float | None:
    """When a pod with ``tolerations`` must be evicted from a node with ``taints``; ``None``: never.

    Only ``NoExecute`` taints count.  An untolerated one evicts at ``now``.  Otherwise each
    taint allows the shortest bounded ``tolerationSeconds`` among the tolerations that match it
    (upstream's ``getMinTolerationTime``), counted from when the taint was added, and the pod
    goes at the earliest such deadline.  Negative seconds count as zero.
    """
    deadline: float | None = None
    for timed in taints:
        if timed.taint.effect is not TaintEffect.NO_EXECUTE:
            continue
        matching = [t for t in tolerations if t.toleration.tolerates(timed.taint)]
        if not matching:
            return now
        bounded = [max(0.0, t.seconds) for t in matching if t.seconds is not None]
        if not bounded:
            continue
        start = timed.added_at if timed.added_at is not None else now
        at = start + min(bounded)
        deadline = at if deadline is None else min(deadline, at)
    return deadline


# ------------------------------------------------------------------------ healer
class HealAction(Enum):
    """One step of the healer."""

    ENROLL_SPARE = "EnrollSpare"
    """Put a configured spare into the pool: spare label and ``NoSchedule`` taint."""
    QUARANTINE = "NodeQuarantined"
    """Cordon a lost node, label it with the reason, taint it out-of-service, take it out of the pool."""
    PROMOTE_SPARE = "SparePromoted"
    """Release a spare from the pool (remove its label and taint) so work fits again."""
    RETURN_TO_POOL = "NodeRecovered"
    """A quarantined node heartbeats and passed ``/healthz``: uncordon it, back into the spare pool."""


@dataclass(frozen=True)
class PoolNode:
    """What the healer knows of one node."""

    name: str
    ready: Readiness
    not_ready_since: float | None = None
    """When Ready left True (its ``lastTransitionTime``), if it is not True."""
    lease_fresh: bool = True
    healthy: bool | None = None
    spare: bool = False
    """In the pool (label ``firedrill.dev/spare=true``)."""
    quarantined: bool = False
    enrolled: bool = False
    """Has been put into the pool once already (annotation)."""
    configured_spare: bool = False
    """Named as a spare in the healer's configuration."""
    condition_tainted: bool = False
    """Still carries an ``unreachable``/``not-ready`` taint (the node lifecycle controller has not
    cleared it after its own health check)."""
    gpu_fault: bool = False
    """Its agent posts the Node condition ``GpuFault=True`` (:mod:`refplatform.core.remediation`): it is never
    released as a spare nor returned from quarantine while that stands."""
    remediation_held: bool = False
    """Carries the condition ``RemediationHeld=True``: the remediation budget's breaker left it alone."""
    draining: bool = False
    """Quarantined for its GPU fault and not out of service yet: its drain (:mod:`refplatform.core.drain`) decides
    what becomes of it, not the return below."""


@dataclass(frozen=True)
class HealStep:
    action: HealAction
    node: str
    reason: str = ""
    """For a quarantine: the label value (``unreachable`` or ``not-ready``); for a promotion: the lost node."""


@dataclass(frozen=True)
class HealPlan:
    steps: tuple[HealStep, ...] = ()
    probes: tuple[str, ...] = ()
    """Nodes whose ``/healthz`` answer is needed to decide."""
    next_check: float | None = None

    def of(self, action: HealAction) -> list[HealStep]:
        return [s for s in self.steps if s.action is action]


def _lost(node: PoolNode, now: float, after: float) -> bool:
    if node.ready is Readiness.TRUE or not node.condition_tainted:
        return False
    since = node.not_ready_since if node.not_ready_since is not None else now
    return now - since >= after


def spare_candidates(nodes: Sequence[PoolNode]) -> list[PoolNode]:
    """The spares that may be released, by name: in the pool, not quarantined, Ready, heard from, no GPU fault."""
    return sorted((n for n in nodes if n.spare and not n.quarantined and n.ready is Readiness.TRUE
                   and n.lease_fresh and not n.gpu_fault), key=lambda n: n.name)


def plan_healing(nodes: Sequence[PoolNode], now: float, *, quarantine: bool = True,
                 quarantine_after: float = 0.0) -> HealPlan:
    """The healer's steps at ``now``, in the order to apply them.

    - a configured spare not yet enrolled is enrolled;
    - with ``quarantine``, a node not Ready for ``quarantine_after`` seconds, and already tainted
      ``unreachable``/``not-ready`` by the node lifecycle controller (so the taints keep their order:
      condition taint, then out-of-service), is quarantined (reason ``unreachable`` for
      Ready=Unknown, ``not-ready`` for Ready=False), and for each
      such node that was working capacity (not a spare) one healthy spare is promoted, by name;
    - a quarantined node whose Lease is fresh, that is Ready, healthy, free of condition taints,
      without a standing ``GpuFault`` and not draining returns to the pool; one whose Lease is fresh and whose GPU fault
      cleared but that is not all of these yet is listed in ``probes``.

    The GPU-fault quarantines, and their budget, are :func:`refplatform.core.remediation.plan_remediation`'s.
    """
    steps: list[HealStep] = []
    probes: list[str] = []
    next_check: float | None = None
    for node in nodes:
        if node.configured_spare and not node.enrolled and not node.quarantined:
            steps.append(HealStep(HealAction.ENROLL_SPARE, node.name))
    if quarantine:
        promoted: set[str] = set()
        candidates = spare_candidates(nodes)
        for node in sorted(nodes, key=lambda n: n.name):
            if node.quarantined:
                continue
            if not _lost(node, now, quarantine_after):
                waiting = node.ready is not Readiness.TRUE and node.condition_tainted
                if waiting and node.not_ready_since is not None:
                    at = node.not_ready_since + quarantine_after
                    next_check = at if next_check is None else min(next_check, at)
                continue
            reason = "not-ready" if node.ready is Readiness.FALSE else "unreachable"
            steps.append(HealStep(HealAction.QUARANTINE, node.name, reason))
            if node.spare:
                continue
            spare = next((c for c in candidates if c.name not in promoted and c.name != node.name), None)
            if spare is not None:
                promoted.add(spare.name)
                steps.append(HealStep(HealAction.PROMOTE_SPARE, spare.name, node.name))
    for node in nodes:
        if not node.quarantined or not node.lease_fresh:
            continue
        if node.gpu_fault or node.draining:
            continue  # its GPU fault stands, or its drain stops or finishes first: nothing to probe yet
        if node.healthy and node.ready is Readiness.TRUE and not node.condition_tainted:
            steps.append(HealStep(HealAction.RETURN_TO_POOL, node.name))
        else:
            probes.append(node.name)
    return HealPlan(tuple(steps), tuple(probes), next_check)
