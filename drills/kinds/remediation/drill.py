"""The remediation drill: several nodes report a fatal GPU fault at once; the platform acts on at most its budget.

Steady state (the canary job training whole, a checkpoint written) -> act (nodes that run no rank of the job
report a fatal GPU fault at once: the reference platform's ``firedrill.dev/inject-health``, which expires by
itself) -> observe (from the harness's own node watch: which of them are cordoned or tainted out of service; the
platform's ``RemediationHalted`` Event; the canaries' own lines) -> judge -> rollback (the reports removed, the
breaker reset as a person would, every node back).

Instants: ``t_fault`` (the first report written), ``t_halt`` (the platform's Event saying it stopped acting, its
own stamp). A quarantine is seen when a node that was schedulable at the fault is cordoned
(``spec.unschedulable``) or tainted ``node.kubernetes.io/out-of-service``: what every platform does to a node it
takes out, whatever its remediation is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from drills.kube.driver import NODE, KubeError
from drills.records.verdict import DrillInconclusive, Measurement, Threshold
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.capacity import allocatable_gpus
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
BACK_S = 15.0
"""How long the rollback waits for the quarantined nodes to be schedulable again."""
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
FAULT_CONDITION = "GpuFault"
"""The Node condition the reference platform's agent posts while a fatal GPU fault is reported."""
FLEET_ONLY_REFERENCE = ("a fault reported by many nodes at once is injected through the reference platform's node "
                        "agents (firedrill.dev/inject-health); Firedrill has no way yet to make a real cluster's health "
                        "system (NVSentinel, the GPU operator's health checks) report one, nor to read its breaker")


def _taken_out(node: Obj) -> bool:
    spec = node.get("spec") or {}
    return bool(spec.get("unschedulable")) or any(t.get("key") == OUT_OF_SERVICE_TAINT for t in spec.get("taints") or [])


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

    @staticmethod
    def _node_ready(node: Obj) -> bool:
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (node.get("status") or {}).get("conditions") or [])

    # ------------------------------------------------------------- observe
    def _advance(self) -> None:
        """Under the lock, on every change: each node newly taken out since the fault, when first seen."""
        if "fault" not in self.instants:
            return
        at = self.target.timeline.clock.mono() - self.instants["fault"].mono
        for name, node in self.nodes.items():
            if name not in self.out_before and name not in self.quarantined and _taken_out(node):
                self.quarantined[name] = at

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
        super().rollback()
        self._wait_nodes(set(self.quarantined), lambda node: not _taken_out(node))
        if not self.result.details["rollback"]:
            del self.result.details["rollback"]
