"""Invariants: what must hold in every scenario, whatever the scenario is about (docs/INVARIANTS.md).

A scenario proves its own promise; these safety properties are watched throughout every scenario of every
feature, the way a history checker watches a whole run, from the harness's own watch of the scenario's pods
and what the workloads themselves log (never the platform's claim):

- **GPU exclusivity**: no GPU, and no MIG instance, serves two running pods at once, except on a node whose
  partitioning promises sharing (time-slicing, HAMi shares). The identities come from the workload: the canary,
  the inference canary and the isolation probe log the devices they were given (``NVIDIA_VISIBLE_DEVICES``, or
  NVML's UUIDs) in their first lines.
- **One world per training job**: a training job's running ranks are each rank exactly once within a
  generation (the canary's own ``rank`` and ``generation``); a duplicated rank names the rank, the pods and
  the ranks missing.

:class:`InvariantBook` is the pure part: it is told what the harness saw (a pod's state, the identity its
workload logged, whether a node promises sharing) and answers each breach once, with its evidence. A pod
counts while it runs: bound to a node, phase Running, not being deleted (a pod left Terminating on a dead
node is not running).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drills.kube.flavors import GANG_LABEL

__all__ = ["Breach", "Identity", "Invariant", "InvariantBook", "PodView", "identity_from_lines", "node_shares_gpus",
           "pod_view"]

Obj = dict[str, Any]
SHARED_MODES = frozenset({"time-slicing", "hami"})
"""``firedrill.dev/partition-mode`` values whose GPUs are shared by promise (docs/PARTITIONING.md)."""
SHARING_STRATEGIES = frozenset({"time-slicing", "mps"})
"""``nvidia.com/gpu.sharing-strategy`` values of NVIDIA's device plugin under which replicas share a GPU."""


class Invariant(enum.Enum):
    """A safety property watched in every scenario."""

    GPU_EXCLUSIVE = "GPU exclusivity"
    """No GPU or MIG instance serves two running pods at once, unless the node's partitioning promises sharing."""
    ONE_WORLD = "one world per training job"
    """A training job's running ranks are each rank exactly once within a generation."""


@dataclass(frozen=True)
class PodView:
    """What the harness's watch saw of one pod."""

    uid: str
    name: str
    node: str
    running: bool
    """Bound, phase Running, and not being deleted."""
    job: str = ""
    """The training job it is a rank of (its controller's uid, or its gang); empty for a pod on its own."""
    gpus_requested: bool = False
    """It asks for a GPU resource, so its workload is expected to name the devices it was given."""


@dataclass(frozen=True)
class Identity:
    """What a pod's workload logged about itself."""

    gpus: tuple[str, ...] | None
    """The devices it was given (UUIDs or indexes); None when it could not say."""
    rank: int | None = None
    world_size: int | None = None
    generation: str | None = None


@dataclass(frozen=True)
class Breach:
    invariant: Invariant
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    key: tuple[Any, ...] = ()
    """What makes it the same breach when it is seen again (reported once)."""

    def to_json(self) -> Obj:
        return {"invariant": self.invariant.value, "message": self.message, **dict(self.evidence)}


def _controller(meta: Obj) -> str:
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("uid"):
            return f"{ref.get('kind', '')}/{ref['uid']}"
    return ""


def pod_view(pod: Obj) -> PodView:
    """A pod as :class:`InvariantBook` counts it (a pod of a gang without an owner: its gang is its job)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    node = str(spec.get("nodeName") or "")
    running = bool(node) and status.get("phase") == "Running" and not meta.get("deletionTimestamp")
    gang = (meta.get("labels") or {}).get(GANG_LABEL)
    job = _controller(meta) or (f"gang/{gang}" if gang else "")
    wanted = any(name.startswith("nvidia.com/") and not name.endswith(("gpumem", "gpucores"))
                 and str(value) not in ("0", "")
                 for c in spec.get("containers") or []
                 for res in [(c or {}).get("resources") or {}]
                 for name, value in {**(res.get("requests") or {}), **(res.get("limits") or {})}.items())
    return PodView(str(meta.get("uid") or ""), str(meta.get("name") or ""), node, running, job, wanted)


def node_shares_gpus(node: Obj) -> bool:
    """Does this node's partitioning promise that pods share a GPU (time-slicing, HAMi, MPS replicas)?"""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if labels.get("firedrill.dev/partition-mode") in SHARED_MODES:
        return True
    if labels.get("nvidia.com/gpu.sharing-strategy") in SHARING_STRATEGIES:
        return True
    try:
        return int(labels.get("nvidia.com/gpu.replicas", "1")) > 1
    except ValueError:
        return False


PROBE_PREFIX = "FIREDRILL-PROBE "


def identity_from_lines(lines: Iterable[str]) -> Identity | None:
    """The identity a workload logged in its first lines: the canary's and the inference canary's ``start``
    line (``gpus``, and the canary's ``rank``, ``world_size``, ``generation``), or the isolation probe's report
    (its devices' UUIDs); None when none of the lines says it yet."""
    for raw in lines:
        text = raw.strip()
        if text.startswith(PROBE_PREFIX):
            text = text[len(PROBE_PREFIX):]
        if not text.startswith("{"):
            continue
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if not isinstance(line, dict):
            continue
        if line.get("event") == "start" and "gpus" in line:
            gpus = line["gpus"]
            named = tuple(str(g) for g in gpus) if isinstance(gpus, list) else None
            rank, world = line.get("rank"), line.get("world_size")
            return Identity(named, rank if isinstance(rank, int) else None,
                            world if isinstance(world, int) else None,
                            str(line["generation"]) if "generation" in line else None)
        devices = line.get("devices")
        if isinstance(devices, list) and devices:
            uuids = tuple(str(d["uuid"]) for d in devices if isinstance(d, dict) and d.get("uuid"))
            return Identity(uuids or None)
    return None


class InvariantBook:
    """The invariants' state over one scenario (pure): tell it what was seen; it answers new breaches."""

    def __init__(self) -> None:
        self.pods: dict[str, PodView] = {}
        self.identities: dict[str, Identity] = {}
        self.sharing: dict[str, bool] = {}
        self._reported: set[tuple[Any, ...]] = set()

    def pod(self, view: PodView) -> list[Breach]:
        self.pods[view.uid] = view
        return self._check()

    def gone(self, uid: str) -> list[Breach]:
        self.pods.pop(uid, None)
        return []

    def identity(self, uid: str, identity: Identity) -> list[Breach]:
        self.identities[uid] = identity
        return self._check()

    def node(self, name: str, shares: bool) -> list[Breach]:
        self.sharing[name] = shares
        return self._check()

    def needs_identity(self) -> list[PodView]:
        """Running pods that ask for GPUs and whose workload has not yet said what it was given."""
        return [p for p in self.pods.values() if p.running and p.gpus_requested and p.uid not in self.identities]

    # ------------------------------------------------------------------ the checks
    def _check(self) -> list[Breach]:
        found = [*self._exclusive(), *self._one_world()]
        new = [b for b in found if b.key not in self._reported]
        self._reported.update(b.key for b in new)
        return new

    def _running(self) -> list[tuple[PodView, Identity]]:
        return [(p, self.identities[p.uid]) for p in self.pods.values() if p.running and p.uid in self.identities]

    def _exclusive(self) -> list[Breach]:
        holders: dict[str, list[PodView]] = {}
        for pod, ident in self._running():
            for gpu in dict.fromkeys(ident.gpus or ()):
                holders.setdefault(gpu, []).append(pod)
        shared: dict[tuple[str, ...], list[str]] = {}  # the pods that share, and every GPU they share
        nodes_of: dict[tuple[str, ...], list[str]] = {}
        for gpu, pods in sorted(holders.items()):
            if len(pods) < 2:
                continue
            nodes = sorted({p.node for p in pods})
            if any(n not in self.sharing for n in nodes):
                continue  # judged once the node has said whether it promises sharing
            if all(self.sharing[n] for n in nodes):
                continue  # sharing is what the node promises
            names = tuple(sorted(p.name for p in pods))
            shared.setdefault(names, []).append(gpu)
            nodes_of[names] = sorted({*nodes_of.get(names, []), *nodes})
        out = []
        for names, gpus in shared.items():
            nodes = nodes_of[names]
            where = f"node {nodes[0]}" if len(nodes) == 1 else "nodes " + ", ".join(nodes)
            what = f"GPU {gpus[0]} on {where} serves" if len(gpus) == 1 else \
                f"GPUs {', '.join(gpus)} on {where} each serve"
            out.append(Breach(Invariant.GPU_EXCLUSIVE,
                              f"{what} {len(names)} running pods at once: {', '.join(names)} (each pod's own log "
                              "names the devices it was given; the node promises no sharing)",
                              {"gpus": gpus, "nodes": nodes, "pods": list(names)},
                              (Invariant.GPU_EXCLUSIVE, names)))
        return out

    def _one_world(self) -> list[Breach]:
        unread = {p.job for p in self.needs_identity() if p.job}  # judged once every running rank has spoken
        worlds: dict[tuple[str, str], dict[int, list[PodView]]] = {}
        sizes: dict[tuple[str, str], int] = {}
        for pod, ident in self._running():
            if not pod.job or pod.job in unread or ident.rank is None or ident.generation is None:
                continue
            key = (pod.job, ident.generation)
            worlds.setdefault(key, {}).setdefault(ident.rank, []).append(pod)
            if ident.world_size is not None:
                sizes[key] = max(sizes.get(key, 0), ident.world_size)
        out = []
        for (job, generation), ranks in sorted(worlds.items()):
            for rank, pods in sorted(ranks.items()):
                if len(pods) < 2:
                    continue
                names = sorted(p.name for p in pods)
                size = sizes.get((job, generation))
                missing = sorted(set(range(size)) - set(ranks)) if size else []
                gap = f"; rank(s) {', '.join(map(str, missing))} missing" if missing else ""
                out.append(Breach(Invariant.ONE_WORLD,
                                  f"rank {rank} of generation {generation} runs twice at once: {', '.join(names)}"
                                  f"{gap} (the canary's own log)",
                                  {"rank": rank, "generation": generation, "pods": names, "missing_ranks": missing,
                                   "world_size": size},
                                  (Invariant.ONE_WORLD, job, generation, rank, tuple(names))))
        return out
