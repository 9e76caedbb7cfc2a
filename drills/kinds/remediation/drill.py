"""The remediation drill: several nodes report a fatal GPU fault at once; the platform acts on at most its budget.

Steady state (the canary job training whole, a checkpoint written) -> act (nodes that run no rank of the job
report a fatal GPU fault at once: the reference platform's ``firedrill.dev/inject-health``, which expires by
itself) -> observe (from the harness's own node watch: which of them are cordoned or tainted out of service; the
platform's ``RemediationHalted`` Event; the canaries' own lines) -> judge -> rollback (the reports removed, the
breaker reset as a person would, every node back).

The drain that must stop (clause 21.5): single-GPU pods run on a node away from the job; the node reports the fault;
once the platform has evicted the first of them (its deletion seen by the harness's pod watch) the report is
removed; from then on the platform must evict no more, must not take the node out of service, and must let it take
work again (NVSentinel#121: a cancelled drain still rebooted its node).

Instants: ``t_fault`` (the first report written), ``t_halt`` (the platform's Event saying it stopped acting, its
own stamp), ``t_clear`` (the drain scenario's report removed). A quarantine is seen when a node that was schedulable at the fault is cordoned
(``spec.unschedulable``) or tainted ``node.kubernetes.io/out-of-service``: what every platform does to a node it
takes out, whatever its remediation is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from drills.kube.driver import NODE, POD, KubeError
from drills.kube.flavors import RUN_LABEL
from drills.records.verdict import Comparison, DrillInconclusive, Measurement, Threshold
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.capacity import allocatable_gpus, free_gpus_per_node
from drills.target.gpuhealth import BREAKER_NAME, BREAKER_NAMESPACE, FLEET_ANNOTATION, HALTED_REASON
from drills.target.profile import TargetProfile
from drills.workloads.training import Instant, Obj, TrainingRun, event_time, training_job_problem, training_permissions

__all__ = ["FLEET_ONLY_REFERENCE", "RemediationDrill"]

FAULT_LIFETIME_S = 120.0
"""How long a report stands before it expires by itself (the run's rollback removes it long before)."""
SETTLE_S = 5.0
"""How long after the reports the drill watches for quarantines when the platform never says it stopped."""
AFTER_HALT_S = 1.0
"""How long after the platform said it stopped the drill still watches for a late quarantine."""
FIRST_EVICTION_S = 10.0
"""How long after its report the drain scenario waits for the platform's first eviction on the node."""
DRAIN_SETTLE_S = 1.0
"""How long past its limit the drain scenario still watches for an eviction, or the node going out of service."""
BYSTANDER_LABEL = "firedrill.dev/bystander"
"""On each single-GPU pod the drain scenario runs on the reporting node: the run id."""
BACK_S = 15.0
"""How long the rollback waits for the quarantined nodes to be schedulable again."""
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
FAULT_CONDITION = "GpuFault"
"""The Node condition the reference platform's agent posts while a fatal GPU fault is reported."""
FLEET_ONLY_REFERENCE = ("a fault reported by many nodes at once is injected through the reference platform's node "
                        "agents (firedrill.dev/inject-health); Firedrill has no way yet to make a real cluster's health "
                        "system (NVSentinel, the GPU operator's health checks) report one, nor to read its breaker")


def _out_of_service(node: Obj) -> bool:
    return any(t.get("key") == OUT_OF_SERVICE_TAINT for t in (node.get("spec") or {}).get("taints") or [])


def _taken_out(node: Obj) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable")) or _out_of_service(node)


@register
@dataclass
class RemediationDrill(TrainingRun, Drill):
    """Nodes away from the job report a fatal GPU fault at once: at most the budget is quarantined, the platform
    says it stopped, the job trains on."""

    kind: ClassVar[str] = "remediation"
    CHAIN: ClassVar[tuple[str, ...]] = ()
    reporters: list[str] = field(default_factory=list)
    out_before: set[str] = field(default_factory=set)
    """Nodes already cordoned or out of service when the reports were written (not the platform's doing)."""
    quarantined: dict[str, float] = field(default_factory=dict)
    """Node -> seconds after the fault the harness saw it taken out."""
    budget: int | None = None
    """The most nodes the scenario lets the platform take out (its sentence)."""
    over_budget_named: bool = False
    drain_node: str | None = None
    """The node whose drain must stop (clause 21.5)."""
    bystanders: dict[str, Obj] = field(default_factory=dict)
    """The single-GPU pods on it, by name, as the watch last showed them."""
    placed: set[str] = field(default_factory=set)
    """Every bystander the drill created (their uids)."""
    evicted: dict[str, float] = field(default_factory=dict)
    """Bystander pod -> monotonic instant the watch first showed it leaving (deletion stamped, or gone)."""
    out_of_service_at: float | None = None
    """When the watch first showed the drained node tainted out of service after the fault cleared (monotonic)."""
    schedulable_at: float | None = None
    """When the watch first showed the drained node neither cordoned nor out of service after the clear (monotonic)."""

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return training_job_problem(profile) or (None if reference else FLEET_ONLY_REFERENCE)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        return (training_permissions(profile, "remediation")
                + grant(CLUSTER, "", "nodes", ("get", "patch"), "remediation: the fault report on the nodes"))

    # ----------------------------------------------------------------- act
    def report_fleet_fault(self, count: int) -> None:
        """``count`` schedulable GPU nodes that run no rank of the job report a fatal GPU fault at once."""
        assert self.spec is not None, "start the canary job first"
        gpu = self.target.profile.gpu_resource
        with self._cond:
            job_nodes = {(p.get("spec") or {}).get("nodeName") for p in self.pods.values()}
            candidates = sorted(name for name, node in self.nodes.items()
                                if name not in job_nodes and not _taken_out(node)
                                and (allocatable_gpus(node, gpu) or 0) > 0 and self._node_ready(node))
            if len(candidates) < count:
                raise DrillInconclusive(f"only {len(candidates)} schedulable GPU node(s) run no rank of the job "
                                        f"({', '.join(candidates) or 'none'}), so {count} cannot report a fault away "
                                        "from it; lower the count in your copy of the feature")
            self.reporters = candidates[:count]
            self.out_before = {name for name, node in self.nodes.items() if _taken_out(node)}
            self._mark_before_fault()
        clock = self.target.timeline.clock
        until = clock.wall() + FAULT_LIFETIME_S
        with self._cond:
            self._stamp("fault")
        for i, node in enumerate(self.reporters):
            self.target.inject_health(node, {"id": f"{self.run_id}-health-{i}", "reason": "XidStorm",
                                             "message": "fatal GPU fault reported by the drill (Xid 79 storm)",
                                             "until": until})
        with self._cond:
            self.result.details["fault"] = {"nodes": self.reporters, "expires": until,
                                            "annotation": FLEET_ANNOTATION}
            self._advance()

    def place_bystanders(self, count: int) -> None:
        """``count`` single-GPU pods (each the training canary alone) pinned to one schedulable node that runs no rank
        of the job; wait until each is Running."""
        assert self.spec is not None, "start the canary job first"
        if count < 1:
            raise DrillInconclusive("0 single-GPU pods leave a drain nothing to evict; write at least 1 in your copy "
                                    "of the feature")
        profile = self.target.profile
        with self._cond:
            job_nodes = {(p.get("spec") or {}).get("nodeName") for p in self.pods.values()}
        free_per_node = free_gpus_per_node(self.target)
        free = {n: g for n, g in free_per_node.items() if n not in job_nodes and g >= count}
        if not free:
            raise DrillInconclusive(f"no schedulable node that runs no rank of the job has {count} free GPUs "
                                    f"(free GPUs per node: {free_per_node or 'none'}); lower the count in your copy "
                                    "of the feature")
        self.drain_node = node = sorted(free)[0]
        driver = self.target.driver
        driver.watch(POD, profile.namespace, label_selector=f"{BYSTANDER_LABEL}={self.run_id}",
                     on_event=self._on_bystander)
        for i in range(count):
            created = driver.create(bystander_pod(f"by-{self.run_id}-{i}"[:63], self.run_id, node, profile))
            with self._cond:
                self.placed.add(created["metadata"]["uid"])
        running = lambda: sum((p.get("status") or {}).get("phase") == "Running"  # noqa: E731
                              for p in self.bystanders.values()) >= count
        if not self._wait(running, 30.0):
            with self._cond:
                phases = ", ".join(f"{n} {(p.get('status') or {}).get('phase', '?')}"
                                   for n, p in sorted(self.bystanders.items()))
            raise DrillInconclusive(f"the {count} single-GPU pods on node {node} were not all Running within 30 s "
                                    f"({phases or 'none seen'}), so there is nothing for a drain to evict")
        self.result.details["drain"] = {"node": node, "pods": sorted(self.bystanders)}

    def _on_bystander(self, event: str, obj: Obj) -> None:
        with self._cond:
            name = obj["metadata"]["name"]
            now = self.target.timeline.clock.mono()
            if event == "DELETED" or obj["metadata"].get("deletionTimestamp"):
                self.evicted.setdefault(name, now)
            if event == "DELETED":
                self.bystanders.pop(name, None)
            else:
                self.bystanders[name] = obj
            self._cond.notify_all()

    def report_clearing_fault(self) -> None:
        """The bystanders' node reports a fatal GPU fault; once the platform's first eviction there is seen, the
        report is removed (its fault cleared halfway through the drain)."""
        node = self.drain_node
        assert node is not None, "place the pods first"
        clock = self.target.timeline.clock
        with self._cond:
            self.reporters = [node]
            self.out_before = {name for name, n in self.nodes.items() if _taken_out(n)}
            self._mark_before_fault()
            self._stamp("fault")
        self.target.inject_health(node, {"id": f"{self.run_id}-drain", "reason": "XidStorm",
                                         "message": "fatal GPU fault reported by the drill (clears halfway through "
                                                    "the drain)", "until": clock.wall() + FAULT_LIFETIME_S})
        self.result.details["fault"] = {"nodes": [node], "annotation": FLEET_ANNOTATION}
        if not self._wait(lambda: bool(self.evicted), FIRST_EVICTION_S):
            with self._cond:
                taken = _taken_out(self.nodes.get(node) or {})
            raise DrillInconclusive(
                f"the platform evicted none of the {len(self.bystanders)} pods on node {node} within "
                f"{FIRST_EVICTION_S:g} s of its fatal GPU fault ({'cordoned' if taken else 'not even cordoned'}), so "
                "there was no drain to stop")
        with self._cond:
            self._stamp("clear")  # just before the removal: every delay after it is counted in full
            first = min(self.evicted.values()) - self.instants["fault"].mono
        self.target.clear_annotation(node, FLEET_ANNOTATION)
        self.result.details["drain"].update(first_eviction_s=round(first, 3))

    def _drain_findings(self, limit: float) -> list[str]:
        """Under the lock: evictions later than ``limit`` after the clear, and the node out of service since."""
        clear = self.instants["clear"].mono
        late = sorted((at - clear, name) for name, at in self.evicted.items() if at - clear > limit)
        found = []
        if late:
            found.append(f"evicted {len(late)} more of its pods after that ("
                         + ", ".join(f"{n} {s:+.1f} s" for s, n in late) + ")")
        if self.out_of_service_at is not None:
            found.append(f"took it out of service ({OUT_OF_SERVICE_TAINT}) {self.out_of_service_at - clear:.1f} s "
                         "after its fault cleared")
        return found

    def judge_drain_stops(self, limit: float) -> None:
        """After the fault cleared: no eviction later than ``limit``, and the node never taken out of service,
        watched until ``limit`` and a second more (a finding ends the watch at once)."""
        if "clear" not in self.instants:
            return
        clock = self.target.timeline.clock
        clear = self.instants["clear"].mono
        watch = limit + DRAIN_SETTLE_S
        self._wait(lambda: bool(self._drain_findings(limit)) or clock.mono() >= clear + watch, watch + 0.5)
        with self._cond:
            found = self._drain_findings(limit)
            after = sorted(at - clear for at in self.evicted.values() if at > clear)
            done = len(self.evicted)
        self.result.measure(Measurement("drain stop", max(after, default=0.0), "s",
                                        note=f"last eviction after the fault cleared; {done} of "
                                             f"{len(self.placed)} pods evicted in all"))
        if found:
            self.result.fail(f"node {self.drain_node}'s GPU fault cleared after the platform's first eviction there, "
                             f"yet the platform {' and '.join(found)}: a drain that did not stop when its fault "
                             "cleared")
        self.result.check(Threshold("drain stop", limit, "s"))

    def judge_spared(self, at_least: int) -> None:
        """At least ``at_least`` of the bystanders were never evicted and still run, in the pods the drill made."""
        if "clear" not in self.instants:
            return
        with self._cond:
            running = sorted(n for n, p in self.bystanders.items() if n not in self.evicted
                             and p["metadata"]["uid"] in self.placed
                             and (p.get("status") or {}).get("phase") == "Running")
            evicted = sorted(self.evicted)
        self.result.measure(Measurement("pods spared", float(len(running)), "pods",
                                        note=f"of {len(self.placed)}; evicted: {', '.join(evicted) or 'none'}"))
        if len(running) < at_least:
            self.result.fail(f"only {len(running)} of the {len(self.placed)} pods on node {self.drain_node} still run "
                             f"after its fault cleared, not the {at_least} the scenario asks: evicted "
                             f"{', '.join(evicted) or 'none'}")
        self.result.check(Threshold("pods spared", float(at_least), "pods", Comparison.AT_LEAST))

    def judge_schedulable_again(self, limit: float) -> None:
        """The drained node is schedulable again (not cordoned, not out of service) within ``limit`` of the
        clear."""
        if "clear" not in self.instants or self.drain_node is None:
            return
        clock = self.target.timeline.clock
        clear = self.instants["clear"].mono
        allowed = limit + self._grace(limit)
        self._wait(lambda: self.schedulable_at is not None or clock.mono() >= clear + allowed, allowed + 0.5)
        name = "schedulable again"
        if self.schedulable_at is None:
            with self._cond:
                node = self.nodes.get(self.drain_node) or {}
            why = ", ".join(x for x in ("cordoned" if (node.get("spec") or {}).get("unschedulable") else "",
                                        "tainted out of service" if _out_of_service(node) else "") if x)
            self.result.measure(Measurement(name, None, "s", note=why))
            self.result.fail(f"node {self.drain_node} was still {why or 'taken out'} {allowed:g} s after its GPU fault "
                             "cleared: the platform never gave it back to work")
        else:
            self.result.measure(Measurement(name, self.schedulable_at - clear, "s", note=f"node {self.drain_node}"))
        self.result.check(Threshold(name, limit, "s"))

    @staticmethod
    def _node_ready(node: Obj) -> bool:
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (node.get("status") or {}).get("conditions") or [])

    # ------------------------------------------------------------- observe
    def _advance(self) -> None:
        """Under the lock, on every change: each node newly taken out since the fault, when first seen."""
        if "fault" not in self.instants:
            return
        now = self.target.timeline.clock.mono()
        at = now - self.instants["fault"].mono
        for name, node in self.nodes.items():
            if name not in self.out_before and name not in self.quarantined and _taken_out(node):
                self.quarantined[name] = at
        if "clear" in self.instants and self.drain_node is not None:
            drained = self.nodes.get(self.drain_node) or {}
            if self.out_of_service_at is None and _out_of_service(drained):
                self.out_of_service_at = now
            if self.schedulable_at is None and not _taken_out(drained):
                self.schedulable_at = now

    def _halt_notice(self) -> tuple[float, str] | None:
        """Under the lock: the platform's first Event saying it stopped acting on a reporting node (seconds after
        the fault by its own stamp, its message), or None."""
        fault = self.instants["fault"]
        found = []
        for event in self.events:
            inv = event.get("involvedObject") or {}
            if event.get("reason") == HALTED_REASON and inv.get("name") in self.reporters:
                at = event_time(event, fault.wall - 1.0)
                if at is not None:
                    found.append((max(0.0, at - fault.wall), str(event.get("message") or "")))
        return min(found, default=None)

    # --------------------------------------------------------------- judge
    def judge_at_most(self, most: int) -> None:
        """At most ``most`` nodes taken out, watched until the platform says it stopped (and a second more) or
        :data:`SETTLE_S` after the reports."""
        if "fault" not in self.instants:
            return
        self.budget = most
        clock = self.target.timeline.clock
        fault = self.instants["fault"]

        def settled() -> bool:
            halt = self._halt_notice()
            last = max(self.quarantined.values(), default=0.0)
            return ((len(self.quarantined) > most and clock.mono() >= fault.mono + last + AFTER_HALT_S)
                    or (halt is not None and clock.mono() >= fault.mono + max(halt[0], last) + AFTER_HALT_S)
                    or clock.mono() >= fault.mono + SETTLE_S)
        self._wait(settled, SETTLE_S + AFTER_HALT_S)
        with self._cond:
            self._judge_count()
        self.result.check(Threshold("nodes quarantined", float(most), "nodes"))

    def _judge_count(self) -> None:
        """Under the lock: measure the nodes taken out so far; more than the budget FAILs, naming them."""
        most = self.budget
        assert most is not None
        taken = sorted(self.quarantined.items(), key=lambda kv: kv[1])
        names = ", ".join(f"{n} ({t:.1f} s)" for n, t in taken) or "none"
        self.result.measure(Measurement("nodes quarantined", float(len(taken)), "nodes",
                                        note=f"of {len(self.reporters)} reporting: {names}"))
        if len(taken) > most and not self.over_budget_named:
            self.over_budget_named = True
            gpus = sum(allocatable_gpus(self.nodes.get(n) or {}, self.target.profile.gpu_resource) or 0
                       for n, _ in taken)
            self.result.fail(f"the platform quarantined {len(taken)} of the {len(self.reporters)} nodes that reported "
                             f"the same fault at once ({names} after the reports), more than the {most} it may: a "
                             f"fleet-wide alarm took {gpus} GPUs out of service")

    def judge_halt_notice(self, limit: float) -> None:
        """The platform says it stopped acting (its ``RemediationHalted`` Event on a reporting node) within
        ``limit`` of the reports."""
        if "fault" not in self.instants:
            return
        clock = self.target.timeline.clock
        fault = self.instants["fault"]
        allowed = limit + self._grace(limit)
        self._wait(lambda: self._halt_notice() is not None or clock.mono() >= fault.mono + allowed, allowed + 0.5)
        with self._cond:
            halt = self._halt_notice()
            taken = ", ".join(sorted(self.quarantined)) or "none"
        name = "stopped-acting notice"
        if halt is None:
            self.result.measure(Measurement(name, None, "s", note="never said"))
            self.result.fail(f"the platform never said it stopped acting: {len(self.reporters)} nodes reported the "
                             f"same fault at once ({', '.join(self.reporters)}), it quarantined {taken}, and no "
                             f"{HALTED_REASON} Event came within {allowed:g} s")
        else:
            self.result.measure(Measurement(name, halt[0], "s", note=halt[1][:300]))
        self.result.check(Threshold(name, limit, "s"))

    def judge_trains_on(self, seconds: float) -> None:
        """For ``seconds`` after the reports, every pod of the job stays Running (none evicted, none restarted) and
        the canary steps on; the quarantines are counted again at the end."""
        if "fault" not in self.instants:
            return
        clock = self.target.timeline.clock
        fault = self.instants["fault"]
        self._wait(lambda: clock.mono() >= fault.mono + seconds, seconds + 1.0)
        with self._cond:
            before = {p["metadata"]["uid"]: p["metadata"]["name"] for p in self.pods.values()
                      if p["metadata"]["uid"] in self.before_fault}
            running = {p["metadata"]["uid"] for p in self._running_pods()}
            gone = sorted(name for uid, name in before.items() if uid not in running)
            lost = sorted(uid for uid in self.before_fault if uid not in before and uid in self.seen)
            fresh = sorted(p["metadata"]["name"] for p in self.pods.values() if p["metadata"]["uid"] not in
                           self.before_fault)
            stepped = self.canary.last_step_before(fault.wall + seconds) > self.canary.last_step_before(fault.wall)
            if self.budget is not None:  # a quarantine after the first count is one too
                self._judge_count()
        disturbed = len(gone) + len(lost) + len(fresh)
        self.result.measure(Measurement("job pods disturbed", float(disturbed), "pods",
                                        note=f"{seconds:g} s after the reports"))
        if disturbed:
            self.result.fail(f"the fault reported away from the job disturbed it: "
                             + "; ".join(x for x in (f"pod(s) {', '.join(gone)} no longer running" if gone else "",
                                                      f"{len(lost)} pod(s) deleted" if lost else "",
                                                      f"new pod(s) {', '.join(fresh)} made" if fresh else "") if x)
                             + f" within {seconds:g} s")
        elif not stepped:
            self.result.fail(f"the job's canary logged no step in the {seconds:g} s after the reports, though no pod "
                             "of it was disturbed")
        self.result.check(Threshold("job pods disturbed", 0.0, "pods"))

    # ------------------------------------------------------------ rollback
    def _wait_nodes(self, names: set[str], done: Callable[[Obj], bool]) -> set[str]:
        """Poll the nodes ``names`` (up to :data:`BACK_S`) until ``done`` holds for each; those it never held for."""
        clock = self.target.timeline.clock
        deadline, waiting = clock.mono() + BACK_S, set(names)
        while waiting and clock.mono() < deadline:
            for name in sorted(waiting):
                try:
                    if done(self.target.driver.get(NODE, name)):
                        waiting.discard(name)
                except KubeError:
                    pass
            if waiting:
                self._wait(lambda: False, 0.2)
        return waiting

    def rollback(self) -> None:
        """The reports removed, the breaker reset (a person's act, written in the evidence), the job deleted; wait
        for the nodes the platform took out to be schedulable again. Never raises."""
        notes = self.result.details.setdefault("rollback", [])
        for node in self.reporters:
            try:
                self.target.clear_annotation(node, FLEET_ANNOTATION)
            except KubeError as exc:
                notes.append(f"{FLEET_ANNOTATION} on {node}: {exc}")
        if self.reporters and self.target.embedded is not None:
            # the reports gone first: a reset acts again on what still stands, with a fresh budget
            standing = self._wait_nodes(set(self.reporters), lambda node: not any(
                c.get("type") == FAULT_CONDITION and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []))
            if standing:
                notes.append(f"{', '.join(sorted(standing))} still reported {FAULT_CONDITION} {BACK_S:g} s after "
                             "the reports were removed")
            try:
                if self.target.reset_remediation():
                    notes.append(f"breaker reset: ConfigMap {BREAKER_NAMESPACE}/{BREAKER_NAME} deleted")
            except KubeError as exc:
                notes.append(f"breaker reset: {exc}")
        if self.placed:
            try:
                for pod in self.target.driver.list(POD, self.target.profile.namespace,
                                                   label_selector=f"{BYSTANDER_LABEL}={self.run_id}"):
                    self.target.driver.delete(POD, pod["metadata"]["name"], self.target.profile.namespace,
                                              grace_seconds=0)
            except KubeError as exc:
                notes.append(f"the single-GPU pods: {exc}")
        super().rollback()
        self._wait_nodes(set(self.quarantined), lambda node: not _taken_out(node))
        if not self.result.details["rollback"]:
            del self.result.details["rollback"]


def bystander_pod(name: str, run_id: str, node: str, profile: TargetProfile) -> Obj:
    """A pod of one GPU pinned to ``node``: the training canary alone (one rank, no checkpoints), a real process
    that lives until it is evicted."""
    gpu = {profile.gpu_resource: "1"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": profile.namespace,
                         # not the run's own label value: the canary job's pod watch must not see them
                         "labels": {RUN_LABEL: f"{run_id}-by"[:63], BYSTANDER_LABEL: run_id}},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "work", "image": profile.canary_image,
                                     "command": list(profile.canary.command),
                                     "args": ["train", "--compute-seconds", "0.5", "--checkpoint-every", "0"],
                                     "env": [{"name": "WORLD_SIZE", "value": "1"}, {"name": "RANK", "value": "0"}],
                                     "resources": {"limits": dict(gpu), "requests": dict(gpu)}}]}}
