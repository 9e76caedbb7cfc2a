"""The canary training job on a Slurm cluster, and the node under one of its ranks pulled: detect, evict,
replace, resume, each timed, judged by the same code as on Kubernetes (:class:`drills.workloads.training
.TrainingRun`).

The job is a batch job of one task per node (``sbatch --nodes=N --ntasks-per-node=1 --gres=<gres>:G``, with
the profile's ``slurm.sbatch_args``; whether Slurm requeues it when a node dies is the cluster's ``JobRequeue``,
as for its users' jobs, unless those arguments say) whose script runs the canary once per task (``srun``); each task reads its rank, world, generation
(``SLURM_RESTART_COUNT``), GPUs and node from what Slurm tells it (docs/WORKLOAD.md).  Every task writes its lines
to its own file in the run's folder on the profile's shared directory (``srun --output=<dir>/%j-%t.log
--open-mode=append``), which outlives the task and the node; the harness reads them there, as it reads a pod's log
on Kubernetes.  A rank is a task of one generation: its lines' ``uid`` is ``<job>.<generation>.<rank>``.

The instants, on the harness's monotonic clock (DESIGN.md's meanings, in Slurm's words):

- ``t_fault``: the profile's fault command returned; the fault is confirmed by the workload: the rank on the
  node falls silent (a live rank keeps logging, steps or ``stalled`` lines while a peer is lost), or the node is
  already reported down;
- ``t_detect``: the pulled node first shows ``NOT_RESPONDING`` or ``DOWN`` (``sinfo``);
- ``t_evict``: the job no longer holds the pulled node (``squeue``: requeued, pending, or running elsewhere);
- ``t_replace``: the job runs again (a later restart than at the fault) on nodes that all serve, none of them
  the pulled one;
- ``t_resume``: a rank of the new generation logs a step beyond the step it resumed from.

The platform's own stamps beside them: Slurm's start time of the job's new run (``replace``).
"""

from __future__ import annotations

import logging
import shlex
import shutil
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from drills.kube.flavors import GangSpec
from drills.records.verdict import DrillInconclusive
from drills.slurm.state import JobState, SlurmError, SlurmJob, SlurmNode
from drills.target.profile import TargetProfile
from drills.workloads.canarylog import CanaryEvent, CanaryLine, parse_line
from drills.workloads.rankpull import RankPull
from drills.workloads.training import Instant, TrainingRun

__all__ = ["RankOutput", "SlurmTrainingRun", "job_of", "run_folder", "said_node", "slurm_storage_problem"]

log = logging.getLogger(__name__)

POLL_S = 0.25
"""How often the run reads the job (``squeue``), the nodes (``sinfo``) and the ranks' output files."""
START_TIMEOUT_S = 90.0
"""Seconds the job may take from submission to training whole (Slurm's scheduling loop included)."""

NO_SHARED_DIR = ("the training canary on Slurm needs a directory every node sees at the same path for its "
                 "checkpoints, rendezvous and output: set slurm.shared_dir in the target profile (docs/SLURM.md)")


def slurm_storage_problem(profile: TargetProfile) -> str | None:
    """Why no training canary can run on the Slurm cluster of ``profile``, or None."""
    return NO_SHARED_DIR if profile.slurm is None or profile.slurm.shared_dir is None else None


def run_folder(profile: TargetProfile, run_id: str) -> Path:
    """The scenario's own folder on the shared directory: checkpoints, rendezvous and its ranks' output
    (``out/<job>-<task>.log``), which the invariant watch reads too."""
    assert profile.slurm is not None and profile.slurm.shared_dir is not None
    return Path(profile.slurm.shared_dir) / f"firedrill-{run_id}"


def job_of(path: Path) -> str:
    """The job id of a rank's output file ``<job>-<task>.log``."""
    return path.name.split("-", 1)[0]


@dataclass
class RankOutput:
    """The ranks' output files of one run (``<job>-<task>.log`` in its ``out`` folder), read as they grow."""

    folder: Path
    _offsets: dict[Path, int] = field(default_factory=dict)

    def new_lines(self) -> list[tuple[Path, str]]:
        """Each complete line written since the last call, with its file (a line still being written waits)."""
        out: list[tuple[Path, str]] = []
        for path in sorted(self.folder.glob("*.log")) if self.folder.is_dir() else []:
            if path.name.startswith("batch-"):
                continue
            try:
                with path.open("rb") as fh:
                    fh.seek(self._offsets.get(path, 0))
                    data = fh.read()
            except OSError:
                continue
            complete = data[:data.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            out += [(path, raw) for raw in complete.decode("utf-8", errors="replace").splitlines()]
        return out


def said_node(line: CanaryLine) -> str:
    """The node a rank's start line says it runs on (its ``config.node``, from ``SLURMD_NODENAME``), or ""."""
    config = line.fields.get("config") or {}
    return str(config.get("node") or "") if isinstance(config, dict) else ""


def canary_script(command: tuple[str, ...], args: list[str], out: Path) -> str:
    """The batch script: one canary per task, each task's lines appended to its own file."""
    return ("#!/bin/sh\n"
            f"exec srun --output={shlex.quote(str(out / '%j-%t.log'))} --open-mode=append "
            f"{shlex.join([*command, *args])}\n")


@dataclass
class SlurmTrainingRun(RankPull, TrainingRun):
    """The training run on a Slurm cluster (``target`` is a :class:`drills.target.slurmtarget.SlurmTarget`).
    The Kubernetes fields of :class:`TrainingRun` (pods, nodes, events) stay empty here."""

    DOWN_SAID: ClassVar[str] = "the node shows down in sinfo"

    job_id: int | None = None
    folder: Path | None = None
    """The run's own folder on the shared directory: checkpoints, rendezvous, the ranks' output."""
    job: SlurmJob | None = None
    """The job as ``squeue`` showed it last."""
    cluster: dict[str, SlurmNode] = field(default_factory=dict)
    """Every node as ``sinfo`` showed it last."""
    restarts_at_fault: int = 0
    node_down_at: Instant | None = None
    """When the pulled node first showed down (before the fault was confirmed, if it came first)."""
    rank_nodes: dict[str, str] = field(default_factory=dict)
    """uid -> the node its rank runs on (its start line's ``config.node``)."""
    output: RankOutput | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _poller: threading.Thread | None = None

    # ----------------------------------------------------------- steady state
    def start_canary(self, workers: int, gpus: int, checkpoint_every: int, priority_class: str | None = None,
                     required_topology: str | None = None, **step: Any) -> None:
        """Submit the canary job and wait until every rank trains, by its own lines."""
        profile = self.target.profile
        problem = slurm_storage_problem(profile)
        if problem is not None:
            raise DrillInconclusive(problem)
        if priority_class is not None or required_topology is not None:
            raise DrillInconclusive("a priority class or a required topology for the canary is not written for "
                                    "Slurm yet (docs/SLURM.md)")
        assert profile.slurm is not None and profile.slurm.shared_dir is not None
        self._check_room(workers, gpus)
        name = f"canary-{self.run_id}"
        # the job's shape as the shared judging reads it; what its workers run is the canary command, not an image
        self.spec = GangSpec(name=name, run_id=self.run_id, workers=workers, gpus_per_worker=gpus,
                             image=shlex.join(profile.slurm.canary_command))
        self.folder = run_folder(profile, self.run_id)
        for sub in ("checkpoints", "rendezvous", "out"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        self.output = RankOutput(self.folder / "out")
        args = ["train", "--compute-seconds", f"{self.step_seconds:g}", "--checkpoint-every", str(checkpoint_every),
                "--checkpoint-dir", str(self.folder / "checkpoints"),
                "--rendezvous-dir", str(self.folder / "rendezvous")]
        args += [f"--{k.replace('_', '-')}={v:g}" for k, v in step.items() if isinstance(v, (int, float))]
        options = [f"--job-name={name}", f"--nodes={workers}", "--ntasks-per-node=1",
                   f"--output={self.folder / 'out' / 'batch-%j.log'}", *profile.slurm.sbatch_options()]
        if gpus:
            options.append(f"--gres={profile.slurm.gres}:{gpus}")
        self.canary.listeners.append(self._on_canary)
        try:
            self.job_id = self.target.driver.submit(canary_script(profile.slurm.canary_command, args,
                                                                  self.folder / "out"), options)
        except SlurmError as exc:
            raise DrillInconclusive(f"the canary job could not be submitted: {exc}") from None
        self.target.timeline.action("submitted", target=name, job_id=self.job_id)
        self._poller = threading.Thread(target=self._poll, name=f"slurm-{self.run_id}", daemon=True)
        self._poller.start()
        if not self._wait(lambda: len(self._stepping()) >= workers or self._ended() is not None, START_TIMEOUT_S):
            raise DrillInconclusive(f"the canary job {self.job_id} was not training whole within "
                                    f"{START_TIMEOUT_S:g} s (by its own lines), so no fault can be injected under "
                                    f"it; {self._pod_summary()}")
        ended = self._ended()
        if ended is not None and len(self._stepping()) < workers:
            raise DrillInconclusive(f"the canary job {self.job_id} ended before it trained whole ({ended}); "
                                    f"its batch output is in {self.folder / 'out'}")

    def _check_room(self, workers: int, gpus: int) -> None:
        try:
            nodes = self.target.nodes()
        except SlurmError as exc:
            raise DrillInconclusive(f"the cluster's nodes could not be read: {exc}") from None
        free = {n.name: n.gpus - n.gpus_used for n in nodes if n.serving}
        room = sum(1 for g in free.values() if g >= gpus)
        if room < workers:
            short = self.target.not_given_back()
            raise DrillInconclusive(
                f"the cluster has room for {room} of the canary job's {workers} workers of {gpus} GPUs (free GPUs "
                f"per serving node: {free or 'none'}), so it cannot start whole; "
                + (f"nodes that served when the run began are out of service now: {short}" if short else
                   "free capacity, or lower the numbers in your copy of the feature"))

    def _generation(self) -> str:
        return str(self.job.restarts) if self.job is not None else "0"

    def _where(self, pod: str) -> str:
        """A Slurm run's lines name the job's rank where a pod would be (``job 15 rank 0 generation 1``)."""
        return pod

    def _live_ranks(self) -> set[str]:
        """The ranks of the job's current generation that started (their lines' ``<job>.<generation>.<rank>``)."""
        return {ln.uid for ln in self.canary.of(CanaryEvent.START) if ln.generation == self._generation()}

    def _stepping(self) -> set[str]:
        """The ranks of the job's current run that logged steps (they really train, by their own word)."""
        running = self.job is not None and self.job.state is JobState.RUNNING
        return self.canary.stepping(self._live_ranks()) if running else set()

    def _ended(self) -> str | None:
        job = self.job
        return None if job is None or not job.state.ended else f"{job.state.value}, reason {job.reason}"

    def _pod_summary(self) -> str:
        job = self.job
        if job is None:
            return f"job {self.job_id}: not seen in squeue"
        return (f"job {job.job_id}: {job.state.value} (reason {job.reason}) on {', '.join(job.nodes) or 'no node'}, "
                f"restarted {job.restarts} time(s)")

    # ------------------------------------------------------------- reading
    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self._read_lines()
            try:
                job = self.target.driver.job(self.job_id) if self.job_id is not None else None
                nodes = {n.name: n for n in self.target.nodes()}
            except SlurmError as exc:
                log.debug("slurm poll: %s", exc)
                continue
            clock = self.target.timeline.clock
            with self._cond:
                self.job = job if job is not None else self.job
                self.cluster = nodes
                pulled = nodes.get(self.pulled or "")
                if pulled is not None and pulled.down and self.node_down_at is None and self.before_fault:
                    self.node_down_at = Instant(clock.mono(), clock.wall())
                self._advance()
                self._cond.notify_all()

    def _read_lines(self) -> None:
        """Every new complete line of every rank's output file, parsed and added to the canary's log."""
        if self.output is None:
            return
        clock = self.target.timeline.clock
        for path, raw in self.output.new_lines():
            line = parse_line(raw, pod="", uid="", node="", mono=clock.mono(), wall=clock.wall())
            if line is not None:
                self.canary.add(self._placed(line, path))

    def _placed(self, line: CanaryLine, path: Path) -> CanaryLine:
        """The line with its rank's identity: uid ``<job>.<generation>.<rank>`` and the node it said it runs on."""
        job = job_of(path)
        uid = f"{job}.{line.generation}.{line.rank}"
        if line.event is CanaryEvent.START and said_node(line):
            self.rank_nodes[uid] = said_node(line)
        return replace(line, uid=uid, pod=f"job {job} rank {line.rank} generation {line.generation}",
                       node=self.rank_nodes.get(uid, ""))

    # ------------------------------------------------------------------ act
    # ------------------------------------------------------------- observe
    def _advance(self) -> None:
        """Under the lock: stamp each instant the moment its condition first holds (module docstring)."""
        if "fault" not in self.instants or self.pulled is None:
            return
        if "detect" not in self.instants and self.node_down_at is not None:
            self._stamp("detect", self.node_down_at)
        job = self.job
        if job is None:
            return
        if job.state.ended and "replace" not in self.instants and not self.result.halted:
            self.result.halt(f"the canary job {job.job_id} ended {job.state.value} (reason {job.reason}) after node "
                             f"{self.pulled} was lost, and never ran again: Slurm did not requeue it (the cluster's "
                             "JobRequeue, or --no-requeue in slurm.sbatch_args); the job is gone, so the scenario "
                             "ends here")
            return
        holding = job.state in (JobState.RUNNING, JobState.COMPLETING, JobState.CONFIGURING)
        if "evict" not in self.instants and not (holding and self.pulled in job.nodes):
            self._stamp("evict")
        if "evict" in self.instants and "replace" not in self.instants and job.state is JobState.RUNNING and \
                job.restarts > self.restarts_at_fault and self.pulled not in job.nodes and \
                all(self.cluster.get(n) is not None and self.cluster[n].serving for n in job.nodes):
            self._stamp("replace")
        self._stamp_resume()

    def _down_at(self) -> Instant | None:
        return self.node_down_at

    def _note_fault(self, node: str, generation: str) -> None:
        self.restarts_at_fault = self.job.restarts if self.job is not None else 0

    def _server_instants(self) -> dict[str, float]:
        """Slurm's own stamp: the start time of the job's run after the fault (``replace``)."""
        job = self.job
        if job is None or job.restarts <= self.restarts_at_fault or not job.started_at:
            return {}
        return {"replace": float(job.started_at)}

    def _awaited_stamps(self) -> set[str]:
        return set()

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Undo the fault, cancel the job, wait for the pulled node to serve, remove the run's folder; never
        raises."""
        self.target.restore_all()
        try:
            if self.job_id is not None:
                self.target.driver.cancel(self.job_id)
        except SlurmError as exc:
            log.warning("rollback: job %s not cancelled: %s", self.job_id, exc)
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
        self._read_lines()
        self.result.details["canary"] = {"lines": len(self.canary.lines), "job": self.job_id}
        self._wait_node_back()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _pulled_serves(self) -> bool:
        """Does the pulled node serve again (answering, not drained; False where sinfo cannot be read)?"""
        try:
            return any(n.name == self.pulled and n.serving for n in self.target.nodes())
        except SlurmError:
            return False
