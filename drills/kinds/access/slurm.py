"""The accelerator access drill on a Slurm cluster: each probe one batch job of one task on the chosen node
(``sbatch --nodelist=<node> --gres=<gres>:N``), the access probe its step, its lines in its own file on the shared
directory (``srun --output``), read there as they grow.

A Slurm node has no container: every job reads the host's ``/dev`` (``slurm.device_dir``), so a device file there
says nothing about what a job may use. Slurm confines a job with the device cgroup (``ConstrainDevices=yes``,
task/cgroup), which lets an ``open()`` of its own GPUs through and refuses the others (``EPERM``). The probe runs
with ``--dev``: a GPU is *seen* and *opened* where its open passed access control (NVML, where the node has it,
enumerates the same), and what the job was told is ``SLURM_STEP_GPUS``, the node's GPU indexes (Slurm's
``CUDA_VISIBLE_DEVICES`` restarts at 0 in every job under ``ConstrainDevices``). A job that requests no GPU and
asks for every one, as CUDA images do, runs with ``CUDA_VISIBLE_DEVICES`` unset and ``NVIDIA_VISIBLE_DEVICES=all``
(what a container runtime such as enroot/pyxis would honour).

The sentences say "pod"; on Slurm each is a job, and the findings name it (``job 12 (acc-fd...-1)``). A probe job
carries a time limit, so one a dead run left behind ends on its own; ``firedrill recover`` cancels it before that.
"""

from __future__ import annotations

import logging
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from drills.kinds.access.drill import AccessDrill, summary
from drills.kinds.access.judge import ProbePod
from drills.records.verdict import DrillInconclusive
from drills.scenario.drill import slurm_side
from drills.slurm.state import SlurmError, SlurmJob
from drills.workloads.accessprobe import ALL_DEVICES, VISIBLE_ENV, access_args, program_source
from drills.workloads.slurmtraining import RankOutput, job_of, run_folder, slurm_storage_problem

__all__ = ["SlurmAccessDrill", "probe_script"]

log = logging.getLogger(__name__)


def probe_script(args: list[str], out: Path, *, ask_all: bool) -> str:
    """The batch script: ``srun`` of the access probe (standard library Python, as ``python3 -c``), its lines in
    ``out/<job>-<task>.log``; ``ask_all``: its environment asks for every GPU, as CUDA images do."""
    env = ["env", "-u", "CUDA_VISIBLE_DEVICES", f"{VISIBLE_ENV}={ALL_DEVICES}"] if ask_all else []
    return ("#!/bin/sh\n"
            f"exec srun --output={shlex.quote(str(out / '%j-%t.log'))} "
            f"{shlex.join([*env, 'python3', '-c', program_source(), *args])}\n")


@slurm_side(AccessDrill)
@dataclass
class SlurmAccessDrill(AccessDrill):
    """The accelerator access drill on a Slurm cluster (``target`` is a
    :class:`drills.target.slurmtarget.SlurmTarget`)."""

    jobs: dict[str, int] = field(default_factory=dict)
    """probe name -> its job id."""
    output: RankOutput | None = None

    # ---------------------------------------------------------------- steady state
    def use_node(self, free: int) -> None:
        """The first serving node (by name) with at least ``free`` GPUs free; none: INCONCLUSIVE."""
        try:
            nodes = {n.name: n for n in self.target.nodes() if n.serving and n.gpus}
        except SlurmError as exc:
            raise DrillInconclusive(f"the cluster's nodes could not be read: {exc}") from None
        per_node = {name: n.gpus - n.gpus_used for name, n in nodes.items()}
        chosen = sorted(name for name, f in per_node.items() if f >= free)
        if not chosen:
            seen = ", ".join(f"{n}: {f}" for n, f in sorted(per_node.items())) or "none"
            raise DrillInconclusive(f"no serving Slurm node with GPUs has {free} of them free (free GPUs per node: "
                                    f"{seen}): free some, or ask for fewer")
        self.node = chosen[0]
        self.node_gpus = nodes[self.node].gpus
        self.result.details["access"] = {"node": self.node, "node_gpus": self.node_gpus,
                                         "free_gpus": per_node[self.node], "pods": {}}

    # ------------------------------------------------------------------------ act
    def start(self, requests: list[int], *, ask_all: bool = False) -> None:
        """Submit one probe job per entry of ``requests`` (the GPUs it requests) to the node; wait until each runs
        and has reported once."""
        if not self.node:
            raise DrillInconclusive("no node was chosen before the probe jobs were started")
        profile = self.target.profile
        problem = slurm_storage_problem(profile)
        if problem is not None:
            raise DrillInconclusive(problem)
        assert profile.slurm is not None
        out = run_folder(profile, self.run_id) / "access"
        out.mkdir(parents=True, exist_ok=True)
        self.output = self.output or RankOutput(out)
        args = access_args(attempt=max(self.node_gpus, 1), period=self.period, rounds=self.rounds,
                           dev=profile.slurm.devices_of(self.node))
        # the probe holds what it opened until its job ends: Slurm ends it at this limit if nobody cancels it
        minutes = math.ceil((self.run_timeout + self.report_timeout + self.rounds * self.period) / 60) + 1
        names = []
        for gpus in requests:
            name = f"acc-{self.run_id}-{len(self.requested) + 1}"
            options = [f"--job-name={name}", "--nodes=1", "--ntasks=1", f"--output={out / 'batch-%j.log'}",
                       *profile.slurm.sbatch_options(), f"--nodelist={self.node}", f"--time={minutes}"]
            if gpus:
                options.append(f"--gres={profile.slurm.gres}:{gpus}")
            try:
                job_id = self.target.driver.submit(probe_script(args, out, ask_all=ask_all), options)
            except SlurmError as exc:
                raise DrillInconclusive(f"probe job {name} could not be submitted: {exc}") from None
            self.jobs[name] = job_id
            self.requested[name] = gpus
            names.append(name)
        self.target.timeline.action("start-probes", target=self.node, pods=names, gpus=requests, ask_all=ask_all,
                                    jobs=[self.jobs[n] for n in names])
        self._wait_reported(names)

    def _read(self) -> None:
        """Take every line the probe jobs wrote since the last call."""
        if self.output is None:
            return
        by_job = {str(job_id): name for name, job_id in self.jobs.items()}
        for path, text in self.output.new_lines():
            name = by_job.get(job_of(path))
            if name is not None:
                self._take(name, text)

    def _jobs(self) -> dict[str, SlurmJob]:
        try:
            found = {j.job_id: j for j in self.target.driver.jobs(list(self.jobs.values()))}
        except SlurmError as exc:
            log.debug("access on Slurm: squeue: %s", exc)
            return {}
        return {name: found[job_id] for name, job_id in self.jobs.items() if job_id in found}

    def _why_not_running(self, name: str, job: SlurmJob | None) -> str:
        if job is None:
            return f"job {self.jobs[name]} is gone from squeue"
        why = f"job {job.job_id} is {job.state.value}"
        return why + (f" ({job.reason})" if job.reason and job.reason != "None" else "")

    def _wait_reported(self, names: list[str]) -> None:
        """Until every probe of ``names`` has reported; a job that ended first, or never ran within
        :attr:`run_timeout`: INCONCLUSIVE, saying why."""
        clock = self.target.timeline.clock
        deadline = clock.mono() + self.run_timeout
        waiting = list(names)
        while waiting:
            self.result.raise_if_halted()
            self._read()
            jobs = self._jobs()
            with self._lock:
                waiting = [n for n in waiting if not self.reports.get(n)]
            for name in waiting:
                job = jobs.get(name)
                if job is not None and job.state.ended:
                    raise DrillInconclusive(f"probe {name} ended before it reported ({self._why_not_running(name, job)}"
                                            f"); its output in {self.output.folder if self.output else '?'} says why")
            if not waiting:
                return
            if clock.mono() >= deadline:
                why = "; ".join(f"{n}: {self._why_not_running(n, jobs.get(n))}" for n in waiting)
                raise DrillInconclusive(f"probe jobs never reported within {self.run_timeout:g} s: {why} (does "
                                        "every node have python3?)")
            self._heard.clear()
            self._heard.wait(0.25)

    # ------------------------------------------------------------- observe, judge
    def probe_pods(self) -> list[ProbePod]:
        self._read()
        return super().probe_pods()

    def _label(self, probe: str) -> str:
        return f"job {self.jobs[probe]} ({probe})" if probe in self.jobs else ""

    # ----------------------------------------------------------------- rollback
    def rollback(self) -> None:
        """Cancel every probe job; record what each reported; never raises."""
        for name, job_id in self.jobs.items():
            try:
                self.target.driver.cancel(job_id)
            except SlurmError as exc:
                log.warning("rollback of access drill %s: job %s (%s): %s", self.run_id, job_id, name, exc)
        if self.node:
            self.result.details.setdefault("access", {})["pods"] = {
                p.called: {**summary(p), "job": self.jobs.get(p.name)} for p in self.probe_pods()}
