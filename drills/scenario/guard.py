"""The abort guard: conditions the customer names that stop the whole run at once (docs/SAFETY.md).

A drill that goes wrong on a customer's cluster must not go on.  The profile's ``safety.abort_when`` names the
conditions; while a scenario runs, the guard watches for them and, on a breach, makes the scenario ABORTED
(:meth:`~drills.records.verdict.DrillResult.abort`): the step that waits ends, the rollback undoes every fault,
and the run stops there with its own exit code, naming the breach.

One condition today, :attr:`AbortCondition.OUTSIDE_NODE_NOT_READY`: a node outside the drill's blast radius
goes NotReady.  The blast radius is every node the run faulted in this scenario (its fault records, kept after
they are undone: a node coming back may flap); a fault on the control plane makes every node's heartbeat late,
so while one stands, or after it, no node is judged.  Only a change counts: a node NotReady when the scenario
began is the pre-flight's business, not a breach.  :class:`NodeGuard` is the pure part.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from drills.kube.driver import NODE
from drills.records.verdict import DrillResult
from drills.target.connect import Target
from drills.target.faults import CONTROL_PLANE
from drills.target.profile import AbortCondition
from drills.target.safety import is_ready

__all__ = ["AbortGuard", "NodeGuard"]

Obj = dict[str, Any]


@dataclass
class NodeGuard:
    """Which node left Ready while outside the blast radius (pure: told each node's state and the radius)."""

    was_ready: dict[str, bool] = field(default_factory=dict)

    def see(self, name: str, ready: bool, radius: Collection[str]) -> str | None:
        """The breach this change of ``name`` is (None: none): Ready before, not now, and not a faulted node."""
        before = self.was_ready.get(name)
        self.was_ready[name] = ready
        if before is not True or ready or CONTROL_PLANE in radius or name in radius:
            return None
        inside = ", ".join(sorted(radius)) or "no node yet"
        return (f"node {name} went NotReady, and it is outside the drill's blast radius ({inside}): the abort "
                f"guard (safety.abort_when: {AbortCondition.OUTSIDE_NODE_NOT_READY.value}) stopped the run; every "
                "fault was undone, and no scenario after this one ran")


@dataclass
class AbortGuard:
    """Watches one scenario for the profile's abort conditions, from :meth:`start` until the watches stop."""

    target: Target
    result: DrillResult
    radius: Callable[[], Collection[str]]
    """The nodes faulted in this scenario so far (and ``control-plane`` for a fault on it)."""
    nodes: NodeGuard = field(default_factory=NodeGuard)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> AbortGuard:
        if AbortCondition.OUTSIDE_NODE_NOT_READY in self.target.profile.safety.abort_when:
            self.target.driver.watch(NODE, on_event=self._on_node, record=False)
        return self

    def _on_node(self, event: str, node: Obj) -> None:
        name = str(node["metadata"]["name"])
        ready = event != "DELETED" and is_ready(node)
        with self._lock:
            breach = self.nodes.see(name, ready, self.radius())
        if breach is not None:
            self.result.abort(breach)
