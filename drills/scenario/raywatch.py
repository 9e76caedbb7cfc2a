"""The invariants on a Ray cluster, watched live through one scenario (the pure part is
:mod:`drills.scenario.invariants`, the same book as on Kubernetes and Slurm).

A rank is a worker of one worker group of one of the scenario's Ray jobs (``<submission id>.<generation>.<rank>``,
:mod:`drills.workloads.raytraining`; a gang's workers are generation 0).  The watch reads what each rank said of
itself in its start line (its rank, world, generation, the node it runs on and the GPUs Ray gave it) from the
logs of the run's jobs, through the Job Submission API.  A rank runs while its job runs, its worker group is the
job's newest, its node is ALIVE and it has not logged its exit.  GPU ids are a node's own, so each GPU is named
``<node>:<id>``; Ray promises no sharing of a GPU resource given whole.  A breach FAILs the scenario at once and
halts it, as elsewhere.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from drills.ray.state import JobStatus, RayError
from drills.records.verdict import DrillResult
from drills.scenario.invariants import Breach, Identity, InvariantBook, PodView
from drills.scenario.watch import report_breaches
from drills.workloads.canarylog import CanaryEvent, parse_line
from drills.workloads.raytraining import RayJobLog, said_node_id

__all__ = ["RayInvariantWatch"]

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5


@dataclass
class RayInvariantWatch:
    """Watches one scenario's invariants on a Ray cluster from :meth:`start` to :meth:`stop`."""

    target: Any
    """A :class:`drills.target.raytarget.RayTarget`."""
    result: DrillResult
    run_id: str
    book: InvariantBook = field(default_factory=InvariantBook)
    breaches: list[Breach] = field(default_factory=list)
    ranks: dict[str, tuple[str, Identity]] = field(default_factory=dict)
    """uid -> (node id, identity), from each rank's start line."""
    exited: set[str] = field(default_factory=set)
    logs: dict[str, RayJobLog] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> RayInvariantWatch:
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
                "identities": {uid: list(i.gpus or ()) for uid, (_, i) in sorted(self.ranks.items()) if i.gpus},
                "breaches": [b.to_json() for b in self.breaches],
            }

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._look()

    def _look(self) -> None:
        try:
            jobs = {j.submission_id: j for j in self.target.driver.jobs() if j.submission_id.endswith(self.run_id)}
            for job_id in jobs:
                # the drill polling the same job has most often just read its whole log: that read will do
                self.logs.setdefault(job_id, RayJobLog(self.target.driver, job_id, max_age=POLL_SECONDS))
            self._read(jobs)
            nodes = self.target.driver.nodes()
        except RayError as exc:
            log.debug("invariants: %s", exc)
            return
        names = {n.node_id: n.name or n.node_id for n in nodes}
        alive = {n.node_id for n in nodes if n.alive}
        newest: dict[str, int] = {}
        for uid in self.ranks:
            job, generation = uid.rsplit(".", 2)[:2]
            newest[job] = max(newest.get(job, 0), int(generation) if generation.isdigit() else 0)
        with self._lock:
            for uid, (node_id, ident) in sorted(self.ranks.items()):
                job_id, generation = uid.rsplit(".", 2)[:2]
                job = jobs.get(job_id)
                running = (job is not None and job.status is JobStatus.RUNNING and node_id in alive
                           and generation == str(newest.get(job_id, 0)) and uid not in self.exited)
                node = names.get(node_id, node_id)
                self._report(self.book.node(node, False))
                self._report(self.book.pod(PodView(uid, f"job {job_id} rank {ident.rank} worker group {generation} "
                                                        f"on {node}", node, running, job_id, bool(ident.gpus))))
                self._report(self.book.identity(uid, ident))

    def _read(self, jobs: dict[str, Any]) -> None:
        nodes: dict[str, str] | None = None
        for job_id, job_log in self.logs.items():
            for raw in job_log.new_lines():
                line = parse_line(raw, pod="", uid="", node="", mono=0.0, wall=0.0)
                if line is None:
                    continue
                uid = f"{job_id}.{line.generation}.{line.rank}"
                if line.event is CanaryEvent.EXIT:
                    with self._lock:
                        self.exited.add(uid)
                if line.event is not CanaryEvent.START:
                    continue
                if nodes is None:
                    nodes = {n.node_id: n.name or n.node_id for n in self.target.driver.nodes()}
                node_id = said_node_id(line)
                node = nodes.get(node_id, node_id)
                gpus = line.fields.get("gpus")
                world = line.fields.get("world_size")
                with self._lock:
                    self.ranks[uid] = (node_id, Identity(
                        tuple(f"{node}:{g}" for g in gpus) if isinstance(gpus, list) else None, line.rank,
                        world if isinstance(world, int) else None, line.generation))

    def _report(self, found: list[Breach]) -> None:
        """Under the lock: the first breach of each invariant FAILs the scenario and halts it."""
        report_breaches(found, self.breaches, self.result, self.target.timeline)
