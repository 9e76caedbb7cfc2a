"""The live scheduler: informer caches -> core.schedule() -> binds, evictions, statuses, Events.

Every reconcile takes one snapshot of nodes, pods, pod groups and queues,
asks the pure core for decisions, and applies them through the API:

- a bind is ``POST pods/NAME/binding`` carrying the chosen GPU indices as
  the Binding's annotation (the API server copies a Binding's annotations
  onto the pod, as upstream's does: one write a pod), with a ``Scheduled``
  Event written in the background (off the bind's path, as upstream's event
  broadcaster writes it); gangs are committed by ``binders`` threads, each
  gang's binds in order, beside the cycles: a cycle assumes its binds and
  hands them over without waiting (as upstream's binding cycles run beside its
  scheduling cycles), and so it does with its status patches, one at a time
  for a pod or a PodGroup, and a pod's earlier status patch lands before its
  bind; a cycle's CPU time sets the pause before the next
  (:data:`CYCLE_CPU_SHARE`);
- a preemption victim (kube-scheduler's way) gets the condition
  ``DisruptionTarget=True, reason PreemptionByScheduler`` in a status patch, then
  a plain ``DELETE`` (graceful: its ``terminationGracePeriodSeconds``, so the
  node agent sends SIGTERM and SIGKILLs only after the grace), with a
  ``Preempted`` Event; each pod of the preemptor gets ``status.nominatedNodeName``;
- a reclaim victim (Volcano's way) is ``POST pods/NAME/eviction``, with a
  ``Reclaimed`` Event;
- a pod that stays pending gets ``PodScheduled=False, reason Unschedulable``,
  a ``firedrill.dev/Unplaced`` condition whose reason says why its gang's GPU
  demand is not placed (``Fragmentation``, ``InsufficientCapacity``, ``Quota``,
  ``Other``), both in one status patch, and a ``FailedScheduling`` Event
  (written only when the message or the pending reason changes);
- a PodGroup's phase, counts and conditions go to its ``/status``.

Binds made in one cycle are *assumed* (held in the next snapshots) until the
informer shows them, so a slow watch never double-books a GPU.

A gang's binds are committed whole (:meth:`SchedulerController._commit`): all of
them are assumed, then bound one by one; when the API server refuses one (the
pod was deleted meanwhile, someone else bound it) and the gang is left with
fewer than ``minMember`` pods placed, the binds this cycle made for it are
undone.  A bound pod cannot be unbound, so "undone" means deleted (graceful,
with a uid precondition) so its controller creates it again; the pods not yet
bound are forgotten (no longer assumed), and a ``GangBindFailed`` Warning Event
on the PodGroup (and on its owning Job) and on each deleted pod says so.  See
docs/SCHEDULER.md, "Committing a gang through the API".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from datetime import datetime, timezone
from typing import Any

from refplatform import core
from refplatform.client import ApiStatusError, ApiUnreachable, MERGE_PATCH, RestClient, resource_path
from refplatform.controllers.convert import Converter
from refplatform.controllers.events import BackgroundEvents, EventRecorder
from refplatform.controllers.manager import Cache
from refplatform.core import GPU_INDEX_ANNOTATION, PodGroupPhase
from refplatform.core.accounting import UNPLACED_CONDITION
from refplatform.resources import NODES, PODGROUPS, PODS, QUEUES

log = logging.getLogger(__name__)
Obj = dict[str, Any]



def _status_summary(status: Obj) -> tuple[Any, ...]:
    """What decides whether a PodGroup's status needs writing: its phase and counts, and its conditions' type,
    status and message (not their times)."""
    return (status.get("phase"), status.get("running"), status.get("succeeded"), status.get("failed"),
            tuple((c.get("type"), c.get("status"), c.get("message")) for c in status.get("conditions") or []))


def _log_failure(future: Future[None]) -> None:
    """A bug in a write the binder threads ran is logged (nobody waits for its result)."""
    if not future.cancelled() and future.exception() is not None:
        log.error("a scheduler write failed", exc_info=future.exception())


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


BINDERS = 16
"""Threads that commit gangs (each gang's binds in order) and write statuses, beside the cycles: a bind is a
round trip to the API server, so more of them in flight keep binding up with pods being created (8 left the
end-to-end benchmark's binds behind its creates; docs/SCHEDULER.md, "End-to-end throughput")."""
CYCLE_CPU_SHARE = 0.2
"""The most CPU the scheduling cycles take, as a share of one core: the pause after a cycle is at least the
CPU time it took divided by this share.  A cycle looks at every pod, so on a large cluster it costs the same
however few pods are new, and back-to-back cycles would take CPU from the binds, the API server and the
nodes; binds go on between cycles.  (Volcano's scheduler runs a cycle every ``schedule-period``, 1 s.)"""


class SchedulerController:
    name = "scheduler"
    watches = (NODES, PODS, PODGROUPS, QUEUES)
    resync = 1.0

    def __init__(self, client: RestClient, config: core.SchedulerConfig,
                 clock: Callable[[], float] = time.time, *, binders: int = BINDERS,
                 cpu_share: float = CYCLE_CPU_SHARE) -> None:
        """``binders``: how many gangs are committed at once (each gang's binds stay in order); ``cpu_share``:
        see :data:`CYCLE_CPU_SHARE`."""
        self.client = client
        self.cpu_share = cpu_share
        self.min_interval = 0.0
        """The pause this cycle asks of the controller manager (see :data:`CYCLE_CPU_SHARE`); the manager
        pauses at least its own as well."""
        self.config = config
        self.clock = clock
        self.binders = max(1, binders)
        self._binder_pool: ThreadPoolExecutor | None = None
        self._convert = Converter()  # unchanged pods and nodes are not converted again each cycle
        self.events = EventRecorder(client, "volcano" if config.profile is core.Profile.GANG else "no-gang-scheduler")
        self._scheduled_events: BackgroundEvents | None = None  # each bind's Scheduled Event, off the bind's path
        # The cycle and the binder threads share these; ``_lock`` guards them (held only for dict operations).
        self._lock = threading.Lock()
        self._assumed: dict[str, tuple[str, tuple[int, ...]]] = {}  # pod uid -> (node, gpu indices)
        self._unschedulable: dict[str, tuple[str, str]] = {}  # pod uid -> last (message, pending reason) written
        self._pod_writes: dict[str, Future[None]] = {}  # pod uid -> its unschedulable status write in flight
        self._status_writes: dict[str, Future[None]] = {}  # PodGroup key -> its status write in flight
        # PodGroup key -> (the status written, the version it made): not written again before the watch shows it
        self._status_written: dict[str, tuple[tuple[Any, ...], int]] = {}
        self._arrival: dict[str, float] = {}  # pod uid -> sub-second arrival order (see convert.pod_of)
        self._arrivals = 0

    def close(self) -> None:
        """Stop the binder threads (after the binds in flight) and the Event writers (after what is queued):
        for a scheduler run inside another program (a test); the controllers process ends with its threads."""
        if self._binder_pool is not None:
            self._binder_pool.shutdown(wait=True)
        if self._scheduled_events is not None:
            self._scheduled_events.close()

    # ----------------------------------------------------------------- cycle
    def reconcile(self, cache: Cache) -> None:
        if self._scheduled_events is None:  # here, on the one reconcile thread: never two of them
            self._scheduled_events = BackgroundEvents(self.events)
        started = time.thread_time()
        self._forget_finished_writes()
        pods = cache.list(PODS)
        pods = self._with_assumed(pods)
        self._note_arrivals(pods)
        snapshot = self._convert.snapshot(cache.list(NODES), pods, cache.list(PODGROUPS), cache.list(QUEUES),
                                          self.clock(), arrival=self._arrival)
        decisions = core.schedule(snapshot, self.config)
        by_key = {f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}": p for p in pods}
        nominated = {n.pod.uid: n.node for n in decisions.nominations}
        for ev in decisions.evictions:
            if ev.reason is core.EvictReason.PREEMPTED:
                self._preempt(by_key.get(ev.pod.key), ev, nominated)
            else:
                self._evict(by_key.get(ev.pod.key), ev)
        for nomination in decisions.nominations:
            self._nominate(by_key.get(nomination.pod.key), nomination)
        groups = {f"{g['metadata']['namespace']}/{g['metadata']['name']}": g for g in cache.list(PODGROUPS)}
        with self._lock:
            for key in [k for k in self._status_written if k not in groups]:
                del self._status_written[key]
        for failure in decisions.failures:
            self._unschedulable_pod(by_key.get(failure.pod.key), failure)
        self._commit_all([(c, groups.get(c.gang) if c.group else None) for c in decisions.commits], by_key)
        for status in decisions.pod_groups:
            self._pod_group_status(groups.get(status.key), status)
        self.min_interval = (time.thread_time() - started) / self.cpu_share

    def _forget_finished_writes(self) -> None:
        """Writes the binder threads have finished no longer hold back their pod's or PodGroup's next one."""
        with self._lock:
            for uid in [u for u, f in self._pod_writes.items() if f.done()]:
                del self._pod_writes[uid]
            for key in [k for k, f in self._status_writes.items() if f.done()]:
                del self._status_writes[key]

    def _note_arrivals(self, pods: list[Obj]) -> None:
        """Number pods in the order they reached the scheduler (new ones by creation resourceVersion)."""
        live = {p["metadata"].get("uid") for p in pods}
        for uid in [u for u in self._arrival if u not in live]:
            del self._arrival[uid]
        new = [p for p in pods if p["metadata"].get("uid") not in self._arrival]
        for pod in sorted(new, key=lambda p: int(p["metadata"].get("resourceVersion") or 0)):
            self._arrivals += 1
            self._arrival[pod["metadata"]["uid"]] = (self._arrivals % 100_000) / 100_000

    def _with_assumed(self, pods: list[Obj]) -> list[Obj]:
        """Overlay binds this scheduler made (or is making) that the informer has not shown yet."""
        live = {p["metadata"].get("uid") for p in pods}
        with self._lock:
            for uid in [u for u in self._assumed if u not in live]:
                del self._assumed[uid]
            for pod in pods:
                uid = pod["metadata"].get("uid")
                if uid in self._assumed and (pod.get("spec") or {}).get("nodeName"):
                    del self._assumed[uid]
            assumed = dict(self._assumed)
        out = []
        for pod in pods:
            uid = pod["metadata"].get("uid")
            if uid in assumed:
                if not (pod.get("spec") or {}).get("nodeName"):
                    node, indices = assumed[uid]
                    pod = {**pod, "spec": {**pod["spec"], "nodeName": node},
                           "metadata": {**pod["metadata"], "annotations": {
                               **(pod["metadata"].get("annotations") or {}),
                               GPU_INDEX_ANNOTATION: ",".join(map(str, indices))}}}
            out.append(pod)
        return out

    # --------------------------------------------------------------- effects
    def _commit_all(self, commits: list[tuple[core.GangCommit, Obj | None]], by_key: dict[str, Obj]) -> None:
        """Assume every gang's pods now, on the cycle's thread, so the next snapshot holds their GPUs whatever the
        watch shows yet; then hand each gang's binds to the binder threads, up to ``binders`` gangs at once (a
        bind is a round trip to the API server; gangs are independent: each holds GPUs the others' decisions
        left free).  The cycle does not wait for them: the next one starts while they go on, as upstream's
        binding cycles run beside its scheduling cycles."""
        for commit, group in commits:
            pods = [(by_key.get(b.pod.key), b) for b in commit.binds]
            with self._lock:
                for pod, bind in pods:
                    if pod is not None:
                        self._assumed[pod["metadata"]["uid"]] = (bind.node, bind.gpu_indices)
            self._submit(self._commit, commit, pods, group)

    def _submit(self, fn: Callable[..., None], *args: Any) -> Future[None]:
        """Hand one write to the binder threads (first in, first out); the cycle does not wait for it."""
        if self._binder_pool is None:
            self._binder_pool = ThreadPoolExecutor(max_workers=self.binders, thread_name_prefix="scheduler-bind")
        future = self._binder_pool.submit(fn, *args)
        future.add_done_callback(_log_failure)
        return future

    def _commit(self, commit: core.GangCommit, pods: list[tuple[Obj | None, core.Bind]], group: Obj | None) -> None:
        """Bind one gang's pods of a cycle whole (the cycle assumed them all): bind them in order, and when a bind
        fails and the gang can no longer reach minMember, undo the binds made (see the module docstring)."""
        atomic = self.config.profile is core.Profile.GANG and not self.config.partial_gang_bind
        bound: list[tuple[Obj, core.Bind]] = []
        failure: tuple[core.Bind, str] | None = None
        attempted = 0
        for pod, bind in pods:
            attempted += 1
            if pod is not None:  # a status write of an earlier cycle lands first, never over the bind's
                with self._lock:
                    earlier = self._pod_writes.get(pod["metadata"]["uid"])
                if earlier is not None:
                    futures_wait([earlier])
            error = "the pod is no longer in the scheduler's cache" if pod is None else self._bind(pod, bind)
            if error is None:
                assert pod is not None
                bound.append((pod, bind))
                continue
            if pod is not None:
                with self._lock:
                    self._assumed.pop(pod["metadata"]["uid"], None)
            failure = failure or (bind, error)
            if atomic and not commit.whole_with(len(bound) + len(pods) - attempted):
                break  # the gang cannot be whole any more: bind no further pod of it
        with self._lock:
            for pod, _ in pods[attempted:]:  # never attempted: no longer assumed, pending again
                if pod is not None:
                    self._assumed.pop(pod["metadata"]["uid"], None)
        if failure is not None and atomic and not commit.whole_with(len(bound)):
            self._undo(commit, bound, failure, group)

    def _bind(self, pod: Obj, bind: core.Bind) -> str | None:
        """Bind one pod: POST its Binding, its GPU indices as the Binding's annotation (the API server puts
        them on the pod with ``spec.nodeName``, in the same write); the API server's refusal, or None."""
        ns, name = bind.pod.namespace, bind.pod.name
        meta: Obj = {"name": name, "namespace": ns}
        if bind.gpu_indices:
            meta["annotations"] = {GPU_INDEX_ANNOTATION: ",".join(map(str, bind.gpu_indices))}
        try:
            self.client.create(resource_path("", "v1", "pods", ns, name, "binding"), {
                "apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": bind.node}})
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("bind %s/%s -> %s failed: %s", ns, name, bind.node, exc)
            return str(exc)
        with self._lock:
            self._unschedulable.pop(pod["metadata"]["uid"], None)
        gpus = f" (GPUs {','.join(map(str, bind.gpu_indices))})" if bind.gpu_indices else ""
        assert self._scheduled_events is not None  # made by reconcile, before any bind thread runs
        self._scheduled_events.record(pod, "Pod", "Normal", "Scheduled",
                                      f"Successfully assigned {ns}/{name} to {bind.node}{gpus}")
        return None

    def _undo(self, commit: core.GangCommit, bound: list[tuple[Obj, core.Bind]], failure: tuple[core.Bind, str],
              group: Obj | None) -> None:
        """Release the pods this cycle bound for a gang that cannot be whole: delete them (a bound pod cannot be
        unbound), gracefully and only the very pod bound (uid precondition), so their GPUs are free once they
        are gone and their controller creates them again."""
        failed, why = failure
        deleted = []
        for pod, bind in bound:
            ns, name = bind.pod.namespace, bind.pod.name
            try:
                self.client.delete(resource_path("", "v1", "pods", ns, name),
                                   {"apiVersion": "v1", "kind": "DeleteOptions",
                                    "preconditions": {"uid": pod["metadata"]["uid"]}})
            except ApiStatusError as exc:
                if not (exc.not_found or exc.conflict):  # gone already, or another pod by now: nothing held
                    log.warning("could not release %s/%s of gang %s: %s", ns, name, commit.gang, exc)
                continue
            except ApiUnreachable as exc:
                log.warning("could not release %s/%s of gang %s: %s", ns, name, commit.gang, exc)
                continue
            deleted.append(name)
            self.events.record(pod, "Pod", "Warning", "GangBindFailed",
                               f"Deleted: bound to {bind.node} as part of gang {commit.group}, whose pod "
                               f"{failed.pod.name} could not be bound; a bound pod cannot be unbound",
                               action="Deleting")
        placed = commit.ready_before + len(bound) - len(deleted)
        undone = (f"undid the gang's other binds of this cycle by deleting {', '.join(deleted) or 'none of them'} "
                  "(a bound pod cannot be unbound; a controller that owns them creates them again)" if bound else
                  "bound no other pod of the gang this cycle")
        message = (f"binding pod {failed.pod.name} to {failed.node} failed ({why}); {undone}, so that the gang does "
                   f"not hold GPUs with {placed} of minMember {commit.min_member} pods placed")
        log.warning("gang %s: %s", commit.gang, message)
        if group is None:
            return
        self.events.record(group, "PodGroup", "Warning", "GangBindFailed", message)
        meta = group["metadata"]
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == "Job" and owner.get("name") and owner.get("uid"):
                self.events.record({"apiVersion": owner.get("apiVersion", ""), "metadata": {
                    "name": owner["name"], "namespace": meta.get("namespace"), "uid": owner["uid"]}},
                    "Job", "Warning", "GangBindFailed", message)

    def _evict(self, pod: Obj | None, ev: core.Evict) -> None:
        if pod is None:
            return
        ns, name = ev.pod.namespace, ev.pod.name
        try:
            self.client.create(resource_path("", "v1", "pods", ns, name, "eviction"), {
                "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}})
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("evict %s/%s failed: %s", ns, name, exc)
            return
        message = ev.message or f"{ev.reason.value} by {ev.preemptor or 'the scheduler'} on node {ev.node}"
        self.events.record(pod, "Pod", "Normal", ev.reason.value, message)

    def _preempt(self, pod: Obj | None, ev: core.Evict, nominated: dict[str, str]) -> None:
        """kube-scheduler's preemption of one victim: DisruptionTarget condition, graceful delete, Event."""
        if pod is None:
            return
        ns, name = ev.pod.namespace, ev.pod.name
        # A pod without a pod group is its own gang, keyed podgroup-<uid> (core.Session): name the pod.
        preemptor_uid = ev.preemptor.rpartition("/podgroup-")[2] if "/podgroup-" in ev.preemptor else ""
        kind = "pod" if preemptor_uid in nominated else "pod group"
        current = (pod.get("status") or {}).get("conditions") or []
        conditions = [c for c in current if c.get("type") != "DisruptionTarget"]
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                           "message": f"{self.events.component}: preempting to accommodate a higher priority {kind}",
                           "lastTransitionTime": _rfc3339(self.clock())})
        try:
            self.client.patch(resource_path("", "v1", "pods", ns, name, "status"),
                              {"status": {"conditions": conditions}}, MERGE_PATCH)
            self.client.delete(resource_path("", "v1", "pods", ns, name),
                               {"apiVersion": "v1", "kind": "DeleteOptions",
                                "preconditions": {"uid": ev.pod.uid}} if ev.pod.uid else None)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("preempt %s/%s failed: %s", ns, name, exc)
            return
        who = f"pod {preemptor_uid}" if kind == "pod" else f"pod group {ev.preemptor}"
        self.events.record(pod, "Pod", "Normal", "Preempted", f"Preempted by {who} on node {ev.node}",
                           action="Preempting")

    def _nominate(self, pod: Obj | None, nomination: core.Nomination) -> None:
        if pod is None or (pod.get("status") or {}).get("nominatedNodeName") == nomination.node:
            return
        try:
            self.client.patch(resource_path("", "v1", "pods", nomination.pod.namespace, nomination.pod.name,
                                            "status"), {"status": {"nominatedNodeName": nomination.node}},
                              MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("could not nominate %s to %s: %s", nomination.pod.key, nomination.node, exc)

    def _unschedulable_pod(self, pod: Obj | None, failure: core.FailedScheduling) -> None:
        if pod is None or (pod.get("spec") or {}).get("nodeName"):
            return
        uid = pod["metadata"]["uid"]
        # Written again when the kube message or the pending reason changes (not for every change of the
        # numbers in the pending message: free GPUs move with every bind).
        written = (failure.message, failure.pending_reason)
        with self._lock:
            last = self._unschedulable.get(uid)
            if last == written or uid in self._pod_writes:  # written, or being written: the next cycle looks again
                return
        now = _rfc3339(self.clock())
        current = (pod.get("status") or {}).get("conditions") or []
        previous = next((c for c in current if c.get("type") == UNPLACED_CONDITION), {})
        # The reason's transition time stays while the reason does (only its words changed).
        since = previous.get("lastTransitionTime") if (
            previous.get("status") == "True" and previous.get("reason") == failure.pending_reason) else None
        conditions = [c for c in current if c.get("type") not in ("PodScheduled", UNPLACED_CONDITION)]
        conditions.append({"type": "PodScheduled", "status": "False", "reason": failure.reason,
                           "message": failure.message, "lastTransitionTime": now})
        conditions.append({"type": UNPLACED_CONDITION, "status": "True", "reason": failure.pending_reason,
                           "message": failure.pending_message, "lastTransitionTime": since or now})
        future = self._submit(self._write_unschedulable, pod, conditions, written,
                              last is None or last[0] != failure.message, failure.message)
        with self._lock:
            self._pod_writes[uid] = future

    def _write_unschedulable(self, pod: Obj, conditions: list[Obj], written: tuple[str, str], event: bool,
                             message: str) -> None:
        try:
            self.client.patch(resource_path("", "v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                                            "status"), {"status": {"conditions": conditions}}, MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("could not mark %s unschedulable: %s", pod["metadata"]["name"], exc)
            return
        with self._lock:
            self._unschedulable[pod["metadata"]["uid"]] = written
        if event:
            self.events.record(pod, "Pod", "Warning", "FailedScheduling", message)

    def _pod_group_status(self, group: Obj | None, status: core.PodGroupStatus) -> None:
        if group is None:
            return
        current = group.get("status") or {}
        conditions = []
        for cond in status.conditions:
            previous = next((c for c in current.get("conditions") or [] if c.get("type") == cond.type.value), {})
            same = previous.get("status") == ("True" if cond.status else "False")
            conditions.append({"type": cond.type.value, "status": "True" if cond.status else "False",
                               "reason": cond.reason, "message": cond.message,
                               "lastTransitionTime": previous.get("lastTransitionTime") if same and previous.get(
                                   "lastTransitionTime") else _rfc3339(cond.transition_time or self.clock())})
        wanted = {"phase": status.phase.value, "running": status.running, "succeeded": status.succeeded,
                  "failed": status.failed, "conditions": conditions or current.get("conditions") or []}
        if _status_summary(current) == _status_summary(wanted):
            return
        meta = group["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        with self._lock:
            if key in self._status_writes:  # one write a group at a time: the next cycle looks again
                return
            last = self._status_written.get(key)
            if last is not None and last[0] == _status_summary(wanted) and \
                    int(meta.get("resourceVersion") or 0) < last[1]:
                return  # written already; the watch has not shown it yet
        future = self._submit(self._write_pod_group_status, group, status, wanted)
        with self._lock:
            self._status_writes[key] = future

    def _write_pod_group_status(self, group: Obj, status: core.PodGroupStatus, wanted: Obj) -> None:
        current, meta = group.get("status") or {}, group["metadata"]
        try:
            written = self.client.patch(resource_path(PODGROUPS.group, PODGROUPS.version, PODGROUPS.plural,
                                                      meta["namespace"], meta["name"], "status"),
                                        {"status": wanted}, MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("could not update podgroup %s status: %s", meta["name"], exc)
            return
        version = int(((written or {}).get("metadata") or {}).get("resourceVersion") or 0)
        with self._lock:
            self._status_written[f"{meta.get('namespace')}/{meta['name']}"] = (_status_summary(wanted), version)
        if status.phase is PodGroupPhase.RUNNING and current.get("phase") != PodGroupPhase.RUNNING.value:
            self.events.record(group, "PodGroup", "Normal", "Scheduled",
                               f"pod group {meta['name']} has {status.running} of its minMember pods placed")
        unschedulable = next((c for c in status.conditions if c.type is core.ConditionType.UNSCHEDULABLE
                              and c.status), None)
        if unschedulable is not None:
            self.events.record(group, "PodGroup", "Warning", "Unschedulable", unschedulable.message)
