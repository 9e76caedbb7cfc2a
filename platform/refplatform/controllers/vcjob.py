"""The Volcano Job controller: ``batch.volcano.sh/v1alpha1`` Jobs -> a PodGroup and one pod per rank.

Each reconcile turns every Job and its pods into the pure core's terms and
asks :func:`refplatform.core.vcjob.plan_job` what to do, then writes it, in
this order:

1. the restart epoch, when the plan bumps it: a JSON patch on the Job's
   annotation ``firedrill.dev/epoch`` that *tests* the old value first, so two
   writers never both restart and rank 0's fenced checkpoint writes of the old
   epoch fail from that instant on;
2. the Job's ``/status`` (Volcano's ``state.phase``, ``retryCount``, counts,
   ``minAvailable``, ``version`` = the epoch, ``taskStatusCount``);
3. a ``RestartJob`` (or other action) Event on the Job;
4. pod deletions: grace 0 for a pod on a lost node (nobody is left there to
   finish a graceful deletion; an ``Evicted`` Event), graceful otherwise (a
   ``Killing`` Event);
5. pod creations for the ranks that are missing.

The Job object is only ever *patched* (the epoch annotation, the status
subresource), never PUT from a cached copy, so the checkpoint record that rank
0 keeps on the Job (``firedrill.dev/checkpoint-step``/``-time``) is never lost.

Pods: ``<job>-<task>-<index>`` with labels ``volcano.sh/job-name``,
``volcano.sh/task-spec`` (plus ``volcano.sh/job-namespace``,
``volcano.sh/queue-name``), annotations ``scheduling.k8s.io/group-name``,
``volcano.sh/task-index``, ``firedrill.dev/rank``, ``firedrill.dev/world-size``
(the job's minAvailable), ``firedrill.dev/epoch`` (plus
``volcano.sh/job-name``, ``volcano.sh/task-spec``, ``volcano.sh/job-version``),
over the task template's own; ``schedulerName`` from the Job; an owner
reference to the Job.  Pods and PodGroups whose Job is gone are deleted (the
garbage collector's part).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from refplatform.client import (
    ApiStatusError, ApiUnreachable, JSON_PATCH, MERGE_PATCH, RestClient, resource_path,
)
from refplatform.controllers.events import EventRecorder
from refplatform.controllers.manager import Cache
from refplatform.controllers.nodeinfo import newest, node_lost, rfc3339
from refplatform.core.vcjob import (
    JobAction, JobPhase, JobPlan, JobSpec, JobView, Policy, Rank, RankPod, TaskSpec, plan_job, ranks_of,
)
from refplatform.resources import NODES, PODGROUPS, PODS, VCJOBS
from refplatform.quantity import parse_quantity

log = logging.getLogger(__name__)
Obj = dict[str, Any]

EPOCH = "firedrill.dev/epoch"
RANK = "firedrill.dev/rank"
WORLD_SIZE = "firedrill.dev/world-size"
CHECKPOINT_STEP = "firedrill.dev/checkpoint-step"
CHECKPOINT_TIME = "firedrill.dev/checkpoint-time"
GROUP_NAME = "scheduling.k8s.io/group-name"
JOB_NAME = "volcano.sh/job-name"
JOB_NAMESPACE = "volcano.sh/job-namespace"
TASK_SPEC = "volcano.sh/task-spec"
TASK_INDEX = "volcano.sh/task-index"
JOB_VERSION = "volcano.sh/job-version"
QUEUE_NAME = "volcano.sh/queue-name"
_TERMINAL = ("Succeeded", "Failed")


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _policies(raw: Any) -> tuple[Policy, ...]:
    out = []
    for p in raw or []:
        if not isinstance(p, dict):
            continue
        events = tuple(e for e in ([p["event"]] if p.get("event") else []) + list(p.get("events") or []) if e)
        code = p.get("exitCode")
        out.append(Policy(events, JobAction.of(p.get("action")), code if isinstance(code, int) else None))
    return tuple(out)


def job_spec_of(job: Obj) -> JobSpec:
    spec = job.get("spec") or {}
    tasks = tuple(TaskSpec(t.get("name") or f"task{i}", max(0, _int(t.get("replicas"), 0)),
                           _policies(t.get("policies")))
                  for i, t in enumerate(spec.get("tasks") or []) if isinstance(t, dict))
    min_available = spec.get("minAvailable")
    return JobSpec(job["metadata"]["name"], tasks, min_available if isinstance(min_available, int) else None,
                   _int(spec.get("maxRetry"), 0), _policies(spec.get("policies")))


def _version(raw: Any) -> int | None:
    """A resourceVersion as a number, to tell which of two is newer (the reference API server's are counters;
    None for one that is not, and then nothing is compared)."""
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return None


def epoch_of(obj: Obj) -> int | None:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(EPOCH)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _exit_code(pod: Obj) -> int | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or {}
        if isinstance(terminated.get("exitCode"), int):
            return int(terminated["exitCode"])
    return None


def _sum_requests(specs: list[Obj]) -> dict[str, str]:
    total: dict[str, Decimal] = {}
    for spec in specs:
        for c in spec.get("containers") or []:
            res = c.get("resources") or {}
            for name, value in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
                try:
                    total[name] = total.get(name, Decimal(0)) + Decimal(parse_quantity(value))
                except (ValueError, TypeError):
                    continue
    out = {}
    for name, v in sorted(total.items()):
        out[name] = str(int(v)) if v == v.to_integral_value() else f"{int(v * 1000)}m"
    return out


class VolcanoJobController:
    name = "vcjob"
    watches = (VCJOBS, PODS, PODGROUPS, NODES)
    resync = 1.0

    def __init__(self, client: RestClient, clock: Callable[[], float] = time.time,
                 duplicate_rank: bool = False) -> None:
        """``duplicate_rank``: the ``duplicate-rank`` defect (a restarted job's last rank is created with rank 0's
        index, so the job runs rank 0 twice and never rank N-1)."""
        self.client = client
        self.clock = clock
        self.duplicate_rank = duplicate_rank
        self.events = EventRecorder(client, "vc-controller-manager",
                                    clock=lambda: datetime.fromtimestamp(self.clock(), timezone.utc))
        self._jobs: dict[str, Obj] = {}          # job uid -> the copy our last write returned
        self._deleting: set[str] = set()          # pod uids this controller deleted gracefully
        self._forced: set[str] = set()            # pod uids this controller deleted with grace 0
        self._seen: dict[str, dict[str, str]] = {}  # job uid -> {pod name: uid} seen in the current epoch
        self._seen_epoch: dict[str, int] = {}
        self._created: dict[str, int] = {}        # pod uid -> its resourceVersion when created (while tracked)

    # ------------------------------------------------------------------ cycle
    def reconcile(self, cache: Cache) -> None:
        nodes = {n["metadata"]["name"]: n for n in cache.list(NODES)}
        pods_by_owner: dict[str, list[Obj]] = {}
        for pod in cache.list(PODS):
            owner = next((o.get("uid") for o in pod["metadata"].get("ownerReferences") or []
                          if o.get("kind") == "Job" and o.get("apiVersion", "").startswith("batch.volcano.sh/")), None)
            if owner:
                pods_by_owner.setdefault(owner, []).append(pod)
        jobs = {}
        for cached in cache.list(VCJOBS):
            uid = cached["metadata"].get("uid", "")
            job = newest(cached, self._jobs.get(uid))
            assert job is not None
            jobs[uid] = job
            try:
                self.sync(job, pods_by_owner.get(uid, []), nodes, cache)
            except (ApiStatusError, ApiUnreachable) as exc:
                log.info("job %s/%s: %s (retrying)", job["metadata"].get("namespace"), job["metadata"]["name"], exc)
        self._collect_garbage(jobs, pods_by_owner, cache)
        for uid in [u for u in self._jobs if u not in jobs]:
            self._jobs.pop(uid, None)
            self._seen.pop(uid, None)
            self._seen_epoch.pop(uid, None)
        live = {p["metadata"].get("uid") for ps in pods_by_owner.values() for p in ps}
        self._deleting &= live
        self._forced &= live
        tracked = {u for seen in self._seen.values() for u in seen.values()}
        self._created = {u: v for u, v in self._created.items() if u in tracked}

    def sync(self, job: Obj, pods: list[Obj], nodes: dict[str, Obj], cache: Cache) -> None:
        meta = job["metadata"]
        ns, name, uid = meta.get("namespace", "default"), meta["name"], meta["uid"]
        epoch = epoch_of(job)
        if epoch is None:
            job = self._patch_job(job, {"metadata": {"annotations": {EPOCH: "0"}}}, MERGE_PATCH)
            epoch = 0
        spec = job_spec_of(job)
        status = job.get("status") or {}
        view = JobView(JobPhase.of((status.get("state") or {}).get("phase")), _int(status.get("retryCount"), 0), epoch)
        if cache.get(PODGROUPS, ns, name) is None and not (view.phase and view.phase.finished):
            self._ensure_pod_group(job, spec)
        rank_pods = [self._rank_pod(p, nodes) for p in pods]
        vanished = self._vanished(uid, epoch, rank_pods, _version(cache.resource_version(PODS)))
        plan = plan_job(spec, view, rank_pods, deleting=frozenset(self._deleting), vanished=vanished)
        self._apply(job, spec, view, plan, {p["metadata"]["name"]: p for p in pods})

    def _rank_pod(self, pod: Obj, nodes: dict[str, Obj]) -> RankPod:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName") or None
        epoch = epoch_of(pod)
        return RankPod(meta["name"], meta.get("uid", ""), -1 if epoch is None else epoch,
                       status.get("phase") or "Pending", bool(meta.get("deletionTimestamp")), node,
                       bool(node) and node_lost(nodes.get(node or "")), _exit_code(pod),
                       (meta.get("labels") or {}).get(TASK_SPEC) or (meta.get("annotations") or {}).get(TASK_SPEC, ""))

    def _vanished(self, job_uid: str, epoch: int, pods: list[RankPod], cache_version: int | None) -> list[str]:
        """Current-epoch pods seen before that are gone now, and not because this controller deleted them.  A pod
        this controller created that its cache has not caught up with yet (``cache_version`` older than the
        creation's) is not gone: its ADDED event is on its way (a loaded machine delays it past the next pass)."""
        if self._seen_epoch.get(job_uid) != epoch:
            self._seen_epoch[job_uid] = epoch
            self._seen[job_uid] = {}
        seen = self._seen[job_uid]
        present = {p.name: p.uid for p in pods if p.epoch == epoch}
        gone: list[str] = []
        pending: dict[str, str] = {}
        for name, uid in seen.items():
            if present.get(name) == uid or uid in self._deleting or uid in self._forced:
                continue
            made = self._created.get(uid)
            if made is not None and cache_version is not None and cache_version < made:
                pending[name] = uid
                continue
            gone.append(name)
        self._seen[job_uid] = {**pending, **present}
        return gone

    # ---------------------------------------------------------------- effects
    def _apply(self, job: Obj, spec: JobSpec, view: JobView, plan: JobPlan, pods: dict[str, Obj]) -> None:
        meta = job["metadata"]
        ns, name = meta.get("namespace", "default"), meta["name"]
        if plan.bump_epoch:
            # One write, fenced on the epoch we decided from: the restart starts here.
            job = self._patch_job(job, [
                {"op": "test", "path": "/metadata/annotations/firedrill.dev~1epoch", "value": str(view.epoch)},
                {"op": "replace", "path": "/metadata/annotations/firedrill.dev~1epoch", "value": str(plan.epoch)},
            ], JSON_PATCH)
            log.info("job %s/%s: %s (%s): epoch %d -> %d, retry %d", ns, name, plan.action.value if plan.action
                     else "restart", plan.message, view.epoch, plan.epoch, plan.retry_count)
        job = self._write_status(job, spec, view, plan)
        if plan.action is not None:
            event_type = "Warning" if plan.action in (JobAction.ABORT_JOB, JobAction.TERMINATE_JOB) else "Normal"
            detail = f"; epoch {plan.epoch}, retry {plan.retry_count} of maxRetry {spec.retry_limit}" \
                if plan.action is JobAction.RESTART_JOB else ""
            self.events.record(job, "Job", event_type, plan.action.value,
                               f"Start to execute action {plan.action.value}: {plan.message}{detail}")
        if plan.phase is JobPhase.FAILED and view.phase is not JobPhase.FAILED:
            self.events.record(job, "Job", "Warning", "JobFailed", plan.message or "job failed")
        for deletion in plan.delete:
            pod = pods.get(deletion.name)
            if pod is not None and deletion.uid not in self._forced:
                self._delete_pod(pod, deletion.force, deletion.reason)
        if plan.create and plan.phase in (JobPhase.PENDING, JobPhase.RUNNING):
            for rank in plan.create:
                self._create_pod(job, spec, rank, plan.epoch)

    def _patch_job(self, job: Obj, body: Any, content_type: str, subresource: str = "") -> Obj:
        meta = job["metadata"]
        path = resource_path(VCJOBS.group, VCJOBS.version, VCJOBS.plural, meta.get("namespace", "default"),
                             meta["name"], subresource or None)
        new = self.client.patch(path, body, content_type)
        self._jobs[meta["uid"]] = new
        return new

    def _write_status(self, job: Obj, spec: JobSpec, view: JobView, plan: JobPlan) -> Obj:
        current = job.get("status") or {}
        state = current.get("state") or {}
        c = plan.counts
        wanted: Obj = {"minAvailable": spec.min_available_or_all, "retryCount": plan.retry_count,
                       "version": plan.epoch, "pending": c.pending, "running": c.running, "succeeded": c.succeeded,
                       "failed": c.failed, "terminating": c.terminating, "unknown": c.unknown}
        phase_changed = state.get("phase") != plan.phase.value
        if not phase_changed and all(current.get(k) == v for k, v in wanted.items()):
            return job
        now = rfc3339(self.clock())
        if phase_changed:
            reason = plan.trigger[0].value if plan.trigger else ""
            wanted["state"] = {"phase": plan.phase.value, "reason": reason, "message": plan.message,
                               "lastTransitionTime": now}
            wanted["conditions"] = [*(current.get("conditions") or []),
                                    {"status": plan.phase.value, "lastTransitionTime": now}][-16:]
        return self._patch_job(job, {"status": wanted}, MERGE_PATCH, "status")

    def _delete_pod(self, pod: Obj, force: bool, reason: str) -> None:
        meta = pod["metadata"]
        ns, name, uid = meta.get("namespace", "default"), meta["name"], meta.get("uid", "")
        node = (pod.get("spec") or {}).get("nodeName")
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        if force:
            body["gracePeriodSeconds"] = 0
        # The eviction's instant is the decision's, taken before the call (as upstream's taint eviction records
        # its Event before deleting): a watcher sees the deletion after this, never before.
        at = datetime.fromtimestamp(self.clock(), timezone.utc)
        try:
            self.client.delete(resource_path("", "v1", "pods", ns, name), body,
                               {"gracePeriodSeconds": 0} if force else None)
        except ApiStatusError as exc:
            if exc.not_found or exc.conflict:  # already gone (someone else deleted it): nothing to report
                (self._forced if force else self._deleting).add(uid)
            else:
                log.info("could not delete pod %s/%s: %s", ns, name, exc)
            return
        except ApiUnreachable as exc:
            log.info("could not delete pod %s/%s: %s", ns, name, exc)
            return
        (self._forced if force else self._deleting).add(uid)
        if force:
            self.events.record(pod, "Pod", "Normal", "Evicted",
                               f"Force-deleted (grace 0) for {reason}: node {node} is lost", action="Deleting", when=at)
        else:
            self.events.record(pod, "Pod", "Normal", "Killing", f"Stopping pod for {reason}", action="Deleting",
                               when=at)

    def _create_pod(self, job: Obj, spec: JobSpec, rank: Rank, epoch: int) -> None:
        if self.duplicate_rank and epoch > 0 and rank.rank > 0 and rank.rank == spec.min_available_or_all - 1:
            rank = dataclasses.replace(rank, index=0, rank=0)  # duplicate-rank: rank 0's index, under its own name
        body = build_pod(job, spec, rank, epoch)
        ns = job["metadata"].get("namespace", "default")
        try:
            created = self.client.create(resource_path("", "v1", "pods", ns), body)
        except ApiStatusError as exc:
            if not exc.conflict:
                log.info("could not create pod %s/%s: %s", ns, rank.name, exc)
            return
        # Seen from now on: a pod deleted by someone else before this controller's cache showed it has vanished
        # all the same (upstream's job controller learns that from the pod's delete event).
        pod_uid = created["metadata"].get("uid", "")
        self._seen.setdefault(job["metadata"]["uid"], {})[rank.name] = pod_uid
        made = _version(created["metadata"].get("resourceVersion"))
        if made is not None:
            self._created[pod_uid] = made
        log.info("job %s/%s: created %s (rank %d, epoch %d)", ns, spec.name, rank.name, rank.rank, epoch)

    def _ensure_pod_group(self, job: Obj, spec: JobSpec) -> None:
        ns = job["metadata"].get("namespace", "default")
        try:
            self.client.create(resource_path(PODGROUPS.group, PODGROUPS.version, PODGROUPS.plural, ns),
                               build_pod_group(job, spec))
        except ApiStatusError as exc:
            if not exc.conflict:
                raise

    def _collect_garbage(self, jobs: dict[str, Obj], pods_by_owner: dict[str, list[Obj]], cache: Cache) -> None:
        """Pods and PodGroups owned by a Job that no longer exists are deleted (the garbage collector's part)."""
        for owner, pods in pods_by_owner.items():
            if owner in jobs:
                continue
            for pod in pods:
                uid = pod["metadata"].get("uid", "")
                if pod["metadata"].get("deletionTimestamp") and not node_lost(
                        cache.get(NODES, "", (pod.get("spec") or {}).get("nodeName") or "")):
                    continue
                if uid not in self._deleting and uid not in self._forced:
                    node = (pod.get("spec") or {}).get("nodeName")
                    self._delete_pod(pod, bool(node) and node_lost(cache.get(NODES, "", node)), "owner Job deleted")
        for group in cache.list(PODGROUPS):
            owners = [o.get("uid") for o in group["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"]
            if owners and not any(o in jobs for o in owners):
                meta = group["metadata"]
                try:
                    self.client.delete(resource_path(PODGROUPS.group, PODGROUPS.version, PODGROUPS.plural,
                                                     meta.get("namespace", "default"), meta["name"]),
                                       {"preconditions": {"uid": meta.get("uid")}})
                except (ApiStatusError, ApiUnreachable) as exc:
                    log.debug("podgroup %s: %s", meta["name"], exc)


def _owner(job: Obj) -> Obj:
    return {"apiVersion": VCJOBS.api_version, "kind": "Job", "name": job["metadata"]["name"],
            "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _task(job: Obj, name: str) -> Obj:
    return next((t for t in (job.get("spec") or {}).get("tasks") or [] if t.get("name") == name), {})


def build_pod(job: Obj, spec: JobSpec, rank: Rank, epoch: int) -> Obj:
    """The pod of ``rank`` at ``epoch`` (see the module docstring for its labels and annotations)."""
    jmeta, jspec = job["metadata"], job.get("spec") or {}
    ns, name = jmeta.get("namespace", "default"), jmeta["name"]
    template = _task(job, rank.task).get("template") or {}
    tmeta = template.get("metadata") or {}
    pod_spec = copy.deepcopy(template.get("spec") or {})
    queue = jspec.get("queue") or "default"
    labels = {**(tmeta.get("labels") or {}), JOB_NAME: name, JOB_NAMESPACE: ns, QUEUE_NAME: queue,
              TASK_SPEC: rank.task}
    annotations = {**(tmeta.get("annotations") or {}), GROUP_NAME: name, JOB_NAME: name, TASK_SPEC: rank.task,
                   TASK_INDEX: str(rank.index), JOB_VERSION: str(epoch), QUEUE_NAME: queue,
                   RANK: str(rank.rank), WORLD_SIZE: str(spec.min_available_or_all), EPOCH: str(epoch)}
    pod_spec["schedulerName"] = jspec.get("schedulerName") or pod_spec.get("schedulerName") or "volcano"
    if jspec.get("priorityClassName") and not pod_spec.get("priorityClassName"):
        pod_spec["priorityClassName"] = jspec["priorityClassName"]
    pod_spec.pop("nodeName", None)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": rank.name, "namespace": ns, "labels": labels, "annotations": annotations,
                         "ownerReferences": [_owner(job)]},
            "spec": pod_spec}


def build_pod_group(job: Obj, spec: JobSpec) -> Obj:
    """The PodGroup ``<job>``: minMember = minAvailable, the job's queue and priority class, and
    minResources = the requests of the first minAvailable ranks."""
    jmeta, jspec = job["metadata"], job.get("spec") or {}
    first = ranks_of(spec)[:spec.min_available_or_all]
    specs = [(_task(job, r.task).get("template") or {}).get("spec") or {} for r in first]
    group_spec: Obj = {"minMember": spec.min_available_or_all, "queue": jspec.get("queue") or "default",
                       "minResources": _sum_requests(specs),
                       "minTaskMember": {t.name: t.replicas for t in spec.tasks}}
    for t in jspec.get("tasks") or []:
        if isinstance(t, dict) and isinstance(t.get("minAvailable"), int):
            group_spec["minTaskMember"][t["name"]] = t["minAvailable"]
    if jspec.get("priorityClassName"):
        group_spec["priorityClassName"] = jspec["priorityClassName"]
    return {"apiVersion": f"{PODGROUPS.group}/{PODGROUPS.version}", "kind": "PodGroup",
            "metadata": {"name": jmeta["name"], "namespace": jmeta.get("namespace", "default"),
                         "labels": {JOB_NAME: jmeta["name"]}, "ownerReferences": [_owner(job)]},
            "spec": group_spec}
