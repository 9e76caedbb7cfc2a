"""The canary training job on a Ray cluster, and the node under one of its ranks pulled: detect, evict, replace,
resume, each timed, judged by the same code as on Kubernetes and Slurm (:class:`drills.workloads.training
.TrainingRun`).

The job is the canary as a Ray Train job (``<ray.canary_command> train``, :mod:`drills.canary.raytrain`),
submitted through the Job Submission API: a ``DataParallelTrainer`` of N workers of G GPUs, its checkpoints
reported to Ray Train so that Ray decides what to resume from, its ``FailureConfig.max_failures`` the profile's.
Recovery is Ray's alone: the harness pulls a node and watches.  Each worker logs the canary's lines; Ray forwards
them to the job's log, which the harness reads through the Job Submission API (``/api/jobs/<id>/logs``), prefix
and colour stripped.  A rank is a worker of one worker group: its lines' ``uid`` is
``<submission id>.<generation>.<rank>``, the generation counting the worker group's starts.

The instants, on the harness's monotonic clock (DESIGN.md's meanings, in Ray's words):

- ``t_fault``: the profile's fault command returned; confirmed by the workload (the rank there falls silent) or
  by Ray (the node is DEAD);
- ``t_detect``: Ray shows it noticed: the GCS marks the pulled node DEAD (the state API's ``/api/v0/nodes``), or
  Ray Train's controller says in the job's log that a worker is gone, whichever comes first (with Ray's default
  health check the controller sees a dead worker's broken connection seconds before the GCS gives up on the node);
- ``t_evict``: no Ray Train worker of the job is ALIVE on the pulled node (``/api/v0/actors``), once detected;
- ``t_replace``: every rank of a later worker group logged its start, none on the pulled node, all on live nodes;
- ``t_resume``: a rank of the new group logs a step beyond the step it resumed from.

Ray's own stamp beside them: the GCS's end time of the pulled node (``detect``).
"""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from drills.kube.flavors import GangSpec
from drills.ray.driver import RayDriver
from drills.ray.state import ActorState, JobStatus, RayError, RayJob, RayNode
from drills.records.verdict import DrillInconclusive
from drills.target.profile import TargetProfile
from drills.workloads.canarylog import CanaryEvent, CanaryLine, parse_line
from drills.workloads.rankpull import RankPull
from drills.workloads.training import Instant, TrainingRun

__all__ = ["RayJobLog", "RayTrainingRun", "ray_storage_problem", "said_node_id"]

log = logging.getLogger(__name__)

POLL_S = 0.25
"""How often the run reads the job's log, its status, the nodes and (after the fault) the pulled node's actors."""
START_TIMEOUT_S = 120.0
"""Seconds the job may take from submission to training whole (Ray starts a Python worker per rank)."""
TRAIN_WORKER = "RayTrainWorker"
"""The class name of a Ray Train worker actor (Ray 2.60's Train v2)."""
TRAIN_NOTICED = ("[FailurePolicy]", "A worker health check failed")
"""What Ray Train's controller says in the job's log when it finds a worker gone (before it retries the group or
gives up): Ray noticed the failure, whether or not the GCS has marked the node DEAD yet."""
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

NO_STORAGE = ("the training canary on Ray needs a directory every node sees at the same path for Ray Train's "
              "checkpoints: set ray.storage_path in the target profile (docs/RAY.md)")


def ray_storage_problem(profile: TargetProfile) -> str | None:
    """Why no training canary can run on the Ray cluster of ``profile``, or None."""
    return NO_STORAGE if profile.ray is None or profile.ray.storage_path is None else None


def said_node_id(line: CanaryLine) -> str:
    """The Ray node id a rank's start line says it runs on (its ``config.node_id``), or ""."""
    config = line.fields.get("config") or {}
    return str(config.get("node_id") or "") if isinstance(config, dict) else ""


@dataclass
class RayJobLog:
    """One Ray job's log, read as it grows through the Job Submission API: each new complete canary line once."""

    driver: RayDriver
    submission_id: str
    max_age: float = 0.0
    """A read of the whole log this recent, by another reader of the same driver, will do (``job_logs``)."""
    _offset: int = 0

    def new_raw(self) -> list[str]:
        """Every complete line added since the last call, colours stripped (Ray's ``(Class pid=...)`` prefix
        kept); a line still being written waits for the next call."""
        text = self.driver.job_logs(self.submission_id, self.max_age)
        if len(text) < self._offset:  # the log was cut (a new driver log): read it again from its start
            self._offset = 0
        fresh = text[self._offset:]
        complete = fresh[:fresh.rfind("\n") + 1]
        self._offset += len(complete)
        return [ANSI.sub("", raw) for raw in complete.splitlines()]

    def new_lines(self) -> list[str]:
        """The canary lines among them (JSON text, from the line's first ``{``)."""
        return [canary_part(raw) for raw in self.new_raw() if "{" in raw]


def canary_part(raw: str) -> str:
    """A log line from its first ``{``: where a worker's canary line starts behind Ray's prefix."""
    return raw[raw.find("{"):]


@dataclass
class RayTrainingRun(RankPull, TrainingRun):
    """The training run on a Ray cluster (``target`` is a :class:`drills.target.raytarget.RayTarget`).  The
    Kubernetes fields of :class:`TrainingRun` (pods, nodes, events) stay empty here."""

    DOWN_SAID: ClassVar[str] = "Ray noticed it (the GCS marked the node DEAD, or Ray Train found its worker gone)"

    job_id: str | None = None
    """The canary job's submission id (``canary-<run id>``)."""
    job: RayJob | None = None
    names: dict[str, str] = field(default_factory=dict)
    """Ray node id -> node name, of every node the GCS knows (DEAD ones included)."""
    alive: set[str] = field(default_factory=set)
    """The ids of the nodes ALIVE at the last read."""
    pulled_id: str = ""
    """The Ray node id of the pulled node at the fault (a node started again gets a new one)."""
    generation_at_fault: int = -1
    noticed_at: Instant | None = None
    """When Ray first showed it noticed the fault: the GCS marked the pulled node DEAD, or Ray Train's controller
    said in the job's log that a worker was gone (with its default 3 s poll it may see a dead worker's broken
    connection well before the GCS's health checks give up on the node)."""
    noticed_by: str = ""
    evicted_at: Instant | None = None
    rank_nodes: dict[str, str] = field(default_factory=dict)
    """uid -> the node (name) its rank said it runs on."""
    output: RayJobLog | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _poller: threading.Thread | None = None

    # ----------------------------------------------------------- steady state
    def start_canary(self, workers: int, gpus: int, checkpoint_every: int, priority_class: str | None = None,
                     required_topology: str | None = None, **step: Any) -> None:
        """Submit the canary as a Ray Train job and wait until every rank trains, by its own lines."""
        profile = self.target.profile
        problem = ray_storage_problem(profile)
        if problem is not None:
            raise DrillInconclusive(problem)
        writing = step.pop("checkpoint_seconds", None)
        if priority_class is not None or required_topology is not None or step:
            raise DrillInconclusive(f"the canary on Ray takes no {', '.join(step) or 'priority class or topology'} "
                                    "yet (docs/RAY.md)")
        assert profile.ray is not None and profile.ray.storage_path is not None
        self._check_room(workers, gpus)
        self.job_id = f"canary-{self.run_id}"
        self.spec = GangSpec(name=self.job_id, run_id=self.run_id, workers=workers, gpus_per_worker=gpus,
                             image=shlex.join(profile.ray.canary_command))
        entrypoint = shlex.join([*profile.ray.canary_command, "train", "--name", self.job_id,
                                 "--workers", str(workers), "--gpus", str(gpus),
                                 "--cpus", f"{profile.ray.cpus_per_worker:g}",
                                 "--compute-seconds", f"{self.step_seconds:g}",
                                 "--checkpoint-every", str(checkpoint_every),
                                 "--storage", profile.ray.storage_path,
                                 "--max-failures", str(self._max_failures())]
                                + (["--checkpoint-seconds", f"{float(writing):g}"] if writing else []))
        self.output = RayJobLog(self.target.driver, self.job_id)
        self.canary.listeners.append(self._on_canary)
        try:
            self.target.driver.submit(entrypoint, submission_id=self.job_id, runtime_env=profile.ray.runtime_env(),
                                      metadata={"firedrill.run": self.run_id})
        except RayError as exc:
            raise DrillInconclusive(f"the canary job could not be submitted: {exc}") from None
        self.target.timeline.action("submitted", target=self.job_id)
        self._poller = threading.Thread(target=self._poll, name=f"ray-{self.run_id}", daemon=True)
        self._poller.start()
        if not self._wait(lambda: len(self._stepping()) >= workers or self._ended() is not None, START_TIMEOUT_S):
            raise DrillInconclusive(f"the canary job {self.job_id} was not training whole within "
                                    f"{START_TIMEOUT_S:g} s (by its own lines), so no fault can be injected under "
                                    f"it; {self._pod_summary()}")
        ended = self._ended()
        if ended is not None and len(self._stepping()) < workers:
            raise DrillInconclusive(f"the canary job {self.job_id} ended before it trained whole ({ended}); "
                                    f"its log: GET /api/jobs/{self.job_id}/logs")

    def _max_failures(self) -> int:
        """Ray Train's ``FailureConfig.max_failures`` for the job: the site's (``ray.max_failures``), unless the
        kind must outlive more faults than that (:attr:`TrainingRun.MAX_RETRY`, a campaign)."""
        assert self.target.profile.ray is not None
        return self.MAX_RETRY if self.MAX_RETRY is not None else self.target.profile.ray.max_failures

    def _check_room(self, workers: int, gpus: int) -> None:
        try:
            nodes = self.target.nodes()
        except RayError as exc:
            raise DrillInconclusive(f"the cluster's nodes could not be read: {exc}") from None
        room = sum(1 for n in nodes if n.alive and n.gpus >= gpus)
        if room < workers:
            short = self.target.not_given_back()
            raise DrillInconclusive(
                f"the cluster has {room} live node(s) of {gpus} GPUs or more for the canary job's {workers} "
                f"workers (GPUs per live node: {({n.name: n.gpus for n in nodes if n.alive}) or 'none'}), so it "
                "cannot start whole; " + (f"nodes that served when the run began are out of service now: {short}"
                                          if short else "add nodes, or lower the numbers in your copy of the feature"))

    def _generation(self) -> str:
        """The newest worker group that logged a start (by the ranks' own lines)."""
        starts = [int(ln.generation) for ln in self.canary.of(CanaryEvent.START) if ln.generation.isdigit()]
        return str(max(starts, default=0))

    def _where(self, pod: str) -> str:
        return pod

    def _live_ranks(self) -> set[str]:
        return {ln.uid for ln in self.canary.of(CanaryEvent.START) if ln.generation == self._generation()}

    def _stepping(self) -> set[str]:
        running = self.job is not None and self.job.status is JobStatus.RUNNING
        return self.canary.stepping(self._live_ranks()) if running else set()

    def _ended(self) -> str | None:
        job = self.job
        if job is None or not job.status.finished:
            return None
        return f"{job.status.value}" + (f": {job.message}" if job.message else "")

    def _pod_summary(self) -> str:
        job = self.job
        if job is None:
            return f"job {self.job_id}: not seen by the Job Submission API"
        ranks = sorted(self._live_ranks())
        return (f"job {job.submission_id}: {job.status.value}" + (f" ({job.message})" if job.message else "")
                + f", worker group {self._generation()}, ranks started: "
                + (", ".join(f"{u.rsplit('.', 1)[1]}@{self.rank_nodes.get(u, '?')}" for u in ranks) or "none"))

    # ------------------------------------------------------------- reading
    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self._look()

    def _look(self) -> None:
        try:
            self._read_lines()
            job = self.target.driver.job(self.job_id) if self.job_id is not None else None
            nodes = self.target.driver.nodes()
            gone = self._train_workers_gone() if self.pulled_id and self.evicted_at is None else False
        except RayError as exc:
            log.debug("ray poll: %s", exc)
            return
        clock = self.target.timeline.clock
        with self._cond:
            self.job = job if job is not None else self.job
            self._see_nodes(nodes)
            now = Instant(clock.mono(), clock.wall())
            if self.pulled_id and self.pulled_id not in self.alive and self.noticed_at is None:
                self.noticed_at, self.noticed_by = now, "the GCS marked the node DEAD"
            if gone and self.evicted_at is None:
                self.evicted_at = now
            self._advance()
            self._cond.notify_all()

    def _see_nodes(self, nodes: list[RayNode]) -> None:
        self.names.update({n.node_id: n.name or n.node_id for n in nodes})
        self.alive = {n.node_id for n in nodes if n.alive}

    def _train_workers_gone(self) -> bool:
        """No Ray Train worker is ALIVE on the pulled node any more (the GCS's own view of its actors)."""
        return not any(TRAIN_WORKER in a.class_name and a.state is ActorState.ALIVE
                       for a in self.target.driver.actors(node_id=self.pulled_id))

    def _read_lines(self) -> None:
        if self.output is None:
            return
        clock = self.target.timeline.clock
        for raw in self.output.new_raw():
            if self.pulled_id and self.noticed_at is None and any(said in raw for said in TRAIN_NOTICED):
                with self._cond:
                    self.noticed_at = Instant(clock.mono(), clock.wall())
                    self.noticed_by = "Ray Train's controller found a worker gone (its log)"
            if "{" not in raw:
                continue
            line = parse_line(canary_part(raw), pod="", uid="", node="", mono=clock.mono(), wall=clock.wall())
            if line is not None:
                self.canary.add(self._placed(line))

    def _placed(self, line: CanaryLine) -> CanaryLine:
        """The line with its rank's identity: uid ``<job>.<generation>.<rank>`` and the node it said it runs on."""
        uid = f"{self.job_id}.{line.generation}.{line.rank}"
        if line.event is CanaryEvent.START and said_node_id(line):
            node_id = said_node_id(line)
            if node_id not in self.names:
                try:
                    self._see_nodes(self.target.driver.nodes())
                except RayError:
                    pass
            self.rank_nodes[uid] = self.names.get(node_id, node_id)
        return replace(line, uid=uid, pod=f"job {self.job_id} rank {line.rank} worker group {line.generation}",
                       node=self.rank_nodes.get(uid, ""))

    def _node_id_of(self, name: str) -> str:
        return next((i for i, n in self.names.items() if n == name and i in self.alive), "")

    # ------------------------------------------------------------------ act
    def _down_at(self) -> Instant | None:
        return self.noticed_at

    def _note_fault(self, node: str, generation: str) -> None:
        self.generation_at_fault = int(generation)
        self.pulled_id = self._node_id_of(node)
        self.result.details["pulled_node_id"] = self.pulled_id

    # ------------------------------------------------------------- observe
    def _advance(self) -> None:
        """Under the lock: stamp each instant the moment its condition first holds (module docstring)."""
        if "fault" not in self.instants or self.pulled is None:
            return
        if "detect" not in self.instants and self.noticed_at is not None:
            self._stamp("detect", self.noticed_at)
            self.result.details["detected_by"] = self.noticed_by
        if "detect" in self.instants and "evict" not in self.instants and self.evicted_at is not None:
            self._stamp("evict", self.evicted_at)
        job = self.job
        if job is not None and job.status.finished and "replace" not in self.instants and not self.result.halted:
            self.result.halt(f"the canary job {job.submission_id} ended {job.status.value}"
                             + (f" ({job.message.strip()[:300]})" if job.message else "")
                             + f" after node {self.pulled} was lost, and never ran again: Ray Train did not restart "
                             f"its worker group (FailureConfig.max_failures is {self._max_failures()}, "
                             "ray.max_failures in the profile); the job is gone, so the scenario ends here")
            return
        if "evict" in self.instants and "replace" not in self.instants:
            started = self._restarted()
            if started is not None:
                self._stamp("replace", started)
        self._stamp_resume()

    def _restarted(self) -> Instant | None:
        """When the last rank of a worker group later than the one at the fault logged its start, once every rank
        did, none on the pulled node and all on live nodes; None until then."""
        assert self.spec is not None
        started = [ln for ln in self.canary.of(CanaryEvent.START) if ln.generation.isdigit()
                   and int(ln.generation) > self.generation_at_fault]
        by_group: dict[str, list[CanaryLine]] = {}
        for ln in started:
            by_group.setdefault(ln.generation, []).append(ln)
        for lines in by_group.values():
            ranks = {ln.rank for ln in lines}
            nodes = {said_node_id(ln) for ln in lines}
            if len(ranks) >= self.spec.workers and self.pulled_id not in nodes and nodes <= self.alive:
                last = max(lines, key=lambda ln: ln.mono)
                return Instant(last.mono, last.wall)
        return None

    def _server_instants(self) -> dict[str, float]:
        """Ray's own stamp: when the GCS marked the pulled node DEAD (``detect``)."""
        try:
            dead = next((n for n in self.target.driver.nodes() if n.node_id == self.pulled_id), None)
        except RayError:
            return {}
        return {"detect": dead.end_time_ms / 1000} if dead is not None and dead.end_time_ms else {}

    def _awaited_stamps(self) -> set[str]:
        return set()

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Undo the fault, stop the job, wait for the pulled node to serve, remove the run's checkpoints; never
        raises."""
        self.target.restore_all()
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
        try:
            self._read_lines()
        except RayError:
            pass
        self.target.stop_jobs([self.job_id] if self.job_id is not None else [])
        self.result.details["canary"] = {"lines": len(self.canary.lines), "job": self.job_id}
        self._wait_node_back()
        profile = self.target.profile
        if self.job_id is not None and profile.ray is not None and profile.ray.storage_path is not None:
            shutil.rmtree(Path(profile.ray.storage_path) / self.job_id, ignore_errors=True)

    def _pulled_serves(self) -> bool:
        try:
            return any(n.name == self.pulled and n.alive for n in self.target.driver.nodes())
        except RayError:
            return False
