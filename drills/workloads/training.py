"""A canary training job the harness starts and follows, and the node under one of its ranks pulled: detect,
evict, replace, resume, each timed.  The node pull drill (:mod:`drills.kinds.nodepull`) is this run judged; the
leak drill runs it to open its stall and fault-tolerance holes, the serving drill as the low-priority training.

Steady state before (a canary job running whole, a checkpoint written) ->
act (pull the node hosting one rank, confirm the fault) -> observe (each
phase instant, from the harness's watches and from the platform's Events) ->
steady state after (the job trains again) -> rollback (the fault undone,
everything the drill made deleted).

Instants, exactly as DESIGN.md defines them (all on the harness's monotonic
clock, with the wall clock and the platform's stamp beside them):

- ``t_fault``: the fault action returned and was confirmed;
- ``t_detect``: the node's Ready condition leaves True, or an
  unreachable/not-ready taint appears;
- ``t_evict``: no pod of the job remains bound to the pulled node in a
  non-terminal phase and not being deleted (on a real cluster a pod of a
  dead node keeps its phase until its kubelet returns: its deletion by the
  taint-eviction controller is the eviction);
- ``t_replace``: the job again has minMember pods Running, all on healthy nodes;
- ``t_resume``: a replacement rank of the canary logs a step beyond the step it resumed from (the harness
  follows every rank's log through ``pods/log``; the instant is when the harness received that line).

Truth comes from the workload, never from the platform: the instants come from the harness's own watches and
the canary's log lines (:mod:`drills.workloads.canarylog`); the platform's Events are shown beside them as its claim.
The resume point must be the last checkpoint the canary completed before the fault, or the scenario FAILs
naming both steps (a platform that loses a checkpoint restarts training from further back); lost steps =
the highest step any rank logged before the fault - the step the job resumed from.  A rank of the replaced
job that still logs steps after the job resumed elsewhere (split brain) FAILs it too.

A fault that cannot be confirmed makes the scenario INCONCLUSIVE, never PASS.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from drills.kube.driver import EVENT, NODE, POD, RESOURCES, KubeError, Resource
from drills.kube.flavors import (JOB_COMPLETION_INDEX_ANNOTATION, TRAINING_JOB_FLAVORS, WORKER_INDEX_LABEL, GangFlavor,
                                 GangSpec, VolcanoForm, gang_manifests, indexed_job, run_selector)
from drills.kube.logs import LogFollower, LogLine
from drills.kube.timeline import parse_time, wait_for
from drills.records.verdict import DrillInconclusive, DrillResult, Measurement
from drills.target.access import CLUSTER, READ, Permission, grant
from drills.target.capacity import free_gpus_per_node
from drills.target.connect import Target
from drills.target.profile import FaultMethod, TargetProfile
from drills.target.safety import check_blast_radius, eligible_nodes
from drills.workloads.canaryjob import CanaryForm, CanaryTraining, canary_job_spec, storage_problem
from drills.workloads.canarylog import CanaryEvent, CanaryLine, CanaryLog, Resumption, parse_line
from drills.workloads.progress import CheckpointWrite, checkpoint_writes

GPU_INDEX_ANNOTATION = "firedrill.dev/gpu-index"
"""The reference platform's Binding annotation: the GPU indexes the scheduler chose for the pod (used to aim)."""

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
PHASES = ("detect", "evict", "replace", "resume", "total")
GRACE_SHARE, GRACE_MIN = 0.25, 1.0
"""Past a phase's threshold the drill waits this share of it (at least GRACE_MIN seconds) more, so that a phase
missed by a little is reported with its value; later than that the promise is broken whatever comes, and the
scenario ends (fail fast: a broken platform ends about as fast as an honest one passes)."""


def grace(limit: float) -> float:
    """Seconds a phase of threshold ``limit`` is waited for past the threshold before it is called never."""
    return max(GRACE_MIN, limit * GRACE_SHARE)
ROLLBACK_READY_TIMEOUT = 30.0
"""Seconds the rollback waits for the pulled node to be Ready again (embedded platform)."""
FENCE_SETTLE = 3.0
"""Seconds after the resume during which a rank of the replaced job must log no step (split brain)."""
VOLCANO_JOB = RESOURCES[("batch.volcano.sh/v1alpha1", "Job")]
BATCH_JOB = RESOURCES[("batch/v1", "Job")]
PEER_TIMEOUT = 3.0
"""Seconds a rank of a batch/v1 Indexed Job waits on a lost peer before it exits, so the Job controller starts it
again and every rank rejoins one world (a Volcano Job restarts every rank itself)."""
RANK_KEYS = ("firedrill.dev/rank", "volcano.sh/task-index", JOB_COMPLETION_INDEX_ANNOTATION)
"""Pod annotations that may carry a rank (the reference platform's, Volcano's, the Job controller's)."""
UNHEALTHY_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
JOB_FAILED_REASONS = ("JobFailed", "BackoffLimitExceeded", "DeadlineExceeded")
PROGRESS_TIMEOUT_ANNOTATION = "firedrill.dev/progress-timeout-seconds"
"""On the canary's Job: the progress threshold a scenario states.  The reference platform's progress watchdog
watches the jobs that carry it (docs/PROGRESS.md); on another platform it is the scenario's record of the promise."""
PROGRESS_STALLED = "ProgressStalled"
"""The reason of the Event on the Job (and of the DisruptionTarget condition on its pods) that names a hung job."""
"""Event reasons of a job its controller gave up on (Volcano's, the batch/v1 Job controller's)."""


def rank_of(pod: Obj) -> int | None:
    """The canary rank a pod runs, from the annotation its job controller wrote (or the gang's index label)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    for value in [*(annotations.get(k) for k in RANK_KEYS), (meta.get("labels") or {}).get(WORKER_INDEX_LABEL)]:
        if value is not None and str(value).isdigit():
            return int(value)
    return None


def event_time(event: Obj, since: float) -> float | None:
    """The platform's stamp of an Event's occurrence at or after ``since``: a repeat of the same Event
    keeps its first eventTime and stamps the new one in series.lastObservedTime (both microseconds)."""
    for raw in ((event.get("series") or {}).get("lastObservedTime"), event.get("eventTime"),
                event.get("lastTimestamp")):
        ts = parse_time(raw)
        if ts is not None and ts >= since:
            return ts
    return None


@dataclass
class Instant:
    mono: float
    wall: float
    server: float | None = None


RESTAMP_WAIT = 1.0
"""Seconds the rollback waits for a platform's Event stamping an instant the harness already measured."""

RENDEZVOUS_GRACE = 10.0
"""Seconds after the last rank of a canary job started within which its world must have formed."""

INTO_WRITE = 1 / 3
"""How far into a checkpoint write, as a share of the time the scenario asked each write to take, a pull "in the
middle of a checkpoint write" lands: part of the checkpoint is on the storage then and part is not. At the write's
very start the pull may land before the writer has created any file (the harness acts on the ``checkpoint-begin``
line, and the writer opens its file milliseconds after it), and nothing is torn; a third in leaves two thirds of
the write for the line's delivery and the fault command."""


def training_job_problem(profile: TargetProfile) -> str | None:
    """Why ``profile``'s flavor has no training job to run the canary as (kai today), or None; the storage the
    canary needs is :func:`drills.workloads.canaryjob.storage_problem`."""
    if profile.flavor is GangFlavor.VOLCANO or profile.flavor in TRAINING_JOB_FLAVORS:
        return storage_problem(profile)
    return (f"the training drills run their canary as a Volcano Job (flavor volcano) or a batch/v1 Indexed Job "
            f"(flavors native and kueue); flavor {profile.flavor.value} has no training job written yet")


def training_permissions(profile: TargetProfile, why: str) -> list[Permission]:
    """What running the training canary asks of the API: its Job (a Volcano Job, or a batch/v1 Indexed Job), its
    pods and their logs (the truth), the Nodes they run on, and Events of every namespace (the platform's own
    stamps beside the harness's in the evidence)."""
    ns = profile.namespace
    group = "batch.volcano.sh" if profile.flavor is GangFlavor.VOLCANO else "batch"
    out = grant(ns, group, "jobs", ("create", "delete"), why)
    out += grant(ns, "", "pods", ("get", "list", "watch", "delete"), why)
    out += grant(ns, "", "pods", ("get",), f"{why}: the canary's log, the drill's truth", subresource="log")
    out += grant(CLUSTER, "", "nodes", READ, why)
    out += grant(CLUSTER, "", "events", ("list", "watch"), "the platform's own stamps in the evidence (Events of "
                                                           "every namespace)")
    return out


@dataclass
class TrainingRun:
    """The run and its recovery chain. A fault kind other than a node pull names its own chain (:attr:`CHAIN`,
    :attr:`STARTS`) and stamps its instants in :meth:`_advance`; observing, judging and failing fast are shared."""

    CHAIN: ClassVar[tuple[str, ...]] = ("detect", "evict", "replace", "resume")
    """The recovery's phases in order: each ends at the instant of its own name."""
    AFTER_RESUME: ClassVar[tuple[str, ...]] = ("total", "lost steps")
    """What is measured from the resume."""
    STARTS: ClassVar[dict[str, str]] = {"detect": "fault", "evict": "detect", "replace": "evict", "resume": "replace",
                                        "total": "fault"}
    """The instant each phase is timed from (``total``: it ends at the resume)."""
    CANARY_PEER_TIMEOUT: ClassVar[float | None] = None
    """The canary's own peer timeout (None: the flavor's, :data:`PEER_TIMEOUT` for an Indexed Job); a kind whose
    fault must outlast any rank's patience (a hang) raises it."""
    MAX_RETRY: ClassVar[int | None] = None
    """Restarts the canary job may take before its controller gives up (None: the flavor's default, Volcano's 3);
    a kind whose job meets many faults raises it."""

    target: Target
    result: DrillResult
    run_id: str
    spec: GangSpec | None = None
    step_seconds: float = 0.1
    """The canary's compute time per step (what it is asked for; it logs what each step really took)."""
    canary: CanaryLog = field(default_factory=CanaryLog)
    follower: LogFollower | None = None
    pods: dict[str, Obj] = field(default_factory=dict)
    nodes: dict[str, Obj] = field(default_factory=dict)
    job_resource: Resource = VOLCANO_JOB
    """The kind of the canary's job: a Volcano Job, or a batch/v1 Job (:data:`BATCH_JOB`)."""
    events: list[Obj] = field(default_factory=list)
    pulled: str | None = None
    victims: set[str] = field(default_factory=set)
    """UIDs of the job's pods on the pulled node at the fault."""
    before_fault: set[str] = field(default_factory=set)
    """UIDs of every pod of the job that existed before the fault, deleted since or not (their Events and
    their log lines are not the recovery's); set by :meth:`_mark_before_fault`."""
    seen: set[str] = field(default_factory=set)
    """UIDs of every pod of the job the watch has shown, deleted ones included."""
    checkpoint_at_fault: int = 0
    """The newest checkpoint the canary logged durable before the fault (its own log)."""
    step_at_fault: int = 0
    """The highest step any rank logged before the fault (its own log)."""
    resumption: Resumption | None = None
    threshold: float | None = None
    """The progress threshold the scenario stated (seconds; :meth:`watch_progress`)."""
    torn: CheckpointWrite | None = None
    """The checkpoint write a pull cut short (:meth:`pull_during_checkpoint`), as the canary declared it."""
    write_seconds: float = 0.0
    """How long the scenario asked each checkpoint write to take (0: as fast as the storage takes it)."""
    instants: dict[str, Instant] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    # ----------------------------------------------------------- steady state
    def start_canary(self, workers: int, gpus: int, checkpoint_every: int, priority_class: str | None = None,
                     required_topology: str | None = None, **step: Any) -> None:
        """Submit the canary job (``step``: extra CanaryTraining fields, e.g. ``input_seconds``) at a priority class
        (None: the cluster's default), asking to stay inside one domain of the node label ``required_topology``
        (None: anywhere), and wait until every rank is running and, by its own log, training."""
        profile = self.target.profile
        patience = self.CANARY_PEER_TIMEOUT
        if profile.flavor is GangFlavor.VOLCANO:
            form, self.job_resource = CanaryForm.VOLCANO_JOB, VOLCANO_JOB
            training = CanaryTraining(workers, gpus, checkpoint_every, compute_seconds=self.step_seconds,
                                      peer_timeout=patience, **step)
        elif profile.flavor in TRAINING_JOB_FLAVORS:
            form, self.job_resource = CanaryForm.INDEXED_JOB, BATCH_JOB
            # a rank waits in its all-reduce while rank 0 writes a checkpoint: that peer is busy, not lost
            writing = float(step.get("checkpoint_seconds") or 0.0)
            training = CanaryTraining(workers, gpus, checkpoint_every, compute_seconds=self.step_seconds,
                                      peer_timeout=patience or PEER_TIMEOUT + writing, **step)
        else:
            raise DrillInconclusive(training_job_problem(profile) or "")
        free = free_gpus_per_node(self.target)
        room = sum(g // gpus for g in free.values()) if gpus else workers
        if room < workers:  # it could never start whole: say so now, not after the start timeout
            short = self.target.not_given_back()
            raise DrillInconclusive(f"the cluster has room for {room} of the canary job's {workers} workers of {gpus} "
                                    f"GPUs (free GPUs per schedulable node: {free or 'none'}), so it cannot start "
                                    "whole; " + (f"nodes that served when the run began are out of service now, never given back "
                                                 f"after an earlier scenario's fault: {short}" if short else
                                                 "free capacity, or lower the numbers in your copy of the feature"))
        self.spec = canary_job_spec(f"canary-{self.run_id}"[:40], self.run_id, profile, training, form=form,
                                    priority_class=priority_class)
        if required_topology is not None:
            self.spec = replace(self.spec, required_topology=required_topology)
        if self.MAX_RETRY is not None:
            self.spec = replace(self.spec, max_retry=self.MAX_RETRY)
        driver, ns = self.target.driver, profile.namespace
        self.canary.listeners.append(self._on_canary)
        self.follower = LogFollower(driver, self._on_log_line, self.target.timeline.clock)
        driver.watch(NODE, on_event=self._on(self.nodes))
        driver.watch(POD, ns, label_selector=run_selector(self.run_id), on_event=self._on(self.pods))
        driver.watch(EVENT, on_event=self._on_event)
        manifests = ([indexed_job(self.spec, profile.flavor)] if form is CanaryForm.INDEXED_JOB
                     else gang_manifests(self.spec, profile.flavor, VolcanoForm.JOB))
        for obj in manifests:
            driver.create(obj)
        if not self._wait(lambda: len(self._training()) >= self.spec.min_available or self._never_met()
                          or self._job_failed() is not None, 60):
            raise DrillInconclusive(f"the canary job {self.spec.name} was not training whole within 60 s (by its "
                                    f"own log), so no fault can be injected under it; pods: {self._pod_summary()}")
        failed = self._job_failed()
        if failed is not None and len(self._training()) < self.spec.min_available:
            raise DrillInconclusive(f"the canary job {self.spec.name} failed before it trained whole ({failed}), so "
                                    f"no fault can be injected under it; pods: {self._pod_summary()}")
        if len(self._training()) < self.spec.min_available:
            raise DrillInconclusive(
                f"the canary job {self.spec.name}'s {self.spec.min_available} ranks all started, the last "
                f"{RENDEZVOUS_GRACE:g} s ago or more, but never completed their rendezvous (rank 0 publishes its "
                "address on the shared volume and the others read it there), so it cannot train; ranks that "
                "cannot see each other's files have storage that is not shared between their nodes "
                f"(canary.shared_volume); pods: {self._pod_summary()}")

    def watch_progress(self, seconds: float) -> None:
        """The platform restarts the job when it makes no progress for ``seconds``: written on the job as
        :data:`PROGRESS_TIMEOUT_ANNOTATION` (the reference platform's watchdog watches jobs that carry it)."""
        if self.spec is None:
            raise DrillInconclusive("the progress threshold is stated before any canary job started; start it "
                                    "first (Given a canary training job ...)")
        self.threshold = seconds
        try:
            self.target.driver.patch(self.job_resource, self.spec.name, {"metadata": {"annotations": {
                PROGRESS_TIMEOUT_ANNOTATION: f"{seconds:g}"}}}, self.target.profile.namespace)
        except KubeError as exc:
            raise DrillInconclusive(f"could not write the progress threshold on job {self.spec.name} ({exc})") from None
        self.result.details["progress_threshold_s"] = seconds

    def _job_failed(self) -> str | None:
        """The job's controller gave up on it (its Event, e.g. Volcano's JobFailed, a Job's BackoffLimitExceeded):
        ``reason: message``, or None. Only ends a wait early; the verdict never rests on it."""
        name = self.spec.name if self.spec is not None else None
        for e in self.events:
            inv = e.get("involvedObject") or {}
            if inv.get("name") == name and inv.get("kind") == "Job" and e.get("reason") in JOB_FAILED_REASONS:
                return f"{e.get('reason')}: {e.get('message') or ''}".strip()
        return None

    def _never_met(self) -> bool:
        """Fail fast on a world that cannot form: every rank runs and has logged its start, none has completed
        the rendezvous, and the last start was RENDEZVOUS_GRACE seconds ago (a rendezvous takes a second)."""
        uids = [p["metadata"]["uid"] for p in self._running_pods()]
        if self.spec is None or len(uids) < self.spec.min_available or self.spec.min_available < 2:
            return False
        started = self.canary.of(CanaryEvent.START, uids)
        if {line.uid for line in started} != set(uids) or self.canary.of(CanaryEvent.RENDEZVOUS, uids):
            return False
        return self.target.timeline.clock.mono() - max(line.mono for line in started) >= RENDEZVOUS_GRACE

    def wait_checkpoint(self, limit: float) -> None:
        if not self._wait(lambda: bool(self.canary.checkpoints() - {0}), limit):
            raise DrillInconclusive(f"the canary logged no completed checkpoint within {limit:g} s; resumption "
                                    "cannot be judged")

    def _training(self) -> list[Obj]:
        """Running pods whose canary has logged steps (they are really training, by their own word)."""
        stepping = self.canary.stepping(p["metadata"]["uid"] for p in self._running_pods())
        return [p for p in self._running_pods() if p["metadata"]["uid"] in stepping]

    def _on_log_line(self, raw: LogLine) -> None:
        line = parse_line(raw.text, pod=raw.pod, uid=raw.uid, node=raw.node, mono=raw.mono, wall=raw.wall)
        if line is not None:
            self.canary.add(line)

    def _on_canary(self, line: CanaryLine) -> None:
        with self._cond:
            self._advance()
            self._cond.notify_all()

    # ------------------------------------------------------------- watches
    def _on(self, store: dict[str, Obj]) -> Any:
        def handle(event: str, obj: Obj) -> None:
            with self._cond:
                name = obj["metadata"]["name"]
                if store is self.pods:
                    self.seen.add(obj["metadata"]["uid"])
                if event == "DELETED":
                    store.pop(name, None)
                else:
                    store[name] = obj
                    if obj.get("kind", "Pod") == "Pod" and store is self.pods and self.follower is not None:
                        self.follower.follow(obj)
                self._advance()
                self._cond.notify_all()
        return handle

    def _on_event(self, event: str, obj: Obj) -> None:
        """Events are the platform's claim: kept for the stamps shown beside the harness's, never judged."""
        if event == "ADDED" or event == "MODIFIED":
            with self._cond:
                self.events.append(obj)
                self._cond.notify_all()

    # ------------------------------------------------------------- helpers
    def _wait(self, predicate: Any, timeout: float) -> bool:
        """Wait for ``predicate``; a halted scenario ends the wait (ScenarioHalted)."""
        return wait_for(self._cond, predicate, timeout, self.target.timeline.clock, check=self.result.raise_if_halted)

    def _running_pods(self) -> list[Obj]:
        return [p for p in self.pods.values() if (p.get("status") or {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]

    def _where(self, pod: str) -> str:
        """How a finding names the pod a canary line came from (a Slurm run's lines name a job's rank instead)."""
        return f"pod {pod}"

    def _live_ranks(self) -> set[str]:
        """The identities (``uid``) the canary lines of the running ranks carry: here their pods' uids."""
        return {p["metadata"]["uid"] for p in self._running_pods()}

    def _pod_summary(self) -> str:
        return ", ".join(f"{n}={(p.get('status') or {}).get('phase')}@{(p.get('spec') or {}).get('nodeName')}"
                         for n, p in sorted(self.pods.items())) or "none"

    def _rank_gpu(self, rank: int, verb: str, *, index_needed: bool = True) -> tuple[Obj, str, int | None, str]:
        """Under the lock: worker ``rank``'s running pod, its node, the index of its first GPU (the platform's
        ``firedrill.dev/gpu-index`` binding, to aim; None where no platform says it and ``index_needed`` is false)
        and that GPU's identity as its canary logged it (its start line's ``gpus``, to follow); INCONCLUSIVE when
        a needed one is missing (``verb``: what the fault does)."""
        pod = next((p for p in self._running_pods() if rank_of(p) == rank), None)
        if pod is None:
            raise DrillInconclusive(f"worker {rank} of the canary job is not running; pods: {self._pod_summary()}")
        bound = [int(i) for i in ((pod["metadata"].get("annotations") or {}).get(GPU_INDEX_ANNOTATION) or "")
                 .split(",") if i.strip().isdigit()]
        start = next(iter(self.canary.of(CanaryEvent.START, [pod["metadata"]["uid"]])), None)
        named = (start.fields.get("gpus") if start is not None else None) or []
        if (index_needed and not bound) or not named:
            raise DrillInconclusive(f"worker {rank}'s pod {pod['metadata']['name']} does not say which GPU it "
                                    "holds (no firedrill.dev/gpu-index binding, or its canary logged no GPUs), "
                                    f"so no GPU of it can be {verb} and followed")
        return pod, pod["spec"]["nodeName"], (bound[0] if bound else None), str(named[0])

    def _node_healthy(self, name: str) -> bool:
        node = self.nodes.get(name) or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [])
        return ready and not any(t.get("key") in UNHEALTHY_TAINTS for t in (node.get("spec") or {}).get("taints") or [])

    def _stamp(self, name: str, at: Instant | None = None) -> None:
        """Stamp instant ``name`` now (or at ``at``: when the harness received the line that proved it). A phase
        never ends before the instant it is timed from (:attr:`STARTS`): what the platform did first, the harness
        may learn second (a node Ray noticed dead while the fault command still ran is detected at the command's
        return, 0 s after the fault; a rank that stepped before the last one started resumes at the replacement)."""
        if name in self.instants:
            return
        clock = self.target.timeline.clock
        at = at or Instant(clock.mono(), clock.wall())
        start = self.instants.get(self.STARTS.get(name, ""))
        self.instants[name] = Instant(start.mono, start.wall) if start is not None and at.mono < start.mono else at
        self.target.timeline.action(f"t_{name}", target=self.pulled or "")

    def _advance(self) -> None:
        """Called under the lock on every change: stamp each instant the moment its condition first holds."""
        if "fault" not in self.instants or self.pulled is None:
            return
        if "detect" not in self.instants and not self._node_healthy(self.pulled):
            self._stamp("detect")
        if "evict" not in self.instants and not any(
                (p.get("spec") or {}).get("nodeName") == self.pulled and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in TERMINAL for p in self.pods.values()):
            self._stamp("evict")
        if "evict" in self.instants and "replace" not in self.instants:
            running = self._running_pods()
            if self.spec is not None and len(running) >= self.spec.min_available and all(
                    (p.get("spec") or {}).get("nodeName") != self.pulled and
                    self._node_healthy((p.get("spec") or {}).get("nodeName", "")) for p in running):
                self._stamp("replace")
        self._stamp_resume()

    def _stamp_resume(self, after: str = "replace") -> None:
        """Under the lock, after the replacement (or the instant ``after``): the first step a new rank logs beyond
        its resume point."""
        if after in self.instants and "resume" not in self.instants:
            found = self.canary.resumptions(exclude=self.before_fault)
            if found:
                self.resumption = found[0]
                first = found[0].first_step
                self._stamp("resume", Instant(first.mono, first.wall))

    # ----------------------------------------------------------------- act
    def _mark_before_fault(self) -> None:
        """Under the lock, just before a fault: every pod of the job so far is of the old incarnation, including
        a rank replaced and deleted before the fault (a rendezvous retried at start), whose fresh start from
        step 0 would otherwise read as the recovery's resume point."""
        self.before_fault = self.seen | {p["metadata"]["uid"] for p in self.pods.values()} | self.canary.uids()

    def pull(self, rank: int, method: FaultMethod, asked: FaultMethod | None = None) -> None:
        """Pull the node of worker ``rank`` with ``method``; ``asked``: the fault the scenario named (a stand-in's
        reference method, which a fault command's ``{fault}`` says)."""
        assert self.spec is not None, "start the canary job first"
        with self._cond:
            pod = next((p for p in self._running_pods() if rank_of(p) == rank), None)
            if pod is None:
                raise DrillInconclusive(f"worker {rank} of the canary job is not running; pods: {self._pod_summary()}")
            node = pod["spec"]["nodeName"]
            self.victims = {p["metadata"]["uid"] for p in self.pods.values()
                            if (p.get("spec") or {}).get("nodeName") == node}
            self._mark_before_fault()
        if self.target.embedded is None:
            all_nodes = self.target.driver.list(NODE)
            chosen = [n for n in eligible_nodes(all_nodes, self.target.profile.safety) if n["metadata"]["name"] == node]
            if not chosen:
                raise DrillInconclusive(f"node {node} (worker {rank}) is not eligible for faults: it lacks the allow "
                                        f"label {self.target.profile.safety.allow_label} or is a control-plane node")
            check_blast_radius(chosen, all_nodes, self.target.profile.safety, self.target.profile.gpu_resource)
        self.pulled = node
        record = self.target.pull(node, method, self.run_id, asked)
        with self._cond:
            self.result.details["fault"] = {"node": node, "method": method.value, "rank": rank,
                                            "confirmed": record.confirmed, "detail": record.detail}
            if not record.confirmed:
                self.result.inconclusive(f"the {method.value} fault on {node} could not be confirmed "
                                         f"({record.detail}); no timing is claimed")
                return
            # t_fault is when the action returned; on a real cluster its confirmation (the Lease stopped, Ready
            # left True) comes later and only gates the verdict, or detect would be understated.
            clock = self.target.timeline.clock
            acted = record.acted_at if record.acted_at is not None else clock.mono()
            self._stamp("fault", Instant(acted, clock.wall() - (clock.mono() - acted)))
            self._advance()

    # ------------------------------------------------------------- observe
    @classmethod
    def _end(cls, phase: str) -> str:
        return "resume" if phase in cls.AFTER_RESUME else phase

    def pull_during_checkpoint(self, rank: int, method: FaultMethod, asked: FaultMethod | None = None,
                               timeout: float = 60.0) -> None:
        """Pull the node of worker ``rank`` while a checkpoint write of the job is under way, :data:`INTO_WRITE`
        of :attr:`write_seconds` after rank 0's ``checkpoint-begin`` line reached the harness, so the write is cut
        short: the torn checkpoint. A write that completes before that point is passed over for the next one."""
        assert self.spec is not None, "start the canary job first"
        clock = self.target.timeline.clock
        since = clock.mono()
        lead = INTO_WRITE * self.write_seconds

        def writing() -> CheckpointWrite | None:
            running = self._live_ranks()
            return next((w for w in checkpoint_writes(self.canary.snapshot()) if w.began >= since
                         and w.done is None and w.uid in running and clock.mono() >= w.began + lead), None)
        # the lead is a point in time, not a line: look again every 50 ms as well as on every line
        if not wait_for(self._cond, lambda: writing() is not None, timeout, clock, poll=0.05,
                        check=self.result.raise_if_halted):
            raise DrillInconclusive(f"no checkpoint write of the canary job was still under way {lead:.1f} s after "
                                    f"it began (a third of the {self.write_seconds:g} s asked) within {timeout:g} s "
                                    "(its own checkpoint-begin and checkpoint lines), so none could be cut short")
        with self._cond:
            self.torn = writing()
        self.pull(rank, method, asked)

    def judge_not_torn(self) -> None:
        """After the resume: the job resumed from the last checkpoint it completed, and no checkpoint the pull cut
        short was ever shown complete (a file under a checkpoint's final name that the canary's digest check
        refused, ``skipped`` in its resumed line: a framework that trusts the name would have loaded it)."""
        if "fault" not in self.instants or self.torn is None:
            return
        self.observe_until("resume", 0.0)
        with self._cond:
            torn, fault = self.torn, self.instants["fault"]
            done = next((w.done for w in checkpoint_writes(self.canary.snapshot())
                         if w.uid == torn.uid and w.step == torn.step and w.done is not None), None)
            self.result.details["torn"] = {"step": torn.step, "file": torn.file, "pod": torn.pod,
                                           "began_before_fault_s": round(fault.mono - torn.began, 3),
                                           "completed": done is not None}
            if done is not None and done <= fault.mono:
                self.result.inconclusive(f"checkpoint {torn.step} was complete before the pull took (the canary's "
                                         "own checkpoint line), so no write was cut short")
                return
            r = self.resumption
            if r is None:
                self.result.inconclusive("the job never resumed, so what it resumed from cannot be judged")
                return
            job = self.spec.name if self.spec is not None else "the canary job"
            writer, resumer = f"rank 0, {self._where(torn.pod)}", f"rank {r.rank}, {self._where(r.pod)}"
            if r.from_step == torn.step and done is None:
                self.result.fail(f"job {job} resumed from checkpoint {torn.step}, whose write the pull cut short "
                                 f"({writer}: checkpoint-begin, never checkpoint): a torn checkpoint ({resumer}, "
                                 "phase resume; the canary's own log)")
            elif r.skipped:
                self.result.fail(f"job {job}'s storage showed {', '.join(r.skipped)} under a checkpoint's final name "
                                 f"though the write of checkpoint {torn.step} was cut short by the pull "
                                 f"{fault.mono - torn.began:.1f} s into it ({writer}: checkpoint-begin, never "
                                 "checkpoint): a torn checkpoint visible as complete; the canary's digest check "
                                 f"refused it and resumed from step {r.from_step} ({resumer}, phase resume), where a "
                                 "framework that trusts the name would have loaded it")

    def observe_until(self, phase: str, timeout: float) -> None:
        """Wait (up to ``timeout``) for the instants a phase needs, then record the phase measurements."""
        if "fault" not in self.instants:
            return  # inconclusive already recorded by the act
        needed = self._end(phase)
        self._wait(lambda: needed in self.instants, timeout)
        self._measure()

    def _grace(self, limit: float) -> float:
        """The grace past a threshold: :func:`grace`, or the run's ``--keep-measuring`` where that is longer."""
        return max(grace(limit), getattr(self.target, "keep_measuring", 0.0) or 0.0)

    def observe_phase(self, phase: str, limit: float) -> None:
        """Wait for ``phase``'s end instant until its threshold plus :func:`grace` past its start instant (the
        start itself waited for as long, should it not have come yet), then record the phase measurements."""
        start, end = self.STARTS[phase], self._end(phase)
        allowed = limit + self._grace(limit)
        clock = self.target.timeline.clock

        def over() -> bool:
            began = self.instants.get(start)
            return end in self.instants or (began is not None and clock.mono() >= began.mono + allowed)
        self._wait(over, allowed * 2)
        self.observe_until(phase, 0.0)

    def end_if_never(self, phase: str, limit: float) -> None:
        """Fail fast: when the instant ``phase`` needs never came within its threshold and grace, every later
        phase starts from it and cannot be measured, so the scenario ends here (FAIL, naming the phase that missed
        and those never reached) instead of waiting out each later deadline in turn."""
        needed = self._end(phase)
        if "fault" not in self.instants or needed in self.instants or needed not in self.CHAIN:
            return
        later = [*self.CHAIN[self.CHAIN.index(needed) + 1:], *self.AFTER_RESUME]
        since, more = self.STARTS["total" if phase in self.AFTER_RESUME else needed], self._grace(limit)
        why = (f"the promise of {limit:g} s and {more:g} s of grace" if phase != "lost steps" else
               f"lost steps are counted at the resume, waited for {limit:g} s and {more:g} s of grace")
        self.result.halt(f"{needed} never came: t_{needed} was not observed within {limit + more:g} s of "
                         f"t_{since} ({why}), so {', '.join(later)} could never be measured; the scenario ends here")

    def _pairs(self) -> dict[str, tuple[str, str]]:
        """Each timed phase: the instant it starts from and the one it ends at."""
        return {phase: (self.STARTS[phase], self._end(phase)) for phase in (*self.CHAIN, "total")}

    def _platform_phase(self, a: str, b: str, server: dict[str, float]) -> float | None:
        """The phase from instant ``a`` to ``b`` as the platform stamped them (t_fault is the harness's)."""
        sa = server.get(a, self.instants[a].wall if a == "fault" and a in self.instants else None)
        sb = server.get(b)
        return None if sa is None or sb is None else max(0.0, sb - sa)

    def _measure(self) -> None:
        with self._cond:
            t = self.instants
            server = self._server_instants()
            for phase, (a, b) in self._pairs().items():
                if a in t and b in t:
                    self.result.measure(Measurement(phase, max(0.0, t[b].mono - t[a].mono), "s",
                                                    self._platform_phase(a, b, server)))
                elif phase not in self.result.measurements:
                    self.result.measure(Measurement(phase, None, "s", note=f"t_{b} never observed"))
            self._judge_resume_point()
            if self.spec is not None and "resume" in t and self.resumption is not None:
                lost = max(0, self.step_at_fault - self.resumption.from_step)
                step_s = self.canary.median_step_seconds(before=t["fault"].wall) or self.step_seconds
                gpus = self.spec.workers * self.spec.gpus_per_worker
                total = t["resume"].mono - t["fault"].mono
                self.result.measure(Measurement("lost steps", float(lost), "steps",
                                                note=f"{self.step_at_fault} logged before the fault - resumed from "
                                                     f"{self.resumption.from_step} (the canary's log)"))
                self.result.measure(Measurement("GPU-seconds lost", gpus * (total + lost * step_s), "GPU-s",
                                                note=f"{gpus} GPUs x ({total:.3f} s down + {lost} steps x "
                                                     f"{step_s:.3f} s measured per step)"))
            elif "lost steps" not in self.result.measurements:
                self.result.measure(Measurement("lost steps", None, "steps",
                                                note="no replacement rank logged a step beyond its resume point"))
            self._record_instants(server)

    def _record_instants(self, server: dict[str, float]) -> None:
        """Under the lock: every instant as the harness saw it, beside the platform's stamp of it."""
        self.result.details["instants"] = {k: {"mono": v.mono, "wall": v.wall, "server": server.get(k)}
                                           for k, v in self.instants.items()}

    def _judge_resume_point(self) -> None:
        """Under the lock: the job must resume from the last checkpoint it completed before the fault."""
        if "fault" not in self.instants or self.resumption is None or "resume-point" in self.result.details:
            return
        fault_wall = self.instants["fault"].wall
        self.step_at_fault = self.canary.last_step_before(fault_wall)
        self.checkpoint_at_fault = self.canary.last_checkpoint_before(fault_wall)
        r = self.resumption
        self.result.details["resume-point"] = {
            "resumed_from": r.from_step, "checkpoint_file": r.checkpoint, "skipped": list(r.skipped),
            "last_checkpoint_before_fault": self.checkpoint_at_fault, "step_at_fault": self.step_at_fault,
            "rank": r.rank, "pod": r.pod, "first_step": r.first_step.step}
        self.result.details.setdefault("fault", {}).update(
            {"checkpoint_at_fault": self.checkpoint_at_fault, "step_at_fault": self.step_at_fault})
        if r.from_step < self.checkpoint_at_fault:
            self.result.fail(f"training resumed from step {r.from_step}, but checkpoint {self.checkpoint_at_fault} "
                             f"was complete before the fault: {self.checkpoint_at_fault - r.from_step} steps of "
                             f"saved work were lost (rank {r.rank}, {self._where(r.pod)}; the canary's own log)")
        elif r.from_step > 0 and r.from_step not in self.canary.checkpoints():
            self.result.fail(f"training resumed from step {r.from_step}, a checkpoint the job never logged as "
                             f"complete (the last before the fault was {self.checkpoint_at_fault}): the resume "
                             "point did not come from this job's checkpoints")

    def judge_fenced(self, settle: float = FENCE_SETTLE) -> None:
        """After the resume, the replaced job's ranks must train no more: watch ``settle`` seconds for steps
        logged by any pod that existed at the fault (split brain: two incarnations training at once)."""
        if "fault" not in self.instants:
            return
        self.observe_until("resume", 0.0)
        if "resume" not in self.instants:
            self.result.inconclusive("the job never resumed, so whether its old ranks were fenced cannot be judged")
            return
        clock = self.target.timeline.clock
        until = self.instants["resume"].mono + settle
        self._wait(lambda: clock.mono() >= until, max(0.0, until - clock.mono()) + 0.1)
        with self._cond:
            late = self.canary.trained_after(self.before_fault, self.instants["resume"].mono)
            self.result.measure(Measurement("steps by replaced ranks after the resume", float(len(late)), "steps",
                                            note=f"watched {settle:g} s after the resume"))
            if late:
                first = min(late, key=lambda ln: ln.mono)
                self.result.fail(f"split brain: rank {first.rank} of the replaced job ({self._where(first.pod)} on "
                                 f"{first.node or 'its old node'}, generation {first.generation}) kept training "
                                 f"after the job resumed elsewhere: {len(late)} step(s), up to step "
                                 f"{max(ln.step or 0 for ln in late)} (the canary's own log)")

    def _server_instants(self) -> dict[str, float]:
        """The same instants as the platform stamped them in its Events (eventTime, microseconds):
        detect = the pulled node's NodeNotReady; evict = the last of the victims' first evictions (a pod that
        was on the pulled node: TaintManagerEviction, Evicted or Killing, whichever its platform recorded first,
        as the harness sees the first deletion); replace = the last Started of the replacement ranks; resume =
        their first Resumed."""
        out: dict[str, float] = {}
        fault_wall = self.instants["fault"].wall if "fault" in self.instants else 0.0

        def stamps(reasons: tuple[str, ...], accept: Any) -> dict[str, float]:
            """uid (or name) -> the earliest matching eventTime at or after the fault."""
            found: dict[str, float] = {}
            for e in self.events:
                inv = e.get("involvedObject") or {}
                ts = event_time(e, fault_wall - 0.001)
                if e.get("reason") in reasons and ts is not None and accept(inv):
                    key = inv.get("uid") or inv.get("name", "")
                    found[key] = min(ts, found.get(key, ts))
            return found
        detect = stamps(("NodeNotReady",), lambda inv: inv.get("kind") == "Node" and inv.get("name") == self.pulled)
        if detect:
            out["detect"] = min(detect.values())
        evicted = stamps(("TaintManagerEviction", "Evicted", "Killing"), lambda inv: inv.get("uid") in self.victims)
        if evicted:
            out["evict"] = max(evicted.values())
        replacements = {p["metadata"]["uid"] for p in self._running_pods()
                        if p["metadata"].get("uid") not in self.before_fault}
        started = stamps(("Started",), lambda inv: inv.get("uid") in replacements)
        if started and self.spec is not None and len(started) >= self.spec.min_available:
            out["replace"] = max(started.values())
        resumed = stamps(("Resumed",), lambda inv: inv.get("uid") in replacements)
        if resumed:
            out["resume"] = min(resumed.values())
        return out

    def _restamp(self, timeout: float = RESTAMP_WAIT) -> None:
        """Before the watches stop: the platform's side of each phase measured without it.  Its Events are
        written asynchronously and often arrive after the harness measured (a replacement rank's first step is
        received before its Resumed Event); a platform that stamped an instant of this job before the fault
        (the first start's Resumed) is waited for up to ``timeout`` s to stamp it again.  Never judged: only the
        platform column and the instants' ``server`` stamps change."""
        if "fault" not in self.instants:
            return
        awaited = self._awaited_stamps()
        wait_for(self._cond, lambda: awaited & self.instants.keys() <= self._server_instants().keys(), timeout,
                 self.target.timeline.clock, poll=0.05)
        with self._cond:
            server = self._server_instants()
            for phase, (a, b) in self._pairs().items():
                m = self.result.measurements.get(phase)
                if m is not None and m.value is not None and m.platform is None:
                    platform = self._platform_phase(a, b, server)
                    if platform is not None:
                        self.result.measurements[phase] = replace(m, platform=platform)
            if "instants" in self.result.details:
                self._record_instants(server)

    def _awaited_stamps(self) -> set[str]:
        """The instants worth waiting for: ``resume`` where this platform stamped a Resumed Event for a rank of
        the job before the fault and a replacement rank runs now (a rank restarted in its own pod has none to
        stamp); the others come from Events every platform writes, and are not waited for."""
        with self._cond:
            resumed = any(e.get("reason") == "Resumed" and
                          (e.get("involvedObject") or {}).get("uid") in self.before_fault for e in self.events)
            replaced = any(p["metadata"].get("uid") not in self.before_fault for p in self._running_pods())
        return {"resume"} if resumed and replaced else set()

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Undo the fault, stop following logs, delete the job and its pods; never raises."""
        self._restamp()
        self.target.restore_all()
        if self.follower is not None:
            self.follower.stop()
        self.result.details["canary"] = {"lines": len(self.canary.lines)}
        driver, ns = self.target.driver, self.target.profile.namespace
        try:
            if self.spec is not None:
                driver.delete(self.job_resource, self.spec.name, ns)
                for pod in driver.list(POD, ns, label_selector=run_selector(self.run_id)):
                    driver.delete(POD, pod["metadata"]["name"], ns, grace_seconds=0)
        except KubeError as exc:
            log.warning("rollback of node-pull drill %s incomplete: %s", self.run_id, exc)
        self._wait_node_back()

    def _wait_node_back(self, timeout: float = ROLLBACK_READY_TIMEOUT) -> None:
        """After the fault is undone, wait until the pulled node is Ready again, so the next scenario starts on
        the cluster this one found (a spare still out of the pool would make it INCONCLUSIVE); the leak drill
        relies on it too."""
        if self.pulled is None:
            return
        clock = self.target.timeline.clock
        deadline = clock.mono() + timeout
        while clock.mono() < deadline:
            if self._pulled_serves():
                return
            time.sleep(0.2)
        log.warning("node %s was not back in service within %g s of the rollback", self.pulled, timeout)

    def _pulled_serves(self) -> bool:
        """Is the pulled node Ready again (False where it cannot be read)?"""
        try:
            node = self.target.driver.get(NODE, self.pulled)
        except KubeError:
            return False
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (node.get("status") or {}).get("conditions") or [])
