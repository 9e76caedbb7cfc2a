"""Pod sync: run the pods bound to this node, as real processes or simulated workloads.

A pod whose containers have ``command`` runs them as child processes of the
agent (:mod:`refplatform.agent.runtime`, with the node's directories, pod
range and simulated GPU driver given to :class:`PodSync`); any other pod runs
the simulated workload its ``firedrill.dev/workload`` annotation names.
Stopping real processes never blocks a pass: SIGTERM on one pass, SIGKILL on
the first pass after the grace period, the pod's delete once they are gone.

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

A training pod that is a rank of a job (label ``volcano.sh/job-name``) gets its
gang view and checkpoint link from the :class:`~refplatform.agent.jobs.JobCoordinator`.
:meth:`PodSync.resync` (after a partition heals) relists at once and retries
every pod's pending writes now, so pods deleted meanwhile are stopped as the
kubelet does; :meth:`PodSync.note_freeze` (after the process was frozen) also
thaws every workload first, so none is credited with work for the frozen time.

Simplifications against the kubelet: all containers of a pod share one
simulated run (the workload's output goes to the first container's log); a
workload that ends puts the pod in a terminal phase whatever its
``restartPolicy``; a pod found running after an agent restart (its workload
died with the old agent) is restarted: ``restartCount`` + 1, ``lastState``
terminated with reason ``Unknown``, and a training workload resumes from its
published checkpoint.

With a :class:`~refplatform.agent.events.PodEventRecorder` the syncer records,
on the Pod, ``Started`` per container at the instant it set the pod Running
(``startedAt``), the workload's own transitions (a rank's ``Resumed`` and
``Fenced``) at the instants the workload stamped them, and ``Killing`` per
container at the instant it stopped a running workload (pod deleted, gone, or
ended by someone else).  Recording only queues: it never blocks a pass.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from refplatform.agent.clock import Clock, rfc3339, rfc3339_millis
from refplatform.agent.device import Device
from refplatform.agent.devnodes import DeviceGrant, container_devices
from refplatform.agent.errors import ContainerSpecError, WorkloadConfigError
from refplatform.agent.events import KILLING, STARTED, PodEventRecorder, container_field_path, pod_reference
from refplatform.agent.gang import RankSpec
from refplatform.agent.gpuhealth import GpuHealthKeeper
from refplatform.agent.jobs import JobCoordinator
from refplatform.agent.logs import ContainerLog, LogStore
from refplatform.agent.podenv import EnvSource, PodFacts, env_sources
from refplatform.agent.podip import PodAddressError, PodAddressPool
from refplatform.agent.podstatus import HOST_IP, ContainerRun, pod_ip_for, pod_status
from refplatform.agent.probes import Prober, ReadinessTracker, readiness_probe
from refplatform.agent.projection import ProjectionError, Projector, write_files
from refplatform.agent.runtime import DEFAULT_GRACE_SECONDS, ProcessWorkload, grace_seconds, has_command, process_specs
from refplatform.agent.volumes import NodeDirs, pod_volumes
from refplatform.agent.workload import (
    ANN_STEP_SECONDS,
    CheckpointLink,
    Exit,
    Gang,
    LogLine,
    TrainingWorkload,
    Workload,
    workload_for,
    workload_kind,
)
from refplatform.client import MERGE_PATCH, ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.core.resources import GPU, GPU_INDEX_ANNOTATION
from refplatform.gpu.device import AllocationError, DeviceSet, Slice, xid_message
from refplatform.gpu.health import GpuHealth
from refplatform.gpu.identity import gpu_uuid, mig_uuid, visible_devices
from refplatform.gpu.lifecycle import LifecycleRules
from refplatform.gpu.throttle import STORAGE_STALLED_KEY, THROTTLE_ANNOTATION, Throttle, clocks_document, parse_throttle

__all__ = ["Backoff", "DEVICES_ANNOTATION", "MEMORY_ANNOTATION", "OOM_REASON", "PodSync", "PodWorker", "XID_ANNOTATION",
           "XID_EVENT", "parse_xid_entries"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_TERMINAL = ("Succeeded", "Failed")
# Exit code and reason the runtime reports for a container that could not start.
_START_ERROR_EXIT = 128
DEVICES_ANNOTATION = "firedrill.dev/devices"
MEMORY_ANNOTATION = "firedrill.dev/memory-mib"
XID_ANNOTATION = "firedrill.dev/inject-xid"
XID_APPLIED_ANNOTATION = "firedrill.dev/applied-xid"
"""On the Node: the ids of the injections applied (JSON list, newest last), so a restarted agent skips them."""
_APPLIED_KEPT = 100
XID_EVENT = "XidError"
OOM_REASON = "OutOfMemory"
FAILED_MOUNT = "FailedMount"
"""Warning Event on a pod whose volumes could not be filled (the kubelet's reason)."""
ADMISSION_ERROR = "UnexpectedAdmissionError"
_XID_EXIT = 1
_LOST_GRACE_S = 5.0
"""How long processes told their GPU is lost (SIGUSR1) may take to exit before they are killed."""
FENCED_REASON = "NodeFenced"
"""Container termination reason (and Event) when the node killed its pods because it was cut off."""
_FENCED_EXIT = 137
_OOM_EXIT = 137


@dataclass(frozen=True)
class XidEntry:
    id: str
    gpu: int
    instance: int | None
    xid: int


def parse_xid_entries(raw: str) -> tuple[list[XidEntry], list[str]]:
    """The entries of a Node's ``firedrill.dev/inject-xid`` annotation, and a problem per entry skipped."""
    try:
        data = json.loads(raw)
    except ValueError as err:
        return [], [f"{XID_ANNOTATION} is not JSON: {err}"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return [], [f"{XID_ANNOTATION} must be a JSON list of entries"]
    out, problems = [], []
    for item in data:
        try:
            instance = item.get("instance")
            if isinstance(item.get("id"), bool) or item.get("id") in (None, ""):
                raise ValueError("no id")
            gpu, xid = item["gpu"], item["xid"]
            if any(isinstance(v, bool) or not isinstance(v, int) for v in (gpu, xid)) or (
                    instance is not None and (isinstance(instance, bool) or not isinstance(instance, int))):
                raise ValueError("gpu, xid and instance must be integers (instance may be null)")
            out.append(XidEntry(str(item["id"]), gpu, instance, xid))
        except (AttributeError, KeyError, ValueError) as err:
            problems.append(f"{XID_ANNOTATION} entry {item!r} skipped: {err}")
    return out, problems


def _quantity(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def pod_device_requests(pod: Obj) -> dict[str, int]:
    """The pod's extended resources: per container max(limit, request), summed over containers."""
    total: dict[str, int] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        for name in {*limits, *requests}:
            if "/" in name:
                total[name] = total.get(name, 0) + max(_quantity(limits.get(name, 0)), _quantity(requests.get(name, 0)))
    return total


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
class _PendingMount:
    """A pod whose volumes could not be filled yet: when to try again."""

    retry_at: float = 0.0
    backoff: Backoff = field(default_factory=lambda: Backoff(0.5, 10.0))


@dataclass
class PodWorker:
    """The agent's state for one pod uid."""

    uid: str
    namespace: str
    name: str
    container: str
    containers: list[str] = field(default_factory=list)
    ref: Obj = field(default_factory=dict)
    """The pod as an Event's ``involvedObject`` (from the latest copy seen)."""
    workload: Workload | None = None
    run: ContainerRun | None = None
    log: ContainerLog | None = None
    status_dirty: bool = False
    progress_sent: dict[str, str] = field(default_factory=dict)
    progress_sent_at: datetime | None = None
    delete_sent_at: float | None = None
    retry_at: float = 0.0
    backoff: Backoff = field(default_factory=Backoff)
    devices: str | None = None
    """The slice assigned at start (``<gpu>/<instance>``), written as the ``firedrill.dev/devices`` annotation."""
    devices_sent: bool = False
    memory_mib: int = 0
    """What the workload uses (the pod's ``firedrill.dev/memory-mib``)."""
    annotations: dict[str, str] = field(default_factory=dict)
    """The pod's annotations (latest copy seen), for the metrics collector."""
    gpu_request: int = 0
    """Whole ``nvidia.com/gpu`` the pod asks for (used by the metrics when the node has no device set)."""
    gpu_indices: tuple[int, ...] = ()
    """The whole GPUs the pod was given at start (:meth:`PodSync.visible_devices`)."""
    pod_ip: str | None = None
    """The pod's address (from the node's pod range; kept in the status after the pod ended)."""
    grace: float | None = None
    """The pod's grace period as last seen (used when the pod vanishes while its processes run)."""
    probes: dict[str, ReadinessTracker] = field(default_factory=dict)
    """Readiness of the containers that have a readiness probe, by container name."""
    probes_running: dict[str, Future[bool]] = field(default_factory=dict)
    """Probes sent and not yet collected, by container name."""

    def readiness(self) -> dict[str, bool]:
        """Container name -> whether its readiness probe passes (only the probed containers)."""
        return {name: tracker.ready for name, tracker in self.probes.items()}

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

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
        jobs: JobCoordinator | None = None,
        freeze_threshold: float = 2.0,
        events: PodEventRecorder | None = None,
        devices: DeviceSet | None = None,
        dirs: NodeDirs | None = None,
        addresses: PodAddressPool | None = None,
        driver: Device | None = None,
        host_ip: str = HOST_IP,
        shutdown_grace: float = 2.0,
        ignore_grace: bool = False,
        gpu_count: int = 0,
        mistell_gpus: bool = False,
        sick_gpu_stays: bool = False,
        gpu_stays_out: bool = False,
        overreact_app_xid: bool = False,
        gpu_lifecycle: LifecycleRules | None = None,
        link_bandwidth: float | None = None,
        visible_to_all: bool = False,
        api_seconds: Callable[[int], float] | None = None,
        atomic_rename: bool = True,
    ) -> None:
        """``tick``: longest wait between two reconcile passes; ``resync``: how long before an
        acknowledged DELETE is sent again for a pod the watch still shows; ``jobs``: links the
        ranks of jobs to their peers (without it every training pod trains alone);
        ``freeze_threshold``: a reconcile wait that overruns by more than this many seconds
        means the process was frozen; ``events``: records the pods' Events (none without it).

        ``dirs``: where pods' files live; with it, a pod whose containers have ``command`` runs
        them as real processes (:mod:`refplatform.agent.runtime`), without it every pod is
        simulated.  ``addresses``: the node's pod range (without it a pod's IP is a hash of its
        uid); ``driver``: the node's simulated GPU driver the processes report to;
        ``shutdown_grace``: how long :meth:`stop` lets processes exit after SIGTERM before SIGKILL;
        ``ignore_grace``: the ``drop-in-flight`` defect, a deleted pod's processes are killed at once.
        ``gpu_count``: the node's whole GPUs, whose identities a pod is told (:meth:`visible_devices`);
        ``mistell_gpus``: the ``gpu-double-book`` defect, every pod is told the node's first GPUs (or the first
        slice of its kind) whatever it was given; ``sick_gpu_stays``: the ``sick-gpu-stays`` defect, a failed GPU is
        never reported unhealthy (it stays allocatable); ``gpu_stays_out``: the ``gpu-stays-out`` defect, a GPU once
        reported unhealthy stays so after its Xid is cleared; ``overreact_app_xid``: the ``overreact-app-xid`` defect, an
        application Xid takes its GPU out of service too; ``gpu_lifecycle``: how a whole GPU whose Xid cleared comes
        back (burn-in, flap window, their defects: :mod:`refplatform.agent.gpuhealth`); ``visible_to_all``: the
        ``visible-to-all`` defect, every container can see and open every GPU of the node, whatever it requested
        (:mod:`refplatform.agent.devnodes`);
        ``atomic_rename``: False is the ``resume-torn`` defect, the driver's clocks file tells every container the
        node's storage does not keep the rename promise (``"atomic_rename": false``; :mod:`refplatform.gpu.throttle`).
        ``api_seconds``: how long a thread has waited for the API server
        (:meth:`GatedClient.api_seconds <refplatform.agent.partition.GatedClient.api_seconds>`), which
        :meth:`stalled_for` leaves out."""
        self.ignore_grace = ignore_grace
        self._api_seconds = api_seconds
        self._sync_thread: int | None = None
        self._api_at_pass = 0.0
        self.sick_gpu_stays = sick_gpu_stays
        self.gpu_stays_out = gpu_stays_out
        self.overreact_app_xid = overreact_app_xid
        self.link_bandwidth = link_bandwidth
        """The node's link in bytes per second, told every container (``FIREDRILL_LINK_BANDWIDTH``,
        :mod:`refplatform.fabric`); None: nothing is told."""
        self.dead_gpus: dict[int, int] = {}
        """Whole GPUs that failed (index -> Xid) while their injection stands: the device's truth, defects or not."""
        self.unhealthy: dict[int, int] = {}
        """Whole GPUs reported out of service (the device plugin's word: allocatable, ``firedrill.dev/unhealthy-gpus``):
        failed, in burn-in or held (:mod:`refplatform.gpu.lifecycle`)."""
        self._stuck: dict[int, int] = {}
        """``gpu-stays-out``: every GPU ever reported failed, which the lifecycle is told still fails."""
        self._saw: dict[int, Slice] = {}
        """Partitioned node: GPU -> the slice its standing Xid was seen on (what ``shared-health-lost`` takes out)."""
        self.slices_out: frozenset[Slice] = frozenset()
        """Partitioned node: the slices out of service (every slice of each GPU :attr:`unhealthy` names), never
        handed out; :meth:`withdrawn` is what they take off allocatable."""
        self.gpu_health = GpuHealthKeeper(node_name, gpu_count, gpu_lifecycle or LifecycleRules(), client=client,
                                          events=events, node_ref=lambda: self._node_ref)
        """The whole GPUs' way back into service: burn-in, flapping, a person's clear."""
        self.on_health: Any = None
        """Called (no arguments) when :attr:`unhealthy` or the GPU clocks change: the heartbeat reports it at once."""
        self._lost: dict[str, datetime] = {}
        """Workers (by uid) whose device was reported lost to their processes, and when."""
        self.throttle = Throttle()
        """What ``firedrill.dev/inject-throttle`` holds as last applied to the driver's clocks file."""
        self.atomic_rename = atomic_rename
        self._standing = Throttle()
        """What ``firedrill.dev/inject-throttle`` holds as last read (its storage stalls expire as time passes)."""
        self._clocks_doc: dict[str, Any] = clocks_document(Throttle(), str)
        """The clocks file's content as last written (at first: what a missing file means)."""
        self._clocks_lock = threading.Lock()
        """Serializes the clocks file's writes (the heartbeat thread on a Node read, the sync thread each pass)."""
        self._hangs: list[tuple[str, int]] = []
        """``hang`` entries seen and not yet applied: (entry id, GPU index)."""
        self._hang_seen: set[str] = set()
        """The ids of the ``hang`` entries ever seen (each is applied once, by this agent process)."""
        self.gpu_count = gpu_count
        self.mistell_gpus = mistell_gpus
        self.visible_to_all = visible_to_all
        self.client = client
        self.node_name = node_name
        self.store = store
        self.clock = clock
        self.tick = tick
        self.progress_interval = progress_interval
        self.watch_timeout = watch_timeout
        self.resync_after = resync
        self.jobs = jobs
        self.freeze_threshold = freeze_threshold
        self.events = events
        self.devices = devices
        self.dirs = dirs
        self.addresses = addresses
        self.driver = driver
        self.host_ip = host_ip
        self.shutdown_grace = shutdown_grace
        self._dying: dict[str, PodWorker] = {}
        """Workers of vanished pods whose processes are still terminating."""
        self._annotate_via_status = False
        """Set after the API refused the agent a patch of a pod (a real cluster's node identity)."""
        self._mounts: dict[str, _PendingMount] = {}
        self._env_objects: dict[str, dict[EnvSource, dict[str, str] | None]] = {}
        """The ConfigMaps and Secrets each pod's environment reads, fetched with its volumes."""
        """Pods (by uid) whose projected volumes could not be filled yet."""
        self._collected = False
        self._frozen_for = 0.0
        self.last_xid: dict[tuple[int, int | None], int] = {}
        """The last Xid injected per ``(gpu, instance)`` (instance None: the whole GPU), oldest first, for the metrics."""
        """The node's partitioned GPUs (docs/PARTITIONING.md); None: no slices, no memory or Xid faults."""
        self._fence_why: str | None = None
        self._xids: list[XidEntry] = []
        self._xid_seen: set[str] = set()
        self._xid_problems: set[str] = set()
        self._applied: list[str] = []
        self._applied_dirty = False
        self._applied_retry_at = 0.0
        self._node_ref: Obj = {"kind": "Node", "name": node_name, "uid": "", "apiVersion": "v1", "resourceVersion": ""}
        self.last_pass: float | None = None
        """``time.monotonic()`` of the start of the last reconcile pass (:meth:`stalled_for` reads it)."""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._interrupt = threading.Event()  # ends a watch backoff early (stop, resync)
        self._relist = threading.Event()
        self._thaw = threading.Event()
        self._retry_now = threading.Event()
        self._lock = threading.Lock()
        self._pods: dict[str, Obj] = {}
        self._synced = threading.Event()
        self._stream: Any = None
        self.workers: dict[str, PodWorker] = {}
        self._threads: list[threading.Thread] = []
        self._prober: Prober | None = None
        """Runs readiness probes (started with the first pod that has one)."""

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self._watch_loop, "pod-watch"), (self._sync_loop, "pod-sync")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both threads; the sync thread first ends every pod process (SIGTERM, ``shutdown_grace``, SIGKILL)."""
        self._stop.set()
        self._wake.set()
        self._interrupt.set()
        stream = self._stream
        if stream is not None:
            stream.stop()
        for t in self._threads:
            t.join(timeout + self.shutdown_grace)
        if not self._threads:
            self.shutdown_processes()
        if self._prober is not None:
            self._prober.close()
        self.store.close_all()

    def shutdown_processes(self) -> None:
        """End every running pod process: SIGTERM, up to ``shutdown_grace`` seconds, then SIGKILL (blocks).

        Called from the thread that started them (their parent-death signal follows that thread).
        """
        workloads = [w.workload for w in [*self.workers.values(), *self._dying.values()]
                     if isinstance(w.workload, ProcessWorkload) and w.workload.running]
        if not workloads:
            return
        now = self.clock.now()
        for wl in workloads:
            wl.terminate(now, self.shutdown_grace)
        deadline = time.monotonic() + self.shutdown_grace
        for wl in workloads:
            wl.wait(deadline - time.monotonic())
        for wl in workloads:
            wl.kill_now(now)
            wl.wait(1.0)
        log.info("stopped %d pod process group(s) of node %s", len(workloads), self.node_name)

    def fence(self, why: str) -> None:
        """The node fenced itself off (:mod:`refplatform.agent.fence`): kill every pod process on the next pass."""
        with self._lock:
            self._fence_why = why
        self._wake.set()

    def _apply_fence(self, now: datetime) -> None:
        with self._lock:
            why, self._fence_why = self._fence_why, None
        if why is None:
            return
        for worker in list(self.workers.values()):
            if isinstance(worker.workload, ProcessWorkload) and worker.workload.running:
                self._fail(worker, now, FENCED_REASON, _FENCED_EXIT, why, FENCED_REASON)

    def wait_synced(self, timeout: float) -> bool:
        """Whether the first list has arrived within ``timeout`` seconds."""
        return self._synced.wait(timeout)

    def pods(self) -> dict[str, Obj]:
        with self._lock:
            return dict(self._pods)

    def resync(self) -> None:
        """Relist now and retry every pending write now (the network is back)."""
        self._relist.set()
        self._retry_now.set()
        self._interrupt.set()
        stream = self._stream
        if stream is not None:
            stream.stop()
        self._wake.set()

    def note_freeze(self, seconds: float) -> None:
        """The process was frozen for ``seconds``: thaw every workload on the next pass, then resync."""
        self._frozen_for = max(self._frozen_for, seconds)
        self._thaw.set()
        self.resync()

    def note_node(self, node: Obj) -> None:
        """The Node as just read (heartbeat thread): queue the new ``firedrill.dev/inject-xid`` entries."""
        meta = node.get("metadata") or {}
        self._node_ref = {"kind": "Node", "name": self.node_name, "uid": str(meta.get("uid") or ""), "apiVersion": "v1",
                          "resourceVersion": str(meta.get("resourceVersion") or "")}
        annotations = meta.get("annotations") or {}
        self._note_throttle(annotations.get(THROTTLE_ANNOTATION))
        raw = annotations.get(XID_ANNOTATION)
        if not raw:
            self._note_health([], annotations)
            return
        try:
            applied = json.loads(annotations.get(XID_APPLIED_ANNOTATION) or "[]")
        except ValueError:
            applied = []
        if isinstance(applied, list):
            with self._lock:
                self._xid_seen.update(str(i) for i in applied)
        entries, problems = parse_xid_entries(str(raw))
        for problem in problems:
            if problem not in self._xid_problems:
                self._xid_problems.add(problem)
                log.warning("%s", problem)
        if self.devices is None:  # whole GPUs: an Xid of a MIG instance means nothing here
            entries = [e for e in entries if e.instance is None and 0 <= e.gpu < self.gpu_count]
        self._note_health(entries, annotations)
        with self._lock:
            new = [e for e in entries if e.id not in self._xid_seen]
            self._xid_seen.update(e.id for e in new)
            self._xids.extend(new)
        if new:
            self._wake.set()

    def _note_throttle(self, raw: str | None) -> None:
        """Level-triggered: the GPU clocks, input delay and storage stall standing in ``firedrill.dev/inject-throttle``
        go to the driver's clocks file, which the node's processes read each step (:mod:`refplatform.gpu.throttle`);
        its new ``hang`` entries are queued for the next pass (:meth:`_apply_hangs`)."""
        throttle, problems = parse_throttle(raw, self.gpu_count)
        for problem in problems:
            if problem not in self._xid_problems:
                self._xid_problems.add(problem)
                log.warning("%s", problem)
        with self._lock:
            new = [(i, g) for i, g in throttle.hangs.items() if i not in self._hang_seen]
            self._hang_seen.update(i for i, _ in new)
            self._hangs.extend(new)
        with self._clocks_lock:
            self._standing = throttle
            self._sync_clocks(self.clock.now())
        if new:
            self._wake.set()

    def _sync_clocks(self, now: datetime) -> None:
        """Write the clocks file when what it must say at ``now`` changed (a storage stall expires with time;
        ``resume-torn`` makes the file exist from the first pass).  The caller holds ``_clocks_lock``."""
        throttle = self._standing
        doc = clocks_document(throttle, lambda g: gpu_uuid(self.node_name, g), now=now.timestamp(),
                              atomic_rename=self.atomic_rename)
        if doc == self._clocks_doc:
            return
        if self.driver is not None:
            try:
                self.driver.write_clocks(doc)
            except OSError as exc:
                log.warning("node %s: cannot write the GPU clocks file: %s", self.node_name, exc)
                return
        if doc.get(STORAGE_STALLED_KEY) != self._clocks_doc.get(STORAGE_STALLED_KEY):
            until = doc.get(STORAGE_STALLED_KEY)
            log.warning("node %s: storage %s", self.node_name,
                        f"stalled until {datetime.fromtimestamp(until, now.tzinfo).isoformat()}" if until is not None
                        else "answers again")
        self._clocks_doc = doc
        clocks_changed = (throttle.gpu_speed, throttle.input_delay_s) != (self.throttle.gpu_speed,
                                                                          self.throttle.input_delay_s)
        self.throttle = throttle
        if not clocks_changed:
            return
        log.warning("node %s: GPU clocks %s, input delay %g s", self.node_name,
                    ", ".join(f"GPU {g} at {s:.0%}" for g, s in sorted(throttle.gpu_speed.items())) or "full",
                    throttle.input_delay_s)
        if self.on_health is not None:  # the node's report of its clocks goes out at once, not at the next status
            self.on_health()

    def _apply_hangs(self, now: datetime) -> None:
        """Each ``hang`` entry, once: SIGUSR2 to every process of each container holding that GPU now (the canary's
        compute then never ends, as a kernel stuck on the GPU; docs/PROGRESS.md).  A real hang reports nothing:
        no Event, no Xid, the GPU stays in service.  A GPU that no running pod holds when the entry is first seen
        hangs nobody."""
        with self._lock:
            hangs, self._hangs = self._hangs, []
        if not hangs:
            return
        running = self._running_workers()
        for entry, gpu in hangs:
            held = sorted(k for k, w in running.items()
                          if gpu in w.gpu_indices or (w.devices or "").split("/")[0] == str(gpu))
            hung = []
            for key in held:
                workload = running[key].workload
                if isinstance(workload, ProcessWorkload) and workload.signal_running(signal.SIGUSR2):
                    hung.append(key)
            log.warning("node %s: GPU %d hangs (injection %s): %s", self.node_name, gpu, entry,
                        f"SIGUSR2 to the processes of pod(s) {', '.join(hung)}" if hung else "no process holds it")

    def throttled_gpus(self) -> tuple[int, ...]:
        """The GPUs whose clocks the driver now holds below full speed (what DCGM's throttle reasons would say)."""
        return tuple(sorted(g for g, speed in self.throttle.gpu_speed.items() if speed < 1.0))

    def _note_health(self, entries: list[XidEntry], annotations: dict[str, str] | None = None) -> None:
        """Level-triggered: a whole GPU is dead while a GPU-class Xid for it stands in the annotation, and failed
        as the device plugin would judge it (application Xids excepted); once the rollback removed the entry it
        comes back through its burn-in (:mod:`refplatform.agent.gpuhealth`, which also reads the Node's
        ``inject-diag`` and ``clear-gpus`` from ``annotations``).  On a partitioned node a GPU is dead while an Xid
        stands that takes it out whole (:func:`refplatform.gpu.device.takes_gpu_out`), with every slice on it; the
        whole-GPU defects below act on whole GPUs only."""
        standing = [(e.gpu, e.instance, e.xid) for e in entries]
        if self.devices is not None:
            truth = self.devices.failing(standing)
            with self._lock:
                self.dead_gpus = dict(truth)
                self._saw = self.devices.saw(standing)
            self._gpu_health_moved(self.gpu_health.observe(truth, self.clock.now(), annotations))
            return
        truth = GpuHealth.of(standing, self.gpu_count).unhealthy
        if self.sick_gpu_stays:
            reported: dict[int, int] = {}
        elif self.overreact_app_xid:
            reported = {}
            for e in entries:
                reported.setdefault(e.gpu, e.xid)
        else:
            reported = dict(truth)
        if self.gpu_stays_out:  # what was reported out stays out, whatever the device says now
            reported = self._stuck = {**self._stuck, **reported}
        with self._lock:
            self.dead_gpus = dict(truth)
        self._gpu_health_moved(self.gpu_health.observe(reported, self.clock.now(), annotations))

    def _gpu_health_moved(self, changed: bool) -> None:
        """After the lifecycle stepped: what the node reports (allocatable, ``unhealthy-gpus``, ``gpu-health``)
        goes out at the next beat, which is kicked now."""
        out = self.gpu_health.out_of_service()
        with self._lock:
            changed = changed or out != self.unhealthy
            self.unhealthy = out
            if self.devices is not None:
                # the slices' list never changes after start: any thread may read it
                self.slices_out = self.devices.out_of_service(out, self._saw)
        if changed:
            log.warning("node %s: GPUs out of service: %s", self.node_name,
                        ", ".join(f"{g} ({s.value})" for g, s in self.gpu_health.states().items()) or "none")
            if self.on_health is not None:
                self.on_health()
            self._wake.set()

    def reported_unhealthy(self) -> tuple[int, ...]:
        """The whole GPUs the node reports out of service (indexes)."""
        with self._lock:
            return tuple(sorted(self.unhealthy))

    def withdrawn(self) -> dict[str, int]:
        """Partitioned node: what its slices out of service take off each advertised resource ({} otherwise)."""
        if self.devices is None:
            return {}
        with self._lock:
            out = self.slices_out
        return self.devices.withdrawn(out)

    # -- watcher -----------------------------------------------------------

    def _mine(self, pod: Obj) -> bool:
        return (pod.get("spec") or {}).get("nodeName") == self.node_name and bool(_meta(pod).get("uid"))

    def _watch_loop(self) -> None:
        path = resource_path("", "v1", "pods")
        selector = {"fieldSelector": f"spec.nodeName={self.node_name}"}
        rv: str | None = None
        backoff = Backoff(0.2, 5.0)
        while not self._stop.is_set():
            if self._relist.is_set():
                self._relist.clear()
                rv = None
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
                        if self._relist.is_set():
                            break
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
                self._backoff_wait(delay)
            except ApiUnreachable as err:
                self._stream = None
                delay = backoff.next_delay()
                log.log(logging.INFO if backoff.failures <= 2 else logging.DEBUG, "pod watch: %s (retry in %.1fs)", err, delay)
                if self._relist.is_set():
                    backoff.reset()
                    continue
                self._backoff_wait(delay)

    def _backoff_wait(self, delay: float) -> None:
        """Wait ``delay`` seconds, unless stopped or asked to resync first."""
        self._interrupt.wait(delay)
        self._interrupt.clear()

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

    def _api_waited(self) -> float:
        thread = self._sync_thread
        return 0.0 if self._api_seconds is None or thread is None else self._api_seconds(thread)

    def stalled_for(self) -> float | None:
        """Seconds the reconcile pass under way has taken, less what it spent waiting for the API server (None
        before the first pass); the agent's health check reads it. A pass blocked on a hung or unreachable API
        server is the control plane's outage, not this node's: the kubelet's Ready condition comes from its
        runtime, and only the node lifecycle controller judges the Lease."""
        # The loop writes last_pass, then _api_at_pass; reading them the other way round, a pass that begins in
        # between pairs the new start with the old wait, which subtracts too much: it errs towards Ready.
        at = self._api_at_pass
        last = self.last_pass
        if last is None:
            return None
        return max(0.0, time.monotonic() - last - (self._api_waited() - at))

    def pass_wait(self) -> float:
        """How long the loop waits for the next pass: ``tick`` at most, less when a GPU's burn-in ends sooner (so
        it ends on time, whatever else happens or not)."""
        due = self.gpu_health.next_change()
        if due is None:
            return self.tick
        return min(self.tick, max(0.0, due - self.clock.now().timestamp()))

    def _sync_loop(self) -> None:
        self._sync_thread = threading.get_ident()
        while not self._stop.is_set():
            before = time.monotonic()
            wait = self.pass_wait()
            woken = self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                break
            overrun = time.monotonic() - before - (0.0 if woken else wait)
            if overrun > self.freeze_threshold:
                log.warning("pod sync: a %.1fs wait overran by %.1fs (frozen?); thawing and resyncing", self.tick, overrun)
                self.note_freeze(overrun)
            self.last_pass = time.monotonic()
            self._api_at_pass = self._api_waited()
            try:
                self.sync_once()
            except Exception:  # the loop must survive anything; a bug shows in the log
                log.exception("pod sync pass failed")
        try:
            self.shutdown_processes()  # here: the processes' parent-death signal follows this thread
        except Exception:
            log.exception("stopping pod processes failed")

    def sync_once(self) -> None:
        """One level-triggered pass over every known pod and worker."""
        listed = self._synced.is_set()  # read before the pods: once set, the copy holds the first list
        pods = self.pods()
        now = self.clock.now()
        if self._thaw.is_set():
            self._thaw.clear()
            for worker in self.workers.values():
                if worker.workload is not None:
                    worker.workload.thaw(now)
            if self.driver is not None:
                self.driver.thaw(now, self._frozen_for)
            self._frozen_for = 0.0
        if self._retry_now.is_set():
            self._retry_now.clear()
            for worker in self.workers.values():
                worker.succeeded()
        # Retire the workers of vanished pods first: a pod recreated under the same name then starts clean.
        self._apply_fence(now)
        for uid in [u for u in self.workers if u not in pods]:
            self.reconcile(uid, None, now)
        for uid, worker in list(self._dying.items()):
            if self._halt(worker, now, worker.grace):
                del self._dying[uid]
                self._retire(worker)
        self._claim_addresses(pods)
        if not self._collected and self.dirs is not None and listed:
            self._collected = True
            self._collect_orphans(pods)
        if self.gpu_count and self.gpu_health.advance(now):  # a burn-in ends on time, whatever else happens
            self._gpu_health_moved(True)
        if self.devices is not None:  # before the reconcile, so this pass reports the pods it fails
            self._apply_faults(now)
        elif self.gpu_count:
            self._apply_gpu_faults(now)
        self._apply_hangs(now)
        with self._clocks_lock:
            self._sync_clocks(now)
        for uid in [u for u in self._mounts if u not in pods]:
            del self._mounts[uid]
        for uid in [u for u in self._env_objects if u not in pods]:
            del self._env_objects[uid]
        for uid in pods:
            self.reconcile(uid, pods[uid], now)

    def reconcile(self, uid: str, pod: Obj | None, now: datetime) -> None:
        worker = self.workers.get(uid)
        if pod is None:
            if worker is not None:
                del self.workers[uid]
                if self._halt(worker, now, worker.grace):
                    self._retire(worker)
                else:
                    self._dying[uid] = worker  # SIGTERM sent; finished on later passes
            return
        meta = _meta(pod)
        phase = (pod.get("status") or {}).get("phase")
        if worker is None and (meta.get("deletionTimestamp") or phase not in _TERMINAL):
            if not meta.get("deletionTimestamp") and not self._volumes_filled(uid, pod, now):
                return  # stays Pending until its projected volumes could be filled, as with the kubelet
            worker = self.workers[uid] = PodWorker(
                uid, str(meta.get("namespace") or "default"), str(meta["name"]), _first_container(pod),
                _container_names(pod), pod_reference(pod),
            )
            if not meta.get("deletionTimestamp"):
                self._start(worker, pod, now)
                if self.devices is None and not worker.gpu_indices:  # a simulated workload: the books' GPUs
                    worker.gpu_indices = self._bound_gpus(pod)
        if worker is None:
            return
        worker.ref = pod_reference(pod)  # the latest copy (its resourceVersion) for the next Event
        worker.memory_mib = _quantity((meta.get("annotations") or {}).get(MEMORY_ANNOTATION, 0) or 0)
        worker.annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        worker.gpu_request = pod_device_requests(pod).get("nvidia.com/gpu", 0)
        worker.grace = grace_seconds(pod)
        if meta.get("deletionTimestamp"):
            if self._halt(worker, now, 0.0 if self.ignore_grace else grace_seconds(pod)):
                self._delete(worker)
            return
        if worker.workload is not None and worker.workload.running:
            if phase in _TERMINAL and worker.run is not None and worker.run.exit is None and not worker.status_dirty:
                # Someone else ended the pod: kill its container.
                self._halt(worker, now, grace_seconds(pod))
            else:
                self._advance(worker, now)
                self._probe(worker)
        if time.monotonic() < worker.retry_at:
            return
        if worker.devices is not None and not worker.devices_sent:
            self._publish_devices(worker)
            if time.monotonic() < worker.retry_at:
                return
        if not worker.status_dirty and worker.run is not None and worker.run.exit is None and \
                _api_ready(pod) is False and _api_ready({"status": pod_status(
                    pod, worker.run, now, worker.pod_ip, self.host_ip, probed=worker.readiness())}):
            # Someone else marked the pod not ready (the node lifecycle, on a blip) where we see it ready: report
            # our own readiness, as the kubelet's status manager reconciles the API server's copy.
            worker.status_dirty = True
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
            containers = (pod.get("spec") or {}).get("containers") or []
            probes = [p for i, c in enumerate(containers) if isinstance(c, dict)
                      for p in [readiness_probe(c, f"spec.containers[{i}]")] if p is not None]
            if self.addresses is not None:
                worker.pod_ip = self.addresses.allocate(worker.uid)
            self._allocate(worker, pod, annotations)
            if self.dirs is not None and has_command(pod):
                workload = self._process_workload(worker, pod)
            else:
                gang, checkpoints = self._links(worker, pod)
                workload = workload_for(annotations, gang, checkpoints)
            lines = workload.start(now)
        except (WorkloadConfigError, AllocationError, PodAddressError) as err:
            reason = ADMISSION_ERROR if isinstance(err, AllocationError) else "StartError"
            worker.log.append([LogLine(now, f"{rfc3339_millis(now)} cannot start workload: {err}")])
            worker.run = ContainerRun(now, restart_count, Exit(_START_ERROR_EXIT, reason, now, str(err)), last_terminated)
            worker.status_dirty = True
            self.store.close_pod(worker.namespace, worker.name, worker.uid)
            self._detach(worker)
            log.warning("pod %s: %s", _key(pod), err)
            return
        worker.workload = workload
        # The container started when its workload did, not when this pass began: a pass that starts several
        # pods (a gang's replacement ranks) spawns them one after another, and the status written just below
        # is what a watcher sees, so the stamp is taken here.
        started_at = self.clock.now()
        worker.run = ContainerRun(started_at, restart_count, None, last_terminated)
        started = time.monotonic()
        worker.probes = {p.container: ReadinessTracker(p, started) for p in probes}
        worker.log.append(lines)
        worker.status_dirty = True
        log.info("pod %s: started %s workload (restartCount %d)", _key(pod), workload.kind, restart_count)
        for name in worker.containers:  # at the instant reported as every container's startedAt
            self._record(worker, "Normal", STARTED, f"Started container {name}", started_at, name)
        self._record_workload_events(worker)
        self._check_exit(worker)

    def _volumes_filled(self, uid: str, pod: Obj, now: datetime) -> bool:
        """Fill the pod's projected, configMap, secret and downwardAPI volumes before its processes start.

        True when there is nothing to fill, it is filled, or the spec is bad (the start then fails the pod
        naming the field); False while a fetch fails (retried with backoff; a ``FailedMount`` Event each time)."""
        if self.dirs is None or not has_command(pod):
            return True
        pending = self._mounts.get(uid)
        if pending is not None and time.monotonic() < pending.retry_at:
            return False
        try:
            volumes, _problems = pod_volumes(pod, self.dirs)
        except ContainerSpecError:
            return True
        filled = [v for v in volumes.values() if v.projected]
        if not filled and not env_sources(pod):
            return True
        facts = PodFacts.of(pod, "", self.host_ip)
        projector = Projector(self.client)
        try:
            contents = [(v, projector.files(pod, v.sources, v.default_mode, facts)) for v in filled]
            self._env_objects[uid] = projector.env_objects(pod, facts.namespace)
            for volume, files in contents:
                write_files(volume.directory, files)
        except (ProjectionError, ContainerSpecError, OSError) as err:
            pending = self._mounts.setdefault(uid, _PendingMount())
            delay = pending.backoff.next_delay()
            pending.retry_at = time.monotonic() + delay
            log.log(logging.WARNING if pending.backoff.failures <= 1 else logging.DEBUG,
                    "pod %s: cannot fill its volumes (retry in %.1fs): %s", _key(pod), delay, err)
            if self.events is not None:
                self.events.record(pod_reference(pod), "Warning", FAILED_MOUNT, f"MountVolume.SetUp failed: {err}", now)
            return False
        self._mounts.pop(uid, None)
        return True

    def _process_workload(self, worker: PodWorker, pod: Obj) -> ProcessWorkload:
        """The pod's containers as real processes (ContainerSpecError for a spec the agent cannot run)."""
        assert self.dirs is not None
        facts = PodFacts.of(pod, worker.pod_ip or "", self.host_ip)
        socket_path = str(self.driver.path) if self.driver is not None else None
        node_gpus = [DeviceGrant(g, gpu_uuid(self.node_name, g), GPU) for g in range(self.gpu_count)]
        given = container_devices(pod, self.gpu_grants(worker, pod), node_gpus, visible_to_all=self.visible_to_all)
        specs = process_specs(pod, facts, self.dirs, link_bandwidth=self.link_bandwidth,
                              device_socket=socket_path, devices=given,
                              env_objects=self._env_objects.get(worker.uid, {}))
        logs = {name: self.store.open(worker.namespace, worker.name, name, fresh=False, owner=worker.uid)
                for name in worker.containers}
        annotations = _meta(pod).get("annotations") or {}
        return ProcessWorkload(worker.uid, specs, logs, self.clock, self.driver,
                               publish_step_seconds=ANN_STEP_SECONDS not in annotations)

    def _bound_gpus(self, pod: Obj) -> tuple[int, ...]:
        """The whole GPUs the scheduler bound the pod to (``firedrill.dev/gpu-index``), those the node has."""
        return tuple(int(i) for i in (_meta(pod).get("annotations") or {}).get(GPU_INDEX_ANNOTATION, "").split(",")
                     if i.strip().isdigit() and int(i) < self.gpu_count)

    def visible_devices(self, worker: PodWorker, pod: Obj) -> str | None:
        """What the device plugin tells the pod it holds (``NVIDIA_VISIBLE_DEVICES``, :meth:`gpu_grants`); None
        for a pod given no GPU."""
        grants = self.gpu_grants(worker, pod)
        return None if grants is None else visible_devices(g.identity for g in grants)

    def gpu_grants(self, worker: PodWorker, pod: Obj) -> tuple[DeviceGrant, ...] | None:
        """What the device plugin gives the pod: its slice on a partitioned node (a MIG instance, named by its
        UUID, or a shared replica, named by its GPU's), else the GPUs the scheduler chose (``firedrill.dev/gpu-index``)
        or, for a pod another scheduler bound, the lowest GPUs no other pod of the node holds (as the kubelet's
        device manager picks), each named by its UUID; None for a pod given no GPU."""
        if self.devices is not None:
            held = self.devices.by_pod.get(worker.key)
            if held is None:
                return None
            if self.mistell_gpus:  # gpu-double-book: the first slice of its kind, whoever holds it
                held = next(s for s in self.devices.slices if s.resource == held.resource)
            return (DeviceGrant(held.gpu, gpu_uuid(self.node_name, held.gpu) if held.instance is None
                                else mig_uuid(self.node_name, held.gpu, held.instance), held.resource),)
        wanted = pod_device_requests(pod).get(GPU, 0)
        if not wanted:
            return None
        indices = list(self._bound_gpus(pod))
        if not indices:  # bound by another scheduler (kube-scheduler): the kubelet's device manager picks free GPUs
            taken = {g for w in self.workers.values() if w is not worker for g in w.gpu_indices}
            taken |= set(self.reported_unhealthy())  # and never one its device plugin reports unhealthy
            indices = [g for g in range(self.gpu_count) if g not in taken][:wanted]
            if len(indices) < wanted:
                return None  # more than the node has free: nothing honest to tell
        worker.gpu_indices = tuple(indices)
        if self.mistell_gpus:  # gpu-double-book: the books say `indices`, the pod is told the first GPUs
            indices = list(range(min(len(indices), self.gpu_count)))
        return tuple(DeviceGrant(g, gpu_uuid(self.node_name, g), GPU) for g in indices)

    def _claim_addresses(self, pods: dict[str, Obj]) -> None:
        """Reserve the addresses live pods already report (they ran under a previous agent process)."""
        if self.addresses is None:
            return
        for uid, pod in pods.items():
            if uid in self.workers or self.addresses.address_of(uid) is not None:
                continue
            status = pod.get("status") or {}
            ip = status.get("podIP")
            if ip and status.get("phase") not in _TERMINAL and not _meta(pod).get("deletionTimestamp"):
                self.addresses.claim(uid, str(ip))

    def _collect_orphans(self, pods: dict[str, Obj]) -> None:
        """Remove the directories of pods deleted while no agent ran (the kubelet's orphan cleanup)."""
        assert self.dirs is not None
        live = set(pods) | set(self.workers) | set(self._dying)
        for uid in self.dirs.pod_uids():
            if uid not in live:
                self.dirs.remove_pod(uid)
                log.info("removed the directory of deleted pod %s", uid)

    def _retire(self, worker: PodWorker) -> None:
        """The pod is gone and nothing of it runs: forget its logs, release its address, remove its files."""
        self.store.forget_pod(worker.namespace, worker.name, worker.uid)
        self._detach(worker)
        if self.dirs is not None:
            self.dirs.remove_pod(worker.uid)

    def _links(self, worker: PodWorker, pod: Obj) -> tuple[Gang | None, CheckpointLink | None]:
        """A training rank of a job gets its gang and checkpoint link; anything else runs alone."""
        if self.jobs is None or workload_kind(_meta(pod).get("annotations")) != TrainingWorkload.kind:
            return None, None
        spec = RankSpec.from_pod(pod)
        if spec is None:
            return None, None
        link = self.jobs.attach(worker.uid, spec)
        return link, link

    def _allocate(self, worker: PodWorker, pod: Obj, annotations: Obj) -> None:
        """Assign the pod its slice (a device plugin's Allocate); AllocationError when none is free."""
        if self.devices is None:
            return
        previous = annotations.get(DEVICES_ANNOTATION)
        with self._lock:
            unhealthy = self.slices_out
        chosen = self.devices.allocate(worker.key, pod_device_requests(pod), prefer=previous, unhealthy=unhealthy)
        if chosen is not None:
            worker.devices = chosen.annotation
            worker.devices_sent = previous == chosen.annotation
            log.info("pod %s: assigned GPU slice %s (%s)", worker.key, chosen.annotation, chosen.resource)

    def _annotate(self, worker: PodWorker, annotations: dict[str, Any]) -> None:
        """Merge ``annotations`` into the pod's.  A real kube-apiserver lets a node identity write only
        ``pods/status`` of its pods (Node authorizer, NodeRestriction), and that subresource keeps metadata
        changes except labels and ownerReferences: after one 403 on the pod itself the agent writes its
        annotations there.  (The reference API server lets the agent patch the pod, so it never switches.)"""
        body = {"metadata": {"annotations": annotations}}
        if not self._annotate_via_status:
            try:
                self.client.patch(worker.path, body, MERGE_PATCH)
                return
            except ApiStatusError as err:
                if err.code != 403:
                    raise
                self._annotate_via_status = True
                log.info("node %s may not patch pods (%s); writing pod annotations through pods/status",
                         self.node_name, err.message or err.reason)
        self.client.patch(worker.path + "/status", body, MERGE_PATCH)

    def _publish_devices(self, worker: PodWorker) -> None:
        try:
            self._annotate(worker, {DEVICES_ANNOTATION: worker.devices})
        except (ApiStatusError, ApiUnreachable) as err:
            if isinstance(err, ApiStatusError) and err.not_found:
                return
            worker.failed("devices annotation of", err)
            return
        worker.devices_sent = True
        worker.succeeded()

    def _take_xids(self) -> list[XidEntry]:
        """The injections new since the last pass, recorded as applied on the Node."""
        with self._lock:
            xids, self._xids = self._xids, []
        if xids:
            self._applied.extend(e.id for e in xids)
            self._applied = self._applied[-_APPLIED_KEPT:]
            self._applied_dirty = True
        if self._applied_dirty:
            self._publish_applied()
        return xids

    def _running_workers(self) -> dict[str, PodWorker]:
        return {w.key: w for w in self.workers.values()
                if w.workload is not None and w.workload.running and w.run is not None and w.run.exit is None}

    def _apply_gpu_faults(self, now: datetime) -> None:
        """Whole GPUs: each injected Xid fails the processes of the pods on that GPU (an application Xid as much
        as a GPU's: their kernel faulted), and a GPU that stays dead fails any pod that runs on it later."""
        xids = self._take_xids()
        running = self._running_workers()
        with self._lock:
            dead = dict(self.dead_gpus)
        for e in xids:
            self.last_xid.pop((e.gpu, None), None)
            self.last_xid[(e.gpu, None)] = e.xid
            victims = sorted(k for k, w in running.items() if e.gpu in w.gpu_indices)
            message = xid_message(e.gpu, None, e.xid)
            judged = "out of service" if e.gpu in self.unhealthy else "still in service (an application error)"
            node_message = (f"{message} (injection {e.id}), GPU {judged}: "
                            + (f"failed pod(s) {', '.join(victims)}" if victims else "no pod affected"))
            log.warning("node %s: %s", self.node_name, node_message)
            if self.events is not None:
                self.events.record(dict(self._node_ref), "Warning", XID_EVENT, node_message, now)
            for key in victims:
                held = list(running[key].gpu_indices)
                self._lose_device(running[key], now, e.xid, f"{message}; the pod's GPUs {held}")
        for key, worker in running.items():
            bad = [g for g in worker.gpu_indices if g in dead]
            if bad and worker.uid not in self._lost:
                self._lose_device(worker, now, dead[bad[0]], f"{xid_message(bad[0], None, dead[bad[0]])}; the pod was "
                                                             f"started on GPU {bad[0]}, which had failed")
            told = self._lost.get(worker.uid)
            if told is not None and (now - told).total_seconds() >= _LOST_GRACE_S:
                self._fail(worker, now, "GPULost", _XID_EXIT, "the processes went on after their GPU was lost",
                           None)
        for uid in [u for u in self._lost if u not in self.workers]:
            del self._lost[uid]

    def _lose_device(self, worker: PodWorker, now: datetime, xid: int, message: str) -> None:
        """Tell the pod's processes their GPU is lost (SIGUSR1: the canary's next call fails and it exits with
        the error it logs); a simulated workload just ends."""
        self._lost[worker.uid] = now
        self._record(worker, "Warning", XID_EVENT, message, now)
        if isinstance(worker.workload, ProcessWorkload) and worker.workload.signal_running(signal.SIGUSR1):
            log.warning("pod %s: %s (SIGUSR1 to its processes)", worker.key, message)
            return
        self._fail(worker, now, f"GPUXid{xid}", _XID_EXIT, message, None)

    def _apply_faults(self, now: datetime) -> None:
        """Injected Xids (each once), then memory overuse, against the pods holding slices."""
        assert self.devices is not None
        xids = self._take_xids()
        running = self._running_workers()
        for e in xids:
            self.last_xid.pop((e.gpu, e.instance), None)  # the dict's order is the injection order
            self.last_xid[(e.gpu, e.instance)] = e.xid
            victims = sorted(k for k in self.devices.apply_xid(e.gpu, e.instance, e.xid) if k in running)
            message = xid_message(e.gpu, e.instance, e.xid)
            with self._lock:
                out = [s for s in self.slices_out if s.gpu == e.gpu]
            if any(s.instance is not None for s in out):  # MIG: the instances, by name
                judged = f", slices {', '.join(sorted(s.annotation for s in out))} out of service"
            else:
                judged = f", {len(out)} slice{'' if len(out) == 1 else 's'} of GPU {e.gpu} out of service" if out else ""
            node_message = f"{message} (injection {e.id}){judged}: " + (
                f"failed pod(s) {', '.join(victims)}" if victims else "no pod affected")
            log.warning("node %s: %s", self.node_name, node_message)
            if self.events is not None:
                self.events.record(dict(self._node_ref), "Warning", XID_EVENT, node_message, now)
            for key in victims:
                worker = running.pop(key)
                self._fail(worker, now, f"GPUXid{e.xid}", _XID_EXIT,
                           f"{message}; the pod's GPU slice {worker.devices} was affected", XID_EVENT)
        usage = {k: w.memory_mib for k, w in running.items() if w.devices is not None}
        for key, message in sorted(self.devices.check_memory(usage).items()):
            if key in running:
                self._fail(running[key], now, OOM_REASON, _OOM_EXIT, f"out of GPU memory: {message}", None)

    def _publish_applied(self) -> None:
        """Record the applied injection ids on the Node (best effort, retried on later passes)."""
        if time.monotonic() < self._applied_retry_at:
            return
        path = resource_path("", "v1", "nodes", None, self.node_name)
        try:
            self.client.patch(path, {"metadata": {"annotations": {XID_APPLIED_ANNOTATION: json.dumps(self._applied)}}},
                              MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as err:
            self._applied_retry_at = time.monotonic() + 1.0
            log.info("recording applied Xid injections on node %s failed (retrying): %s", self.node_name, err)
            return
        self._applied_dirty = False

    def _fail(self, worker: PodWorker, now: datetime, reason: str, code: int, message: str, event: str | None) -> None:
        """End a running workload with ``reason`` (a GPU fault): the pod goes Failed on this pass."""
        assert worker.workload is not None and worker.log is not None
        worker.log.append(worker.workload.advance(now))
        if worker.workload.running:
            worker.log.append([LogLine(now, f"{rfc3339_millis(now)} {message}")])
            if isinstance(worker.workload, ProcessWorkload):
                worker.workload.fail(now, Exit(code, reason, now, message))
            else:
                worker.workload.exit = Exit(code, reason, now, message)
        if event is not None:
            self._record(worker, "Warning", event, message, now)
        log.warning("pod %s: %s (%s)", worker.key, message, reason)
        self._check_exit(worker)

    def _detach(self, worker: PodWorker) -> None:
        if self.devices is not None:
            self.devices.release(worker.key)
        if self.jobs is not None:
            self.jobs.detach(worker.uid)
        if self.addresses is not None:
            self.addresses.release(worker.uid)  # the status keeps showing it (worker.pod_ip)

    def _advance(self, worker: PodWorker, now: datetime) -> None:
        assert worker.workload is not None and worker.log is not None
        worker.log.append(worker.workload.advance(now))
        self._record_workload_events(worker)
        self._check_exit(worker)

    def _probe(self, worker: PodWorker) -> None:
        """Collect finished readiness probes (a change of readiness makes the status dirty), send due ones."""
        if not worker.probes or worker.run is None or worker.run.exit is not None:
            return
        mono = time.monotonic()
        for name, tracker in worker.probes.items():
            sent = worker.probes_running.get(name)
            if sent is not None and sent.done():
                del worker.probes_running[name]
                ok = not sent.cancelled() and sent.exception() is None and bool(sent.result())
                if tracker.record(ok):
                    worker.status_dirty = True
                    log.info("pod %s/%s: container %s readiness probe %s: %s", worker.namespace, worker.name,
                             name, "passed" if ok else "failed", "ready" if tracker.ready else "not ready")
            if tracker.due(mono):
                if self._prober is None:
                    self._prober = Prober()
                tracker.begin(mono)
                worker.probes_running[name] = self._prober.submit(worker.pod_ip or pod_ip_for(worker.uid),
                                                                  tracker.probe)

    def _container_exits(self, worker: PodWorker) -> None:
        """Real processes: report each container that ended while others of its pod run."""
        wl, run = worker.workload, worker.run
        if not isinstance(wl, ProcessWorkload) or run is None:
            return
        exits = wl.container_exits()
        if exits != dict(run.container_exits or {}):
            worker.run = ContainerRun(run.started_at, run.restart_count, run.exit, run.last_terminated, exits)
            worker.status_dirty = True

    def _check_exit(self, worker: PodWorker) -> None:
        assert worker.workload is not None and worker.run is not None
        self._container_exits(worker)
        ended = worker.workload.exit
        if ended is not None and worker.run.exit is None:
            worker.run = ContainerRun(worker.run.started_at, worker.run.restart_count, ended, worker.run.last_terminated,
                                      worker.run.container_exits)
            worker.status_dirty = True
            self.store.close_pod(worker.namespace, worker.name, worker.uid)
            self._detach(worker)
            log.info("pod %s/%s: workload exited %d (%s)", worker.namespace, worker.name, ended.code, ended.reason)

    def _halt(self, worker: PodWorker, now: datetime, grace: float | None) -> bool:
        """Stop the workload (SIGTERM) if it runs; True once nothing of it runs (its log then ends).

        A simulated workload ends at once.  Real processes get SIGTERM on the first call and
        SIGKILL on the first call after ``grace`` seconds (the pod's; ``None``: the default);
        each pass calls again until they are gone, so the sync loop never waits.
        """
        wl = worker.workload
        if isinstance(wl, ProcessWorkload) and wl.running:
            if not wl.stopping:
                wl.terminate(now, DEFAULT_GRACE_SECONDS if grace is None else grace)
                for name in worker.containers:
                    self._record(worker, "Normal", KILLING, f"Stopping container {name}", now, name)
            wl.advance(now)
            self._record_workload_events(worker)
            if wl.running:
                return False
            log.info("pod %s/%s: processes stopped (exit %d)", worker.namespace, worker.name,
                     wl.exit.code if wl.exit else -1)
        elif worker.workload is not None and worker.workload.running:
            lines = worker.workload.stop(now)
            if worker.log is not None:
                worker.log.append(lines)
            self._record_workload_events(worker)  # what it did on its way out comes first
            if worker.workload.killed:
                for name in worker.containers:
                    self._record(worker, "Normal", KILLING, f"Stopping container {name}", now, name)
            log.info("pod %s/%s: workload stopped", worker.namespace, worker.name)
        self.store.close_pod(worker.namespace, worker.name, worker.uid)
        self._detach(worker)
        return True

    def _record(self, worker: PodWorker, event_type: str, reason: str, message: str, when: datetime,
                container: str | None = None) -> None:
        """Queue an Event on the worker's pod (best effort; never blocks or raises)."""
        if self.events is None:
            return
        ref = worker.ref or {"kind": "Pod", "namespace": worker.namespace, "name": worker.name, "uid": worker.uid,
                             "apiVersion": "v1", "resourceVersion": ""}
        self.events.record(ref, event_type, reason, message, when,
                           field_path=container_field_path(container or worker.container))

    def _record_workload_events(self, worker: PodWorker) -> None:
        """The workload's own transitions (a rank's Resumed, Fenced), at the instants it stamped."""
        if worker.workload is None:
            return
        for ev in worker.workload.take_events():
            self._record(worker, ev.type, ev.reason, ev.message, ev.at)

    def _report_status(self, worker: PodWorker, pod: Obj, now: datetime) -> None:
        assert worker.run is not None
        status = pod_status(pod, worker.run, now, worker.pod_ip, self.host_ip, probed=worker.readiness())
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
        gone: dict[str, Any] = {k: None for k in worker.progress_sent if k not in progress}
        try:
            self._annotate(worker, {**progress, **gone})  # a claim the workload no longer makes is removed
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
        if mono < worker.retry_at or (worker.delete_sent_at is not None and mono - worker.delete_sent_at < self.resync_after):
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


def _api_ready(pod: Obj) -> bool | None:
    """The pod's Ready condition as the API server holds it (None: no such condition yet)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return None


def _container_names(pod: Obj) -> list[str]:
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name")]
    return names or ["main"]


def _first_container(pod: Obj) -> str:
    return _container_names(pod)[0]
