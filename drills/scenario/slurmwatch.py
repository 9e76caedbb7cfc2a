"""The invariants on a Slurm cluster, watched live through one scenario (the pure part is
:mod:`drills.scenario.invariants`, the same book as on Kubernetes).

A rank is a task of one run of a job (``<job>.<generation>.<rank>``, :mod:`drills.workloads.slurmtraining`).  The
watch reads what each rank said of itself in its start line (its rank, world, generation, node and the GPUs Slurm
gave its step) from the ranks' output files in the scenario's folder, and from ``squeue`` whether that run of the
job is the one running now.  GPU indexes are a node's own, so each GPU is named ``<node>:<index>``; a node shares
no GPU by promise (GRES GPUs are exclusive; Slurm's ``shard`` GRES, which shares them, is not drilled yet).  A
breach FAILs the scenario at once and halts it, as on Kubernetes.

On Slurm the GPUs are a job's, not a task's: no GPU serves two jobs at once.  Each run of a job holds, on each of
its nodes, the GPUs its ranks there say the job holds (``SLURM_JOB_GPUS``, the start line's ``config.job_gpus``);
tasks bound to some of them under ``ConstrainDevices=yes`` are told theirs renumbered from 0, so a task's own
``gpus`` tells no two tasks apart (measured on Slurm 22.05).  Where a rank does not say the job's GPUs, its own
are taken, as before.  One world per job is judged from each rank's rank, world and generation.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from drills.records.verdict import DrillResult
from drills.scenario.invariants import Breach, Identity, InvariantBook, PodView
from drills.scenario.watch import report_breaches
from drills.slurm.state import JobState, SlurmError
from drills.workloads.canarylog import CanaryEvent, parse_line
from drills.workloads.slurmtraining import RankOutput, job_of, run_folder, said_node

__all__ = ["SlurmInvariantWatch"]

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5


@dataclass
class SlurmInvariantWatch:
    """Watches one scenario's invariants on a Slurm cluster from :meth:`start` to :meth:`stop`."""

    target: Any
    """A :class:`drills.target.slurmtarget.SlurmTarget`."""
    result: DrillResult
    run_id: str
    book: InvariantBook = field(default_factory=InvariantBook)
    breaches: list[Breach] = field(default_factory=list)
    ranks: dict[str, tuple[str, Identity]] = field(default_factory=dict)
    """uid -> (node, identity), from each rank's start line (its GPUs where it did not say the job's)."""
    holders: dict[str, tuple[str, Identity]] = field(default_factory=dict)
    """``<job>.<generation>@<node>`` -> (node, the GPUs the job holds there), from its ranks' start lines."""
    output: RankOutput | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SlurmInvariantWatch:
        self._thread = threading.Thread(target=self._loop, name=f"invariants-{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._look()  # what came after the last round is judged too
        with self._lock:
            self.result.details["invariants"] = {
                "ranks_watched": len(self.ranks),
                "identities": {uid: list(i.gpus or ()) for uid, (_, i) in sorted({**self.ranks, **self.holders}.items())
                               if i.gpus},
                "breaches": [b.to_json() for b in self.breaches],
            }

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._look()

    def _look(self) -> None:
        self._read_starts()
        if not self.ranks:
            return
        try:
            jobs = {str(j.job_id): j for j in self.target.driver.jobs()}
        except SlurmError as exc:
            log.debug("invariants: squeue: %s", exc)
            return
        def running(job_id: str, generation: str) -> bool:
            job = jobs.get(job_id)
            return job is not None and job.state is JobState.RUNNING and str(job.restarts) == generation

        with self._lock:
            for uid, (node, ident) in sorted(self.ranks.items()):
                job_id, generation = uid.split(".")[:2]
                self._report(self.book.node(node, False))
                self._report(self.book.pod(PodView(uid, f"job {job_id} rank {ident.rank} generation {generation} "
                                                        f"on {node}", node, running(job_id, generation), job_id,
                                                   bool(ident.gpus))))
                self._report(self.book.identity(uid, ident))
            for key, (node, ident) in sorted(self.holders.items()):
                job_id, generation = key.split("@")[0].split(".")
                self._report(self.book.node(node, False))
                self._report(self.book.pod(PodView(key, f"job {job_id} generation {generation} on {node}", node,
                                                   running(job_id, generation), "", True)))
                self._report(self.book.identity(key, ident))

    def _read_starts(self) -> None:
        profile = self.target.profile
        if profile.slurm is None or profile.slurm.shared_dir is None:
            return
        if self.output is None:
            self.output = RankOutput(run_folder(profile, self.run_id) / "out")
        for path, raw in self.output.new_lines():
            line = parse_line(raw, pod="", uid="", node="", mono=0.0, wall=0.0)
            if line is None or line.event is not CanaryEvent.START:
                continue
            node = said_node(line)
            gpus = line.fields.get("gpus")
            config = line.fields.get("config") or {}
            of_job = config.get("job_gpus") if isinstance(config, dict) else None
            world = line.fields.get("world_size")
            named = tuple(f"{node}:{g}" for g in gpus) if isinstance(gpus, list) else None
            world = world if isinstance(world, int) else None
            with self._lock:
                if isinstance(of_job, list):  # the job's GPUs on this node: the holder; the rank's world alone
                    self.holders[f"{job_of(path)}.{line.generation}@{node}"] = (node, Identity(
                        tuple(f"{node}:{g}" for g in of_job)))
                    named = None
                self.ranks[f"{job_of(path)}.{line.generation}.{line.rank}"] = (node, Identity(
                    named, line.rank, world, line.generation))

    def _report(self, found: list[Breach]) -> None:
        """Under the lock: the first breach of each invariant FAILs the scenario and halts it."""
        report_breaches(found, self.breaches, self.result, self.target.timeline)
