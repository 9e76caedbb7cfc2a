"""A whole GPU's way back into service: burn-in, flapping, a person's clear (pure).

:mod:`refplatform.gpu.health` says which GPUs an Xid takes out; this module says when each comes back.  Each whole
GPU of a node is in one :class:`GpuState`:

- ``in-service``: allocatable;
- ``failed``: a GPU-class Xid for it stands (the device plugin's Unhealthy);
- ``burn-in``: its Xid cleared (or a person cleared a hold); the agent runs a diagnostic (``dcgmi diag -r 2``
  style) and a short collective on the node for :attr:`LifecycleRules.burn_in_seconds`.  Passed: back in
  service; failed: ``held``.  A GPU-class Xid meanwhile makes it ``failed`` again (that burn-in is not recorded);
- ``held``: kept out until a person clears it: its burn-in failed, or it failed again within
  :attr:`LifecycleRules.flap_window_seconds` of its last return (flapping: when that Xid clears it is held, not
  burnt in).  A clear sends it to burn-in (a cleared GPU still proves itself) and forgets its flap history; a
  clear of a GPU in service forgets its flap history alone (a person vouches for its last return: the drill's
  rollback does, so the next scenario's fault is not read as a flap of this one).

Everything but ``in-service`` is out of service.  :meth:`Lifecycle.step` is the whole rule: it takes the instant
(``now``, epoch seconds) and plain inputs (the Xids standing, the diagnostics injected, the GPUs a person cleared)
and returns the next :class:`Lifecycle` and what changed, with the Events the agent writes for it.  No clock is
read and nothing is written here; the node agent (:mod:`refplatform.agent.gpuhealth`) drives it on its clock.

The annotations, on the Node:

- ``firedrill.dev/inject-diag`` (the drill's): a JSON list of ``{"id", "gpu", "result": "fail"}``; while an entry
  for a GPU stands, each burn-in of that GPU fails (:func:`parse_diag_entries`);
- ``firedrill.dev/clear-gpus`` (a person's): comma-separated indexes of held GPUs to try again (or of GPUs in service
  whose flap history is to be forgotten); the agent removes it once applied;
- ``firedrill.dev/gpu-health`` (the agent's): :meth:`Lifecycle.document`, the GPUs out of service with their state,
  since when and why, and the last :data:`BURN_INS_KEPT` finished burn-ins.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

__all__ = ["BURN_INS_KEPT", "CLEAR_ANNOTATION", "DIAG_ANNOTATION", "GPU_HEALTH_ANNOTATION", "BurnIn", "GpuEvent",
           "GpuRecord", "GpuState", "Lifecycle", "LifecycleRules", "Step", "Transition", "parse_diag_entries"]

DIAG_ANNOTATION = "firedrill.dev/inject-diag"
"""On a Node, by the drill: a JSON list of ``{"id": str, "gpu": int, "result": "fail"}``; each burn-in of a GPU
named by a standing entry fails."""
CLEAR_ANNOTATION = "firedrill.dev/clear-gpus"
"""On a Node, by a person: comma-separated indexes of held GPUs to send to burn-in; the agent removes it."""
GPU_HEALTH_ANNOTATION = "firedrill.dev/gpu-health"
"""On a Node, by its agent: :meth:`Lifecycle.document` as compact JSON (absent when it is empty)."""
BURN_INS_KEPT = 16
"""Finished burn-ins remembered (and published), oldest first."""
BURN_IN_CHECKS = "diagnostic (level 2) and an all-reduce over the node's GPUs passed"
"""What a passed burn-in checked (its record's detail)."""


class GpuState(enum.Enum):
    """Where a whole GPU stands.  The value is the word the ``gpu-health`` annotation uses."""

    IN_SERVICE = "in-service"
    """Allocatable: the scheduler may hand it out."""
    FAILED = "failed"
    """A GPU-class Xid for it stands: out of service."""
    BURN_IN = "burn-in"
    """Its Xid cleared, its burn-in runs: still out of service until the burn-in passes."""
    HELD = "held"
    """Its burn-in failed or it flapped: out of service until a person clears it."""


class GpuEvent(enum.Enum):
    """The Events the agent writes on its Node for a transition.  The value is the Event's reason."""

    BURN_IN_PASSED = "GpuBurnInPassed"
    """A burn-in passed (Normal)."""
    BURN_IN_FAILED = "GpuBurnInFailed"
    """A burn-in's diagnostic failed (Warning); the GPU is held."""
    HELD = "GpuHeld"
    """The GPU is held until a person clears it: its burn-in failed or it flapped (Warning)."""
    RETURNED = "GpuReturned"
    """The GPU is back in service (Normal)."""

    @property
    def warning(self) -> bool:
        return self in (GpuEvent.BURN_IN_FAILED, GpuEvent.HELD)


@dataclass(frozen=True)
class LifecycleRules:
    """The settings (agent flags ``--burn-in-seconds``, ``--flap-window``) and the defects that bend the rule."""

    burn_in_seconds: float = 2.0
    """How long a burn-in runs before it is judged."""
    flap_window_seconds: float = 60.0
    """A GPU that fails again within this many seconds of its last return is held when that Xid clears."""
    burn_in: bool = True
    """False: the ``return-without-burn-in`` defect, a GPU whose Xid clears returns at once, unproven."""
    hold_flapping: bool = True
    """False: the ``flap-back`` defect, a GPU that fails again within the window is burnt in and returned as new."""

    def __post_init__(self) -> None:
        if not (self.burn_in_seconds > 0 and math.isfinite(self.burn_in_seconds)):
            raise ValueError(f"burn-in seconds must be > 0, not {self.burn_in_seconds!r}")
        if not (self.flap_window_seconds >= 0 and math.isfinite(self.flap_window_seconds)):
            raise ValueError(f"flap window seconds must be >= 0, not {self.flap_window_seconds!r}")


@dataclass(frozen=True)
class GpuRecord:
    """One GPU's state and the history the rule needs."""

    state: GpuState
    since: float
    """When it entered :attr:`state` (epoch seconds; a burn-in's start)."""
    reason: str = ""
    xid: int | None = None
    """The Xid that last failed it."""
    returned_at: float | None = None
    """Its last return to service (None: never returned, or a person cleared its flap history)."""
    flapping: str | None = None
    """While failed: the hold reason waiting for its Xid to clear (it failed again within the window)."""


@dataclass(frozen=True)
class BurnIn:
    """A finished burn-in."""

    gpu: int
    started: float
    ended: float
    passed: bool
    detail: str

    def document(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "started": round(self.started, 3), "ended": round(self.ended, 3),
                "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Transition:
    """A GPU moved from one state to another at ``at``; ``events`` are what the agent writes for it, in order."""

    gpu: int
    before: GpuState
    after: GpuState
    at: float
    reason: str
    events: tuple[GpuEvent, ...] = ()


@dataclass(frozen=True)
class Step:
    """What :meth:`Lifecycle.step` decided."""

    lifecycle: Lifecycle
    transitions: tuple[Transition, ...] = ()
    ignored_clears: tuple[int, ...] = ()
    """Indexes a person cleared that were neither held nor with a return to forget (nothing done)."""


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class Lifecycle:
    """The GPUs of one node that are out of service or have a history; a GPU without a record is in service."""

    records: Mapping[int, GpuRecord] = field(default_factory=dict)
    burn_ins: tuple[BurnIn, ...] = ()
    """The last :data:`BURN_INS_KEPT` finished burn-ins, oldest first."""

    def state(self, gpu: int) -> GpuState:
        rec = self.records.get(gpu)
        return GpuState.IN_SERVICE if rec is None else rec.state

    def out_of_service(self) -> dict[int, GpuRecord]:
        """Every GPU not in service, by index."""
        return {g: r for g, r in sorted(self.records.items()) if r.state is not GpuState.IN_SERVICE}

    def next_change(self, rules: LifecycleRules) -> float | None:
        """The instant the earliest running burn-in ends (None: none runs): when the agent must step again."""
        ends = [r.since + rules.burn_in_seconds for r in self.records.values() if r.state is GpuState.BURN_IN]
        return min(ends) if ends else None

    def step(self, now: float, rules: LifecycleRules, failing: Mapping[int, int],
             diagnostics: Mapping[int, str] | None = None, clears: Iterable[int] = ()) -> Step:
        """The lifecycle at ``now``: ``failing`` maps each GPU a GPU-class Xid stands for to that Xid;
        ``diagnostics`` each GPU whose burn-in must fail to the injection's id; ``clears`` the GPUs a person
        cleared.  In this order: new failures, cleared Xids, a person's clears (so one Node write that removes
        an Xid and clears its hold works), then the burn-ins that are due."""
        records = dict(self.records)
        burn_ins = list(self.burn_ins)
        out: list[Transition] = []

        def move(gpu: int, rec: GpuRecord, reason: str, *events: GpuEvent) -> None:
            before = records[gpu].state if gpu in records else GpuState.IN_SERVICE
            records[gpu] = rec
            out.append(Transition(gpu, before, rec.state, now, reason, events))

        for gpu, xid in sorted(failing.items()):
            rec = records.get(gpu)
            state = GpuState.IN_SERVICE if rec is None else rec.state
            if state in (GpuState.FAILED, GpuState.HELD):
                continue
            returned = None if rec is None else rec.returned_at
            flapping = None if rec is None else rec.flapping
            if state is GpuState.IN_SERVICE and rules.hold_flapping and returned is not None \
                    and now - returned <= rules.flap_window_seconds:
                flapping = f"flapping: failed again {now - returned:.1f} s after its return at {_iso(returned)}"
            why = f"Xid {xid}" + (" during its burn-in" if state is GpuState.BURN_IN else "")
            move(gpu, GpuRecord(GpuState.FAILED, now, why, xid, returned, flapping), why)

        for gpu, rec in sorted(records.items()):
            if rec.state is not GpuState.FAILED or gpu in failing:
                continue
            if rec.flapping is not None and rules.hold_flapping:
                move(gpu, replace(rec, state=GpuState.HELD, since=now, reason=rec.flapping, flapping=None),
                     rec.flapping, GpuEvent.HELD)
            else:
                self._release(gpu, rec, now, rules, f"its Xid {rec.xid} cleared", move)

        ignored = []
        for gpu in sorted(set(clears)):
            rec = records.get(gpu)
            if rec is not None and rec.state is GpuState.IN_SERVICE and rec.returned_at is not None:
                records[gpu] = replace(rec, returned_at=None)  # a person vouches for it: its flap history goes
                continue
            if rec is None or rec.state is not GpuState.HELD:
                ignored.append(gpu)
                continue
            rec = replace(rec, returned_at=None, flapping=None)
            if gpu in failing:
                move(gpu, replace(rec, state=GpuState.FAILED, since=now, reason=f"Xid {failing[gpu]}",
                                  xid=failing[gpu]), f"cleared by a person; Xid {failing[gpu]} still stands")
            else:
                self._release(gpu, rec, now, rules, "cleared by a person", move)

        for gpu, rec in sorted(records.items()):
            if rec.state is not GpuState.BURN_IN or now < rec.since + rules.burn_in_seconds:
                continue
            injected = (diagnostics or {}).get(gpu)
            if injected is None:
                burn_ins.append(BurnIn(gpu, rec.since, now, True, BURN_IN_CHECKS))
                move(gpu, replace(rec, state=GpuState.IN_SERVICE, since=now, reason="", returned_at=now),
                     f"burn-in passed: {BURN_IN_CHECKS}", GpuEvent.BURN_IN_PASSED, GpuEvent.RETURNED)
            else:
                detail = f"diagnostic failed (injected {injected})"
                burn_ins.append(BurnIn(gpu, rec.since, now, False, detail))
                move(gpu, replace(rec, state=GpuState.HELD, since=now, reason=f"burn-in failed: {detail}"),
                     f"burn-in failed: {detail}", GpuEvent.BURN_IN_FAILED, GpuEvent.HELD)
        return Step(Lifecycle(records, tuple(burn_ins[-BURN_INS_KEPT:])), tuple(out), tuple(ignored))

    @staticmethod
    def _release(gpu: int, rec: GpuRecord, now: float, rules: LifecycleRules, why: str,
                 move: Callable[..., None]) -> None:
        """A GPU free to come back: to burn-in, or (``return-without-burn-in``) straight back into service."""
        if rules.burn_in:
            move(gpu, replace(rec, state=GpuState.BURN_IN, since=now,
                              reason=f"burn-in: {why}; diagnostic and collective for {rules.burn_in_seconds:g} s"),
                 why)
        else:
            move(gpu, replace(rec, state=GpuState.IN_SERVICE, since=now, reason="", returned_at=now),
                 f"{why}; returned without a burn-in", GpuEvent.RETURNED)

    def document(self) -> dict[str, Any]:
        """The ``firedrill.dev/gpu-health`` annotation's content: ``{}`` when every GPU is in service and no
        burn-in ever ran."""
        gpus = {str(g): {"state": r.state.value, "since": round(r.since, 3), "reason": r.reason}
                for g, r in self.out_of_service().items()}
        if not gpus and not self.burn_ins:
            return {}
        return {"gpus": gpus, "burn_ins": [b.document() for b in self.burn_ins]}

    def annotation(self) -> str | None:
        """:meth:`document` as compact JSON; None when it is empty (the annotation is removed)."""
        doc = self.document()
        return json.dumps(doc, separators=(",", ":")) if doc else None

    @classmethod
    def restored(cls, raw: str | None, now: float, rules: LifecycleRules, gpu_count: int) -> Lifecycle:
        """What an agent that restarts takes over from its Node's ``gpu-health`` annotation (its previous life's):
        a held GPU stays held; any other GPU that was out proves itself again in a burn-in from ``now`` (straight
        back into service under ``return-without-burn-in``); the burn-in records are kept.  Flap history is lost.
        Anything malformed is skipped."""
        try:
            doc = json.loads(raw or "{}")
        except ValueError:
            return cls()
        if not isinstance(doc, dict):
            return cls()
        records: dict[int, GpuRecord] = {}
        gpus = doc.get("gpus")
        for key, entry in (gpus.items() if isinstance(gpus, dict) else ()):
            if not (isinstance(key, str) and key.isdigit() and int(key) < gpu_count and isinstance(entry, dict)):
                continue
            if entry.get("state") == GpuState.HELD.value and isinstance(entry.get("since"), (int, float)):
                records[int(key)] = GpuRecord(GpuState.HELD, float(entry["since"]), str(entry.get("reason") or ""))
            elif entry.get("state") in (GpuState.FAILED.value, GpuState.BURN_IN.value) and rules.burn_in:
                records[int(key)] = GpuRecord(GpuState.BURN_IN, now, "burn-in: the agent restarted; diagnostic and "
                                                                     f"collective for {rules.burn_in_seconds:g} s")
        burn_ins = []
        listed = doc.get("burn_ins")
        for item in listed if isinstance(listed, list) else ():
            try:
                burn_ins.append(BurnIn(int(item["gpu"]), float(item["started"]), float(item["ended"]),
                                       bool(item["passed"]), str(item.get("detail") or "")))
            except (TypeError, KeyError, ValueError):
                continue
        return cls(records, tuple(burn_ins[-BURN_INS_KEPT:]))


def parse_diag_entries(raw: str | None, gpu_count: int) -> tuple[dict[int, str], list[str]]:
    """The ``firedrill.dev/inject-diag`` annotation: GPU index -> the id of the (first) entry that fails its
    burn-ins, and a problem per entry skipped (the agent logs them, as it does inject-xid's)."""
    if not raw:
        return {}, []
    try:
        data = json.loads(raw)
    except ValueError as err:
        return {}, [f"{DIAG_ANNOTATION} is not JSON: {err}"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return {}, [f"{DIAG_ANNOTATION} must be a JSON list of entries"]
    out: dict[int, str] = {}
    problems = []
    for item in data:
        entry_id = item.get("id") if isinstance(item, dict) else None
        gpu = item.get("gpu") if isinstance(item, dict) else None
        if not isinstance(item, dict) or isinstance(entry_id, bool) or entry_id in (None, ""):
            problems.append(f"{DIAG_ANNOTATION} entry {item!r} skipped: no id")
        elif isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < gpu_count:
            problems.append(f"{DIAG_ANNOTATION} entry {item!r} skipped: gpu must be the index of one of the node's "
                            f"{gpu_count} GPUs")
        elif item.get("result") != "fail":
            problems.append(f"{DIAG_ANNOTATION} entry {item!r} skipped: result must be \"fail\"")
        else:
            out.setdefault(gpu, str(entry_id))
    return out, problems
