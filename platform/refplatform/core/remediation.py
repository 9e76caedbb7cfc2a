"""The remediation budget: a fleet-wide alarm does not drain the fleet.

A node whose agent posts the condition ``GpuFault=True`` is remediated by the
healer: quarantined (cordon, label ``firedrill.dev/quarantine=gpu-fault``, the
``out-of-service`` taint) and replaced by a spare.  When a large share of the
fleet reports a fault at once (a bad driver roll-out, a monitoring bug), doing
that to every reporting node would drain the cluster, so GpuFault quarantines
are budgeted:

- at most ``max(min_nodes, floor(share * nodes in the pool))`` of them within a
  sliding window of ``window`` seconds (the pool: every node, working and spare);
- a GpuFault node that would go beyond the budget trips the **breaker**: no
  further GpuFault node is quarantined until a person resets it, and the nodes
  left alone are named (they carry ``RemediationHeld=True``);
- the budget and the breaker never touch the healing of a lost node
  (:func:`refplatform.core.healing.plan_healing`): a dead node is still replaced.

:func:`plan_remediation` is a pure function of the nodes, the breaker's state,
the GpuFault quarantines of the past and ``now`` (epoch seconds, injected): no
clock is read and no I/O is done here.  The node's return once its fault
clears is :func:`~refplatform.core.healing.plan_healing`'s (``PoolNode.gpu_fault``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from refplatform.core.errors import CoreError
from refplatform.core.healing import HealAction, HealStep, PoolNode, spare_candidates

__all__ = [
    "BUDGET_EXHAUSTED", "GPU_FAULT_CONDITION", "GPU_FAULT_QUARANTINE", "REMEDIATION_HELD_CONDITION",
    "Breaker", "BreakerState", "Remediation", "RemediationBudget", "RemediationError", "RemediationPlan",
    "plan_remediation", "within_window",
]

GPU_FAULT_CONDITION = "GpuFault"
"""The Node condition a node's agent posts while a fleet fault stands (``firedrill.dev/inject-health``)."""
GPU_FAULT_QUARANTINE = "gpu-fault"
"""The ``firedrill.dev/quarantine`` label value of a node quarantined for its GpuFault."""
REMEDIATION_HELD_CONDITION = "RemediationHeld"
"""The Node condition the healer sets on each GpuFault node the tripped breaker leaves alone."""
BUDGET_EXHAUSTED = "BudgetExhausted"
"""``RemediationHeld``'s reason while the breaker holds the node."""


class RemediationError(CoreError):
    """A remediation budget out of range."""


class BreakerState(Enum):
    """The remediation breaker, as ``data.state`` of the ConfigMap ``kube-system/firedrill-remediation``."""

    CLOSED = "Closed"
    """GpuFault nodes are quarantined, within the budget."""
    TRIPPED = "Tripped"
    """The budget was exceeded: no GpuFault node is quarantined until a person resets the breaker."""


@dataclass(frozen=True)
class RemediationBudget:
    """How many GpuFault quarantines the healer may make, and over which time."""

    share: float = 0.25
    """Of the nodes in the pool (working and spare), the share that may be quarantined within the window."""
    min_nodes: int = 1
    """At least this many, however small the pool."""
    window: float = 600.0
    """The sliding window, seconds."""
    unlimited: bool = False
    """The ``remediate-the-fleet`` defect: every GpuFault node is quarantined and the breaker never trips."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise RemediationError(f"the remediation share must be within 0..1, not {self.share}")
        if self.min_nodes < 0:
            raise RemediationError(f"the remediation minimum must be >= 0 nodes, not {self.min_nodes}")
        if self.window <= 0:
            raise RemediationError(f"the remediation window must be > 0 seconds, not {self.window}")

    def limit(self, pool: int) -> int:
        """The quarantines allowed within a window for a pool of ``pool`` nodes."""
        return max(self.min_nodes, math.floor(self.share * pool + 1e-9))

    def describe(self, pool: int) -> str:
        """``1 (25 % of 5 nodes, at least 1)``."""
        return f"{self.limit(pool)} ({self.share * 100:g} % of {_nodes(pool)}, at least {self.min_nodes})"


@dataclass(frozen=True)
class Remediation:
    """One GpuFault quarantine made: which node, when (epoch seconds)."""

    node: str
    at: float


@dataclass(frozen=True)
class Breaker:
    """The breaker's state; tripped: since when, why, and the nodes it left alone."""

    state: BreakerState = BreakerState.CLOSED
    tripped_at: float | None = None
    reason: str = ""
    left_alone: tuple[str, ...] = ()

    @property
    def tripped(self) -> bool:
        return self.state is BreakerState.TRIPPED


@dataclass(frozen=True)
class RemediationPlan:
    """What the healer does about GpuFault nodes at one instant."""

    steps: tuple[HealStep, ...] = ()
    """Quarantines (reason ``gpu-fault``), each working node's followed by the spare released for it."""
    breaker: Breaker = Breaker()
    """The breaker after this decision (tripped now, or its list of nodes left alone grown)."""
    tripped_now: bool = False
    hold: tuple[str, ...] = ()
    """The GpuFault nodes the breaker leaves alone: each must carry ``RemediationHeld=True``."""
    release: tuple[str, ...] = ()
    """Nodes carrying ``RemediationHeld=True`` that are no longer held (breaker reset, or their fault cleared)."""
    used: int = 0
    """GpuFault quarantines already made within the window (before this plan)."""
    limit: int = 0
    """The budget for this pool."""

    def quarantined(self) -> list[str]:
        return [s.node for s in self.steps if s.action is HealAction.QUARANTINE]


def within_window(history: Iterable[Remediation], now: float, window: float) -> list[Remediation]:
    """The quarantines made in the ``window`` seconds up to ``now`` (one exactly ``window`` old has left it)."""
    return [r for r in history if now - window < r.at <= now]


def plan_remediation(nodes: Sequence[PoolNode], now: float, budget: RemediationBudget, breaker: Breaker,
                     history: Iterable[Remediation], *, busy: Collection[str] = ()) -> RemediationPlan:
    """The GpuFault remediation at ``now``.

    - The candidates are the nodes with ``GpuFault=True`` not quarantined yet and not ``busy`` (already in
      this instant's healing plan, as a lost node or a released spare), by name.
    - Breaker tripped: none is quarantined; every candidate is held (its name joins the breaker's list, and the
      reason's count becomes the window's quarantines plus that list).
    - Closed: the first ``limit - used`` candidates are quarantined (a spare released for each working one);
      if any is left, the breaker trips with a reason in words and the rest are held.
    - ``unlimited`` (the defect): every candidate is quarantined, the breaker stays as it is.
    """
    pool = len(nodes)
    limit = budget.limit(pool)
    used = len(within_window(history, now, budget.window))
    candidates = sorted((n for n in nodes if n.gpu_fault and not n.quarantined and n.name not in busy),
                        key=lambda n: n.name)
    take: list[PoolNode] = []
    hold: list[str] = []
    tripped_now = False
    if breaker.tripped and not budget.unlimited:
        hold = [n.name for n in candidates]
        grown = tuple(sorted(set(breaker.left_alone) | set(hold)))
        if grown != breaker.left_alone:  # more nodes report: the reason counts them too
            breaker = replace(breaker, left_alone=grown, reason=_reason(used + len(grown), budget, pool))
    elif budget.unlimited:
        take = candidates
    else:
        room = max(0, limit - used)
        take, rest = candidates[:room], candidates[room:]
        if rest:
            hold = [n.name for n in rest]
            tripped_now = True
            breaker = Breaker(BreakerState.TRIPPED, now, _reason(used + len(candidates), budget, pool), tuple(hold))
    steps: list[HealStep] = []
    spares = [s for s in spare_candidates(nodes) if s.name not in busy and s.name not in {n.name for n in take}]
    for node in take:
        steps.append(HealStep(HealAction.QUARANTINE, node.name, GPU_FAULT_QUARANTINE))
        if not node.spare and spares:
            steps.append(HealStep(HealAction.PROMOTE_SPARE, spares.pop(0).name, node.name))
    release = tuple(n.name for n in nodes if n.remediation_held and n.name not in hold)
    return RemediationPlan(tuple(steps), breaker, tripped_now, tuple(hold), release, used, limit)


def _reason(reported: int, budget: RemediationBudget, pool: int) -> str:
    """``3 nodes reported GpuFault within 600 s; the budget is 1 (25 % of 5 nodes, at least 1)``."""
    return f"{_nodes(reported)} reported {GPU_FAULT_CONDITION} within {budget.window:g} s; " \
           f"the budget is {budget.describe(pool)}"


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"
