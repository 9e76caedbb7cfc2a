"""The ``batch/v1`` Job controller: each Job and its pods -> :func:`refplatform.core.batchjob.plan`, then the
writes, in upstream's order: the Job's status (which records the pods it counts), the pods' job-tracking
finalizers removed, surplus or ended pods deleted, new pods created.

Pods are ``<job>-<index>-<random>`` (Indexed) or ``<job>-<random>``, with the template's labels and
annotations plus ``batch.kubernetes.io/controller-uid``, ``batch.kubernetes.io/job-name`` (and the legacy
``controller-uid``, ``job-name``); an Indexed pod also gets ``batch.kubernetes.io/job-completion-index`` as
annotation and label, ``spec.hostname`` ``<job>-<index>``, the ``JOB_COMPLETION_INDEX`` environment variable
in every container (from that annotation, as upstream injects it), and the index's failure counts.  Each pod
has the Job as controlling owner and the ``batch.kubernetes.io/job-tracking`` finalizer.  Pods whose Job is
gone lose the finalizer and are deleted (the garbage collector's part).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from refplatform import jsoncodec
from refplatform.client import ApiStatusError, ApiUnreachable, MERGE_PATCH, RestClient, resource_path
from refplatform.controllers.manager import Cache
from refplatform.core.batchjob import (
    COMPLETION_INDEX, INDEX_FAILURE_COUNT, INDEX_IGNORED_FAILURE_COUNT, TRACKING_FINALIZER, Clock, NewPod, PodView,
    plan,
)
from refplatform.resources import JOBS, PODS

log = logging.getLogger(__name__)
Obj = dict[str, Any]
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"


def _time(text: Any) -> float | None:
    """An RFC 3339 time as seconds since the epoch."""
    if not isinstance(text, str) or not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _finished_at(pod: Obj) -> float | None:
    """When a pod that failed finished, as upstream's ``getFinishedTime`` reads it: the last of its containers'
    ``finishedAt`` when every container terminated; else when its Ready condition turned False (the node
    lifecycle marks the pods of a lost node not ready); else when its deletion was asked; else its creation."""
    status, meta = pod.get("status") or {}, pod["metadata"]
    containers = status.get("containerStatuses") or []
    ends = [_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt")) for c in containers]
    if containers and all(e is not None for e in ends):
        return max(e for e in ends if e is not None)
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "False" and _time(ready.get("lastTransitionTime")) is not None:
        return _time(ready.get("lastTransitionTime"))
    deleted = _time(meta.get("deletionTimestamp"))
    if deleted is not None:
        return deleted - int(meta.get("deletionGracePeriodSeconds") or 0)
    return _time(meta.get("creationTimestamp"))


def pod_view(pod: Obj) -> PodView:
    meta, status = pod["metadata"], pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    index = annotations.get(COMPLETION_INDEX)
    codes = tuple((c.get("name", ""), int(((c.get("state") or {}).get("terminated") or {}).get("exitCode", 0)))
                  for c in status.get("containerStatuses") or [] if (c.get("state") or {}).get("terminated"))
    conditions = tuple((c.get("type", ""), c.get("status", "")) for c in status.get("conditions") or [])
    return PodView(name=meta["name"], uid=meta.get("uid", ""), phase=status.get("phase", "Pending"),
                   index=int(index) if isinstance(index, str) and index.isdigit() else None,
                   deleting=bool(meta.get("deletionTimestamp")),
                   tracked=TRACKING_FINALIZER in (meta.get("finalizers") or []), finished_at=_finished_at(pod),
                   index_failures=int(annotations.get(INDEX_FAILURE_COUNT, "0") or 0),
                   index_ignored=int(annotations.get(INDEX_IGNORED_FAILURE_COUNT, "0") or 0),
                   exit_codes=codes, conditions=conditions, ready=("Ready", "True") in conditions)


def build_pod(job: Obj, new: NewPod) -> Obj:
    meta, spec = job["metadata"], job.get("spec") or {}
    template = jsoncodec.clone(spec.get("template") or {})
    tmeta = template.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), CONTROLLER_UID: meta["uid"], JOB_NAME: meta["name"],
              "controller-uid": meta["uid"], "job-name": meta["name"]}
    annotations = dict(tmeta.get("annotations") or {})
    pod_spec = template.get("spec") or {}
    name = f"{meta['name']}-"
    if new.index is not None:
        index = str(new.index)
        labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = index
        if spec.get("backoffLimitPerIndex") is not None:
            annotations[INDEX_FAILURE_COUNT] = str(new.index_failures)
            if new.index_ignored:
                annotations[INDEX_IGNORED_FAILURE_COUNT] = str(new.index_ignored)
        name = f"{meta['name']}-{index}-"
        pod_spec.setdefault("hostname", f"{meta['name']}-{index}")
        env = {"name": "JOB_COMPLETION_INDEX",
               "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}
        for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
            if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in container.get("env") or []):
                container["env"] = [*(container.get("env") or []), env]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": name, "namespace": meta.get("namespace", "default"), "labels": labels,
                         "annotations": annotations, "ownerReferences": [owner],
                         "finalizers": [TRACKING_FINALIZER]},
            "spec": pod_spec}


class JobController:
    name = "job"
    watches = (JOBS, PODS)
    resync = 1.0
    """Back-offs end between events: a look every second starts a replacement within a second of its time."""

    def __init__(self, client: RestClient, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.clock = clock
        self._pods_to_collect = True
        """Look at the pods next time: a Job or a pod of a gone Job was seen at the last look (and at start)."""

    def reconcile(self, cache: Cache) -> None:
        jobs = {j["metadata"]["uid"]: j for j in cache.list(JOBS)}
        if not jobs and not self._pods_to_collect:
            return  # no Job now or at the last look, no pod of one left: nothing to do (pods change all the time)
        owned: dict[str, list[Obj]] = {}
        for pod in cache.list(PODS):
            uid = (pod["metadata"].get("labels") or {}).get(CONTROLLER_UID)
            if uid:
                owned.setdefault(uid, []).append(pod)
        now = self.clock()
        stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for uid, job in jobs.items():
            try:
                self.sync(job, owned.get(uid, []), Clock(now, stamp, _time((job.get("status") or {}).get("startTime"))))
            except ApiUnreachable as exc:
                log.info("job %s/%s: %s", job["metadata"].get("namespace"), job["metadata"]["name"], exc)
            except ApiStatusError as exc:
                if not exc.conflict:
                    log.info("job %s/%s: %s", job["metadata"].get("namespace"), job["metadata"]["name"], exc)
        orphans = [pod for uid, pods in owned.items() if uid not in jobs for pod in pods]
        for pod in orphans:
            self._orphan(pod)
        self._pods_to_collect = bool(orphans or jobs)  # a Job seen now may be gone, its pods left, next time

    def sync(self, job: Obj, pods: list[Obj], clock: Clock) -> None:
        meta = job["metadata"]
        ns, name = meta.get("namespace", "default"), meta["name"]
        by_name = {p["metadata"]["name"]: p for p in pods}
        decided = plan(job, [pod_view(p) for p in pods], clock)
        if decided.status != (job.get("status") or {}):
            self.client.patch(resource_path("batch", "v1", "jobs", ns, name, "status"),
                              {"status": decided.status}, MERGE_PATCH)
        for pod_name in decided.untrack:
            self._untrack(by_name[pod_name])
        for pod_name in decided.delete:
            try:
                self.client.delete(resource_path("", "v1", "pods", ns, pod_name))
            except ApiStatusError as exc:
                if exc.code != 404:
                    raise
        for new in decided.create:
            self.client.create(resource_path("", "v1", "pods", ns), build_pod(job, new))

    def _untrack(self, pod: Obj) -> None:
        meta = pod["metadata"]
        rest = [f for f in meta.get("finalizers") or [] if f != TRACKING_FINALIZER]
        try:
            self.client.patch(resource_path("", "v1", "pods", meta.get("namespace", "default"), meta["name"]),
                              {"metadata": {"finalizers": rest or None}}, MERGE_PATCH)
        except ApiStatusError as exc:
            if exc.code != 404:
                raise

    def _orphan(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            if TRACKING_FINALIZER in (meta.get("finalizers") or []):
                self._untrack(pod)
            if not meta.get("deletionTimestamp"):
                self.client.delete(resource_path("", "v1", "pods", meta.get("namespace", "default"), meta["name"]))
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("orphan pod %s: %s", meta["name"], exc)
