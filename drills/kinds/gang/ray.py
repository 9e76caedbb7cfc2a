"""The gang submission drill on a Ray cluster: each gang is one Ray job (``<ray.canary_command> gang``) whose
driver asks for N workers of G GPUs the way the site's jobs do (``ray.gang_form``): one placement group of N
bundles, every worker an actor in its bundle (Ray reserves every bundle or none), or each worker an actor of its
own (no gang).  Each worker logs the canary's start line and steps for the gang's run time.

What is judged is what :class:`~drills.kinds.gang.drill.GangDrill` judges on Kubernetes, from the same tracks:

- a worker is *placed* (holds GPUs) while its actor is ALIVE on a node, or its bundle is reserved on one (the
  state API's ``/api/v0/actors`` and ``/api/v0/placement_groups``);
- a worker *runs* once its rank logged its start (the canary's own line, read from the job's log) while placed;
- a gang whose job ended is its workers succeeded (``SUCCEEDED``) or failed (any other end).
"""

from __future__ import annotations

import logging
import shlex
import threading
from dataclasses import dataclass, field

from drills.kinds.gang.drill import GANG_STEP_SECONDS, GangDrill
from drills.kube.flavors import GangSpec
from drills.ray.state import ActorState, JobStatus, PlacementGroup, RayActor, RayError, RayJob
from drills.records.verdict import DrillInconclusive
from drills.scenario.drill import ray_side
from drills.workloads.canarylog import CanaryEvent, parse_line
from drills.workloads.raytraining import RayJobLog, said_node_id

__all__ = ["RayGangDrill"]

log = logging.getLogger(__name__)
POLL_S = 0.25


@ray_side(GangDrill)
@dataclass
class RayGangDrill(GangDrill):
    """The gang drill on a Ray cluster (``target`` is a :class:`drills.target.raytarget.RayTarget`)."""

    logs: dict[str, RayJobLog] = field(default_factory=dict)
    """gang name (its job's submission id) -> its job's log."""
    started: dict[str, dict[int, str]] = field(default_factory=dict)
    """gang name -> {rank: node id} of the ranks that logged their start."""
    names: dict[str, str] = field(default_factory=dict)
    """Ray node id -> node name."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _poller: threading.Thread | None = None

    def _free_gpus(self) -> dict[str, int]:
        try:
            return self.target.free_gpus()
        except RayError as exc:
            raise DrillInconclusive(f"the cluster's nodes could not be read: {exc}") from None

    def submit(self, gangs: int, workers: int, gpus: int, run_seconds: float | None = None) -> None:
        """Submit ``gangs`` jobs back to back; a scenario may submit again while the earlier ones run."""
        profile = self.target.profile
        assert profile.ray is not None
        steps = 0 if run_seconds is None else max(1, round(run_seconds / GANG_STEP_SECONDS))
        first = len(self.specs)
        names = [f"gang-{chr(ord('a') + first + i)}-{self.run_id}" for i in range(gangs)]
        specs = [GangSpec(name=n, run_id=self.run_id, workers=workers, gpus_per_worker=gpus,
                          image=shlex.join(profile.ray.canary_command)) for n in names]
        if first:
            self._must_wait(specs)
        elif gangs > 1:
            self.room_for_all = self._room_for_all(specs)
        self._track(specs)
        submitted = self.target.timeline.action("submit-gangs", target=",".join(names), workers=workers,
                                                gpus_per_worker=gpus, form=profile.ray.gang_form.value).stamp.mono
        if self.submitted_at is None:
            self.submitted_at = submitted
        self.submitted.update({n: submitted for n in names})
        for spec in specs:
            entrypoint = shlex.join([*profile.ray.canary_command, "gang", "--name", spec.name,
                                     "--workers", str(workers), "--gpus", str(gpus),
                                     "--compute-seconds", f"{GANG_STEP_SECONDS:g}", "--steps-total", str(steps),
                                     "--form", profile.ray.gang_form.value])
            try:
                self.target.driver.submit(entrypoint, submission_id=spec.name, runtime_env=profile.ray.runtime_env(),
                                          metadata={"firedrill.run": self.run_id})
            except RayError as exc:
                raise DrillInconclusive(f"gang {spec.name} could not be submitted: {exc}") from None
            with self._lock:
                self.logs[spec.name] = RayJobLog(self.target.driver, spec.name)
                self.started.setdefault(spec.name, {})
        if self._poller is None:
            self._poller = threading.Thread(target=self._poll, name=f"ray-gangs-{self.run_id}", daemon=True)
            self._poller.start()

    # ------------------------------------------------------------- reading
    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self._look()
            except RayError as exc:
                log.debug("ray gangs: %s", exc)

    def _look(self) -> None:
        with self._lock:
            wanted = dict(self.logs)
        for name, job_log in wanted.items():
            for raw in job_log.new_lines():
                line = parse_line(raw, pod="", uid="", node="", mono=0.0, wall=0.0)
                if line is not None and line.event is CanaryEvent.START:
                    with self._lock:
                        self.started.setdefault(name, {})[line.rank] = said_node_id(line)
        driver = self.target.driver
        self.names.update({n.node_id: n.name or n.node_id for n in driver.nodes()})
        actors = {a.name: a for a in driver.actors() if a.name.startswith(tuple(wanted))}
        groups = {g.name: g for g in driver.placement_groups() if g.name in wanted}
        jobs = {name: driver.job(name) for name in wanted}
        for spec in list(self.specs):
            if spec.name in wanted:
                self._see(spec, jobs[spec.name], groups.get(spec.name), actors)

    def _see(self, spec: GangSpec, job: RayJob, group: PlacementGroup | None, actors: dict[str, RayActor]) -> None:
        """Each worker of ``spec`` as its actor, its bundle and its rank's lines show it now."""
        started = self.started.get(spec.name, {})
        for rank in range(spec.workers):
            name = f"{spec.name}-worker-{rank}"
            if job.status.finished:
                self._observe(name, None, "Succeeded" if job.status is JobStatus.SUCCEEDED else "Failed")
                continue
            actor = actors.get(name)
            node_id = ""
            if actor is not None and actor.state is ActorState.ALIVE:
                node_id = actor.node_id
            elif group is not None and rank < len(group.bundles) and group.bundles[rank].node_id:
                node_id = group.bundles[rank].node_id  # reserved for it before its actor runs
            if actor is not None and actor.state is ActorState.DEAD:
                self._observe(name, None, "Failed", gone=True)
                continue
            node = self.names.get(node_id, node_id) if node_id else None
            phase = "Running" if node and rank in started else "Pending"
            self._observe(name, node, phase)

    # ----------------------------------------------------------- rollback
    def rollback(self) -> None:
        """Stop every job this drill submitted and wait until none runs; never raises."""
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
        self.target.stop_jobs(sorted(self.logs))
        self.result.details["bind_report"] = self.bind_report()
        self.result.details["submitted_mono"] = self.submitted_at
        self.result.details["jobs"] = sorted(self.logs)
