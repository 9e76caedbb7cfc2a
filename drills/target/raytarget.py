"""A Ray cluster as a drill target: the profile's ``ray`` settings, the Ray driver, the fault commands.

The same surface as the Slurm target (:mod:`drills.target.slurmtarget`) where a Ray cluster has the same thing:
the run's timeline and fault journal, a node pulled with the profile's command (written down before it acts,
undone on every exit path), each node's service before a scenario and now, and what a dead run left behind.

A Ray node is known by its name (``ray start --node-name``): a node that dies and starts again gets a new node id,
and the GCS keeps the old id, DEAD, beside the new one.  A name serves while any node of that name is ALIVE.

Safety, as on Kubernetes and Slurm (docs/SAFETY.md): only nodes declaring the profile's ``safety.allow_resource``
(a custom resource) are pulled, never the head (it holds the GCS: without GCS fault tolerance the whole cluster
dies with it); at most ``safety.max_nodes`` nodes and ``safety.max_gpu_share`` of the GPUs out at once; with
``safety.require_healthy`` a run refuses a cluster whose allowed nodes are already dead; a run refuses a cluster
for which a dead run's journal still holds a fault not undone (``firedrill recover --profile``).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from drills.ray.driver import RayDriver
from drills.ray.state import PlacementState, RayError, RayNode
from drills.target.commandtarget import CommandTarget, check_share
from drills.target.faults import FaultError
from drills.target.journal import Undo, UndoKind
from drills.target.marks import Mark
from drills.target.profile import RaySettings, TargetProfile
from drills.target.service import NodeService

__all__ = ["DRILL_JOB", "RayTarget", "by_name", "ray_driver", "ray_key", "ray_marks", "ray_serving_on",
           "ray_target"]

log = logging.getLogger(__name__)


def ray_key(profile: TargetProfile) -> str:
    """What the fault journals call this cluster (its dashboard's address)."""
    assert profile.ray is not None
    return f"ray:{profile.ray.dashboard}"


def by_name(nodes: list[RayNode]) -> dict[str, RayNode]:
    """Each node name's current record: its ALIVE node where it has one, else its newest DEAD one."""
    out: dict[str, RayNode] = {}
    for node in sorted(nodes, key=lambda n: (n.alive, n.end_time_ms or 0)):
        out[node.name or node.node_id] = node
    return out


def node_service(node: RayNode) -> NodeService:
    """A Ray node's service in the words "back in service" judges: ready = ALIVE; its GPUs = what it declared."""
    return NodeService(node.name or node.node_id, ready=node.alive, cordoned=False, taints=frozenset(),
                       gpus=node.gpus)


@dataclass
class RayTarget(CommandTarget):
    """A Ray cluster, drilled through its dashboard (``platform: ray``)."""

    PLATFORM: ClassVar[str] = "Ray"
    driver: RayDriver | None = None

    @property
    def ray(self) -> RaySettings:
        assert self.profile is not None and self.profile.ray is not None
        return self.profile.ray

    @property
    def journal_key(self) -> str:
        assert self.profile is not None
        return ray_key(self.profile)

    @property
    def description(self) -> str:
        assert self.profile is not None
        return f"Ray cluster {self.profile.name} (dashboard {self.ray.dashboard})"

    def secrets(self) -> list[str]:
        return [v for v in (self.driver.headers.values() if self.driver is not None else ()) if v]

    def nodes(self) -> list[RayNode]:
        """Each node name's current record (:func:`by_name`), the head included."""
        assert self.driver is not None
        return list(by_name(self.driver.nodes()).values())

    def allowed(self, node: RayNode) -> bool:
        return not node.head and self.ray.allow_resource in node.resources

    def free_gpus(self) -> dict[str, int]:
        """Free GPUs per live node that may run drills (not the head), by name: what it declared, less the bundles
        of placement groups placed there and the GPUs of live actors outside any placement group (the state API
        states no free resources of its own)."""
        assert self.driver is not None
        nodes = [n for n in self.driver.nodes() if n.alive and not n.head]
        used: dict[str, float] = {}
        for group in self.driver.placement_groups():
            if group.state in (PlacementState.CREATED, PlacementState.PREPARED, PlacementState.RESCHEDULING):
                for bundle in group.placed:
                    used[bundle.node_id] = used.get(bundle.node_id, 0.0) + bundle.resources.get("GPU", 0.0)
        for actor in self.driver.actors(state="ALIVE"):
            if not actor.placement_group_id and actor.gpus:
                used[actor.node_id] = used.get(actor.node_id, 0.0) + actor.gpus
        return {n.name or n.node_id: max(0, int(n.gpus - used.get(n.node_id, 0.0))) for n in nodes}

    def service_now(self) -> dict[str, NodeService]:
        """Every node's service as it stands (raises RayError when the dashboard does not answer)."""
        return {n.name or n.node_id: node_service(n) for n in self.nodes()}

    def preflight(self) -> None:
        """Refuse a cluster whose allowed nodes are already dead (``safety.require_healthy``); warn otherwise."""
        assert self.profile is not None
        allowed = [n for n in self.nodes() if self.allowed(n)]
        if not allowed:
            self.warnings.append(f"no node declares the resource {self.ray.allow_resource!r} "
                                 "(safety.allow_resource), so no node can be pulled: start the GPU nodes with "
                                 f"ray start --resources '{{\"{self.ray.allow_resource}\": 1}}'")
        dead = sorted(n.name for n in allowed if not n.alive)
        if dead and self.profile.safety.require_healthy:
            raise RayError("the cluster is already degraded, so no verdict on it would be honest: node(s) "
                           f"{', '.join(dead)} are DEAD and none of that name is ALIVE again (start them again, "
                           "or set safety.require_healthy: false to drill it anyway)")
        self.warnings += [f"node {n} is DEAD before the run" for n in dead]

    def _check_blast_radius(self, node: str) -> None:
        assert self.profile is not None
        nodes = {n.name: n for n in self.nodes()}
        found = nodes.get(node)
        if found is None:
            raise FaultError(f"node {node} is not in the cluster's node list (GET /api/v0/nodes)")
        if found.head:
            raise FaultError(f"node {node} is the head: it holds the GCS and is never pulled")
        if not self.allowed(found):
            raise FaultError(f"node {node} does not declare the resource {self.ray.allow_resource!r} "
                             "(safety.allow_resource), so it is never pulled")
        check_share(node, self._pulled_now(), {n: x.gpus for n, x in nodes.items()}, self.profile.safety)

    def stop_jobs(self, submission_ids: list[str], timeout: float = 30.0, poll: float = 0.25) -> None:
        """Stop the drill's jobs and wait until none runs any more (they hold GPUs the next scenario needs); never
        raises: a job still running at the deadline is logged."""
        assert self.driver is not None
        for job in submission_ids:
            try:
                self.driver.stop(job)
            except RayError as exc:
                log.warning("Ray job %s not stopped: %s", job, exc)
        deadline = self.timeline.clock.mono() + timeout
        while submission_ids and self.timeline.clock.mono() < deadline:
            try:
                if all(self.driver.job(job).status.finished for job in submission_ids):
                    return
            except RayError:
                pass
            threading.Event().wait(poll)
        if submission_ids:
            log.warning("Ray job(s) %s still running %g s after they were stopped", ", ".join(submission_ids),
                        timeout)


DRILL_JOB = re.compile(r"^(canary|gang-[a-z])-fd[0-9a-f]{6}$")
"""The submission ids of the drills' jobs, each with its run's id: the training canary (``canary-<run id>``) and a
gang (``gang-a-<run id>``). Only a Firedrill run submits such a job."""


def ray_driver(profile: TargetProfile) -> RayDriver:
    assert profile.ray is not None
    return RayDriver(profile.ray.dashboard)


def ray_marks(profile: TargetProfile, driver: RayDriver) -> list[Mark]:
    """What a dead run left on the Ray cluster, journal or not: its drill jobs still running (they hold GPUs the
    next verdict would count as the platform's), each with the request that stops it."""
    assert profile.ray is not None
    stop = f"{profile.ray.dashboard}/api/jobs/{{}}/stop"
    post = "import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1], method='POST'), timeout=10)"
    return [Mark(f"Ray job {j.submission_id} ({j.status.value})",
                 Undo(UndoKind.COMMAND, argv=(sys.executable, "-c", post, stop.format(j.submission_id)),
                      note=f"stop Ray job {j.submission_id} (POST {stop.format(j.submission_id)})"))
            for j in driver.jobs() if DRILL_JOB.match(j.submission_id) and not j.status.finished]


def ray_serving_on(driver: RayDriver) -> Callable[[str], bool]:
    """Whether a node (by name) serves again: some node of that name is ALIVE."""
    def serving(name: str) -> bool:
        try:
            return any(n.name == name and n.alive for n in driver.nodes())
        except RayError:
            return False
    return serving


def ray_target(profile: TargetProfile) -> RayTarget:
    """Reach the Ray cluster ``profile`` names and check it before any drill (raises RayError saying what failed
    and how to fix it)."""
    target = RayTarget(driver=ray_driver(profile), profile=profile)
    target.preflight()
    return target
