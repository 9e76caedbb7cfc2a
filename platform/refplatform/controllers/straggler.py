"""The straggler controller: names the node of a rank that runs slow, and moves the rank.

Each pass reads, for every running training rank (a pod of a Volcano job), the per-rank timing its node's agent
publishes from the workload's own step lines (``firedrill.dev/compute-seconds``; ``firedrill.dev/step-seconds``
for the ``accuse-the-healthy`` defect) and hands the snapshot with ``now`` to the pure decision
(:func:`refplatform.core.straggler.detect`).  For each rank it names, once:

1. **taints** its node ``firedrill.dev/straggler=<GPU indexes>:NoSchedule`` and records a Warning Event
   ``StragglerDetected`` on the Node: nothing new lands on that node, while the node's other pods (other jobs,
   on GPUs that may be healthy) keep running.  NoSchedule and not NoExecute: a throttled GPU fails nobody, so
   evicting the node's other workloads would turn one slow GPU into lost work for every job there;
2. **evicts** the slow rank's pod (``DisruptionTarget`` reason ``StragglerEviction``, then a graceful delete):
   its job's controller restarts the job from its last checkpoint (``PodEvicted: RestartJob``) and the scheduler
   places the rank off the tainted node, so the job gets its speed back.

3. **gives the node back** once its agent, having reported a GPU held below full clock while the node was named
   (``firedrill.dev/throttled-gpus``, as DCGM's clock throttle reasons would say), reports every GPU at full clock
   again for the detector's sustain time: it removes the taint and records a Normal ``StragglerCleared`` Event (the
   rule is :func:`refplatform.core.straggler.release`).  A GPU still held down keeps its node named, however long;
   a node named for a slowness its clocks never showed keeps its taint until a person clears it.

With the ``no-straggler-detection`` defect the controller never names anything; with ``straggler-eviction-lost`` it
names the node and marks the pod but never deletes it; with ``straggler-taint-stays`` it never gives a named node
back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from refplatform.client import MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.controllers.events import EventRecorder
from refplatform.controllers.manager import Cache
from refplatform.controllers.nodeinfo import rfc3339
from refplatform.core.straggler import (COMPUTE_SECONDS_ANNOTATION, DetectorState, RankTiming, ReleaseState,
                                        Suspect, Thresholds, detect, release)
from refplatform.gpu.throttle import THROTTLED_ANNOTATION
from refplatform.resources import NODES, PODS

__all__ = ["STRAGGLER_TAINT", "StragglerController"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]

STRAGGLER_TAINT = "firedrill.dev/straggler"
"""The taint key that names a straggler's node (value: the slow rank's GPU indexes)."""
STRAGGLER_REASON = "StragglerDetected"
CLEARED_REASON = "StragglerCleared"
JOB_NAME_LABEL = "volcano.sh/job-name"
STEP_SECONDS_ANNOTATION = "firedrill.dev/step-seconds"
GPU_INDEX_ANNOTATION = "firedrill.dev/gpu-index"


def _seconds(value: Any) -> float | None:
    try:
        out = float(str(value))
    except (TypeError, ValueError):
        return None
    return out if out >= 0 else None


def rank_timings(pods: list[Obj]) -> list[RankTiming]:
    """The snapshot: every running, not deleting, bound pod of a Volcano job, with what its agent published."""
    out = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
        if (not job or meta.get("deletionTimestamp") or not spec.get("nodeName")
                or (pod.get("status") or {}).get("phase") != "Running"):
            continue
        ns = meta.get("namespace") or "default"
        annotations = meta.get("annotations") or {}
        out.append(RankTiming(f"{ns}/{job}", str(meta.get("uid") or ""), f"{ns}/{meta.get('name')}",
                              spec["nodeName"], _seconds(annotations.get(COMPUTE_SECONDS_ANNOTATION)),
                              _seconds(annotations.get(STEP_SECONDS_ANNOTATION))))
    return out


class StragglerController:
    name = "straggler"
    watches = (NODES, PODS)

    def __init__(self, client: RestClient, *, thresholds: Thresholds = Thresholds(), period: float = 0.5,
                 clock: Callable[[], float] = time.time, no_detection: bool = False,
                 accuse_by_history: bool = False, eviction_lost: bool = False, taint_stays: bool = False) -> None:
        """``no_detection``: the ``no-straggler-detection`` defect; ``accuse_by_history``: ``accuse-the-healthy``;
        ``eviction_lost``: ``straggler-eviction-lost``; ``taint_stays``: ``straggler-taint-stays``."""
        self.client = client
        self.thresholds = thresholds
        self.clock = clock
        self.no_detection = no_detection
        self.accuse_by_history = accuse_by_history
        self.eviction_lost = eviction_lost
        self.taint_stays = taint_stays
        self._release = ReleaseState()
        """What the give-back rule carries from one pass to the next."""
        self.resync = period
        self.events = EventRecorder(client, "straggler-detector",
                                    clock=lambda: datetime.fromtimestamp(self.clock(), timezone.utc))
        self.state = DetectorState()
        self._acted: set[str] = set()
        """Pod uids already named and evicted."""

    def reconcile(self, cache: Cache) -> None:
        if self.no_detection:
            return
        now = self.clock()
        pods = cache.list(PODS)
        named, self.state = detect(rank_timings(pods), self.state, now, self.thresholds,
                                   accuse_by_history=self.accuse_by_history)
        live = {str((p.get("metadata") or {}).get("uid") or "") for p in pods}
        self._acted &= live
        by_uid = {str((p.get("metadata") or {}).get("uid") or ""): p for p in pods}
        for suspect in named:
            if suspect.pod in self._acted:
                continue
            node = cache.get(NODES, "", suspect.node)
            pod = by_uid.get(suspect.pod)
            if node is None or pod is None:
                continue
            if self._taint(node, pod, suspect, now):
                self._evict(pod, suspect, now)
                self._acted.add(suspect.pod)
        if not self.taint_stays:
            self._give_back(cache, now)

    def _give_back(self, cache: Cache, now: float) -> None:
        """Untaint each named node whose agent has reported every GPU at full clock for the detector's sustain time
        (:func:`refplatform.core.straggler.release`), with a Normal ``StragglerCleared`` Event."""
        named = {n["metadata"]["name"]: n for n in cache.list(NODES) if _named(n)}
        clear = {name: not ((n["metadata"].get("annotations") or {}).get(THROTTLED_ANNOTATION))
                 for name, n in named.items()}
        back, self._release = release(clear, self._release, now, self.thresholds)
        for name in back:
            node = named[name]
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)
                      and t.get("key") != STRAGGLER_TAINT]
            if not self._set_taints(node, taints, "give back"):
                continue
            self.events.record(node, "Node", "Normal", CLEARED_REASON,
                               f"Node {name} reports every GPU at full clock again for "
                               f"{self.thresholds.sustain_s:g} s: its straggler taint is removed",
                               action="Untaint", when=datetime.fromtimestamp(now, timezone.utc))

    def _set_taints(self, node: Obj, taints: list[Obj], why: str) -> bool:
        """Write the node's taints (guarded by the resourceVersion the cache saw); False, logged, when refused."""
        meta = node["metadata"]
        try:
            self.client.patch(resource_path("", "v1", "nodes", None, meta["name"]),
                              {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                               "spec": {"taints": taints}}, MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("could not %s straggler node %s: %s", why, meta["name"], exc)
            return False
        return True

    def _taint(self, node: Obj, pod: Obj, suspect: Suspect, now: float) -> bool:
        gpus = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX_ANNOTATION) or ""
        value = "gpu-" + gpus.replace(",", "-") if gpus else "unknown-gpu"
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
        if not _named(node) and not self._set_taints(node, taints + [{
                "key": STRAGGLER_TAINT, "value": value, "effect": "NoSchedule", "timeAdded": rfc3339(now)}], "taint"):
            return False
        self.events.record(node, "Node", "Warning", STRAGGLER_REASON,
                           f"Node {suspect.node} runs a straggler ({value}): {suspect.reason(self.thresholds)}",
                           action="Taint", when=datetime.fromtimestamp(now, timezone.utc))
        log.warning("straggler on %s: %s", suspect.node, suspect.reason(self.thresholds))
        return True

    def _evict(self, pod: Obj, suspect: Suspect, now: float) -> None:
        meta = pod["metadata"]
        ns, name = meta.get("namespace", "default"), meta["name"]
        path = resource_path("", "v1", "pods", ns, name)
        try:
            self.client.patch(path + "/status", {"status": {"conditions": [{
                "type": "DisruptionTarget", "status": "True", "reason": "StragglerEviction",
                "message": f"Straggler detector: {suspect.reason(self.thresholds)}",
                "lastTransitionTime": rfc3339(now)}]}}, STRATEGIC_MERGE_PATCH)
            if self.eviction_lost:
                return
            self.client.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                      "preconditions": {"uid": meta.get("uid", "")}})
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("could not evict straggler %s/%s: %s", ns, name, exc)


def _named(node: Obj) -> bool:
    """The node carries the straggler taint."""
    taints = (node.get("spec") or {}).get("taints") or []
    return any(isinstance(t, dict) and t.get("key") == STRAGGLER_TAINT for t in taints)
