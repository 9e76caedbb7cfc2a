"""The topology drill: does a gang that asks to stay inside one rack (one NVLink domain) stay inside it, or wait?

Steady state before (enough domains with free GPUs; another job holding GPUs on each node of some domains, so
that a scheduler that ignores the request has a reason to cross) -> act (submit one gang whose pods ask, in the
target's flavor, to stay inside one domain of the label) -> observe (where each pod runs: its node from the
harness's own pod watch, that node's domain from the harness's own reading of the node's label) -> judge (the
gang runs inside one domain within the threshold; or, where no domain has room for it, it places no pod and
holds no GPU) -> rollback (everything the drill made is deleted, on every exit path).

A domain is the set of nodes that share one value of a node label (:mod:`drills.kinds.topology.domains`).  The
gang's ranks are training canary ranks that rendezvous and step together; the other job's pods are canaries that
hold their GPUs (``drills.workloads.canaryjob.gpu_holder``), so the invariant watch reads what every one of them
was given.  How a gang asks, per flavor (docs/TOPOLOGY.md):

- ``kueue``: Kueue's pod-set annotation ``kueue.x-k8s.io/podset-required-topology: <label>`` on every pod; the
  LocalQueue's flavor must name a Kueue Topology with a level on that label;
- ``native``: the PodGroup's ``schedulingConstraints.topology`` (Kubernetes' ``TopologyAwareWorkloadScheduling``);
  a kube-apiserver that drops the field makes the scenario INCONCLUSIVE, naming the gate;

  both read before the scenario creates anything (:mod:`drills.kinds.topology.asking`);
- the reference platform reads Kueue's annotation in every flavor; ``volcano`` and ``kai`` on a real cluster
  spell topology otherwise (HyperNodes, a Topology object) and are INCONCLUSIVE before anything is created.

A premise that does not hold (no domain has room for a gang that should fit one; a domain has room for a gang
that should wait) is INCONCLUSIVE with what the harness saw, never a verdict on another question.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from drills.kinds.topology.asking import scheduler_problem
from drills.kinds.topology.domains import Freed, Level, Release, Spread, domain_room, first_room, spread
from drills.kube.driver import NODE, POD, KubeError, resource_for
from drills.kube.flavors import RUN_LABEL, GangFlavor, GangSpec, VolcanoForm, gang_manifests, locate, run_selector
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.capacity import free_gpus_per_node
from drills.target.profile import TargetProfile
from drills.workloads.canaryjob import (CanaryForm, CanaryTraining, canary_job_spec, gpu_holder,
                                        gpu_taint_toleration, storage_problem)
from drills.workloads.gangs import gang_permissions

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
HOSTNAME_LABEL = "kubernetes.io/hostname"
STEP_SECONDS = 0.1
"""The canary step time of the gang's ranks."""
HOLD_RUNNING_WITHIN = 30.0
"""Seconds the other job's pods get to run before the gang is submitted (else the premise is missing)."""
ROLLBACK_GONE_TIMEOUT = 30.0
"""Seconds the rollback waits for the drill's pods to be gone, so the next scenario finds their GPUs free."""
WAITING_HELD = "GPUs the waiting gang held"
"""The measurement of a gang that must wait: GPUs its pods held while it was to hold none."""

FLAVOR_PROBLEMS: dict[GangFlavor, str] = {
    GangFlavor.VOLCANO: (
        "Volcano keeps a gang inside a network domain through HyperNode objects and the PodGroup's "
        "spec.networkTopology (mode hard), not through a node label, and this drill does not write those yet; run the "
        "topology feature with the kueue flavor (Kueue's topology-aware scheduling) or the native one "
        "(TopologyAwareWorkloadScheduling) where the cluster's scheduler honours a node label"),
    GangFlavor.KAI: (
        "KAI-Scheduler keeps a gang inside a domain through a Topology object named by the PodGroup's "
        "spec.topologyConstraint (topology, requiredTopologyLevel), and the target profile has no field for that "
        "Topology's name yet; run the topology feature with the kueue or native flavor"),
}
"""Flavors whose real scheduler the drill cannot ask for a required topology, and why (the reference platform
reads Kueue's annotation in every flavor)."""


@dataclass
class PodTrack:
    """One pod of the drill, as the harness's own watch saw it."""

    gpus: int
    node: str | None = None
    phase: str = "Pending"
    gone: bool = False
    bound_at: float | None = None
    running_at: float | None = None
    ended_at: float | None = None

    @property
    def holding(self) -> bool:
        """Bound and not finished: it holds its GPUs."""
        return bool(self.node) and not self.gone and self.phase not in TERMINAL

    @property
    def ended(self) -> bool:
        return self.gone or self.phase in TERMINAL


@register
@dataclass
class TopologyDrill(Drill):
    kind: ClassVar[str] = "topology"
    needs_whole_cluster: ClassVar[str] = ("where a gang asked to stay inside one domain goes, and which domains have "
                                          "room for it, depend on every node of the cluster")

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        problem = storage_problem(profile)  # every rank of the gang is a training canary rank
        if problem is not None or reference:
            return problem
        return FLAVOR_PROBLEMS.get(profile.flavor)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        ns, why = profile.namespace, "topology"
        out = gang_permissions(profile, f"{why} (the gang, the other job, each node's domain label)")
        if profile.flavor is GangFlavor.KUEUE:
            out += grant(ns, "kueue.x-k8s.io", "localqueues", ("get",), f"{why}: the LocalQueue's ClusterQueue")
            for resource in ("clusterqueues", "resourceflavors", "topologies"):
                out += grant(CLUSTER, "kueue.x-k8s.io", resource, ("get",),
                             f"{why}: whether the queue's flavor is topology-aware on the label")
        return out

    level: Level | None = None
    label: str | None = None
    """The node label whose values are the domains (declared by the feature, else the level's default)."""
    domain_of: dict[str, str | None] = field(default_factory=dict)
    """Each node's domain (its label value), from the harness's own list of the nodes."""
    hostnames: dict[str, str | None] = field(default_factory=dict)
    """Each node's ``kubernetes.io/hostname`` label (how the other job's pods are pinned to it)."""
    others: dict[str, PodTrack] = field(default_factory=dict)
    """The other job's pods (holding GPUs on each node of some domains)."""
    other_domains: tuple[str, ...] = ()
    other_seconds: float | None = None
    """How long the other job's pods hold their GPUs (None: until the rollback)."""
    spec: GangSpec | None = None
    gang: dict[str, PodTrack] = field(default_factory=dict)
    room: dict[str, int] = field(default_factory=dict)
    """Workers of the gang's size each domain had room for when the gang was submitted."""
    cluster_room: int = 0
    """Workers of the gang's size the cluster had room for, node by node, when the gang was submitted."""
    free_at_submit: dict[str, int] = field(default_factory=dict)
    """Free GPUs per usable node when the gang was submitted (the harness's own reading)."""
    held_at_submit: frozenset[str] = frozenset()
    """The other job's pods still holding their GPUs (as the watch saw them) just before that reading: their ends
    are what can give a domain room for the gang."""
    submitted_at: float | None = None
    whole_at: float | None = None
    """When every worker of the gang was first Running at once (harness monotonic clock)."""
    crossed: Spread | None = None
    """The gang's pods as first seen spread over more than one domain (or onto a node without the label)."""
    watching: bool = False
    scheduler_checked: bool = False
    _lock: threading.Condition = field(default_factory=threading.Condition)

    # ------------------------------------------------------------ words
    def use(self, level: Level, label: str | None = None) -> str:
        """The scenario's level and its label: a declared label, else the level's default (one level a scenario,
        which the feature check holds)."""
        if label is not None:
            self.level, self.label = level, label
        elif self.label is None or self.level is not level:
            self.level, self.label = level, level.default_label
        return self.label

    # ------------------------------------------------------- steady state
    def _read_domains(self) -> None:
        assert self.label is not None
        nodes = self.target.driver.list(NODE)
        self.domain_of = {n["metadata"]["name"]: ((n["metadata"].get("labels") or {}).get(self.label))
                          for n in nodes}
        self.hostnames = {n["metadata"]["name"]: ((n["metadata"].get("labels") or {}).get(HOSTNAME_LABEL))
                           for n in nodes}

    def _free_by_domain(self, free: dict[str, int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for node, gpus in free.items():
            domain = self.domain_of.get(node)
            if domain is not None:
                out[domain] = out.get(domain, 0) + max(gpus, 0)
        return dict(sorted(out.items()))

    def _describe(self, free: dict[str, int]) -> str:
        assert self.level is not None
        by_domain = self._free_by_domain(free)
        if not by_domain:
            return (f"no schedulable node carries the label {self.label}: give each node its {self.level.value} in "
                    f"that label, or name your cluster's label in the feature ('Given a {self.level.value} is the "
                    "set of nodes that share the label ...')")
        loose = sorted(n for n in free if self.domain_of.get(n) is None)
        return (f"free GPUs per {self.level.value} ({self.label}): "
                + ", ".join(f"{d} {g}" for d, g in by_domain.items())
                + (f"; schedulable nodes without the label: {', '.join(loose)}" if loose else ""))

    def _check_scheduler(self) -> None:
        """Once a scenario, before anything is created: on a real cluster, is the flavor's scheduler asked to keep
        a gang inside one domain of the label at all (:mod:`drills.kinds.topology.asking`)?  INCONCLUSIVE if not."""
        if self.scheduler_checked or self.target.embedded is not None:
            return
        assert self.label is not None
        problem = scheduler_problem(self.target.driver, self.target.profile, self.label, self.run_id)
        self.scheduler_checked = True
        if problem:
            raise DrillInconclusive(problem)

    def steady_state_before(self, count: int, level: Level, gpus: int) -> None:
        """At least ``count`` domains with ``gpus`` free GPUs each (on nodes the drill's pods may use)."""
        self.use(level)
        self._check_scheduler()
        self._read_domains()
        free = free_gpus_per_node(self.target)
        enough = [d for d, g in self._free_by_domain(free).items() if g >= gpus]
        self.result.details.update({"topology_label": self.label, "domains_before": self._free_by_domain(free)})
        if len(enough) < count:
            raise DrillInconclusive(f"the cluster has {level.counted(len(enough))} with {gpus} free GPUs, the drill "
                                    f"needs {count}; {self._describe(free)}")

    def hold(self, gpus: int, level: Level, every: bool, seconds: float | None = None) -> None:
        """Another job holds ``gpus`` GPUs on each node of one domain (the first, by name, where every node has
        them free) or of every domain, until the rollback or for ``seconds``; returns once all its pods run."""
        self.use(level)
        self._check_scheduler()
        self._read_domains()
        free = free_gpus_per_node(self.target)
        members: dict[str, list[str]] = {}
        for node in sorted(free):
            domain = self.domain_of.get(node)
            if domain is not None:
                members.setdefault(domain, []).append(node)
        fitting = sorted(d for d, nodes in members.items() if all(free[n] >= gpus for n in nodes))
        chosen = fitting if every else fitting[:1]
        if not chosen or (every and len(fitting) < len(members)):
            short = sorted(set(members) - set(fitting))
            raise DrillInconclusive(f"the other job needs {gpus} free GPUs on each node of "
                                    f"{'every' if every else 'one'} {level.value}; "
                                    + (f"{', '.join(short)} lack(s) them; " if short else "")
                                    + self._describe(free))
        self.other_domains, self.other_seconds = tuple(chosen), seconds
        profile = self.target.profile
        steps = 0 if seconds is None else max(1, math.ceil(seconds))
        pods = []
        for i, node in enumerate(n for d in chosen for n in members[d]):
            name = f"{self.run_id}-other-{i}"
            container = gpu_holder(profile, gpus, seconds=steps)
            pods.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "namespace": profile.namespace,
                                      "labels": {RUN_LABEL: self.run_id}},
                         "spec": {"restartPolicy": "Never", "containers": [container],
                                  "nodeSelector": {HOSTNAME_LABEL: self.hostnames.get(node) or node},
                                  "tolerations": [dict(t) for t in gpu_taint_toleration(profile.gpu_resource)]}})
            with self._lock:
                self.others[name] = PodTrack(gpus)
        self._ensure_watch()
        self.target.driver.timeline.action("other-job", target=",".join(chosen), gpus_per_node=gpus,
                                           seconds=seconds or 0)
        for pod in pods:
            self.target.driver.create(pod)
        self.result.details["other_job"] = {"domains": list(chosen), "gpus_per_node": gpus, "seconds": seconds}
        running = self._wait(lambda: all(t.running_at is not None or t.ended for t in self.others.values()),
                             HOLD_RUNNING_WITHIN)
        if not running:
            with self._lock:
                late = sorted(n for n, t in self.others.items() if t.running_at is None and not t.ended)
            raise DrillInconclusive(f"the other job's pods {', '.join(late)} did not run within "
                                    f"{HOLD_RUNNING_WITHIN:g} s, so the domains were never as the scenario says")

    # ---------------------------------------------------------------- act
    def submit(self, workers: int, gpus: int, level: Level) -> None:
        """Submit one gang of training canary ranks that must stay inside one domain of the label."""
        label = self.use(level)
        profile = self.target.profile
        self._check_scheduler()
        self._read_domains()
        with self._lock:  # before the reading: a holder ending in between is then counted free early, never never
            self.held_at_submit = frozenset(n for n, t in self.others.items() if not t.ended)
        free = free_gpus_per_node(self.target)
        self.free_at_submit = free
        self.room = domain_room(free, self.domain_of, gpus)
        self.cluster_room = sum(max(g, 0) // gpus for g in free.values())
        training = CanaryTraining(workers, gpus, checkpoint_every=0, compute_seconds=STEP_SECONDS)
        name = f"gang-{self.run_id}"
        spec = replace(canary_job_spec(name, self.run_id, profile, training, form=CanaryForm.GANG_PODS),
                       required_topology=label)
        manifests = gang_manifests(spec, profile.flavor, VolcanoForm.PODGROUP)
        with self._lock:
            self.spec = spec
            for i in range(workers):
                self.gang[f"{name}-worker-{i}"] = PodTrack(gpus)
        self._ensure_watch()
        self.submitted_at = self.target.driver.timeline.action(
            "submit-gang", target=name, workers=workers, gpus_per_worker=gpus, topology=label).stamp.mono
        for obj in manifests:
            if obj.get("kind") != "Pod":
                self._create_group_object(obj)
        for obj in manifests:
            if obj.get("kind") == "Pod":
                self.target.driver.create(obj)

    def _create_group_object(self, obj: Obj) -> None:
        """Create the gang's group object; a cluster that does not serve its API, or drops the topology
        constraint from it, makes the scenario INCONCLUSIVE."""
        flavor = self.target.profile.flavor
        try:
            made = self.target.driver.create(obj)
        except KubeError as exc:
            if exc.code != 404:
                raise
            raise DrillInconclusive(f"the cluster does not serve {resource_for(obj).plural} in "
                                    f"{obj.get('apiVersion')}, which the {flavor.value} gang flavor writes ({exc}); "
                                    "is the profile's flavor the cluster's gang scheduler?") from None
        if flavor is GangFlavor.NATIVE and obj.get("kind") == "PodGroup" \
                and not ((made.get("spec") or {}).get("schedulingConstraints") or {}).get("topology"):
            raise DrillInconclusive(
                f"kube-apiserver dropped the PodGroup's spec.schedulingConstraints.topology (key {self.label}): its "
                "TopologyAwareWorkloadScheduling feature gate is off, so no scheduler is asked to keep the gang inside "
                "one domain; turn the gate on in kube-apiserver and kube-scheduler (docs/REAL_CLUSTERS.md)")

    # ------------------------------------------------------------ observe
    def _ensure_watch(self) -> None:
        if not self.watching:
            self.watching = True
            self.target.driver.watch(POD, self.target.profile.namespace, label_selector=run_selector(self.run_id),
                                     on_event=self._on_pod)

    def _on_pod(self, event: str, obj: Obj) -> None:
        meta = obj["metadata"]
        now = self.target.driver.timeline.clock.mono()
        with self._lock:
            track = self.gang.get(meta["name"]) or self.others.get(meta["name"])
            if track is None:
                return
            node = (obj.get("spec") or {}).get("nodeName")
            track.phase = (obj.get("status") or {}).get("phase", "Pending")
            track.gone = track.gone or event == "DELETED"
            if node and track.bound_at is None:
                track.bound_at, track.node = now, node
            if track.phase == "Running" and track.running_at is None:
                track.running_at = now
            if track.ended and track.ended_at is None:
                track.ended_at = now
            if meta["name"] in self.gang:
                self._judge_gang(now)
            self._lock.notify_all()

    def _spread(self) -> Spread:
        assert self.level is not None and self.label is not None
        return spread(self.level, self.label, {n: t.node for n, t in self.gang.items() if t.holding},
                      self.domain_of)

    def _judge_gang(self, now: float) -> None:
        """Under the lock, at each change of a gang pod: whole (every worker Running), or spread over domains."""
        current = self._spread()
        if self.crossed is None and current.placed and not current.inside_one:
            self.crossed = current
        if self.whole_at is None and self.gang and all(t.phase == "Running" and t.holding
                                                       for t in self.gang.values()):
            self.whole_at = now

    def _wait(self, predicate: Any, timeout: float) -> bool:
        deadline = self.target.driver.timeline.clock.mono() + timeout
        with self._lock:
            while not predicate():
                now = self.target.driver.timeline.clock.mono()
                if deadline - now <= 0:
                    return False
                self.result.raise_if_halted()
                self._lock.wait(min(deadline - now, 0.2))
            return True

    def _gang_name(self) -> str:
        return self.spec.name if self.spec is not None else "?"

    def _premise(self, should_fit: bool) -> None:
        """A gang judged on being placed inside one domain needs a domain with room for it when it was submitted;
        one judged on waiting needs the cluster to have room for it and no domain to."""
        assert self.spec is not None and self.level is not None
        workers, gpus = self.spec.workers, self.spec.gpus_per_worker
        what = f"the gang's {workers} workers of {gpus} GPUs"
        rooms = ", ".join(f"{d} {n}" for d, n in self.room.items()) or "none"
        seen = (f"workers of {gpus} GPUs each {self.level.value} had room for: {rooms}; "
                f"{self._describe(self.free_at_submit)}")
        if should_fit and not any(n >= workers for n in self.room.values()):
            raise DrillInconclusive(f"no {self.level.value} had room for {what} when it was submitted ({seen}), so "
                                    f"it could not be placed inside one; make the gang smaller in your copy of the "
                                    "feature")
        if not should_fit:
            roomy = [d for d, n in self.room.items() if n >= workers]
            if roomy:
                raise DrillInconclusive(f"{self.level.value} {roomy[0]} had room for {what} when it was submitted "
                                        f"({seen}), so the gang need not wait and waiting proves nothing; make it "
                                        "bigger in your copy of the feature")
            if self.cluster_room < workers:
                raise DrillInconclusive(f"the cluster had room for {self.cluster_room} of {what} when it was "
                                        f"submitted ({seen}), so it would wait across {self.level.value}s too; make "
                                        "it smaller in your copy of the feature")

    def wait_inside_one(self, timeout: float, since_freed: bool = False) -> Measurement:
        """Every worker Running, all on nodes of one domain; a spread over domains FAILs at once, naming them.
        Measured from the gang's submission, or (``since_freed``) from the instant a domain freed up."""
        assert self.spec is not None and self.level is not None
        name = self.inside_one_name(self.level, since_freed)
        if since_freed:  # a gang already spread over domains is judged now, not once a domain frees up
            self._wait(lambda: self.freed_at() is not None or self.crossed is not None, timeout)
        start = self.freed_at() if since_freed else self.submitted_at
        if start is None and self.crossed is None:
            raise DrillInconclusive(f"no {self.level.value} gained room for {self._whole()} as the other job's pods "
                                    "ended, so nothing was to be placed after it")
        if not since_freed:
            self._premise(should_fit=True)
        self._wait(lambda: self.whole_at is not None or self.crossed is not None, timeout)
        if self.crossed is not None:
            self._settle()
        with self._lock:
            self.result.details["placement"] = self.placement()
            if self.crossed is not None:
                seen = self.crossed.widest(self._spread())
                self.result.fail(seen.crossing(self._gang_name()))
                return self.result.measure(Measurement(name, None, "s", note=f"it spread over "
                                                       f"{', '.join(seen.domains)}"))
            if self.whole_at is None:
                running = sum(1 for t in self.gang.values() if t.holding and t.phase == "Running")
                return self.result.measure(Measurement(name, None, "s", note=f"{running} of {self.spec.workers} "
                                                       f"workers running after {timeout:g} s"))
            assert start is not None
            return self.result.measure(Measurement(name, self.whole_at - start, "s"))

    def _settle(self, seconds: float = 2.0) -> None:
        """Give the rest of a gang the scheduler is binding (one commit, pod by pod) a moment to show, so that a
        finding names every pod that went astray."""
        self._wait(lambda: all(t.node or t.ended for t in self.gang.values()), seconds)

    @staticmethod
    def inside_one_name(level: Level, since_freed: bool = False) -> str:
        """The measurement's name: ``time until every worker runs inside one rack`` (``after one freed up``)."""
        return f"time until every worker runs inside one {level.value}" + (" after one freed up" if since_freed else "")

    def freed(self) -> Freed | None:
        """The first instant (harness clock) some domain had room for the whole gang, counted from the free GPUs the
        harness read when the gang was submitted plus those of each pod of the other job its watch saw end since:
        "a rack frees up" as this gang needs it, whatever its size against the rack's (:func:`first_room`)."""
        with self._lock:
            if self.spec is None:
                return None
            releases = [Release(t.ended_at, t.node, t.gpus) for name, t in self.others.items()
                        if name in self.held_at_submit and t.node and t.ended_at is not None]
            return first_room(self.free_at_submit, self.domain_of, self.spec.gpus_per_worker, self.spec.workers,
                              releases)

    def freed_at(self) -> float | None:
        freed = self.freed()
        return None if freed is None else freed.at

    def _whole(self) -> str:
        assert self.spec is not None
        return f"the gang's {self.spec.workers} workers of {self.spec.gpus_per_worker} GPUs"

    def observe_waiting(self, duration: float | None, timeout: float) -> Measurement:
        """The gang places no pod and holds no GPU for ``duration`` seconds from submission, or (None) until a
        domain the other job held frees up; a pod bound before then FAILs at once, naming where it went."""
        assert self.spec is not None and self.level is not None and self.submitted_at is not None
        self._premise(should_fit=False)
        placed = lambda: any(t.node for t in self.gang.values())  # noqa: E731
        if duration is not None:
            until = self.submitted_at + duration
            self._wait(lambda: placed() or self.target.driver.timeline.clock.mono() >= until,
                       max(0.0, until - self.target.driver.timeline.clock.mono()))
        else:
            if not self._wait(lambda: placed() or self.freed_at() is not None, timeout):
                raise DrillInconclusive(f"no {self.level.value} gained room for {self._whole()} within {timeout:g} s "
                                        f"as the other job's pods ended ({self._ends()}), so the wait had no end to "
                                        "judge")
        if placed():
            self._settle()
        freed = self.freed() if duration is None else None
        if duration is None:
            until = freed.at if freed is not None else self.target.driver.timeline.clock.mono()
            if freed is not None:
                self.result.details["room_for_the_gang"] = {"domain": freed.domain,
                                                            "at_s": round(freed.at - self.submitted_at, 3)}
        with self._lock:
            early = {n: t for n, t in self.gang.items() if t.bound_at is not None and t.bound_at < until}
            vanished = sorted(n for n, t in self.gang.items() if t.ended and n not in early)
            held = sum(t.gpus for t in early.values())
            name = WAITING_HELD
            self.result.details["placement"] = self.placement()
            if early:
                where = spread(self.level, self.label or "", {n: t.node for n, t in early.items()}, self.domain_of)
                rooms = ", ".join(f"{d} {n}" for d, n in self.room.items())
                self.result.fail(f"gang {self._gang_name()} was to wait whole (no {self.level.value} had room for its "
                                 f"{self.spec.workers} workers of {self.spec.gpus_per_worker} GPUs; workers each "
                                 f"{self.level.value} had room for: {rooms}) but {len(early)} of its "
                                 f"{self.spec.workers} pods {'was' if len(early) == 1 else 'were'} placed, holding "
                                 f"{held} GPUs in {self.level.counted(len(where.domains))} ({self.label}): "
                                 f"{where.where()}; {self._binds(early, duration, freed)}")
            elif vanished:
                raise DrillInconclusive(f"the gang's pods {', '.join(vanished)} ended or were deleted while it "
                                        "waited, so its waiting cannot be judged")
            return self.result.measure(Measurement(name, float(held), "GPUs",
                                                   note=f"{len(early)} of {self.spec.workers} pods placed"))

    def _binds(self, early: dict[str, PodTrack], duration: float | None, freed: Freed | None) -> str:
        """When each early pod was bound, against the instant the gang had to wait for."""
        base = self.submitted_at or 0.0
        bound = ", ".join(f"{n} at {t.bound_at - base:.2f} s" for n, t in sorted(early.items(), key=lambda kv: (
            kv[1].bound_at or 0.0, kv[0])) if t.bound_at is not None)
        if duration is not None:
            return f"bound after submission: {bound}, within the {duration:g} s it was to wait"
        level = self.level.value if self.level is not None else "domain"
        if freed is None:
            return f"bound after submission: {bound}, and no {level} had room for the whole gang yet"
        return (f"bound after submission: {bound}, before any {level} had room for the whole gang "
                f"({freed.domain} had from {freed.at - base:.2f} s)")

    def _ends(self) -> str:
        """When each pod of the other job held at submission was seen to end (s after submission)."""
        base = self.submitted_at or 0.0
        with self._lock:
            parts = [f"{n} on {t.node} " + ("still holding" if t.ended_at is None
                                             else f"ended at {t.ended_at - base:.2f} s")
                     for n, t in sorted(self.others.items()) if n in self.held_at_submit]
        return "; ".join(parts) or "none held GPUs when the gang was submitted"

    def placement(self) -> dict[str, Any]:
        """Per pod: its node, that node's domain, when it was bound and when it ended (s after submission), for the
        evidence."""
        base = self.submitted_at or 0.0
        rel = lambda at: None if at is None else round(at - base, 3)  # noqa: E731
        return {name: {"node": t.node, "domain": self.domain_of.get(t.node) if t.node else None,
                       "bound_s": rel(t.bound_at), "ended_s": rel(t.ended_at), "phase": t.phase}
                for name, t in sorted({**self.others, **self.gang}.items())}

    # ----------------------------------------------------------- rollback
    def rollback(self) -> None:
        """Delete everything this drill made (pods first, then the gang's group objects); never raises."""
        driver, profile = self.target.driver, self.target.profile
        ns = profile.namespace
        try:
            for pod in driver.list(POD, ns, label_selector=run_selector(self.run_id)):
                driver.delete(POD, pod["metadata"]["name"], ns, grace_seconds=0)
            if self.spec is not None:
                for obj in gang_manifests(self.spec, profile.flavor, VolcanoForm.PODGROUP):
                    if obj.get("kind") != "Pod":
                        driver.delete(resource_for(obj), obj["metadata"]["name"], ns)
                if profile.flavor is GangFlavor.KUEUE:  # its Workload holds the pods' kueue.x-k8s.io/managed finalizer
                    group = locate(self.spec, GangFlavor.KUEUE).group
                    driver.delete(resource_for({"apiVersion": f"{group.group}/{group.version}", "kind": group.kind}),
                                  group.name, ns)
            deadline = time.monotonic() + ROLLBACK_GONE_TIMEOUT
            while driver.list(POD, ns, label_selector=run_selector(self.run_id)):
                if time.monotonic() >= deadline:
                    log.warning("topology drill %s: pods still present %g s after the rollback deleted them",
                                self.run_id, ROLLBACK_GONE_TIMEOUT)
                    break
                time.sleep(0.2)
        except KubeError as exc:
            log.warning("rollback of topology drill %s incomplete: %s", self.run_id, exc)
        with self._lock:
            self.result.details["placement"] = self.placement()


__all__ = ["FLAVOR_PROBLEMS", "WAITING_HELD", "PodTrack", "TopologyDrill"]
