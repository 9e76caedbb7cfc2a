"""The GPU-fault drain: a node that reports a fatal GPU fault is emptied pod by pod, and left alone once the fault
clears before it is empty.

A node the remediation budget lets the healer act on (:mod:`refplatform.core.remediation`) is cordoned and
labelled ``firedrill.dev/quarantine=gpu-fault`` at once; its pods then leave through the Eviction API one at a
time, ``interval`` seconds apart (disruption budgets are honoured: a refused eviction is tried again later), as
NVSentinel's node drainer and ``kubectl drain`` do.  Only once no pod is left is the node taken out of service
(the ``out-of-service`` taint: the remediation proper, a reset or a reboot on a real fleet).

When the node's ``GpuFault`` clears before the drain finished (a transient fault, a monitoring blip), the drain
stops: no further pod is evicted, the node is uncordoned and unlabelled and goes on working with the pods it still
runs.  A drain that carries on anyway, and takes the node out of service after its fault cleared, is the bug
NVSentinel#121 reported (the ``drain-past-recovery`` defect: ``ignore_recovery``).

:func:`plan_drain` is a pure function of what the healer knows of one draining node and ``now`` (epoch seconds,
injected): no clock is read and no I/O is done here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from refplatform.core.errors import CoreError

__all__ = ["DrainAction", "DrainError", "DrainPlan", "DrainStep", "DrainingNode", "plan_drain"]


class DrainError(CoreError):
    """A drain setting out of range."""


class DrainAction(Enum):
    """One step of a GPU-fault drain (the value is the Event reason the healer records)."""

    EVICT = "DrainEviction"
    """Evict the next pod (through ``pods/eviction``)."""
    CANCEL = "DrainCancelled"
    """The fault cleared first: stop, uncordon, unlabel; the pods still there stay."""
    FINISH = "NodeDrained"
    """No pod left: taint the node out of service."""


@dataclass(frozen=True)
class DrainingNode:
    """What the healer knows of one node quarantined for its GPU fault and not yet out of service."""

    name: str
    gpu_fault: bool
    """Its ``GpuFault`` condition still stands."""
    pods: tuple[str, ...] = ()
    """``namespace/name`` of each pod bound to it and not being deleted, in the order to evict them."""
    leaving: int = 0
    """Pods bound to it that are being deleted (evicted, not gone yet)."""
    last_eviction: float | None = None
    """When the healer last evicted one of its pods (None: not yet)."""
    ready: bool = True
    """Its Ready condition is True.  A node that is not cannot see its pods out: its drain finishes at once."""


@dataclass(frozen=True)
class DrainStep:
    action: DrainAction
    node: str
    pod: str = ""
    """For an eviction: ``namespace/name``."""


@dataclass(frozen=True)
class DrainPlan:
    steps: tuple[DrainStep, ...] = ()
    next_check: float | None = None
    """When the next eviction falls due (None: nothing waits on the clock)."""


def plan_drain(node: DrainingNode, now: float, interval: float, *, ignore_recovery: bool = False) -> DrainPlan:
    """The next step of ``node``'s drain at ``now``.

    - its fault cleared (and not ``ignore_recovery``): cancel;
    - not Ready: finish at once (its pods cannot leave by themselves; out of service, they are force-deleted);
    - pods left: evict the first once ``interval`` seconds passed since the last eviction (at once for the
      first), else wait until then;
    - none left and none leaving: finish (out of service); some still leaving: wait for them.
    """
    if interval < 0:
        raise DrainError(f"the drain interval must be >= 0 seconds, not {interval}")
    if not node.gpu_fault and not ignore_recovery:
        return DrainPlan((DrainStep(DrainAction.CANCEL, node.name),))
    if not node.ready:
        return DrainPlan((DrainStep(DrainAction.FINISH, node.name),))
    if node.pods:
        due = now if node.last_eviction is None else node.last_eviction + interval
        if now >= due:
            return DrainPlan((DrainStep(DrainAction.EVICT, node.name, node.pods[0]),))
        return DrainPlan(next_check=due)
    if node.leaving:
        return DrainPlan()
    return DrainPlan((DrainStep(DrainAction.FINISH, node.name),))
