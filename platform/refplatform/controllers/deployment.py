"""The Deployment and ReplicaSet controllers: ``apps/v1`` Deployments -> ReplicaSets -> pods.

Two pure cores decide, the controllers around them only read the informer
caches and write through the API:

- :func:`plan_replicaset`: a ReplicaSet and its pods -> how many pods to
  create, which to delete, and the status to write.  A ReplicaSet keeps
  ``spec.replicas`` live pods (not Failed/Succeeded, not being deleted); a
  Failed or Succeeded pod is deleted and replaced, a deleted one is replaced
  as soon as it carries a ``deletionTimestamp``; surplus pods go not-ready
  first, then newest first.  Status: ``replicas`` (live pods),
  ``readyReplicas`` and ``availableReplicas`` (live pods whose Ready condition
  is True; ``minReadySeconds`` is not served, so available = ready),
  ``observedGeneration``.
- :func:`plan_deployment`: a Deployment and the ReplicaSets it owns -> the
  ReplicaSet to create and the scales to write.  The Deployment owns one
  ReplicaSet per pod-template hash (label ``pod-template-hash`` on the
  ReplicaSet, its selector and its pods; name ``<deployment>-<hash>``).  The
  rolling update is *minimal*: when the template changes the new ReplicaSet is
  created at full scale and every old one is scaled to 0 at once; there is no
  maxSurge/maxUnavailable pacing (``spec.strategy`` is accepted and ignored).

Pods are created with ``generateName: <replicaset>-`` and an owner reference
to their ReplicaSet (controller: true); ReplicaSets with one to their
Deployment.  Owned objects whose owner is gone are deleted (the garbage
collector's part).  Because the caches lag the writes, the ReplicaSet
controller remembers the pods it created and has not seen yet, and the pods
it deleted (the "expectations" of upstream), so it never creates twice.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, MERGE_PATCH, RestClient, resource_path
from refplatform.controllers.manager import Cache
from refplatform.resources import DEPLOYMENTS, PODS, REPLICASETS, ResourceType

log = logging.getLogger(__name__)
Obj = dict[str, Any]

TEMPLATE_HASH = "pod-template-hash"
EXPECTATION_TIMEOUT = 30.0
"""Seconds after which a created pod that never showed up in the cache stops counting (upstream: 5 min)."""
_TERMINAL = ("Failed", "Succeeded")


# ======================================================================== pure core
@dataclass(frozen=True)
class PodView:
    """What the ReplicaSet core needs of one owned pod."""

    name: str
    uid: str
    phase: str
    ready: bool
    deleting: bool
    """The pod has a deletionTimestamp, or this controller deleted it and the cache has not caught up."""
    created: str = ""
    """creationTimestamp (RFC 3339 sorts as text): the newest surplus pod goes first."""

    @property
    def live(self) -> bool:
        return not self.deleting and self.phase not in _TERMINAL


@dataclass(frozen=True)
class ReplicaSetStatus:
    replicas: int
    ready_replicas: int
    available_replicas: int
    observed_generation: int

    def as_dict(self) -> Obj:
        return {"replicas": self.replicas, "readyReplicas": self.ready_replicas,
                "availableReplicas": self.available_replicas, "observedGeneration": self.observed_generation}


@dataclass(frozen=True)
class ReplicaSetPlan:
    create: int
    """Pods to create."""
    delete: tuple[str, ...]
    """Names of pods to delete: finished ones (to be replaced) and the surplus."""
    status: ReplicaSetStatus


def plan_replicaset(replicas: int, generation: int, pods: Sequence[PodView],
                    pending_creates: int = 0) -> ReplicaSetPlan:
    """Converge the pods of one ReplicaSet on ``replicas`` live pods.

    ``pending_creates`` counts pods this controller created that the cache does
    not show yet: they count as live, so a lagging cache never doubles them.
    """
    finished = tuple(p.name for p in pods if not p.deleting and p.phase in _TERMINAL)
    live = [p for p in pods if p.live]
    have = len(live) + pending_creates
    surplus: tuple[str, ...] = ()
    if have > replicas:
        newest_first = sorted(live, key=lambda p: p.created, reverse=True)
        order = sorted(newest_first, key=lambda p: p.ready)  # stable: not ready first, then newest first
        surplus = tuple(p.name for p in order[:min(len(live), have - replicas)])
    ready = sum(1 for p in live if p.ready)
    status = ReplicaSetStatus(len(live), ready, ready, generation)
    return ReplicaSetPlan(max(0, replicas - have), finished + surplus, status)


@dataclass(frozen=True)
class ReplicaSetView:
    """What the Deployment core needs of one owned ReplicaSet."""

    name: str
    template_hash: str
    spec_replicas: int
    replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0


@dataclass(frozen=True)
class DeploymentStatus:
    replicas: int
    updated_replicas: int
    ready_replicas: int
    available_replicas: int
    observed_generation: int

    def as_dict(self) -> Obj:
        return {"replicas": self.replicas, "updatedReplicas": self.updated_replicas,
                "readyReplicas": self.ready_replicas, "availableReplicas": self.available_replicas,
                "observedGeneration": self.observed_generation}


@dataclass(frozen=True)
class DeploymentPlan:
    create: bool
    """Create the ReplicaSet of the current template hash (at full scale)."""
    scale: tuple[tuple[str, int], ...] = field(default=())
    """(ReplicaSet name, replicas) to write: the current one to the Deployment's scale, old ones to 0."""
    status: DeploymentStatus = DeploymentStatus(0, 0, 0, 0, 0)


def plan_deployment(replicas: int, generation: int, current_hash: str,
                    owned: Sequence[ReplicaSetView]) -> DeploymentPlan:
    """One ReplicaSet per template hash; the current one at ``replicas``, the rest at 0 (minimal rollout)."""
    current = next((rs for rs in owned if rs.template_hash == current_hash), None)
    scale = []
    if current is not None and current.spec_replicas != replicas:
        scale.append((current.name, replicas))
    scale += [(rs.name, 0) for rs in owned if rs is not current and rs.spec_replicas != 0]
    status = DeploymentStatus(sum(rs.replicas for rs in owned), current.replicas if current else 0,
                              sum(rs.ready_replicas for rs in owned), sum(rs.available_replicas for rs in owned),
                              generation)
    return DeploymentPlan(current is None, tuple(scale), status)


def template_hash(template: Obj) -> str:
    """A stable, label-safe hash of a pod template (10 lowercase hex characters)."""
    canonical = json.dumps(template or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


# ======================================================================== glue
def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def controller_uid(obj: Obj, kind: str) -> str | None:
    """The uid of ``obj``'s controlling owner of ``kind``, if any."""
    for o in obj["metadata"].get("ownerReferences") or []:
        if o.get("kind") == kind and o.get("controller") and o.get("apiVersion", "").startswith("apps/"):
            return str(o.get("uid"))
    return None


def owner_ref(obj: Obj, rt: ResourceType) -> Obj:
    return {"apiVersion": rt.api_version, "kind": rt.kind, "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _path(rt: ResourceType, obj: Obj, sub: str | None = None) -> str:
    meta = obj["metadata"]
    return resource_path(rt.group, rt.version, rt.plural, meta.get("namespace", "default"), meta["name"], sub)


def _delete(client: RestClient, rt: ResourceType, obj: Obj) -> bool:
    meta = obj["metadata"]
    try:
        client.delete(_path(rt, obj), {"apiVersion": "v1", "kind": "DeleteOptions",
                                       "preconditions": {"uid": meta.get("uid")}})
    except ApiStatusError as exc:
        if exc.not_found or exc.conflict:
            return True
        log.info("could not delete %s %s: %s", rt.kind, meta["name"], exc)
        return False
    except ApiUnreachable as exc:
        log.info("could not delete %s %s: %s", rt.kind, meta["name"], exc)
        return False
    return True


class ReplicaSetController:
    name = "replicaset"
    watches = (REPLICASETS, PODS)
    resync = 1.0

    def __init__(self, client: RestClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._created: dict[str, dict[str, float]] = {}  # rs uid -> {pod name: when created}
        self._deleted: set[str] = set()                   # pod uids this controller deleted

    def reconcile(self, cache: Cache) -> None:
        by_owner: dict[str, list[Obj]] = {}
        for pod in cache.list(PODS):
            uid = controller_uid(pod, "ReplicaSet")
            if uid:
                by_owner.setdefault(uid, []).append(pod)
        sets = {rs["metadata"]["uid"]: rs for rs in cache.list(REPLICASETS)}
        for uid, rs in sets.items():
            try:
                self.sync(rs, by_owner.get(uid, []))
            except (ApiStatusError, ApiUnreachable) as exc:
                log.info("replicaset %s: %s (retrying)", rs["metadata"]["name"], exc)
        for uid, pods in by_owner.items():
            if uid not in sets:
                for pod in pods:
                    if not pod["metadata"].get("deletionTimestamp") and pod["metadata"].get("uid") not in self._deleted:
                        if _delete(self.client, PODS, pod):
                            self._deleted.add(pod["metadata"].get("uid", ""))
        for uid in [u for u in self._created if u not in sets]:
            del self._created[uid]
        live = {p["metadata"].get("uid") for ps in by_owner.values() for p in ps}
        self._deleted &= live

    def sync(self, rs: Obj, pods: list[Obj]) -> None:
        meta, spec = rs["metadata"], rs.get("spec") or {}
        uid = meta["uid"]
        seen = {p["metadata"]["name"] for p in pods}
        now = self.clock()
        expected = {n: t for n, t in self._created.get(uid, {}).items()
                    if n not in seen and now - t < EXPECTATION_TIMEOUT}
        self._created[uid] = expected
        views = [PodView(p["metadata"]["name"], p["metadata"].get("uid", ""),
                         (p.get("status") or {}).get("phase") or "Pending", pod_ready(p),
                         bool(p["metadata"].get("deletionTimestamp")) or p["metadata"].get("uid") in self._deleted,
                         p["metadata"].get("creationTimestamp") or "") for p in pods]
        plan = plan_replicaset(_int(spec.get("replicas"), 1), _int(meta.get("generation"), 1), views, len(expected))
        by_name = {p["metadata"]["name"]: p for p in pods}
        for name in plan.delete:
            if _delete(self.client, PODS, by_name[name]):
                self._deleted.add(by_name[name]["metadata"].get("uid", ""))
        for _ in range(plan.create):
            created = self.client.create(resource_path("", "v1", "pods", meta.get("namespace", "default")),
                                         build_pod(rs))
            expected[created["metadata"]["name"]] = now
            log.info("replicaset %s: created pod %s", meta["name"], created["metadata"]["name"])
        wanted = plan.status.as_dict()
        status = rs.get("status") or {}
        if any(status.get(k) != v for k, v in wanted.items()):
            self.client.patch(_path(REPLICASETS, rs, "status"), {"status": wanted}, MERGE_PATCH)


def build_pod(rs: Obj) -> Obj:
    """A pod of ``rs``: its template, ``generateName: <rs>-``, an owner reference to it."""
    template = (rs.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    meta: Obj = {"generateName": f"{rs['metadata']['name']}-", "namespace": rs["metadata"].get("namespace", "default"),
                 "labels": dict(tmeta.get("labels") or {}), "ownerReferences": [owner_ref(rs, REPLICASETS)]}
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    spec = copy.deepcopy(template.get("spec") or {})
    spec.pop("nodeName", None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class DeploymentController:
    name = "deployment"
    watches = (DEPLOYMENTS, REPLICASETS)
    resync = 2.0

    def __init__(self, client: RestClient) -> None:
        self.client = client

    def reconcile(self, cache: Cache) -> None:
        by_owner: dict[str, list[Obj]] = {}
        for rs in cache.list(REPLICASETS):
            uid = controller_uid(rs, "Deployment")
            if uid:
                by_owner.setdefault(uid, []).append(rs)
        deployments = {d["metadata"]["uid"]: d for d in cache.list(DEPLOYMENTS)}
        for uid, d in deployments.items():
            try:
                self.sync(d, by_owner.get(uid, []))
            except (ApiStatusError, ApiUnreachable) as exc:
                log.info("deployment %s: %s (retrying)", d["metadata"]["name"], exc)
        for uid, sets in by_owner.items():
            if uid not in deployments:
                for rs in sets:
                    if not rs["metadata"].get("deletionTimestamp"):
                        _delete(self.client, REPLICASETS, rs)

    def sync(self, d: Obj, sets: list[Obj]) -> None:
        meta, spec = d["metadata"], d.get("spec") or {}
        h = template_hash(spec.get("template") or {})
        views = [ReplicaSetView(rs["metadata"]["name"], (rs["metadata"].get("labels") or {}).get(TEMPLATE_HASH, ""),
                                _int((rs.get("spec") or {}).get("replicas"), 0),
                                _int((rs.get("status") or {}).get("replicas"), 0),
                                _int((rs.get("status") or {}).get("readyReplicas"), 0),
                                _int((rs.get("status") or {}).get("availableReplicas"), 0)) for rs in sets]
        replicas = _int(spec.get("replicas"), 1)
        plan = plan_deployment(replicas, _int(meta.get("generation"), 1), h, views)
        by_name = {rs["metadata"]["name"]: rs for rs in sets}
        if plan.create:
            try:
                self.client.create(resource_path(REPLICASETS.group, REPLICASETS.version, REPLICASETS.plural,
                                                 meta.get("namespace", "default")), build_replicaset(d, h))
                log.info("deployment %s: created replicaset %s-%s (%d replicas)", meta["name"], meta["name"], h,
                         replicas)
            except ApiStatusError as exc:
                if not exc.conflict:
                    raise
        for name, n in plan.scale:
            self.client.patch(_path(REPLICASETS, by_name[name]), {"spec": {"replicas": n}}, MERGE_PATCH)
            log.info("deployment %s: scaled replicaset %s to %d", meta["name"], name, n)
        wanted = plan.status.as_dict()
        status = d.get("status") or {}
        if any(status.get(k) != v for k, v in wanted.items()):
            self.client.patch(_path(DEPLOYMENTS, d, "status"), {"status": wanted}, MERGE_PATCH)


def build_replicaset(d: Obj, h: str) -> Obj:
    """The ReplicaSet ``<deployment>-<hash>`` of ``d``'s current template, labelled with the hash."""
    meta, spec = d["metadata"], d.get("spec") or {}
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), TEMPLATE_HASH: h}
    selector = copy.deepcopy(spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), TEMPLATE_HASH: h}
    return {"apiVersion": REPLICASETS.api_version, "kind": "ReplicaSet",
            "metadata": {"name": f"{meta['name']}-{h}", "namespace": meta.get("namespace", "default"),
                         "labels": {**(tmeta["labels"])}, "ownerReferences": [owner_ref(d, DEPLOYMENTS)]},
            "spec": {"replicas": _int(spec.get("replicas"), 1), "selector": selector, "template": template}}
