"""The gang submission drill on a Slurm cluster: each gang is one batch job of N tasks of G GPUs
(``sbatch --ntasks=N --gpus-per-task=G``: Slurm packs them onto nodes as their GPUs fit, as a scheduler packs
pods), its workers the tasks of the job's step, each a rank of the training canary (they really rendezvous and step together; a gang that runs a while exits after that many steps).

What is judged is what :class:`~drills.kinds.gang.drill.GangDrill` judges on Kubernetes, from the same tracks:

- a worker is *placed* (holds GPUs) while the job holds nodes (``squeue``: running, configuring or completing,
  with its node list): on the node its rank said it runs on, the job's allocation until then;
- a worker *runs* once its rank logged its start (the canary's own line, read from its output file), while the
  job holds its nodes: a job that Slurm shows running but whose ranks never start is not run whole;
- a job that ended is its workers succeeded (``COMPLETED``) or failed (any other end).

Slurm allocates a job's nodes together, so on an honest Slurm every gang is placed whole or not at all; a job
pending while others run holds nothing.  A site that splits its training jobs into one job per worker has no
gang, and the drill shows what that costs.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import threading
from dataclasses import dataclass, field

from drills.kinds.gang.drill import GANG_STEP_SECONDS, GangDrill
from drills.kube.flavors import GangSpec
from drills.records.verdict import DrillInconclusive
from drills.scenario.drill import slurm_side
from drills.slurm.state import JobState, SlurmError, SlurmJob
from drills.workloads.canarylog import CanaryEvent, parse_line
from drills.workloads.slurmtraining import (RankOutput, canary_script, job_of, run_folder, said_node,
                                            slurm_storage_problem)

__all__ = ["SlurmGangDrill"]

log = logging.getLogger(__name__)
POLL_S = 0.25
HOLDING = (JobState.RUNNING, JobState.CONFIGURING, JobState.COMPLETING)


@slurm_side(GangDrill)
@dataclass
class SlurmGangDrill(GangDrill):
    """The gang drill on a Slurm cluster (``target`` is a :class:`drills.target.slurmtarget.SlurmTarget`)."""

    jobs: dict[str, int] = field(default_factory=dict)
    """gang name -> its job id."""
    started: dict[str, dict[int, str]] = field(default_factory=dict)
    """job id -> {rank: node} of the ranks that logged their start."""
    output: RankOutput | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _poller: threading.Thread | None = None

    def _free_gpus(self) -> dict[str, int]:
        try:
            return {n.name: n.gpus - n.gpus_used for n in self.target.nodes() if n.serving}
        except SlurmError as exc:
            raise DrillInconclusive(f"the cluster's nodes could not be read: {exc}") from None

    def submit(self, gangs: int, workers: int, gpus: int, run_seconds: float | None = None) -> None:
        """Submit ``gangs`` jobs back to back (as jobs submitted together reach slurmctld); a scenario may submit
        again while the earlier ones run."""
        profile = self.target.profile
        problem = slurm_storage_problem(profile)
        if problem is not None:
            raise DrillInconclusive(problem)
        assert profile.slurm is not None
        steps = 0 if run_seconds is None else max(1, round(run_seconds / GANG_STEP_SECONDS))
        first = len(self.specs)
        names = [f"gang-{chr(ord('a') + first + i)}-{self.run_id}"[:50] for i in range(gangs)]
        specs = [GangSpec(name=n, run_id=self.run_id, workers=workers, gpus_per_worker=gpus,
                          image=shlex.join(profile.slurm.canary_command)) for n in names]
        if first:
            self._must_wait(specs)
        elif gangs > 1:
            self.room_for_all = self._room_for_all(specs)
        folder = run_folder(profile, self.run_id)
        (folder / "out").mkdir(parents=True, exist_ok=True)
        self.output = self.output or RankOutput(folder / "out")
        self._track(specs)
        submitted = self.target.timeline.action("submit-gangs", target=",".join(names), workers=workers,
                                                gpus_per_worker=gpus).stamp.mono
        if self.submitted_at is None:
            self.submitted_at = submitted
        self.submitted.update({n: submitted for n in names})
        for spec in specs:
            rendezvous = folder / "rendezvous" / spec.name
            rendezvous.mkdir(parents=True, exist_ok=True)
            args = ["train", "--compute-seconds", f"{GANG_STEP_SECONDS:g}", "--checkpoint-every", "0",
                    "--rendezvous-dir", str(rendezvous), "--steps-total", str(steps)]
            options = [f"--job-name={spec.name}", f"--ntasks={workers}",
                       f"--output={folder / 'out' / 'batch-%j.log'}", *profile.slurm.sbatch_options()]
            if gpus:  # Slurm packs the workers onto nodes as their GPUs fit, as a scheduler packs pods
                options.append(f"--gpus-per-task={profile.slurm.gres}:{gpus}" if profile.slurm.gres != "gpu"
                               else f"--gpus-per-task={gpus}")
            try:
                job_id = self.target.driver.submit(canary_script(profile.slurm.canary_command, args, folder / "out"),
                                                   options)
            except SlurmError as exc:
                raise DrillInconclusive(f"gang {spec.name} could not be submitted: {exc}") from None
            with self._lock:
                self.jobs[spec.name] = job_id
                self.started.setdefault(str(job_id), {})
        if self._poller is None:
            self._poller = threading.Thread(target=self._poll, name=f"slurm-gangs-{self.run_id}", daemon=True)
            self._poller.start()

    # ------------------------------------------------------------- reading
    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self._look()

    def _look(self) -> None:
        self._read_starts()
        with self._lock:
            wanted = dict(self.jobs)
        try:
            found = {j.job_id: j for j in self.target.driver.jobs(list(wanted.values()))}
        except SlurmError as exc:
            log.debug("slurm gangs: %s", exc)
            return
        for spec in list(self.specs):
            job_id = wanted.get(spec.name)
            if job_id is not None:
                self._see(spec, found.get(job_id))

    def _see(self, spec: GangSpec, job: SlurmJob | None) -> None:
        """Each worker of ``spec``'s job as the job and its ranks show it now (None: the job is gone)."""
        holding = job is not None and job.state in HOLDING and bool(job.nodes)
        started = self.started.get(str(job.job_id), {}) if job is not None else {}
        for rank in range(spec.workers):
            name = f"{spec.name}-worker-{rank}"
            if job is None or job.state.ended:
                ended = job is not None and job.state is JobState.COMPLETED
                self._observe(name, None, "Succeeded" if ended else "Failed", gone=job is None)
                continue
            # the node its rank said it runs on; until it starts, the job's allocation as Slurm states it
            node = started.get(rank) or ",".join(job.nodes)
            phase = "Running" if holding and rank in started else "Pending"
            self._observe(name, node if holding else None, phase)
            with self._lock:
                track = self.pods.get(name)
                if track is not None and started.get(rank):
                    track.node = started[rank]  # where the rank runs, by its own word

    def _read_starts(self) -> None:
        if self.output is None:
            return
        for path, raw in self.output.new_lines():
            line = parse_line(raw, pod="", uid="", node="", mono=0.0, wall=0.0)
            if line is None or line.event is not CanaryEvent.START:
                continue
            with self._lock:
                self.started.setdefault(job_of(path), {})[line.rank] = said_node(line)

    # ----------------------------------------------------------- rollback
    def rollback(self) -> None:
        """Cancel every job this drill submitted, wait until none holds a node, remove its folder; never
        raises."""
        for job_id in list(self.jobs.values()):
            try:
                self.target.driver.cancel(job_id)
            except SlurmError as exc:
                log.warning("rollback: job %s not cancelled: %s", job_id, exc)
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
        self._wait_jobs_gone()
        self.result.details["bind_report"] = self.bind_report()
        self.result.details["submitted_mono"] = self.submitted_at
        self.result.details["jobs"] = dict(self.jobs)
        profile = self.target.profile
        if profile.slurm is not None and profile.slurm.shared_dir is not None:
            shutil.rmtree(run_folder(profile, self.run_id), ignore_errors=True)

    def _wait_jobs_gone(self, timeout: float = 30.0) -> None:
        clock = self.target.timeline.clock
        deadline = clock.mono() + timeout
        while self.jobs and clock.mono() < deadline:
            try:
                if all(j.state.ended for j in self.target.driver.jobs(list(self.jobs.values()))):
                    return
            except SlurmError:
                pass
            threading.Event().wait(POLL_S)
        if self.jobs:
            log.warning("gang drill %s: jobs %s still hold nodes %g s after they were cancelled", self.run_id,
                        sorted(self.jobs.values()), timeout)
