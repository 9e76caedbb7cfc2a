"""Pod sync: run the pods bound to this node as simulated workloads.

Two threads:

- the **watcher** keeps an in-memory copy of this node's pods: it lists them
  (``fieldSelector=spec.nodeName=<node>``), then watches from the list's
  resourceVersion, resumes after a disconnect from the last version seen
  (bookmarks included) and relists on 410 Gone;
- the **syncer** reconciles, level-triggered, every pod in that copy against
  one :class:`PodWorker` per pod uid, on every watch event and at least every
  ``tick`` seconds: it starts workloads, advances them on the injected clock,
  reports status (Running, then Succeeded/Failed), publishes training progress
  as annotations (at most every ``progress_interval`` seconds), and, once a pod
  carries a ``deletionTimestamp``, stops its workload and deletes it with
  ``gracePeriodSeconds=0`` and a uid precondition, as the kubelet does.

A failed API call is retried on a later pass with per-pod backoff; nothing the
API server does can crash the loop.

Simplifications against the kubelet: all containers of a pod share one
simulated run (the workload's output goes to the first container's log); a
workload that ends puts the pod in a terminal phase whatever its
``restartPolicy``; a pod found running after an agent restart (its workload
died with the old agent) is restarted: ``restartCount`` + 1, ``lastState``
terminated with reason ``Unknown``, and a training workload resumes from its
published checkpoint.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from refplatform.agent.clock import Clock, rfc3339, rfc3339_millis
from refplatform.agent.errors import WorkloadConfigError
from refplatform.agent.logs import ContainerLog, LogStore
from refplatform.agent.podstatus import ContainerRun, pod_status
from refplatform.agent.workload import Exit, LogLine, Workload, workload_for
from refplatform.client import MERGE_PATCH, ApiStatusError, ApiUnreachable, RestClient, resource_path

__all__ = ["Backoff", "PodSync", "PodWorker"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_TERMINAL = ("Succeeded", "Failed")
# Exit code and reason the runtime reports for a container that could not start.
_START_ERROR_EXIT = 128


class Backoff:
    """Exponential backoff with jitter: ``base``, doubling, capped at ``cap`` seconds."""

    def __init__(self, base: float = 0.2, cap: float = 5.0) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * 2.0**self.failures)
        self.failures += 1
        return delay * (0.5 + random.random() / 2)

    def reset(self) -> None:
        self.failures = 0


def _meta(pod: Obj) -> Obj:
    return pod.get("metadata") or {}


def _key(pod: Obj) -> str:
    m = _meta(pod)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


@dataclass
class PodWorker:
    """The agent's state for one pod uid."""

    uid: str
    namespace: str
    name: str
    container: str
    workload: Workload | None = None
    run: ContainerRun | None = None
    log: ContainerLog | None = None
    status_dirty: bool = False
    progress_sent: dict[str, str] = field(default_factory=dict)
    progress_sent_at: datetime | None = None
    delete_sent_at: float | None = None
    retry_at: float = 0.0
    backoff: Backoff = field(default_factory=Backoff)

    @property
    def path(self) -> str:
        return resource_path("", "v1", "pods", self.namespace, self.name)

    def failed(self, what: str, err: Exception) -> None:
        delay = self.backoff.next_delay()
        self.retry_at = time.monotonic() + delay
        level = logging.INFO if self.backoff.failures <= 1 else logging.DEBUG
        log.log(level, "%s %s/%s failed (retry in %.1fs): %s", what, self.namespace, self.name, delay, err)

    def succeeded(self) -> None:
        self.backoff.reset()
        self.retry_at = 0.0


class PodSync:
    """Watches this node's pods and runs them.  ``start()``, then ``stop()``."""

    def __init__(
        self,
        client: RestClient,
        node_name: str,
        store: LogStore,
        clock: Clock,
        *,
        tick: float = 0.1,
        progress_interval: float = 1.0,
        watch_timeout: int = 30,
        resync: float = 5.0,
    ) -> None:
        """``tick``: longest wait between two reconcile passes; ``resync``: how long before an
        acknowledged DELETE is sent again for a pod the watch still shows."""
        self.client = client
        self.node_name = node_name
        self.store = store
        self.clock = clock
        self.tick = tick
        self.progress_interval = progress_interval
        self.watch_timeout = watch_timeout
        self.resync = resync
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._pods: dict[str, Obj] = {}
        self._synced = threading.Event()
        self._stream: Any = None
        self.workers: dict[str, PodWorker] = {}
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self._watch_loop, "pod-watch"), (self._sync_loop, "pod-sync")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        stream = self._stream
        if stream is not None:
            stream.stop()
        for t in self._threads:
            t.join(timeout)
        self.store.close_all()

    def wait_synced(self, timeout: float) -> bool:
        """Whether the first list has arrived within ``timeout`` seconds."""
        return self._synced.wait(timeout)

    def pods(self) -> dict[str, Obj]:
        with self._lock:
            return dict(self._pods)

    # -- watcher -----------------------------------------------------------

    def _mine(self, pod: Obj) -> bool:
        return (pod.get("spec") or {}).get("nodeName") == self.node_name and bool(_meta(pod).get("uid"))

    def _watch_loop(self) -> None:
        path = resource_path("", "v1", "pods")
        selector = {"fieldSelector": f"spec.nodeName={self.node_name}"}
        rv: str | None = None
        backoff = Backoff(0.2, 5.0)
        while not self._stop.is_set():
            try:
                if rv is None:
                    listed = self.client.list(path, selector)
                    items = [p for p in listed.get("items") or [] if self._mine(p)]
                    with self._lock:
                        self._pods = {_meta(p)["uid"]: p for p in items}
                    rv = str((listed.get("metadata") or {}).get("resourceVersion") or "") or None
                    self._synced.set()
                    self._wake.set()
                    log.debug("listed %d pod(s) at resourceVersion %s", len(items), rv)
                stream = self.client.watch(path, selector, resource_version=rv, timeout_seconds=self.watch_timeout)
                self._stream = stream
                if self._stop.is_set():
                    stream.stop()
                with stream:
                    for etype, obj in stream:
                        if etype == "ERROR":
                            err = ApiStatusError.from_status(obj, method="WATCH", url=path)
                            if err.gone:
                                log.info("watch resourceVersion %s expired; relisting", rv)
                            else:
                                log.warning("watch error, relisting: %s", err)
                            rv = None
                            break
                        self._apply(etype, obj)
                        backoff.reset()
                    else:
                        rv = stream.resource_version or rv
                self._stream = None
                backoff.reset()
            except ApiStatusError as err:
                self._stream = None
                if err.gone:
                    rv = None
                    continue
                delay = backoff.next_delay()
                log.warning("pod list/watch failed (retry in %.1fs): %s", delay, err)
                if err.code >= 400 and err.code < 500:
                    rv = None
                self._stop.wait(delay)
            except ApiUnreachable as err:
                self._stream = None
                delay = backoff.next_delay()
                log.log(logging.INFO if backoff.failures <= 2 else logging.DEBUG, "pod watch: %s (retry in %.1fs)", err, delay)
                self._stop.wait(delay)

    def _apply(self, etype: str, obj: Obj) -> None:
        uid = _meta(obj).get("uid")
        if etype == "BOOKMARK" or not uid:
            return
        with self._lock:
            if etype == "DELETED" or not self._mine(obj):
                self._pods.pop(uid, None)
            elif etype in ("ADDED", "MODIFIED"):
                self._pods[uid] = obj
            else:
                return
        self._wake.set()

    # -- syncer ------------------------------------------------------------

    def _sync_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.tick)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.sync_once()
            except Exception:  # the loop must survive anything; a bug shows in the log
                log.exception("pod sync pass failed")

    def sync_once(self) -> None:
        """One level-triggered pass over every known pod and worker."""
        pods = self.pods()
        now = self.clock.now()
        # Retire the workers of vanished pods first: a pod recreated under the same name then starts clean.
        for uid in [u for u in self.workers if u not in pods]:
            self.reconcile(uid, None, now)
        for uid in pods:
            self.reconcile(uid, pods[uid], now)

    def reconcile(self, uid: str, pod: Obj | None, now: datetime) -> None:
        worker = self.workers.get(uid)
        if pod is None:
            if worker is not None:
                self._halt(worker, now)
                self.store.forget_pod(worker.namespace, worker.name, worker.uid)
                del self.workers[uid]
            return
        meta = _meta(pod)
        phase = (pod.get("status") or {}).get("phase")
        if worker is None and (meta.get("deletionTimestamp") or phase not in _TERMINAL):
            worker = self.workers[uid] = PodWorker(
                uid, str(meta.get("namespace") or "default"), str(meta["name"]), _first_container(pod)
            )
            if not meta.get("deletionTimestamp"):
                self._start(worker, pod, now)
        if worker is None:
            return
        if meta.get("deletionTimestamp"):
            self._halt(worker, now)
            self._delete(worker)
            return
        if worker.workload is not None and worker.workload.running:
            if phase in _TERMINAL and worker.run is not None and worker.run.exit is None and not worker.status_dirty:
                # Someone else ended the pod: kill its container.
                self._halt(worker, now)
            else:
                self._advance(worker, now)
        if time.monotonic() < worker.retry_at:
            return
        if worker.status_dirty:
            self._report_status(worker, pod, now)
        self._publish_progress(worker, now)

    # -- steps -------------------------------------------------------------

    def _start(self, worker: PodWorker, pod: Obj, now: datetime) -> None:
        status = pod.get("status") or {}
        previous = next((c for c in status.get("containerStatuses") or [] if isinstance(c, dict)), None)
        restart_count, last_terminated = 0, None
        if previous is not None:
            # The container ran under a previous agent process and died with it.
            restart_count = int(previous.get("restartCount") or 0) + 1
            state = previous.get("state") or {}
            started = (state.get("running") or {}).get("startedAt") or (state.get("terminated") or {}).get("startedAt")
            last_terminated = {"exitCode": 255, "reason": "Unknown", "finishedAt": rfc3339(now)}
            if started:
                last_terminated["startedAt"] = started
        worker.log = self.store.open(worker.namespace, worker.name, worker.container, fresh=previous is None, owner=worker.uid)
        # Every container has a log, even the silent ones.
        for name in _container_names(pod)[1:]:
            self.store.open(worker.namespace, worker.name, name, fresh=previous is None, owner=worker.uid)
        annotations = _meta(pod).get("annotations") or {}
        try:
            workload = workload_for(annotations)
            lines = workload.start(now)
        except WorkloadConfigError as err:
            worker.log.append([LogLine(now, f"{rfc3339_millis(now)} cannot start workload: {err}")])
            worker.run = ContainerRun(now, restart_count, Exit(_START_ERROR_EXIT, "StartError", now, str(err)), last_terminated)
            worker.status_dirty = True
            self.store.close_pod(worker.namespace, worker.name, worker.uid)
            log.warning("pod %s: %s", _key(pod), err)
            return
        worker.workload = workload
        worker.run = ContainerRun(now, restart_count, None, last_terminated)
        worker.log.append(lines)
        worker.status_dirty = True
        log.info("pod %s: started %s workload (restartCount %d)", _key(pod), workload.kind, restart_count)
        self._check_exit(worker)

    def _advance(self, worker: PodWorker, now: datetime) -> None:
        assert worker.workload is not None and worker.log is not None
        worker.log.append(worker.workload.advance(now))
        self._check_exit(worker)

    def _check_exit(self, worker: PodWorker) -> None:
        assert worker.workload is not None and worker.run is not None
        ended = worker.workload.exit
        if ended is not None and worker.run.exit is None:
            worker.run = ContainerRun(worker.run.started_at, worker.run.restart_count, ended, worker.run.last_terminated)
            worker.status_dirty = True
            self.store.close_pod(worker.namespace, worker.name, worker.uid)
            log.info("pod %s/%s: workload exited %d (%s)", worker.namespace, worker.name, ended.code, ended.reason)

    def _halt(self, worker: PodWorker, now: datetime) -> None:
        """Stop the workload (SIGTERM) if it runs; its log ends."""
        if worker.workload is not None and worker.workload.running:
            lines = worker.workload.stop(now)
            if worker.log is not None:
                worker.log.append(lines)
            log.info("pod %s/%s: workload stopped", worker.namespace, worker.name)
        self.store.close_pod(worker.namespace, worker.name, worker.uid)

    def _report_status(self, worker: PodWorker, pod: Obj, now: datetime) -> None:
        assert worker.run is not None
        status = pod_status(pod, worker.run, now)
        try:
            self.client.patch(worker.path + "/status", {"status": status}, MERGE_PATCH)
        except ApiStatusError as err:
            if err.not_found:
                return  # gone; the watch will tell
            worker.failed("status update of", err)
            return
        except ApiUnreachable as err:
            worker.failed("status update of", err)
            return
        worker.status_dirty = False
        worker.succeeded()
        log.debug("pod %s/%s: reported phase %s", worker.namespace, worker.name, status["phase"])

    def _publish_progress(self, worker: PodWorker, now: datetime) -> None:
        if worker.workload is None:
            return
        progress = worker.workload.progress()
        if not progress or progress == worker.progress_sent:
            return
        final = not worker.workload.running
        if not final and worker.progress_sent_at is not None:
            if (now - worker.progress_sent_at).total_seconds() < self.progress_interval:
                return
        try:
            self.client.patch(worker.path, {"metadata": {"annotations": progress}}, MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as err:
            if isinstance(err, ApiStatusError) and err.not_found:
                return
            worker.failed("progress update of", err)
            return
        worker.progress_sent = dict(progress)
        worker.progress_sent_at = now
        worker.succeeded()

    def _delete(self, worker: PodWorker) -> None:
        mono = time.monotonic()
        if mono < worker.retry_at or (worker.delete_sent_at is not None and mono - worker.delete_sent_at < self.resync):
            return
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": worker.uid},
        }
        try:
            self.client.delete(worker.path, body, {"gracePeriodSeconds": 0})
        except ApiStatusError as err:
            if not (err.not_found or err.conflict):  # gone, or a new pod under the same name
                worker.failed("delete of", err)
                return
        except ApiUnreachable as err:
            worker.failed("delete of", err)
            return
        worker.delete_sent_at = mono
        worker.succeeded()
        log.info("pod %s/%s: deleted (gracePeriodSeconds=0)", worker.namespace, worker.name)


def _container_names(pod: Obj) -> list[str]:
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name")]
    return names or ["main"]


def _first_container(pod: Obj) -> str:
    return _container_names(pod)[0]
