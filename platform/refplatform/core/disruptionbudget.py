"""PodDisruptionBudgets (``policy/v1``): how many of a budget's pods may be disrupted now, and whether one
eviction may go ahead; pure, as upstream's disruption controller and eviction REST handler decide.

- ``expectedPods``: the replicas the pods' controllers ask for (a ReplicaSet's ``spec.replicas``, summed over
  the controllers of the selected pods); pods without a controller count themselves, which upstream allows
  only for an integer ``minAvailable``.
- ``desiredHealthy``: ``minAvailable`` (an integer, or a percentage of expected rounded up), or
  expected less ``maxUnavailable`` (an integer, or a percentage rounded up).
- ``currentHealthy``: selected pods Ready and not being deleted, less those evicted but not yet gone
  (``disruptedPods``, forgotten after two minutes as upstream's ``DeletionTimeout``).
- ``disruptionsAllowed`` = max(0, currentHealthy - desiredHealthy).

An eviction of a healthy pod needs ``disruptionsAllowed`` > 0 and uses one up; an unhealthy pod may go when
the budget is met (``IfHealthyBudget``, the default) or always (``AlwaysAllow``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
DELETION_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class BudgetPod:
    name: str
    healthy: bool
    owner: tuple[str, str] | None
    """(kind, name) of the pod's controller, if any."""


@dataclass(frozen=True)
class Counts:
    expected: int
    desired: int
    healthy: int

    @property
    def allowed(self) -> int:
        return max(0, self.healthy - self.desired)


class BudgetError(ValueError):
    """A budget that cannot be computed (a percentage over pods without a controller)."""


def _scaled(value: Any, expected: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * expected / 100)
    return int(value)


def counts(spec: Obj, pods: list[BudgetPod], scales: dict[tuple[str, str], int], disrupted: set[str]) -> Counts:
    """The numbers of a budget over its selected ``pods``; ``scales``: replicas per (kind, name) controller;
    ``disrupted``: pods evicted within the deletion timeout."""
    owners = {p.owner for p in pods if p.owner is not None}
    orphans = [p for p in pods if p.owner is None]
    integer_min = isinstance(spec.get("minAvailable"), int)
    if orphans and not integer_min:
        raise BudgetError("pods without a controller need an integer minAvailable (a percentage or "
                          "maxUnavailable is counted against their controller's replicas)")
    expected = sum(scales.get(o, 0) for o in owners) + len(orphans)
    if integer_min or (not owners and not orphans):
        expected = max(expected, len(pods))
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = max(0, expected - _scaled(spec.get("maxUnavailable", 0), expected))
    healthy = sum(1 for p in pods if p.healthy and p.name not in disrupted)
    return Counts(expected, desired, healthy)


def still_disrupted(disrupted: Obj, now: float, parse: Callable[[Any], float | None]) -> set[str]:
    """``status.disruptedPods`` entries younger than the deletion timeout (``parse``: RFC 3339 -> seconds)."""
    return {name for name, at in (disrupted or {}).items() if (t := parse(at)) is not None and now - t < DELETION_TIMEOUT_S}


@dataclass(frozen=True)
class EvictionAnswer:
    allowed: bool
    uses_budget: bool
    message: str = ""


def may_evict(pdb: Obj, pod_healthy: bool) -> EvictionAnswer:
    """Whether an eviction may go ahead against ``pdb`` (its current status), as upstream's eviction handler."""
    meta, spec, status = pdb["metadata"], pdb.get("spec") or {}, pdb.get("status") or {}
    if status.get("observedGeneration") != meta.get("generation", 1):
        return EvictionAnswer(False, False, f"the disruption budget {meta['name']} is still being processed by the "
                                            "server")
    healthy, desired = int(status.get("currentHealthy", 0)), int(status.get("desiredHealthy", 0))
    if not pod_healthy:
        if spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or healthy >= desired:
            return EvictionAnswer(True, False)
    elif int(status.get("disruptionsAllowed", 0)) > 0:
        return EvictionAnswer(True, True)
    return EvictionAnswer(False, False, f"The disruption budget {meta['name']} needs {desired} healthy pods and has "
                                        f"{healthy} currently")
