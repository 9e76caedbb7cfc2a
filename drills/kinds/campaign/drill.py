"""The campaign: a fault mix arrives at a training job for minutes; what share of the time turned into progress?

Steady state before (the canary job training whole, a checkpoint written) -> act (the seeded schedule of a mix,
:mod:`drills.target.faultmix`: at each arrival one fault on a rank chosen by the same seed, then waiting for the
job to recover, then undoing the fault) -> observe -> judge (effective training time, each fault's recovery time,
the steps each fault lost) -> rollback (every fault undone, the job deleted).

One fault at a time: a fault that arrives while the job is still recovering, or whose target cannot take it, is
skipped and counted, never stacked. Truth from the workload and the harness's own watches:

- ``fault``: the injection returned;
- ``detect``: the platform saw it (node faults: the node's Ready left True or a condition taint came; a GPU's Xid:
  the node's allocatable fell; a slow GPU: the platform named the node, ``firedrill.dev/straggler``; a hung rank:
  the platform named the job, its ``ProgressStalled`` Event, which needs the scenario's progress threshold);
- ``replace``: minMember pods of the job that did not exist at the fault run;
- ``resume``: a new rank logged a step beyond the step it resumed from (its canary's own line); the recovery time
  is ``resume - fault``. A fault not recovered within :data:`GIVE_UP_S` needs a person: the campaign ends there.

Effective training time and badput by cause come from the canary's log (:mod:`drills.workloads.goodput`).
"""

from __future__ import annotations

import logging
import random
import secrets
from dataclasses import dataclass, field
from typing import Any, ClassVar

from drills.errors import FiredrillError
from drills.kube.driver import NODE, KubeError
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.capacity import allocatable_gpus
from drills.target.faultmix import FaultKind, FaultMix, ScheduledFault, describe, schedule
from drills.target.faults import FaultError, FaultRecord
from drills.target.hang import NO_HANG_COMMAND, inject_hang
from drills.target.profile import FaultMethod, FaultUnavailable, TargetProfile
from drills.target.safety import SafetyError, check_blast_radius, eligible_nodes
from drills.target.throttle import STRAGGLER_TAINT
from drills.workloads.canarylog import CanaryEvent
from drills.workloads.goodput import FaultSpan, Goodput, goodput
from drills.workloads.raytraining import ray_storage_problem
from drills.workloads.slurmtraining import slurm_storage_problem
from drills.workloads.training import (PROGRESS_STALLED, Instant, Obj, TrainingRun, rank_of, training_job_problem,
                                      training_permissions)

__all__ = ["CampaignDrill", "CampaignFault", "GIVE_UP_S"]

log = logging.getLogger(__name__)

GIVE_UP_S = 60.0
"""A fault the platform has not recovered from within this long needs a person: the campaign ends there."""
NODE_METHODS = {FaultKind.NODE_KILL: FaultMethod.KILL, FaultKind.NODE_HANG: FaultMethod.HANG,
                FaultKind.NODE_PARTITION: FaultMethod.PARTITION}
GPU_KINDS = (FaultKind.GPU_XID, FaultKind.GPU_SLOW)


@dataclass
class CampaignFault:
    """One arrival of the schedule and what became of it."""

    scheduled: ScheduledFault
    rank: int = -1
    node: str = ""
    skipped: str = ""
    """Why it was not injected (empty: it was)."""
    instants: dict[str, Instant] = field(default_factory=dict)
    before: frozenset[str] = frozenset()
    allocatable_before: int | None = None
    step_at_fault: int = 0
    resumed_from: int | None = None
    resume_ts: float | None = None
    """The canary's own instant of the first step beyond the resume point."""
    record: FaultRecord | None = None
    gpu: int | None = None
    named_before: int = 0
    """The platform's namings of the job hung (its ProgressStalled Events) before this fault."""

    CHAIN: ClassVar[tuple[str, ...]] = ("fault", "detect", "replace", "resume")

    @property
    def kind(self) -> FaultKind:
        return self.scheduled.fault.kind

    def stamp(self, name: str, at: Instant) -> None:
        """Record instant ``name`` at ``at``, never before an earlier instant of :attr:`CHAIN` already recorded:
        what the platform did first, the harness may learn second (a node Ray noticed dead while the fault command
        still ran is detected at the command's return)."""
        if name in self.instants:
            return
        floor = max((self.instants[k] for k in self.CHAIN[:self.CHAIN.index(name)] if k in self.instants),
                    key=lambda i: i.mono, default=None)
        self.instants[name] = Instant(floor.mono, floor.wall) if floor is not None and at.mono < floor.mono else at

    def seconds(self, a: str, b: str) -> float | None:
        if a in self.instants and b in self.instants:
            return max(0.0, self.instants[b].mono - self.instants[a].mono)
        return None

    @property
    def recovery(self) -> float | None:
        return self.seconds("fault", "resume")

    @property
    def lost_steps(self) -> int | None:
        return None if self.resumed_from is None else max(0, self.step_at_fault - self.resumed_from)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.scheduled.index, "at": self.scheduled.at, "kind": self.kind.value,
                               **self.scheduled.fault.params}
        if self.skipped:
            return {**out, "skipped": self.skipped}
        out.update({"rank": self.rank, "node": self.node, "gpu": self.gpu,
                    "instants": {k: round(v.mono - self.instants["fault"].mono, 3) for k, v in self.instants.items()},
                    "recovery_s": self.recovery, "lost_steps": self.lost_steps, "resumed_from": self.resumed_from,
                    "step_at_fault": self.step_at_fault})
        return out


@register
@dataclass
class CampaignDrill(TrainingRun, Drill):
    """A seeded fault mix under the training job: effective training time, recoveries, steps lost."""

    kind: ClassVar[str] = "campaign"
    MAX_RETRY: ClassVar[int | None] = 1000  # the job must outlive every fault of the schedule, not Volcano's 3
    seed: int | None = None
    mix: FaultMix | None = None
    plan: list[ScheduledFault] = field(default_factory=list)
    faults: list[CampaignFault] = field(default_factory=list)
    current: CampaignFault | None = None
    window: tuple[Instant, Instant] | None = None
    measured: Goodput | None = None
    gave_up: CampaignFault | None = None

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return training_job_problem(profile)

    @classmethod
    def unsupported_on_slurm(cls, profile: TargetProfile) -> str | None:
        return slurm_storage_problem(profile)  # its Slurm side: drills.kinds.campaign.slurm

    @classmethod
    def unsupported_on_ray(cls, profile: TargetProfile) -> str | None:
        return ray_storage_problem(profile)  # its Ray side: drills.kinds.campaign.ray

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        return (training_permissions(profile, "campaign")
                + grant(CLUSTER, "", "nodes", ("get", "patch"), "campaign: GPU faults and slow GPUs on the "
                                                                "reference platform (Node annotations)"))

    # ----------------------------------------------------------------- act
    def run(self, mix: FaultMix, interval: float, duration: float) -> None:
        """The whole campaign: ``mix`` arriving every ``interval`` seconds on average for ``duration`` seconds."""
        assert self.spec is not None, "start the canary job first"
        unable = {f.kind: why for f in mix.faults if (why := self._cannot_inject(f.kind))}
        if len(unable) == len({f.kind for f in mix.faults}):
            raise DrillInconclusive(f"no fault of the {mix.name} mix can be injected on this target: "
                                    + "; ".join(f"{k.value}: {why}" for k, why in unable.items()))
        if self.seed is None:
            self.seed = secrets.randbelow(2 ** 31)
        self.mix = mix
        self.plan = schedule(mix, self.seed, interval, duration)
        aim = random.Random(self.seed + 1)  # which rank each fault hits: also replayed by the seed
        clock = self.target.timeline.clock
        self.target.timeline.action("campaign", target=f"seed {self.seed}", mix=mix.name, faults=len(self.plan))
        log.info("campaign: mix %s, seed %d, %d faults planned over %g s", mix.name, self.seed, len(self.plan), duration)
        start = Instant(clock.mono(), clock.wall())
        self.result.details["campaign"] = {"seed": self.seed, "mix": mix.name, "mix_file": mix.path,
                                           "source": mix.source, "mean_interval_s": interval,
                                           "duration_s": duration, "schedule": describe(self.plan)}
        try:
            for planned in self.plan:
                fault = CampaignFault(planned, rank=aim.randrange(self.spec.workers))
                self.faults.append(fault)
                due = start.mono + planned.at
                if clock.mono() > due + 0.5:
                    fault.skipped = "it arrived while the job was still recovering from the fault before"
                    continue
                self._wait(lambda: clock.mono() >= due, max(0.0, due - clock.mono()) + 1.0)
                self._one(fault)
                if self.gave_up is not None:
                    break
            end_at = start.mono + duration
            if self.gave_up is None:
                self._wait(lambda: clock.mono() >= end_at, max(0.0, end_at - clock.mono()) + 1.0)
        finally:
            self.window = (start, Instant(clock.mono(), clock.wall()))
            self._measure_campaign()

    def _cannot_inject(self, kind: FaultKind) -> str:
        """Why faults of ``kind`` cannot be injected on this target ("" when they can)."""
        reference = self.target.embedded is not None
        if kind in NODE_METHODS:
            try:
                self.target.profile.fault.method_for(NODE_METHODS[kind], reference=reference)
            except FaultUnavailable as exc:
                return str(exc)
            return ""
        if kind is FaultKind.RANK_HANG:
            if self.threshold is None:
                return ("a hung rank is recovered only by a progress watchdog: state its threshold (Given the platform "
                        "restarts a job that makes no progress for N seconds)")
            return "" if reference or self.target.profile.fault.hang is not None else NO_HANG_COMMAND
        return "" if reference else ("GPU faults are injected through the reference platform's agents; a real "
                                     "cluster's campaign drills the node faults of its mix")

    def _aim(self, fault: CampaignFault) -> bool:
        """Under the lock: the node of ``fault.rank`` and what the fault's recovery is told apart from; False (and
        ``fault.skipped`` saying why) when the job is not training whole or the rank is not running."""
        assert self.spec is not None
        if len(self._training()) < self.spec.min_available:
            fault.skipped = "the job was not training whole at its arrival"
            return False
        pod = next((p for p in self._running_pods() if rank_of(p) == fault.rank), None)
        if pod is None:
            fault.skipped = f"worker {fault.rank} was not running at its arrival"
            return False
        fault.node = pod["spec"]["nodeName"]
        # every incarnation so far, gone or not: a resumption must come from a rank started after this fault
        fault.before = frozenset({p["metadata"]["uid"] for p in self.pods.values()}
                                 | {ln.uid for ln in self.canary.snapshot()})
        fault.allocatable_before = allocatable_gpus(self.nodes.get(fault.node) or {},
                                                    self.target.profile.gpu_resource)
        fault.named_before = self._namings()
        return True

    def _namings(self) -> int:
        """Under the lock: how many times the platform has named this job hung so far (its Events)."""
        name = self.spec.name if self.spec is not None else None
        return sum(1 for e in self.events if e.get("reason") == PROGRESS_STALLED
                   and (e.get("involvedObject") or {}).get("name") == name)

    def _one(self, fault: CampaignFault) -> None:
        """Inject one fault, wait for the job's recovery (or give up), undo the fault."""
        with self._cond:
            if not self._aim(fault):
                return
        try:
            self._inject(fault)
        except (DrillInconclusive, FiredrillError) as exc:
            fault.skipped = f"it could not be injected: {exc}"
            return
        clock = self.target.timeline.clock
        with self._cond:
            # when the action returned (a fault confirmed later is timed from its act, as the node pull's t_fault)
            acted = fault.record.acted_at if fault.record is not None and fault.record.acted_at is not None \
                else clock.mono()
            fault.instants["fault"] = Instant(acted, clock.wall() - (clock.mono() - acted))
            fault.step_at_fault = self.canary.last_step_before(fault.instants["fault"].wall)
            self.current = fault
            self._advance()
        self.target.timeline.action(f"campaign fault {fault.scheduled.index + 1}", target=fault.node,
                                    kind=fault.kind.value)
        recovered = self._wait(lambda: "resume" in fault.instants, GIVE_UP_S)
        with self._cond:
            self.current = None
        self._undo(fault)
        if not recovered:
            self.gave_up = fault
            self.result.halt(f"fault {fault.scheduled.index + 1} ({fault.scheduled.fault.describe()} on "
                             f"{fault.node}, worker {fault.rank}) was not recovered within {GIVE_UP_S:g} s: it needs "
                             f"a person; reached {', '.join(sorted(fault.instants)) or 'nothing'} "
                             "(the campaign ends here)")

    def _inject(self, fault: CampaignFault) -> None:
        kind, driver = fault.kind, self.target.driver
        why = self._cannot_inject(kind)
        if why:
            raise DrillInconclusive(why)
        if kind in NODE_METHODS:
            method = self.target.profile.fault.method_for(NODE_METHODS[kind], reference=self.target.embedded is not None)
            if self.target.embedded is None:
                nodes = driver.list(NODE)
                chosen = [n for n in eligible_nodes(nodes, self.target.profile.safety)
                          if n["metadata"]["name"] == fault.node]
                if not chosen:
                    raise DrillInconclusive(f"node {fault.node} is not eligible for faults (allow label "
                                            f"{self.target.profile.safety.allow_label})")
                try:
                    check_blast_radius(chosen, nodes, self.target.profile.safety, self.target.profile.gpu_resource)
                except SafetyError as exc:
                    raise DrillInconclusive(str(exc)) from None
            fault.record = self.target.pull(fault.node, method, self.run_id, NODE_METHODS[kind])
            if not fault.record.confirmed:
                raise DrillInconclusive(f"the {method.value} fault was not confirmed: {fault.record.detail}")
            return
        real = self.target.embedded is None
        with self._cond:
            pod, _, index, uuid = self._rank_gpu(fault.rank, "failed", index_needed=not real)
        fault.gpu = index
        entry_id = f"{self.run_id}-c{fault.scheduled.index}"
        if kind is FaultKind.RANK_HANG and real:
            try:
                inject_hang(driver, self.target.profile, self.target.faults_done, fault.node, pod["metadata"]["name"],
                            uuid, intend=self.target.intend)
            except FaultError as exc:
                raise DrillInconclusive(str(exc)) from None
        elif kind is FaultKind.RANK_HANG:
            self.target.inject_throttle(fault.node, {"id": entry_id, "gpu": index, "hang": True})
        elif kind is FaultKind.GPU_XID:
            self.target.inject_xid(fault.node, {"id": entry_id, "gpu": index, "instance": None,
                                            "xid": int(fault.scheduled.fault.params["xid"])})
        else:
            self.target.inject_throttle(fault.node, {"id": entry_id, "gpu": index,
                                                 "speed": fault.scheduled.fault.params["speed"]})

    def _undo(self, fault: CampaignFault) -> None:
        """Undo one fault (never raises): the node back, the GPU back in service, the throttle and its naming gone."""
        driver = self.target.driver
        try:
            if fault.record is not None:
                self.target.restore(fault.record)
            elif fault.kind is FaultKind.GPU_XID:
                self.target.clear_xids(fault.node)
            elif fault.kind is FaultKind.RANK_HANG and self.target.embedded is not None:
                self.target.clear_throttle(fault.node)  # the hung process is gone with the job's restart
            elif fault.kind is FaultKind.GPU_SLOW:
                self.target.clear_throttle(fault.node)
                obj = driver.get(NODE, fault.node)
                taints = [t for t in (obj.get("spec") or {}).get("taints") or [] if t.get("key") != STRAGGLER_TAINT]
                driver.patch(NODE, fault.node, {"spec": {"taints": taints}})
        except (KubeError, FiredrillError, OSError) as exc:
            self.result.details.setdefault("rollback", []).append(f"fault {fault.scheduled.index + 1}: {exc}")

    # ------------------------------------------------------------- observe
    def _advance(self) -> None:
        """Under the lock, on every change: the current fault's detect, replace and resume."""
        fault = self.current
        if fault is None or "fault" not in fault.instants or self.spec is None:
            return
        clock = self.target.timeline.clock
        now = Instant(clock.mono(), clock.wall())
        node = self.nodes.get(fault.node) or {}
        if "detect" not in fault.instants and self._detected(fault, node):
            fault.stamp("detect", now)
        fresh = [p for p in self._running_pods() if p["metadata"]["uid"] not in fault.before]
        if "replace" not in fault.instants and len(fresh) >= self.spec.min_available:
            fault.stamp("replace", now)
        self._stamp_fault_resume(fault)

    def _stamp_fault_resume(self, fault: CampaignFault) -> None:
        """Under the lock, once ``fault`` was replaced: a rank started since logs a step beyond its resume point."""
        if "replace" in fault.instants and "resume" not in fault.instants:
            found = self.canary.resumptions(exclude=fault.before)
            if found:
                first = found[0].first_step
                fault.resumed_from, fault.resume_ts = found[0].from_step, first.ts
                fault.stamp("resume", Instant(first.mono, first.wall))

    def _detected(self, fault: CampaignFault, node: Obj) -> bool:
        if fault.kind in NODE_METHODS:
            return not self._node_healthy(fault.node)
        if fault.kind is FaultKind.RANK_HANG:
            return self._namings() > fault.named_before
        if fault.kind is FaultKind.GPU_XID:
            alloc = allocatable_gpus(node, self.target.profile.gpu_resource)
            return alloc is not None and fault.allocatable_before is not None and alloc < fault.allocatable_before
        return any(isinstance(t, dict) and t.get("key") == STRAGGLER_TAINT
                   for t in (node.get("spec") or {}).get("taints") or [])

    def _on_canary(self, line: Any) -> None:
        with self._cond:
            self._advance()
            self._cond.notify_all()

    def _measure_campaign(self) -> None:
        if self.window is None:
            return
        start, end = self.window
        with self._cond:
            spans = [FaultSpan(f.kind.value, f.instants["fault"].wall,
                               f.instants["detect"].wall if "detect" in f.instants else None,
                               f.instants["replace"].wall if "replace" in f.instants else None,
                               f.resume_ts) for f in self.faults if "fault" in f.instants]
            g = goodput(self.canary.snapshot(), start.wall, end.wall, spans)
            self.measured = g
            injected = [f for f in self.faults if "fault" in f.instants]
            recovered = [f for f in injected if f.recovery is not None]
            self.result.measure(Measurement("effective training time", round(g.percent, 3), "%",
                                            note=f"{g.steps_counted} steps counted ({g.steps_recomputed} recomputed) "
                                                 f"in {g.window_s:.1f} s, by the canary's own log"))
            self.result.measure(Measurement("faults injected", float(len(injected)), "faults",
                                            note=f"{len(self.plan)} planned, {len(self.plan) - len(injected)} "
                                                 "skipped or not reached"))
            self.result.details.update(self._chart(start, end, injected))
            self.result.details["campaign"].update({
                "faults": [f.as_dict() for f in self.faults],
                "goodput": {"window_s": g.window_s, "effective_s": g.effective_s, "percent": g.percent,
                            "steps_counted": g.steps_counted, "steps_recomputed": g.steps_recomputed,
                            "badput_s": g.badput.as_dict()},
                "recovered": len(recovered)})

    def _chart(self, start: Instant, end: Instant, injected: list[CampaignFault]) -> dict[str, Any]:
        """Under the lock: the report's step curve (rank 0's step number against seconds from the campaign's start,
        one line per incarnation of the job, by the canary's own clock) with each fault marked."""
        points = [{"t": round(ln.ts - start.wall, 3), "rank": 0, "generation": ln.generation, "step": ln.step}
                  for ln in self.canary.snapshot() if ln.event is CanaryEvent.STEP and ln.rank == 0
                  and start.wall <= ln.ts <= end.wall]
        marks = {f"fault {f.scheduled.index + 1}": {"mono": f.instants["fault"].mono, "wall": f.instants["fault"].wall}
                 for f in injected}
        return {"instants": {"fault": {"mono": start.mono, "wall": start.wall}, **marks},
                "step_times": {"value": "step", "unit": "", "marks": list(marks), "points": points,
                               "caption": "seconds from the campaign's start; rank 0's step number, one line per "
                                          "incarnation of the job (its canary's own clock): a fault is where a line "
                                          "ends and the next one starts lower"}}

    # --------------------------------------------------------------- judge
    def judge_recoveries(self, limit: float) -> bool:
        """Every injected fault was recovered (a new rank stepped beyond its resume point) within ``limit``; False
        (INCONCLUSIVE) when no fault was injected, so there was nothing to recover from."""
        with self._cond:
            injected = [f for f in self.faults if "fault" in f.instants]
            if not injected:
                self.result.inconclusive("no fault of the campaign was injected (every arrival was skipped), so no "
                                         "recovery can be judged")
                return False
            never = [f for f in injected if f.recovery is None]
            slowest = max(injected, key=lambda f: f.recovery if f.recovery is not None else float("inf"))
            self.result.measure(Measurement("slowest recovery", slowest.recovery, "s",
                                            note=f"fault {slowest.scheduled.index + 1}, {slowest.kind.value} on "
                                                 f"{slowest.node}" + (f"; {len(never)} never recovered"
                                                                      if never else "")))
            late = [f for f in injected if f.recovery is not None and f.recovery > limit]
            for f in [*never, *late]:
                how = "never" if f.recovery is None else f"in {f.recovery:.1f} s"
                self.result.fail(f"fault {f.scheduled.index + 1} ({f.scheduled.fault.describe()} on {f.node}, worker "
                                 f"{f.rank}, {f.scheduled.at:.1f} s into the campaign) was recovered {how}, not "
                                 f"within {limit:g} s: it needs a person")
            return True

    def judge_lost_steps(self, most: int) -> bool:
        """No injected fault lost more than ``most`` steps (its step at the fault less the step it resumed from);
        False (INCONCLUSIVE) when none was injected.  Injected faults that never recovered are FAILed by
        :meth:`judge_recoveries`, and their steps are counted as never measured here."""
        with self._cond:
            lost = [(f.lost_steps, f) for f in self.faults if f.lost_steps is not None]
            if not any("fault" in f.instants for f in self.faults):
                self.result.inconclusive("no fault of the campaign was injected, so no lost steps can be counted")
                return False
            if not lost:
                self.result.inconclusive("no fault of the campaign was recovered, so no lost steps can be counted")
                return True
            worst, fault = max(lost, key=lambda x: x[0] or 0)
            self.result.measure(Measurement("most steps lost by one fault", float(worst or 0), "steps",
                                            note=f"fault {fault.scheduled.index + 1} ({fault.kind.value}): "
                                                 f"{fault.step_at_fault} logged before it, resumed from "
                                                 f"{fault.resumed_from} (the canary's log)"))
            return True

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Undo a fault still standing (the target's records, GPU and throttle injections), then what
        :class:`TrainingRun` undoes. Never raises."""
        for fault in self.faults:
            if fault.record is None and fault.node and not fault.skipped:
                self._undo(fault)
        super().rollback()

