"""The gang submission drill: does a distributed job get all of its GPUs or none?

Steady state before (enough free GPU nodes) -> act (submit one or more gangs,
their pods interleaved as two jobs submitted together would be) -> observe
(when each pod was bound and when it ran; partial-hold GPU-seconds) -> steady
state after / rollback (everything the drill made is deleted, on every exit
path).

The gangs are written in the target's flavor, in the plain form (group
object plus pods), so the drill controls the order in which pods reach the
scheduler: the interleaving is what turns a scheduler without gang support
into a deadlock, and the drill names it when it sees it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from drills.kinds.gang.holds import Gang, PodChange, partial_hold
from drills.kube.driver import POD, KubeError, resource_for
from drills.kube.flavors import GangFlavor, GangSpec, VolcanoForm, gang_manifests, locate, run_selector
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.capacity import free_gpus_per_node
from drills.target.access import Permission
from drills.target.profile import TargetProfile
from drills.workloads.canaryjob import CanaryForm, CanaryTraining, canary_job_spec, storage_problem
from drills.workloads.gangs import gang_permissions
from drills.workloads.slurmtraining import slurm_storage_problem

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
ROLLBACK_GONE_TIMEOUT = 30.0
"""Seconds the rollback waits for the drill's pods to be gone, so the next scenario finds their GPUs free."""
GANG_STEP_SECONDS = 0.1
"""The canary step time of a gang's ranks (a gang that runs N seconds takes N / this many steps)."""


@dataclass
class PodTrack:
    gang: str
    gpus: int
    bound_at: float | None = None
    running_at: float | None = None
    node: str | None = None
    holding: bool = False
    phase: str = "Pending"


@register
@dataclass
class GangDrill(Drill):
    kind: ClassVar[str] = "gang-submission"

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return storage_problem(profile)  # every gang member is a training canary rank

    @classmethod
    def unsupported_on_slurm(cls, profile: TargetProfile) -> str | None:
        return slurm_storage_problem(profile)  # every gang member is a training canary rank (drills.kinds.gang.slurm)

    @classmethod
    def unsupported_on_ray(cls, profile: TargetProfile) -> str | None:
        return None  # its Ray side: drills.kinds.gang.ray

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        return gang_permissions(profile, "gang submission")

    specs: list[GangSpec] = field(default_factory=list)
    pods: dict[str, PodTrack] = field(default_factory=dict)
    changes: list[PodChange] = field(default_factory=list)
    submitted_at: float | None = None
    """When the first gang was submitted (harness monotonic clock)."""
    submitted: dict[str, float] = field(default_factory=dict)
    """When each gang was submitted (a scenario may submit one while another runs)."""
    whole_at: dict[str, float] = field(default_factory=dict)
    """When each gang first had min_member workers Running at the same time."""
    partial_since: float | None = None
    """Since when two or more gangs have held GPUs while none of them was whole (a deadlock in the making)."""
    deadlock: str = ""
    room_for_all: str = ""
    """Why gangs submitted together to contend need not (the cluster had room for all of them), or ""."""
    _lock: threading.Condition = field(default_factory=threading.Condition)

    # ------------------------------------------------------- steady state
    def _free_gpus(self) -> dict[str, int]:
        """Free GPUs per schedulable node, now."""
        return free_gpus_per_node(self.target)

    def steady_state_before(self, nodes: int, gpus_per_node: int) -> None:
        free = self._free_gpus()
        fitting = sorted(n for n, g in free.items() if g >= gpus_per_node)
        self.result.details["free_gpus_before"] = free
        if len(fitting) < nodes:
            raise DrillInconclusive(
                f"the cluster has {len(fitting)} schedulable nodes with {gpus_per_node} free GPUs, the drill needs "
                f"{nodes}; free GPUs per node: {free or 'none'}")

    # ---------------------------------------------------------------- act
    def submit(self, gangs: int, workers: int, gpus: int, run_seconds: float | None = None) -> None:
        """Submit ``gangs`` gangs together (their pods interleaved); a scenario may submit again later, while
        the earlier gangs run (then the new gang has to wait for them, see :meth:`_must_wait`)."""
        profile = self.target.profile
        # Every worker is a rank of the training canary: a gang's ranks really rendezvous and step together,
        # and one that runs for a while exits 0 after that many steps (each steps_total x the step time).
        training = CanaryTraining(workers, gpus, checkpoint_every=0, compute_seconds=GANG_STEP_SECONDS)
        steps = 0 if run_seconds is None else max(1, round(run_seconds / GANG_STEP_SECONDS))
        first = len(self.specs)
        names = [f"gang-{chr(ord('a') + first + i)}-{self.run_id}"[:50] for i in range(gangs)]
        specs = [canary_job_spec(n, self.run_id, profile, training, steps_total=steps, form=CanaryForm.GANG_PODS)
                 for n in names]
        if first:
            self._must_wait(specs)
        elif gangs > 1:
            self.room_for_all = self._room_for_all(specs)
        manifests = [gang_manifests(s, profile.flavor, VolcanoForm.PODGROUP) for s in specs]
        self._track(specs)
        if not first:
            self.target.driver.watch(POD, profile.namespace, label_selector=run_selector(self.run_id),
                                     on_event=self._on_pod)
        groups = [[m for m in ms if m.get("kind") != "Pod"] for ms in manifests]
        pod_lists = [[m for m in ms if m.get("kind") == "Pod"] for ms in manifests]
        submitted = self.target.timeline.action(
            "submit-gangs", target=",".join(names), workers=workers, gpus_per_worker=gpus).stamp.mono
        if self.submitted_at is None:
            self.submitted_at = submitted
        self.submitted.update({n: submitted for n in names})
        for group in groups:
            for obj in group:
                self._create_group_object(obj)
        for i in range(workers):  # interleaved, as jobs submitted together reach the scheduler
            for pods in pod_lists:
                self.target.driver.create(pods[i])

    def _track(self, specs: list[GangSpec]) -> None:
        """Follow the workers of ``specs``: one track per worker, ``<gang>-worker-<rank>``."""
        with self._lock:
            self.specs.extend(specs)
            for spec in specs:
                for i in range(spec.workers):
                    self.pods[f"{spec.name}-worker-{i}"] = PodTrack(spec.name, spec.gpus_per_worker)

    def _room_for_all(self, specs: list[GangSpec]) -> str:
        """Gangs submitted together to contend: where the cluster has room for every one of them at once, none
        waits, and 'exactly one runs while the others hold nothing' cannot be shown; returns why, or ""."""
        free = self._free_gpus()
        gpus = max(s.gpus_per_worker for s in specs)
        room, need = sum(g // gpus for g in free.values()), sum(s.workers for s in specs)
        if room < need:
            return ""
        return (f"the cluster has room for all {len(specs)} gangs at once ({need} workers of {gpus} GPUs; free GPUs "
                f"per node: {free}), so none has to wait and contention cannot be shown; run it where the gangs "
                "together need more than the free GPUs, or make them bigger in your copy of the feature")

    def _must_wait(self, specs: list[GangSpec]) -> None:
        """A gang submitted while this drill's earlier gangs run is there to wait for them: if the cluster has room
        for it at once, it would not wait and the scenario would prove nothing (INCONCLUSIVE)."""
        gpus = max(s.gpus_per_worker for s in specs)
        free = self._free_gpus()
        fitting = sorted(n for n, g in free.items() if g >= gpus)
        need = sum(s.workers for s in specs)
        if len(fitting) >= need:
            raise DrillInconclusive(
                f"the gang would not have to wait: while {', '.join(s.name for s in self.specs)} runs, {len(fitting)} "
                f"nodes still have {gpus} free GPUs and it needs {need}; free GPUs per node: {free}. Make the running "
                "gang bigger, or the waiting one, so that both do not fit at once")

    def _create_group_object(self, obj: Obj) -> None:
        """Create a gang's group object; a cluster that does not serve its API makes the drill INCONCLUSIVE."""
        try:
            self.target.driver.create(obj)
        except KubeError as exc:
            if exc.code != 404:
                raise
            api, plural = obj.get("apiVersion", ""), resource_for(obj).plural
            try:
                served = self.target.driver.request("GET", f"/apis/{api}", retry=False).get("resources") or []
            except KubeError as probe:
                if probe.code != 404:
                    raise exc from None
                served = []
            if any(r.get("name") == plural for r in served):
                raise  # the API is there: the 404 is something else (the namespace)
            flavor = self.target.profile.flavor
            hint = (" (Kubernetes 1.37 serves it with the GenericWorkload feature gate on and "
                    "--runtime-config=scheduling.k8s.io/v1beta1=true; see docs/REAL_CLUSTERS.md)"
                    if flavor is GangFlavor.NATIVE else "")
            raise DrillInconclusive(f"the cluster does not serve {plural} in {api}, which the {flavor.value} "
                                    f"gang flavor writes{hint}; is the profile's flavor the cluster's gang "
                                    "scheduler?") from None

    def _on_pod(self, event: str, obj: Obj) -> None:
        self._observe(obj["metadata"]["name"], (obj.get("spec") or {}).get("nodeName"),
                      (obj.get("status") or {}).get("phase", "Pending"), gone=event == "DELETED")

    def _observe(self, name: str, node: str | None, phase: str, *, gone: bool = False) -> None:
        """A worker seen: bound to ``node`` (None: not placed), in ``phase`` (a pod's phase), or ``gone``."""
        now = self.target.timeline.clock.mono()
        with self._lock:
            track = self.pods.get(name)
            if track is None:
                return
            track.phase = phase
            if node and track.bound_at is None:
                track.bound_at, track.node = now, node
            if track.phase == "Running" and track.running_at is None:
                track.running_at = now
            holding = bool(node) and track.phase not in TERMINAL and not gone
            if holding != track.holding:
                track.holding = holding
                self.changes.append(PodChange(now, track.gang, name, holding))
            running = sum(1 for t in self.pods.values() if t.gang == track.gang and t.holding and t.phase == "Running")
            spec = next((s for s in self.specs if s.name == track.gang), None)
            if spec is not None and running >= spec.min_available and track.gang not in self.whole_at:
                self.whole_at[track.gang] = now
            self._check_deadlock(now)
            self._lock.notify_all()

    def _partial(self) -> list[tuple[GangSpec, list[PodTrack]]]:
        return [(s, h) for s in self.specs if s.name not in self.whole_at
                and 0 < len(h := self._held(s.name)) < s.min_available]

    def _check_deadlock(self, now: float, confirm_after: float = 1.0) -> None:
        """Two or more gangs each holding part of what they need, none whole, for ``confirm_after`` seconds:
        each waits for GPUs another holds.  Recorded once, with who holds what."""
        partial = self._partial()
        if len(partial) < 2 or len(self.whole_at) == len(self.specs):
            self.partial_since = None
            return
        if self.partial_since is None:
            self.partial_since = now
        if not self.deadlock and now - self.partial_since >= confirm_after:
            parts = [f"gang {s.name} holds {sum(t.gpus for t in h)} GPUs with {len(h)} of {s.min_available} "
                     f"workers placed" for s, h in partial]
            self.deadlock = ("DEADLOCK: " + "; ".join(parts) + ". Each waits for GPUs another holds, so none can "
                             "run (the scheduler placed the gangs pod by pod, without gang scheduling).")
            self.result.fail(self.deadlock)

    def _hopeless(self) -> bool:
        """A deadlock was seen, or some gang that never ran whole no longer has enough live pods to."""
        if self.deadlock:
            return True
        return any(s.name not in self.whole_at and sum(1 for t in self.pods.values() if t.gang == s.name
                                                       and t.phase not in TERMINAL) < s.min_available
                   for s in self.specs)

    # ------------------------------------------------------------ observe
    def _wait(self, predicate: Any, timeout: float) -> bool:
        deadline = self.target.timeline.clock.mono() + timeout
        with self._lock:
            while not predicate():
                now = self.target.timeline.clock.mono()
                self._check_deadlock(now)
                if deadline - now <= 0 or self._hopeless():
                    return False
                self.result.raise_if_halted()
                self._lock.wait(min(deadline - now, 0.2))
            return True

    def _whole(self, gang: str) -> bool:
        """Has the gang had all min_member workers Running at the same time (not merely one after another)?"""
        return gang in self.whole_at

    def _held(self, gang: str) -> list[PodTrack]:
        return [t for t in self.pods.values() if t.gang == gang and t.holding]

    def wait_all_running(self, timeout: float) -> Measurement:
        ok = self._wait(lambda: all(self._whole(s.name) for s in self.specs), timeout)
        return self.result.measure(self._time_to_whole("time to run whole", ok, timeout))

    def _time_to_whole(self, name: str, ok: bool, timeout: float) -> Measurement:
        assert self.submitted_at is not None
        with self._lock:
            if not ok:
                missing = [s.name for s in self.specs if s.name not in self.whole_at]
                why = "a deadlock was seen" if self.deadlock else f"waited {timeout:g} s"
                return Measurement(name, None, "s", note=f"gang(s) {', '.join(missing)} never ran whole ({why})")
            return Measurement(name, max(self.whole_at.values()) - self.submitted_at, "s")

    def wait_one_whole_others_empty(self, timeout: float) -> Measurement:
        """Exactly one gang runs whole, and while it does the others hold no GPU at all."""
        if self.room_for_all:
            raise DrillInconclusive(self.room_for_all)
        ok = self._wait(lambda: any(self._whole(s.name) for s in self.specs), timeout)
        name = "time until one gang runs whole"
        with self._lock:
            if not ok:
                note = "a deadlock was seen" if self.deadlock else f"no gang ran whole within {timeout:g} s"
                return self.result.measure(Measurement(name, None, "s", note=note))
            winner = min(self.whole_at, key=self.whole_at.__getitem__)
            for s in self.specs:
                held = self._held(s.name)
                if s.name != winner and held:
                    self.result.fail(f"while gang {winner} runs, gang {s.name} holds {sum(t.gpus for t in held)} GPUs "
                                     f"with {len(held)} of {s.min_available} workers placed")
            assert self.submitted_at is not None
            self.result.details["first_whole_gang"] = winner
            return self.result.measure(Measurement(name, self.whole_at[winner] - self.submitted_at, "s"))

    def wait_running(self, timeout: float) -> None:
        """The gangs submitted so far run whole (a job already running when the scenario's next gang comes);
        INCONCLUSIVE if they do not: what comes next would prove nothing, and *A gang that fits is placed
        whole* judges that promise."""
        ok = self._wait(lambda: all(self._whole(s.name) for s in self.specs), timeout)
        if not ok:
            missing = [s.name for s in self.specs if not self._whole(s.name)]
            raise DrillInconclusive(f"gang(s) {', '.join(missing)} never ran whole within {timeout:g} s, so no later "
                                    "gang had to wait for them")

    def wait_waiting_gang_whole(self, timeout: float, tolerance: float = 1.0) -> Measurement:
        """The last gang submitted, which had to wait for the others, runs whole; a FAIL names the GPUs it held
        with fewer than minMember workers placed while it waited (episodes shorter than ``tolerance``, binding a
        gang pod by pod, count zero)."""
        waiting = self.specs[-1]
        ok = self._wait(lambda: self._whole(waiting.name), timeout)
        name = "time until the waiting gang runs whole"
        now = self.target.timeline.clock.mono()
        with self._lock:
            held = partial_hold(list(self.changes), [Gang(waiting.name, waiting.min_available,
                                                          waiting.gpus_per_worker)], now, tolerance)[waiting.name]
            others = ", ".join(s.name for s in self.specs[:-1])
            if held.episodes:
                seconds = sum(end - start for start, end, _, _ in held.episodes)
                pods, gpus = max((p, g) for _, _, p, g in held.episodes)
                self.result.fail(f"while it waited for {others}, gang {waiting.name} held GPUs with fewer than "
                                 f"{waiting.min_available} workers placed for {seconds:.1f} s: "
                                 f"{held.gpu_seconds / seconds:.0f} GPUs on average, up to {gpus} ({pods} workers); "
                                 f"{held.gpu_seconds:.1f} GPU-s it could not use")
            if not ok:
                note = "a deadlock was seen" if self.deadlock else f"it did not run whole within {timeout:g} s"
                return self.result.measure(Measurement(name, None, "s", note=note))
            return self.result.measure(Measurement(name, self.whole_at[waiting.name] - self.submitted[waiting.name],
                                                   "s"))

    def wait_all_ran_whole(self, timeout: float) -> Measurement:
        ok = self._wait(lambda: all(self._whole(s.name) for s in self.specs), timeout)
        return self.result.measure(self._time_to_whole("time until every gang ran whole", ok, timeout))

    def partial_hold(self, tolerance: float = 1.0) -> Measurement:
        now = self.target.timeline.clock.mono()
        with self._lock:
            holds = partial_hold(list(self.changes), [Gang(s.name, s.min_available, s.gpus_per_worker)
                                                      for s in self.specs], now, tolerance)
        total = sum(h.gpu_seconds for h in holds.values())
        self.result.details["partial_hold"] = {k: {"gpu_seconds": round(v.gpu_seconds, 3),
                                                   "episodes": v.episodes} for k, v in holds.items()}
        return self.result.measure(Measurement("partial-hold GPU-seconds", total, "GPU-s",
                                               note=f"episodes shorter than {tolerance:g} s count zero"))

    def bind_report(self) -> dict[str, dict[str, Any]]:
        """Per pod: node, seconds from submission to bind and to running (the evidence table)."""
        base = self.submitted_at or 0.0
        with self._lock:
            return {name: {"gang": t.gang, "node": t.node,
                           "bound_s": None if t.bound_at is None else round(t.bound_at - base, 3),
                           "running_s": None if t.running_at is None else round(t.running_at - base, 3)}
                    for name, t in sorted(self.pods.items())}

    # ----------------------------------------------------------- rollback
    def rollback(self) -> None:
        """Delete everything this drill made (pods first, then group objects); never raises."""
        driver, ns = self.target.driver, self.target.profile.namespace
        try:
            for pod in driver.list(POD, ns, label_selector=run_selector(self.run_id)):
                driver.delete(POD, pod["metadata"]["name"], ns, grace_seconds=0)
            for spec in self.specs:
                for obj in gang_manifests(spec, self.target.profile.flavor, VolcanoForm.PODGROUP):
                    if obj.get("kind") != "Pod":
                        driver.delete(resource_for(obj), obj["metadata"]["name"], ns)
                if self.target.profile.flavor is GangFlavor.KUEUE:
                    # Kueue's Workload of the pod group: deleting it releases the pods' kueue.x-k8s.io/managed
                    # finalizer, without which they stay, holding their GPUs, after the deletion above
                    group = locate(spec, GangFlavor.KUEUE).group
                    driver.delete(resource_for({"apiVersion": f"{group.group}/{group.version}", "kind": group.kind}),
                                  group.name, ns)
            self._wait_pods_gone(ROLLBACK_GONE_TIMEOUT)
        except KubeError as exc:
            log.warning("rollback of gang drill %s incomplete: %s", self.run_id, exc)
        self.result.details["bind_report"] = self.bind_report()
        self.result.details["submitted_mono"] = self.submitted_at

    def _wait_pods_gone(self, timeout: float) -> None:
        """Wait until no pod of this run is left (a finalizer may keep a deleted pod, and its GPUs, a while)."""
        driver, ns = self.target.driver, self.target.profile.namespace
        deadline = time.monotonic() + timeout
        while driver.list(POD, ns, label_selector=run_selector(self.run_id)):
            if time.monotonic() >= deadline:
                log.warning("gang drill %s: pods still present %g s after the rollback deleted them", self.run_id,
                            timeout)
                return
            time.sleep(0.2)


__all__ = ["GangDrill"]
