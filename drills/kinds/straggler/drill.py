"""The straggler drill: one rank's GPU runs slow (or every rank's input does); time the naming and the recovery.

Steady state (the canary job training whole, a checkpoint written) -> act (a GPU of one rank throttled to a
fraction of its speed; or, the negative case, every rank's input slowed alike) -> observe -> judge -> rollback
(the throttle removed, the naming taint the fault caused removed, the job deleted).

Truth comes from the canaries' own per-rank step lines (:mod:`drills.kinds.straggler.timing`): the job's step time
before and during the fault, the GPU-seconds the other ranks waited for the slow one, and the instant the job's
median step time is back within the sentence's tolerance of its pre-fault median.  The one thing read from the
platform is the thing promised: that it *names* the slow node (docs/STRAGGLER.md: the taint
``firedrill.dev/straggler`` or a ``StragglerDetected`` Event on the Node, seen by the harness's own watches).

Instants (the harness's monotonic clock): ``t_fault`` the injection was written; ``t_slow`` the first instant the
job's rolling median step time is beyond the tolerance (the fault took); ``t_named`` the slow GPU's node first
named; ``t_recovered`` after ``t_slow``, the first instant the rolling median is back within the tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from drills.kinds.straggler.timing import JobStep, job_steps, median_step, rolling_median, waiting_gpu_seconds
from drills.kube.driver import NODE, KubeError
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.profile import TargetProfile
from drills.target.throttle import STRAGGLER_TAINT
from drills.target.xid import wait_seen
from drills.workloads.canarylog import CanaryEvent
from drills.workloads.training import (TERMINAL, Instant, Obj, TrainingRun, rank_of, training_job_problem,
                                       training_permissions)

__all__ = ["NAMING_EVENT", "NAMING_TAINT", "RECOVERED_AFTER_NAMING", "Slowdown", "StragglerDrill"]

NAMING_TAINT = STRAGGLER_TAINT
"""The reference platform names a straggler's node with this taint (docs/STRAGGLER.md)."""
NAMING_EVENT = "StragglerDetected"
"""...and with a Warning Event of this reason on the Node; either counts as named."""
ROLLING = 5
"""Job steps in the rolling median the slowdown and the recovery are judged on."""
SLOW_TOLERANCE = 0.2
"""Before the recovery sentence says its tolerance, the slowdown is seen at 20 % over the pre-fault median."""
REFERENCE_ONLY = ("a slow GPU is injected through the reference platform's node agent; a real cluster needs the "
                  "profile's fault.throttle command (a power limit or a clock lock) and its confirmation through "
                  "DCGM's clock or throttle-reason metrics (DCGM_FI_DEV_SM_CLOCK, "
                  "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS), which are not built yet (issue 26)")
CHART_POINTS = 2000
RECOVERED_AFTER_NAMING = "recovered after naming"
"""The measurement of the naming-relative recovery sentence: t_recovered - t_named."""


@dataclass(frozen=True)
class Slowdown:
    """What the drill slowed."""

    nodes: tuple[str, ...]
    """Where it injected."""
    rank: int | None = None
    """The slowed GPU's rank (None: every rank's input)."""
    gpu: int | None = None
    uuid: str | None = None
    speed: float | None = None
    input_delay_s: float | None = None

    @property
    def uniform(self) -> bool:
        return self.rank is None

    @property
    def node(self) -> str | None:
        """The slow GPU's node (None for a uniform slowdown)."""
        return None if self.uniform else self.nodes[0]


@register
@dataclass
class StragglerDrill(TrainingRun, Drill):
    """One rank's GPU runs slow: named (the platform names its node), recovered (the job's speed is back)."""

    kind: ClassVar[str] = "straggler"
    CHAIN: ClassVar[tuple[str, ...]] = ("named", "recovered")
    AFTER_RESUME: ClassVar[tuple[str, ...]] = ()
    STARTS: ClassVar[dict[str, str]] = {"named": "fault", "recovered": "fault", "total": "fault"}
    slowdown: Slowdown | None = None
    before_step_s: float | None = None
    """The job's median step time over the steps completed before the fault."""
    tolerance: float = SLOW_TOLERANCE
    named_nodes: dict[str, float] = field(default_factory=dict)
    """Node -> seconds after the fault when the harness first saw it named."""
    _tainted_before: set[str] = field(default_factory=set)
    _events_before: int = 0
    _seq: int = 0

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return training_job_problem(profile) or (None if reference else REFERENCE_ONLY)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        return (training_permissions(profile, "straggler")
                + grant(CLUSTER, "", "nodes", ("get", "patch"), "straggler: the throttle injection on the node"))

    # ----------------------------------------------------------------- act
    def _before_fault(self) -> None:
        """Under the lock: what the fault is measured against."""
        assert self.spec is not None
        steps = job_steps(self.canary.snapshot(), self.spec.workers)
        self.before_step_s = median_step(steps[-20:])
        if self.before_step_s is None:
            raise DrillInconclusive("the canary job completed no step on every rank before the fault, so its step "
                                    "time before the fault is unknown")
        self._mark_before_fault()
        self._tainted_before = {n for n, obj in self.nodes.items() if _named_by_taint(obj)}
        self._events_before = len(self.events)

    def slow_gpu(self, rank: int, speed: float) -> None:
        """Throttle the first GPU of worker ``rank``'s pod to ``speed`` (a fraction) of its clock."""
        assert self.spec is not None, "start the canary job first"
        with self._cond:
            _, node, index, uuid = self._rank_gpu(rank, "slowed")
            self._before_fault()
            self.slowdown = Slowdown((node,), rank, index, uuid, speed)
        self._seq += 1
        self.target.inject_throttle(node, {"id": f"{self.run_id}-slow-{self._seq}", "gpu": index,
                                                   "speed": speed})
        self._faulted({"kind": "gpu", "node": node, "gpu": index, "uuid": uuid, "rank": rank,
                       "speed": speed, "method": "throttle"})

    def slow_input(self, delay_s: float) -> None:
        """Every rank waits ``delay_s`` longer for its input each step (an input-bound job: no GPU is slow)."""
        assert self.spec is not None, "start the canary job first"
        with self._cond:
            nodes = tuple(sorted({p["spec"]["nodeName"] for p in self._running_pods()}))
            if not nodes:
                raise DrillInconclusive(f"no rank of the canary job is running; pods: {self._pod_summary()}")
            self._before_fault()
            self.slowdown = Slowdown(nodes, input_delay_s=delay_s)
        for node in nodes:
            self._seq += 1
            self.target.inject_throttle(node, {"id": f"{self.run_id}-input-{self._seq}",
                                                       "input_delay_s": delay_s})
        self._faulted({"kind": "input", "nodes": list(nodes), "input_delay_s": delay_s, "method": "throttle"})

    def _faulted(self, details: dict[str, Any]) -> None:
        with self._cond:
            clock = self.target.timeline.clock
            self._stamp("fault", Instant(clock.mono(), clock.wall()))
            self.result.details["fault"] = {**details, "step_time_before_s": self.before_step_s}
            self._advance()

    # ------------------------------------------------------------- observe
    def _on_event(self, event: str, obj: Obj) -> None:
        super()._on_event(event, obj)
        with self._cond:
            self._advance()
            self._cond.notify_all()

    def _after_fault_steps(self) -> list[JobStep]:
        assert self.spec is not None
        after = self.instants["fault"].mono
        return [s for s in job_steps(self.canary.snapshot(), self.spec.workers) if s.mono >= after]

    def _advance(self) -> None:
        """Under the lock, on every change: which nodes are named, and when the slowdown showed."""
        slowdown = self.slowdown
        if slowdown is None or "fault" not in self.instants or self.spec is None:
            return
        fault = self.instants["fault"]
        now = self.target.timeline.clock.mono() - fault.mono
        for name, node in self.nodes.items():
            if name not in self._tainted_before and _named_by_taint(node):
                self.named_nodes.setdefault(name, now)
        for e in self.events[self._events_before:]:
            inv = e.get("involvedObject") or {}
            if inv.get("kind") == "Node" and e.get("reason") == NAMING_EVENT and inv.get("name"):
                self.named_nodes.setdefault(str(inv["name"]), now)
        if slowdown.node is not None and slowdown.node in self.named_nodes and "named" not in self.instants:
            self._stamp("named", self._at(self.named_nodes[slowdown.node]))
        if "slow" not in self.instants and self.before_step_s is not None:
            limit = self.before_step_s * (1 + SLOW_TOLERANCE)
            seen = next((t for t, m in rolling_median(self._after_fault_steps(), ROLLING) if m > limit), None)
            if seen is not None:
                self._stamp("slow", self._at(seen - fault.mono))

    def _at(self, since_fault: float) -> Instant:
        fault = self.instants["fault"]
        return Instant(fault.mono + since_fault, fault.wall + since_fault)

    def _recovered_at(self, tolerance: float) -> float | None:
        """Under the lock: the harness instant (mono) the rolling median came back within ``tolerance`` of the
        pre-fault median, after the slowdown showed; None while it has not."""
        if "slow" not in self.instants or self.before_step_s is None:
            return None
        limit = self.before_step_s * (1 + tolerance)
        slow = self.instants["slow"].mono
        return next((t for t, m in rolling_median(self._after_fault_steps(), ROLLING) if t > slow and m <= limit),
                    None)

    def observe_recovery(self, tolerance: float, limit: float, since: str = "fault") -> None:
        """Wait until the job's median step time is back within ``tolerance`` of its pre-fault median, at most
        ``limit`` and grace after ``since`` (the fault, or the slow node's naming); stamp ``t_recovered``.  Timed
        from the naming, a job still slow then ends the scenario, naming what the platform did after it named the
        node (the slow rank left untouched, marked for eviction but never deleted, or moved and still slow)."""
        if "fault" not in self.instants or since not in self.instants:
            return  # the act, or the naming sentence, already said why (it ends the scenario when never named)
        self.tolerance = tolerance
        allowed = limit + self._grace(limit)
        clock, fault, base = self.target.timeline.clock, self.instants["fault"].mono, self.instants[since].mono

        def done() -> bool:
            return self._recovered_at(tolerance) is not None or clock.mono() >= base + allowed
        self._wait(done, max(0.0, base + allowed - clock.mono()) + 0.5)
        with self._cond:
            at = self._recovered_at(tolerance)
            if at is not None:
                self._stamp("recovered", self._at(at - fault))
        self._measure()
        if since != "named":
            return
        with self._cond:
            recovered = self.instants.get("recovered")
            self.result.measure(Measurement(
                RECOVERED_AFTER_NAMING, None if recovered is None else max(0.0, recovered.mono - base), "s",
                note=None if recovered is not None else f"still slow {allowed:g} s after the naming"))
            if recovered is None:
                self.result.halt(self._still_slow(allowed))

    def _still_slow(self, waited: float) -> str:
        """Under the lock: the finding of a job still slow ``waited`` seconds after its slow node was named, with
        what became of the slow rank's pod (the harness's own pod watch) and the step times (the canaries' lines)."""
        slowdown = self.slowdown
        assert slowdown is not None and slowdown.node is not None
        named = self.instants["named"].mono - self.instants["fault"].mono
        during = median_step(self._after_fault_steps()[-ROLLING:])
        old = next((p for p in self.pods.values() if p["metadata"]["uid"] in self.before_fault
                    and rank_of(p) == slowdown.rank and (p.get("spec") or {}).get("nodeName") == slowdown.node), None)
        if old is not None and not old["metadata"].get("deletionTimestamp") \
                and (old.get("status") or {}).get("phase") not in TERMINAL:
            marked = next((c for c in (old.get("status") or {}).get("conditions") or []
                           if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)
            fate = (f"the slow rank's pod {old['metadata']['name']} still ran there "
                    + (f"marked for eviction (DisruptionTarget, {marked.get('reason') or 'no reason'}) but never "
                       "deleted: the eviction never took effect" if marked is not None
                       else "untouched: no eviction began"))
        else:
            where = sorted({(p.get("spec") or {}).get("nodeName") or "?" for p in self._running_pods()})
            fate = (f"the slow rank left it (the job's pods now run on {', '.join(where) or 'no node'}), yet the "
                    "job is still slow")
        return (f"the platform named {slowdown.node} {named:.1f} s after the fault, but {waited:g} s later {fate}; "
                f"the job's step time stayed {during or 0:.3f} s against {self.before_step_s or 0:.3f} s before "
                "the fault (the canaries' own step lines)")

    # --------------------------------------------------------------- judge
    def judge_only_the_slow_node(self) -> None:
        """Every node named since the fault must be the slow GPU's: a detector that names a healthy node moves
        healthy work and hides the real culprit."""
        slowdown = self.slowdown
        if slowdown is None or "fault" not in self.instants:
            return
        with self._cond:
            wrong = {n: t for n, t in self.named_nodes.items() if n != slowdown.node}
        if wrong:
            self.result.fail(self._accused(wrong))

    def _accused(self, wrong: dict[str, float]) -> str:
        slowdown = self.slowdown
        assert slowdown is not None
        cause = (f"every rank's input was slowed alike ({slowdown.input_delay_s:g} s more per step), no GPU"
                 if slowdown.uniform else f"only GPU {slowdown.gpu} of {slowdown.node} was slow")
        return (f"the platform accused healthy node(s) "
                f"{', '.join(f'{n} ({t:.1f} s after the fault)' for n, t in sorted(wrong.items()))} of straggling, "
                f"though {cause} (the canaries' own step times)")

    def watch_none_named(self, seconds: float) -> None:
        """For ``seconds`` after the fault no node is named (the slowdown is uniform: no node is at fault)."""
        if "fault" not in self.instants:
            return
        clock = self.target.timeline.clock
        until = self.instants["fault"].mono + seconds
        self._wait(lambda: bool(self.named_nodes) or clock.mono() >= until, max(0.0, until - clock.mono()) + 0.5)
        with self._cond:
            named = dict(self.named_nodes)
        self.result.measure(Measurement("healthy nodes named", float(len(named)), "nodes",
                                        note=", ".join(sorted(named)) or f"none within {seconds:g} s of the fault"))
        if named:
            self.result.fail(self._accused(named))
        self._measure()

    def end_if_never(self, phase: str, limit: float) -> None:
        """A slow node never named is said with what the canaries showed; then, as :meth:`TrainingRun.end_if_never`,
        the scenario ends (the job stays slow for as long as nothing moves it)."""
        slowdown = self.slowdown
        if (slowdown is not None and phase == "named" and "fault" in self.instants
                and "named" not in self.instants):
            with self._cond:
                during = median_step(self._after_fault_steps()[ROLLING:])
            self.result.fail(f"the platform never named {slowdown.node}, whose GPU {slowdown.gpu} ran at "
                             f"{(slowdown.speed or 0) * 100:g} % of its speed: the job's step time went from "
                             f"{self.before_step_s or 0:.3f} s to {during or 0:.3f} s (the canaries' own step lines)"
                             " and stayed there")
        super().end_if_never(phase, limit)

    def _measure(self) -> None:
        with self._cond:
            if "fault" not in self.instants or self.spec is None:
                return
            t, fault = self.instants, self.instants["fault"].mono
            for phase in (() if self.slowdown is None or self.slowdown.uniform else self.CHAIN):
                if phase in t:
                    self.result.measure(Measurement(phase, max(0.0, t[phase].mono - fault), "s"))
                elif phase not in self.result.measurements:
                    self.result.measure(Measurement(phase, None, "s", note=f"t_{phase} never observed"))
            steps = self._after_fault_steps()
            if "slow" not in t:
                self.result.inconclusive(
                    "the slowdown never showed in the canaries' step times (the job's rolling median of "
                    f"{ROLLING} steps never went {SLOW_TOLERANCE:.0%} beyond its pre-fault "
                    f"{self.before_step_s or 0:.3f} s), so the fault was not confirmed")
            end = t["recovered"].mono if "recovered" in t else float("inf")
            faulty = [s for s in steps if s.mono <= end]
            during = [s for s in faulty if "slow" in t and s.mono >= t["slow"].mono]
            self.result.measure(Measurement("step time before", self.before_step_s, "s",
                                            note="median job step (the slowest rank's wall_s) before the fault"))
            self.result.measure(Measurement("step time during", median_step(during), "s",
                                            note="median job step from the slowdown showing to the recovery"))
            self.result.measure(Measurement("waiting GPU-seconds", waiting_gpu_seconds(faulty, self.spec.gpus_per_worker),
                                            "GPU-s", note="GPU-seconds the ranks waited in the all-reduce for the "
                                                          "slowest rank, fault to recovery (the canaries' lines)"))
            self.result.details["named"] = {n: round(s, 3) for n, s in sorted(self.named_nodes.items())}
            self.result.details["step_times"] = _chart(self.canary.snapshot(), fault, self.before_step_s)
            self.result.details["instants"] = {k: {"mono": v.mono, "wall": v.wall} for k, v in t.items()}

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Remove the throttles (GPUs and input at full speed) and the naming taints the fault caused, then what
        :class:`TrainingRun` undoes; wait until the agents have read the removal. Never raises."""
        slowdown = self.slowdown
        driver = self.target.driver
        for node in (slowdown.nodes if slowdown is not None else ()):
            try:
                self.target.clear_throttle(node)
            except KubeError as exc:
                self.result.details.setdefault("rollback", []).append(f"the throttle on {node}: {exc}")
        for node in sorted(set(self.named_nodes) - self._tainted_before):
            try:
                obj = driver.get(NODE, node)
                taints = [x for x in (obj.get("spec") or {}).get("taints") or [] if x.get("key") != NAMING_TAINT]
                driver.patch(NODE, node, {"spec": {"taints": taints}})
            except KubeError as exc:
                self.result.details.setdefault("rollback", []).append(f"the naming taint on {node}: {exc}")
        super().rollback()
        clock = self.target.timeline.clock
        for node in (slowdown.nodes if slowdown is not None else ()):
            wait_seen(driver, node, clock.mono, 10.0)


def _named_by_taint(node: Obj) -> bool:
    return any(isinstance(t, dict) and t.get("key") == NAMING_TAINT for t in (node.get("spec") or {}).get("taints") or [])


def _chart(lines: list[Any], fault: float, before: float | None) -> dict[str, Any]:
    """The report's per-rank step time chart: seconds since the fault, each rank's wall and busy time."""
    points = [{"t": round(ln.mono - fault, 3), "rank": ln.rank, "generation": ln.generation, "node": ln.node,
               "wall_s": round(ln.number("wall_s"), 4), "compute_s": round(ln.number("compute_s"), 4)}
              for ln in lines if ln.event is CanaryEvent.STEP]
    return {"before_s": before, "points": points[-CHART_POINTS:]}

