"""The progress watchdog: names a training job that hangs (no progress, no crash) and restarts it.

Only Volcano Jobs (``batch.volcano.sh/v1alpha1``) that carry ``firedrill.dev/progress-timeout-seconds`` are
watched; every other job is never read past that annotation.  Each pass takes, for every such job, its
non-terminal pods (label ``volcano.sh/job-name``) with what their node's agent published from the workload's own
log lines (``firedrill.dev/step``, ``firedrill.dev/activity``, ``firedrill.dev/stalled-on``; docs/PROGRESS.md)
and hands the snapshot with ``now`` to the pure decision (:func:`refplatform.core.progress.watch`).  For each job
it names, once per hang:

1. records a Warning Event ``ProgressStalled`` on the Job, naming the job, the step it stopped at, the threshold
   and the rank that stopped first (or ``unknown``);
2. marks every pod of the job ``DisruptionTarget`` (reason ``ProgressStalled``) and deletes it gracefully: the
   Job's ``PodEvicted: RestartJob`` policy restarts the whole job from its last checkpoint, as the canary's job
   carries it.  Every rank goes, not only the one that stopped first: a rank stuck in a kernel holds its peers'
   collective, and a restart of one rank alone does not rejoin a job whose other ranks are mid-step.

No condition is written on the Job: Volcano's ``JobCondition`` has only ``status`` (a job phase) and
``lastTransitionTime``, no ``type`` or ``reason`` (the upstream CRD prunes anything else), and the Volcano job
controller appends to that list on every phase change from its own copy.  The Event and the pods'
``DisruptionTarget`` conditions are the platform's word.

With the ``no-hang-detection`` defect the controller never names or restarts anything; with ``restart-on-pause``
it ignores the declared activity, so a long checkpoint (or a storage stall during one) reads as a hang and the
job is restarted under its writer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from refplatform.client import STRATEGIC_MERGE_PATCH, ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.controllers.events import EventRecorder
from refplatform.controllers.manager import Cache
from refplatform.controllers.nodeinfo import rfc3339
from refplatform.controllers.vcjob import job_spec_of
from refplatform.core.progress import (ACTIVITY_ANNOTATION, PROGRESS_TIMEOUT_ANNOTATION, STALLED_ON_ANNOTATION, Hang,
                                       JobProgress, RankProgress, WatchState, parse_ranks, parse_timeout, renamable,
                                       watch)
from refplatform.core.usage import ANN_STEP
from refplatform.resources import PODS, VCJOBS

__all__ = ["PROGRESS_STALLED_REASON", "ProgressController", "job_progress"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]

PROGRESS_STALLED_REASON = "ProgressStalled"
"""The Warning Event's reason on the Job, and the reason of the ``DisruptionTarget`` condition on its pods."""
JOB_NAME_LABEL = "volcano.sh/job-name"
TASK_INDEX = "volcano.sh/task-index"
RANK_ANNOTATION = "firedrill.dev/rank"
_TERMINAL = ("Succeeded", "Failed")


def _int(value: Any) -> int | None:
    try:
        out = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return out if out >= 0 else None


def _rank(meta: Obj) -> int | None:
    """The pod's rank: ``volcano.sh/task-index`` (annotation, then label), else ``firedrill.dev/rank``."""
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    for raw in (annotations.get(TASK_INDEX), labels.get(TASK_INDEX), annotations.get(RANK_ANNOTATION)):
        if raw is not None and (value := _int(raw)) is not None:
            return value
    return None


def _owned_by(pod: Obj, uid: str) -> bool:
    """Not owned by another Volcano Job (a pod without an owner reference is taken by its label alone)."""
    owners = [o.get("uid") for o in (pod.get("metadata") or {}).get("ownerReferences") or []
              if isinstance(o, dict) and o.get("kind") == "Job"
              and str(o.get("apiVersion", "")).startswith("batch.volcano.sh/")]
    return not owners or uid in owners


def job_progress(job: Obj, pods: list[Obj]) -> JobProgress | None:
    """The snapshot of one Job (None when it does not opt in): its non-terminal pods with what their agents
    published.  ``pods``: any pods; those of the job are picked by label, namespace and owner."""
    meta = job.get("metadata") or {}
    timeout = parse_timeout((meta.get("annotations") or {}).get(PROGRESS_TIMEOUT_ANNOTATION))
    if timeout is None:
        return None
    ns, name, uid = meta.get("namespace") or "default", meta.get("name") or "", str(meta.get("uid") or "")
    ranks = []
    for pod in pods:
        pmeta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if ((pmeta.get("labels") or {}).get(JOB_NAME_LABEL) != name or (pmeta.get("namespace") or "default") != ns
                or status.get("phase") in _TERMINAL or not _owned_by(pod, uid)):
            continue
        annotations = pmeta.get("annotations") or {}
        running = (status.get("phase") == "Running" and bool(spec.get("nodeName"))
                   and not pmeta.get("deletionTimestamp"))
        ranks.append(RankProgress(str(pmeta.get("uid") or ""), f"{ns}/{pmeta.get('name')}", _rank(pmeta), running,
                                  _int(annotations.get(ANN_STEP)), annotations.get(ACTIVITY_ANNOTATION) or None,
                                  parse_ranks(annotations.get(STALLED_ON_ANNOTATION))))
    ranks.sort(key=lambda r: r.name)
    return JobProgress(f"{ns}/{name}", uid, timeout, job_spec_of(job).min_available_or_all,
                       tuple(ranks))


class ProgressController:
    name = "progress"
    watches = (VCJOBS,)
    reads = (PODS,)
    """Pods are read, not watched: a hang is a matter of time passing, which the resync covers; waking on every
    pod's progress annotation would only repeat the same decision."""

    def __init__(self, client: RestClient, *, period: float = 0.5, clock: Callable[[], float] = time.time,
                 no_detection: bool = False, ignore_activity: bool = False) -> None:
        """``period``: longest wait between two passes (seconds; a hang is named at most this late);
        ``no_detection``: the ``no-hang-detection`` defect; ``ignore_activity``: ``restart-on-pause``."""
        self.client = client
        self.clock = clock
        self.no_detection = no_detection
        self.ignore_activity = ignore_activity
        self.resync = period
        self.events = EventRecorder(client, "progress-watchdog",
                                    clock=lambda: datetime.fromtimestamp(self.clock(), timezone.utc))
        self.state = WatchState()

    def reconcile(self, cache: Cache) -> None:
        if self.no_detection:
            return
        jobs = [j for j in cache.list(VCJOBS)
                if PROGRESS_TIMEOUT_ANNOTATION in ((j.get("metadata") or {}).get("annotations") or {})]
        if not jobs and not self.state.jobs:
            return
        pods = cache.list(PODS) if jobs else []
        snapshots, by_uid = [], {}
        for job in jobs:
            snap = job_progress(job, pods)
            if snap is not None:
                snapshots.append(snap)
                by_uid[snap.uid] = job
        now = self.clock()
        hangs, self.state = watch(snapshots, self.state, now, ignore_activity=self.ignore_activity)
        if not hangs:
            return
        pods_by_uid = {str((p.get("metadata") or {}).get("uid") or ""): p for p in pods}
        for hang in hangs:
            if not self._act(by_uid[hang.uid], hang, [pods_by_uid[u] for u in hang.pods if u in pods_by_uid], now):
                self.state = renamable(self.state, hang.uid)

    def _act(self, job: Obj, hang: Hang, pods: list[Obj], now: float) -> bool:
        """Name the hang and restart the job; False when no pod's deletion went through (named again next pass)."""
        message = hang.message()
        log.warning("%s", message)
        self.events.record(job, "Job", "Warning", PROGRESS_STALLED_REASON, message, action="RestartJob",
                           when=datetime.fromtimestamp(now, timezone.utc))
        evicted = [self._evict(pod, message, now) for pod in pods]
        return any(evicted)

    def _evict(self, pod: Obj, message: str, now: float) -> bool:
        meta = pod["metadata"]
        ns, name = meta.get("namespace", "default"), meta["name"]
        path = resource_path("", "v1", "pods", ns, name)
        try:
            self.client.patch(path + "/status", {"status": {"conditions": [{
                "type": "DisruptionTarget", "status": "True", "reason": PROGRESS_STALLED_REASON,
                "message": f"Progress watchdog: {message}", "lastTransitionTime": rfc3339(now)}]}},
                STRATEGIC_MERGE_PATCH)
            self.client.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                      "preconditions": {"uid": meta.get("uid", "")}})
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("could not evict hung rank %s/%s: %s", ns, name, exc)
            return False
        return True
