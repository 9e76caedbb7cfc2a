"""Whether a node gives the service it gave before a fault: Ready, schedulable, untainted, its GPUs allocatable.

A healed cluster is whole again only when the nodes a fault touched are back in service, not merely Ready: a
node returned still cordoned, still tainted, or short of GPUs holds nothing, and the next scenario finds the
cluster smaller than the first one did.  :class:`NodeService` is what one node object says of its service;
:func:`out_of_service` says, in words, what keeps a node from the service it gave before (nothing: it is back).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

POOL_TAINTS = frozenset({"firedrill.dev/spare"})
"""Taints that give a node a role rather than take it out of service: the reference platform's spare pool (a node
that comes back joins the pool; the run's rollback gives the pool back its own spares)."""
REPELLING = ("NoSchedule", "NoExecute")
"""Taint effects that keep new pods off a node (PreferNoSchedule only discourages them)."""


@dataclass(frozen=True)
class NodeService:
    """What a Node object says of the service it gives."""

    name: str
    ready: bool
    cordoned: bool
    taints: frozenset[str]
    """Its repelling taints, as ``key:effect`` (``key=value:effect`` when it has a value)."""
    gpus: int | None
    """``status.allocatable`` of the GPU resource (None: not stated)."""

    @classmethod
    def of(cls, node: Obj, gpu_resource: str) -> NodeService:
        spec, status = node.get("spec") or {}, node.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        taints = frozenset(_taint(t) for t in spec.get("taints") or [] if t.get("effect") in REPELLING)
        raw = (status.get("allocatable") or {}).get(gpu_resource)
        try:
            gpus: int | None = int(str(raw)) if raw is not None else None
        except ValueError:
            gpus = None
        return cls(node["metadata"]["name"], ready, bool(spec.get("unschedulable")), taints, gpus)

    @property
    def serving(self) -> bool:
        """Ready and schedulable: it takes pods at all (what it had before is :func:`out_of_service`'s business)."""
        return self.ready and not self.cordoned


def _taint(t: Obj) -> str:
    value = t.get("value")
    return f"{t.get('key')}{'=' + str(value) if value else ''}:{t.get('effect')}"


def snapshot(nodes: Iterable[Obj], gpu_resource: str) -> dict[str, NodeService]:
    """Every node's service, by name."""
    return {s.name: s for s in (NodeService.of(n, gpu_resource) for n in nodes)}


def out_of_service(before: NodeService, now: NodeService | None) -> list[str]:
    """What keeps a node from the service it gave ``before``, in words ([]: it is back).  A taint it had before, a
    cordon it had before and a spare pool's taint (:data:`POOL_TAINTS`) are no fault."""
    if now is None:
        return ["gone from the cluster (its Node object deleted)"]
    problems = []
    if not now.ready:
        problems.append("not Ready")
    if now.cordoned and not before.cordoned:
        problems.append("cordoned (spec.unschedulable)")
    gained = sorted(t for t in now.taints - before.taints if t.split(":")[0].split("=")[0] not in POOL_TAINTS)
    if gained:
        problems.append("tainted " + ", ".join(gained))
    if before.gpus and (now.gpus or 0) < before.gpus:
        problems.append(f"{now.gpus or 0} of its {before.gpus} GPUs allocatable")
    return problems


def not_back(before: Mapping[str, NodeService], now: Mapping[str, NodeService],
             nodes: Iterable[str] | None = None) -> dict[str, list[str]]:
    """Of ``nodes`` (default: every node of ``before``), those that served ``before`` and are not back in that
    service ``now``, each with what keeps it out."""
    out: dict[str, list[str]] = {}
    for name in sorted(before if nodes is None else nodes):
        was = before.get(name)
        if was is None or not was.serving:
            continue
        problems = out_of_service(was, now.get(name))
        if problems:
            out[name] = problems
    return out


def describe(missing: Mapping[str, list[str]]) -> str:
    """``gpu-node-1: cordoned (spec.unschedulable); gpu-node-2: not Ready, tainted ...``."""
    return "; ".join(f"{name}: {', '.join(problems)}" for name, problems in missing.items())


__all__ = ["POOL_TAINTS", "NodeService", "describe", "not_back", "out_of_service", "snapshot"]
