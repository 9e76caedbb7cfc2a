"""The node agent's side of a GPU's way back (:mod:`refplatform.gpu.lifecycle`): it drives the pure rule on the
agent's clock and says what it decided.

:class:`GpuHealthKeeper` is fed twice: by the heartbeat thread with every Node it reads (:meth:`observe`: the GPUs
an Xid stands for, ``firedrill.dev/inject-diag``, ``firedrill.dev/clear-gpus``), and by the pod sync thread on each
pass (:meth:`advance`), so a burn-in ends on time whether or not anything else happens.  Each transition is logged
and written as an Event on the Node (``GpuBurnInPassed``, ``GpuBurnInFailed``, ``GpuHeld``, ``GpuReturned``,
reported by the kubelet as the agent's other Events).  A person's ``clear-gpus`` is removed from the Node once
applied (a JSON patch that tests the value it applied, so a newer clear is never lost).  The first Node read seeds
the lifecycle from the ``firedrill.dev/gpu-health`` annotation a previous life of the agent wrote
(:meth:`~refplatform.gpu.lifecycle.Lifecycle.restored`): a held GPU stays held across a restart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from refplatform.agent.events import PodEventRecorder
from refplatform.client import JSON_PATCH, ApiStatusError, ApiUnreachable, resource_path
from refplatform.gpu.health import parse_unhealthy
from refplatform.gpu.identity import gpu_uuid
from refplatform.gpu.lifecycle import (
    CLEAR_ANNOTATION,
    DIAG_ANNOTATION,
    GPU_HEALTH_ANNOTATION,
    GpuEvent,
    GpuState,
    Lifecycle,
    LifecycleRules,
    Transition,
    parse_diag_entries,
)

__all__ = ["GpuHealthKeeper"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class GpuHealthKeeper:
    """The whole GPUs' lifecycle of one node, thread-safe.  Every method takes the agent's ``now``."""

    def __init__(self, node: str, gpu_count: int, rules: LifecycleRules, *, client: Any = None,
                 events: PodEventRecorder | None = None, node_ref: Callable[[], Obj] | None = None) -> None:
        """``client``: removes an applied ``clear-gpus`` from the Node (None: left there); ``events`` and
        ``node_ref``: where the transitions' Events go (None: logged only)."""
        self.node = node
        self.gpu_count = gpu_count
        self.rules = rules
        self.client = client
        self.events = events
        self.node_ref = node_ref or (lambda: {"kind": "Node", "name": node, "uid": "", "apiVersion": "v1"})
        self._lock = threading.Lock()
        self._lifecycle = Lifecycle()
        self._seeded = False
        self._failing: dict[int, int] = {}
        self._diagnostics: dict[int, str] = {}
        self._applied_clear: str | None = None
        """The ``clear-gpus`` value last applied, until the Node no longer shows it (never applied twice)."""
        self._problems: set[str] = set()

    # -- what the heartbeat and the pod sync call ----------------------------------------------------

    def observe(self, failing: Mapping[int, int], now: datetime, annotations: Mapping[str, str] | None = None) -> bool:
        """The GPUs a GPU-class Xid stands for now (after the device plugin's defects), and, from a Node just
        read, its annotations; True when what the node reports changed."""
        clear_raw = None
        with self._lock:
            clears: tuple[int, ...] = ()
            if annotations is not None:
                if not self._seeded:
                    self._seeded = True
                    self._lifecycle = Lifecycle.restored(annotations.get(GPU_HEALTH_ANNOTATION), now.timestamp(),
                                                         self.rules, self.gpu_count)
                    if self._lifecycle.records:
                        log.warning("node %s: GPUs taken over from before the agent restarted: %s", self.node,
                                    self._describe())
                diagnostics, problems = parse_diag_entries(annotations.get(DIAG_ANNOTATION), self.gpu_count)
                for problem in problems:
                    if problem not in self._problems:
                        self._problems.add(problem)
                        log.warning("%s", problem)
                if diagnostics != self._diagnostics:
                    log.warning("node %s: burn-ins fail for GPUs %s", self.node,
                                ", ".join(f"{g} (injection {i})" for g, i in sorted(diagnostics.items())) or "none")
                self._diagnostics = diagnostics
                clear_raw = annotations.get(CLEAR_ANNOTATION)
                if clear_raw is not None and clear_raw != self._applied_clear:
                    clears = tuple(g for g in parse_unhealthy(clear_raw) if g < self.gpu_count)
                self._applied_clear = clear_raw  # still there next time: its removal is retried, not re-applied
            self._failing = dict(failing)
            changed = self._step(now, clears)
        if clear_raw is not None:
            self._remove_clear(clear_raw)
        return changed

    def advance(self, now: datetime) -> bool:
        """Step on the clock alone (the burn-ins that are due); True when what the node reports changed."""
        with self._lock:
            due = self._lifecycle.next_change(self.rules)
            if due is None or now.timestamp() < due:
                return False
            return self._step(now, ())

    def out_of_service(self) -> dict[int, int]:
        """Every GPU not in service -> the Xid that last took it out (0 if none is known)."""
        with self._lock:
            return {g: r.xid or 0 for g, r in self._lifecycle.out_of_service().items()}

    def states(self) -> dict[int, GpuState]:
        """Every GPU not in service -> its state."""
        with self._lock:
            return {g: r.state for g, r in self._lifecycle.out_of_service().items()}

    def annotation(self) -> str | None:
        """The ``firedrill.dev/gpu-health`` annotation's value (None: remove it)."""
        with self._lock:
            return self._lifecycle.annotation()

    def lifecycle(self) -> Lifecycle:
        with self._lock:
            return self._lifecycle

    def next_change(self) -> float | None:
        """When the earliest burn-in ends (epoch seconds; None: none runs)."""
        with self._lock:
            return self._lifecycle.next_change(self.rules)

    # -- inside --------------------------------------------------------------------------------------

    def _step(self, now: datetime, clears: tuple[int, ...]) -> bool:
        before = (self._lifecycle.out_of_service().keys(), self._lifecycle.annotation())
        step = self._lifecycle.step(now.timestamp(), self.rules, self._failing, self._diagnostics, clears)
        self._lifecycle = step.lifecycle
        if clears:
            log.warning("node %s: a person cleared GPUs %s%s", self.node, ",".join(map(str, clears)),
                        f" ({', '.join(map(str, step.ignored_clears))} not held: ignored)" if step.ignored_clears
                        else "")
        for t in step.transitions:
            log.warning("node %s: GPU %d %s -> %s: %s", self.node, t.gpu, t.before.value, t.after.value, t.reason)
            self._record(t)
        return (self._lifecycle.out_of_service().keys(), self._lifecycle.annotation()) != before

    def _record(self, t: Transition) -> None:
        if self.events is None or not t.events:
            return
        gpu = f"GPU {t.gpu} ({gpu_uuid(self.node, t.gpu)})"
        burn_in = next((b for b in reversed(self._lifecycle.burn_ins) if b.gpu == t.gpu and b.ended == t.at), None)
        took = f" in {burn_in.ended - burn_in.started:.1f} s" if burn_in is not None else ""
        messages = {
            GpuEvent.BURN_IN_PASSED: f"{gpu} passed its burn-in{took}: {burn_in.detail if burn_in else t.reason}",
            GpuEvent.BURN_IN_FAILED: f"{gpu} failed its burn-in{took}: {burn_in.detail if burn_in else t.reason}",
            GpuEvent.HELD: f"{gpu} is held out of service until a person clears it (kubectl annotate node "
                           f"{self.node} {CLEAR_ANNOTATION}={t.gpu} --overwrite): {t.reason}",
            GpuEvent.RETURNED: f"{gpu} returned to service: {t.reason}",
        }
        when = datetime.fromtimestamp(t.at, UTC)
        for event in t.events:
            self.events.record(dict(self.node_ref()), "Warning" if event.warning else "Normal", event.value,
                               messages[event], when)

    def _describe(self) -> str:
        return ", ".join(f"{g} {r.state.value}" for g, r in self._lifecycle.out_of_service().items())

    def _remove_clear(self, raw: str) -> None:
        """Remove the applied ``clear-gpus`` from the Node, only if it still holds what was applied."""
        if self.client is None:
            return
        pointer = "/metadata/annotations/" + CLEAR_ANNOTATION.replace("~", "~0").replace("/", "~1")
        try:
            self.client.patch(resource_path("", "v1", "nodes", None, self.node),
                              [{"op": "test", "path": pointer, "value": raw}, {"op": "remove", "path": pointer}],
                              JSON_PATCH)
        except (ApiStatusError, ApiUnreachable) as err:
            log.info("node %s: removing the applied %s=%s failed (a newer one is applied at the next read): %s",
                     self.node, CLEAR_ANNOTATION, raw, err)
