"""Reading Nodes, Leases and pod tolerations (JSON) into the healing core's terms, and taints back.

Shared by the node lifecycle, taint eviction, healer and Volcano job controllers.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from refplatform.core import Taint, TaintEffect, Toleration, TolerationOperator
from refplatform.core.healing import (
    CONDITION_TAINT_KEYS, OUT_OF_SERVICE_TAINT, Readiness, TimedTaint, TimedToleration,
)
from refplatform.resources import LEASES

Obj = dict[str, Any]
LEASE_NAMESPACE = "kube-node-lease"
LOST_TAINT_KEYS = CONDITION_TAINT_KEYS | {OUT_OF_SERVICE_TAINT}


def parse_time(value: Any) -> float | None:
    """RFC 3339 (``Time`` or ``MicroTime``) to epoch seconds; None when absent or malformed."""
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(node: Obj, ctype: str = "Ready") -> Obj:
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), {})


def readiness(node: Obj) -> Readiness:
    return Readiness.of(condition(node).get("status"))


def effect_of(value: Any) -> TaintEffect:
    for effect in TaintEffect:
        if effect.value == value:
            return effect
    return TaintEffect.NO_SCHEDULE


def taints_of(node: Obj) -> list[TimedTaint]:
    out = []
    for t in (node.get("spec") or {}).get("taints") or []:
        if isinstance(t, dict) and t.get("key"):
            out.append(TimedTaint(Taint(t["key"], t.get("value") or "", effect_of(t.get("effect"))),
                                  parse_time(t.get("timeAdded"))))
    return out


def taints_json(wanted: Iterable[Taint], current: Obj, now: float) -> list[Obj]:
    """The ``spec.taints`` list for ``wanted``, keeping each existing taint's ``timeAdded`` and
    stamping new ``NoExecute`` taints with ``now`` (as upstream does)."""
    existing = {(t.get("key"), t.get("value") or "", t.get("effect")): t
                for t in (current.get("spec") or {}).get("taints") or [] if isinstance(t, dict)}
    out = []
    for taint in wanted:
        old = existing.get((taint.key, taint.value, taint.effect.value))
        if old is not None:
            out.append(old)
            continue
        entry: Obj = {"key": taint.key, "effect": taint.effect.value}
        if taint.value:
            entry["value"] = taint.value
        if taint.effect is TaintEffect.NO_EXECUTE:
            entry["timeAdded"] = rfc3339(now)
        out.append(entry)
    return out


def tolerations_of(pod: Obj) -> list[TimedToleration]:
    out = []
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if not isinstance(t, dict):
            continue
        op = TolerationOperator.EXISTS if t.get("operator") == "Exists" else TolerationOperator.EQUAL
        effect = effect_of(t["effect"]) if t.get("effect") else None
        seconds = t.get("tolerationSeconds")
        out.append(TimedToleration(Toleration(t.get("key") or "", op, t.get("value") or "", effect),
                                   float(seconds) if isinstance(seconds, (int, float)) else None))
    return out


def lease_of(cache: Any, name: str) -> Obj | None:
    return cache.get(LEASES, LEASE_NAMESPACE, name)


def heard_at(node: Obj, lease: Obj | None) -> float:
    """When the node was last heard from: its Lease's renewTime, else its creation."""
    renew = parse_time(((lease or {}).get("spec") or {}).get("renewTime"))
    if renew is not None:
        return renew
    return parse_time((node.get("metadata") or {}).get("creationTimestamp")) or 0.0


def node_lost(node: Obj | None) -> bool:
    """Nobody is left on this node to finish a graceful pod deletion: it is gone, not Ready,
    or tainted unreachable, not-ready or out-of-service."""
    if node is None:
        return True
    if readiness(node) is not Readiness.TRUE:
        return True
    return any(t.get("key") in LOST_TAINT_KEYS for t in (node.get("spec") or {}).get("taints") or []
               if isinstance(t, dict))


def newest(*objs: Obj | None) -> Obj | None:
    """The copy with the highest resourceVersion (the informer may lag behind our own writes)."""
    best: Obj | None = None
    for obj in objs:
        if obj is None:
            continue
        if best is None or _rv(obj) > _rv(best):
            best = obj
    return best


def _rv(obj: Obj) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0
