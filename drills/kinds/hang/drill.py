"""The hang drill: a rank stops inside a step and the job makes no progress, with nothing crashed; and the pauses a
watchdog must not take for a hang (a long checkpoint write, a checkpoint store that stops answering).

Steady state (the canary job training whole, a checkpoint written; the platform told the job's progress
threshold) -> act (one rank's GPU stuck in a kernel; or the checkpoint storage stalled; or nothing, the job's own
long checkpoints) -> observe -> judge -> rollback (the injection removed, the job deleted).

Truth comes from the canaries' own lines (:mod:`drills.kinds.hang.progress`): "no progress" is the last step every
rank completed, "progress again" a replacement rank's first step past its checkpoint, a pause the canary's
``checkpoint-begin`` line without its ``checkpoint`` line yet.  The one thing read from the platform is what it
promises: that it *names* the hung job (docs/HANG.md: a ``ProgressStalled`` Event on the Job, or a
``DisruptionTarget`` condition of that reason on its pods) and restarts it; the restart itself is seen in the
harness's own pod watch.

Instants (the harness's monotonic clock): ``t_fault`` the hang (or the stall) was written; ``t_named`` the job
first named; ``t_restart`` every rank running again in new pods; ``t_resume`` a new rank's first step past the
checkpoint it resumed from.  A stall's ``t_answer`` is ``t_fault`` + its length; ``t_carried`` the first instant
after it at which the write the stall met is complete and the job has stepped past where it stood.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from drills.workloads.progress import CheckpointWrite, checkpoint_writes, job_progress, whole_steps
from drills.kube.driver import KubeError
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.faults import FaultError
from drills.target.hang import NO_HANG_COMMAND, NO_STALL_COMMAND, inject_hang, stall_storage
from drills.target.profile import TargetProfile
from drills.workloads.canarylog import CanaryEvent
from drills.workloads.training import (PROGRESS_STALLED, TERMINAL, Instant, Obj, TrainingRun, training_job_problem,
                                      training_permissions)

__all__ = ["HangDrill", "NAMING_REASON"]

NAMING_REASON = PROGRESS_STALLED
HANG_PEER_TIMEOUT = 3600.0
"""The canary's own peer timeout in this drill: far longer than any promise, as PyTorch's NCCL watchdog (10 minutes
by default) is, so only the platform can end a hang."""
STOPPED_AFTER = 2.0
"""Seconds without a whole step (and at least 10 step times) after which the job is taken to have stopped."""


@dataclass(frozen=True)
class Hang:
    """What the drill stopped."""

    rank: int
    pod: str
    node: str
    gpu: int | None
    step: int | None
    """The last step every rank completed before the hang (None: not known at the act)."""


@dataclass(frozen=True)
class Stall:
    """The checkpoint storage stopped answering."""

    nodes: tuple[str, ...]
    seconds: float
    step: int | None
    """The last step every rank completed when the storage stopped."""


@register
@dataclass
class HangDrill(TrainingRun, Drill):
    """A rank hangs: named (the platform names the job), restarted, resumed; or a pause left alone."""

    kind: ClassVar[str] = "hang"
    CHAIN: ClassVar[tuple[str, ...]] = ("named", "restart", "resume")
    STARTS: ClassVar[dict[str, str]] = {"named": "fault", "restart": "named", "resume": "restart", "total": "fault"}
    CANARY_PEER_TIMEOUT: ClassVar[float | None] = HANG_PEER_TIMEOUT
    hang: Hang | None = None
    stall: Stall | None = None
    naming: str = ""
    """The platform's own words when it named the job (its Event's message)."""
    _seq: int = 0
    _injected: list[str] = field(default_factory=list)
    _alive: set[str] = field(default_factory=set)
    """UIDs of the job's pods running when the fault came (or the watch began): a restart deletes them."""

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return training_job_problem(profile)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        group = "batch.volcano.sh" if profile.flavor.value == "volcano" else "batch"
        return (training_permissions(profile, "hang")
                + grant(profile.namespace, group, "jobs", ("patch",), "hang: the job's progress threshold")
                + grant(CLUSTER, "", "nodes", ("get", "patch"), "hang: the hang or stall injection on the node"))

    # ----------------------------------------------------------------- act
    def hang_rank(self, rank: int) -> None:
        """Worker ``rank``'s GPU gets stuck in a kernel: that rank stops inside its step without a word, and every
        other rank waits in the all-reduce for it (nothing exits: the canary's peer timeout is an hour)."""
        assert self.spec is not None, "start the canary job first"
        real = self.target.embedded is None
        if real and self.target.profile.fault.hang is None:
            raise DrillInconclusive(NO_HANG_COMMAND)
        with self._cond:
            pod, node, index, uuid = self._rank_gpu(rank, "hung", index_needed=not real)
            self._mark_before_fault()
            progress = job_progress(self.canary.snapshot(), self.spec.workers)
            self.hang = Hang(rank, pod["metadata"]["name"], node, index, None if progress is None else progress.step)
        detail: dict[str, object] = {"method": "hang"}
        if real:
            self.target.touched.add(node)  # its back in service is judged, and the abort guard leaves it alone
            try:
                detail = inject_hang(self.target.driver, self.target.profile, self.target.faults_done, node,
                                     self.hang.pod, uuid, intend=self.target.intend)
            except FaultError as exc:
                raise DrillInconclusive(str(exc)) from None
        else:
            self._inject(node, {"gpu": index, "hang": True})
        self._faulted({"kind": "hang", "rank": rank, "pod": self.hang.pod, "node": node, "gpu": index, "uuid": uuid,
                       "step_before": self.hang.step, **detail})

    def stall_storage(self, seconds: float) -> None:
        """The checkpoint storage stops answering for ``seconds`` (every node the job runs on): a write under way
        or begun in that time waits; the entry expires by itself at its end, whatever became of the harness."""
        assert self.spec is not None, "start the canary job first"
        real = self.target.embedded is None
        if real and self.target.profile.fault.storage_stall is None:
            raise DrillInconclusive(NO_STALL_COMMAND)
        with self._cond:
            nodes = tuple(sorted({p["spec"]["nodeName"] for p in self._running_pods()}))
            if not nodes:
                raise DrillInconclusive(f"no rank of the canary job is running; pods: {self._pod_summary()}")
            self._mark_before_fault()
            progress = job_progress(self.canary.snapshot(), self.spec.workers)
            self.stall = Stall(nodes, seconds, None if progress is None else progress.step)
        until = self.target.timeline.clock.wall() + seconds
        detail: dict[str, object] = {"method": "storage-stall"}
        for node in nodes:
            if real:
                self.target.touched.add(node)
                try:
                    detail = stall_storage(self.target.driver, self.target.profile, self.target.faults_done, node,
                                           seconds, intend=self.target.intend)
                except FaultError as exc:
                    raise DrillInconclusive(str(exc)) from None
            else:
                self._inject(node, {"storage_stall_until": round(until, 3)})
        self._faulted({"kind": "storage-stall", "nodes": list(nodes), "seconds": seconds,
                       "step_before": self.stall.step, **detail})

    def _inject(self, node: str, entry: dict[str, Any]) -> None:
        self._seq += 1
        self.target.inject_throttle(node, {"id": f"{self.run_id}-hang-{self._seq}", **entry})
        self._injected.append(node)

    def _faulted(self, details: dict[str, Any]) -> None:
        with self._cond:
            clock = self.target.timeline.clock
            self._stamp("fault", Instant(clock.mono(), clock.wall()))
            self._alive = {p["metadata"]["uid"] for p in self._running_pods()}
            self.result.details["fault"] = details
            self._advance()

    # ------------------------------------------------------------- observe
    def _on_event(self, event: str, obj: Obj) -> None:
        super()._on_event(event, obj)
        with self._cond:
            self._advance()
            self._cond.notify_all()

    def _named_now(self) -> str | None:
        """Under the lock: the platform's words naming the job hung since the fault (its Event on the Job, or the
        condition on a pod of the job), or None."""
        name = self.spec.name if self.spec is not None else None
        for e in self.events:
            inv = e.get("involvedObject") or {}
            if e.get("reason") == NAMING_REASON and inv.get("kind") == "Job" and inv.get("name") == name:
                return str(e.get("message") or NAMING_REASON)
        for p in self.pods.values():
            if p["metadata"]["uid"] not in self.before_fault:
                continue
            for c in (p.get("status") or {}).get("conditions") or []:
                if c.get("type") == "DisruptionTarget" and c.get("reason") == NAMING_REASON:
                    return str(c.get("message") or NAMING_REASON)
        return None

    def _advance(self) -> None:
        """Under the lock, on every change: the naming, the restart (every rank running in a new pod), the resume."""
        if "fault" not in self.instants or self.spec is None:
            return
        if "named" not in self.instants:
            words = self._named_now()
            if words is not None:
                self.naming = words
                self._stamp("named")
        if "restart" not in self.instants:
            running = self._running_pods()
            if len(running) >= self.spec.min_available and all(p["metadata"]["uid"] not in self.before_fault
                                                               for p in running):
                self._stamp("restart")
        if "restart" in self.instants:
            self._stamp_resume(after="restart")

    def _restarted(self) -> str | None:
        """Under the lock: how the job was restarted since the fault (or the watch began), or None: a pod it ran
        then deleted or ended, a new pod of it, or the platform naming it hung."""
        for p in self.pods.values():
            uid, meta = p["metadata"]["uid"], p["metadata"]
            if uid in self._alive and (meta.get("deletionTimestamp")
                                       or (p.get("status") or {}).get("phase") in TERMINAL):
                return f"its pod {meta['name']} was deleted"
            if uid not in self.before_fault:
                return f"a new pod {meta['name']} of it appeared"
        if self._alive - {p["metadata"]["uid"] for p in self.pods.values()}:
            return "a pod of it was deleted"
        words = self._named_now()
        return None if words is None else f"the platform named it hung ({words})"

    # --------------------------------------------------------------- judge
    def observe_named(self, limit: float) -> None:
        """Wait for the naming (threshold and grace past the hang); never named: FAIL naming the job, the rank
        that hung and where the job stopped, then end the scenario (restart and resume cannot come)."""
        self.observe_phase("named", limit)
        with self._cond:
            self._confirm_stopped()
            if "fault" in self.instants and "named" not in self.instants and self.hang is not None:
                self.result.fail(self._never_named())
            if self.naming:
                self.result.details["naming"] = self.naming

    def _confirm_stopped(self) -> None:
        """Under the lock: the hang must show in the canaries' lines (no whole step after it), or nothing was
        proven hung: INCONCLUSIVE."""
        if self.hang is None or "fault" not in self.instants or self.spec is None:
            return
        fault = self.instants["fault"].mono
        progress = job_progress(self.canary.snapshot(), self.spec.workers, self.before_fault)
        stepped_on = progress is not None and progress.mono > fault + max(STOPPED_AFTER, 10 * self.step_seconds)
        if stepped_on:
            self.result.inconclusive(f"the job kept making progress after worker {self.hang.rank}'s hang was "
                                     f"injected (step {progress.step} {progress.mono - fault:.1f} s later, the "
                                     "canaries' own lines), so the hang never took")
        elif progress is not None:
            self.result.details["stopped"] = {"step": progress.step, "after_fault_s": round(progress.mono - fault, 3)}

    def _never_named(self) -> str:
        """Under the lock: the finding of a hang the platform never named."""
        hang, spec = self.hang, self.spec
        assert hang is not None and spec is not None
        stopped = self.result.details.get("stopped") or {}
        at = stopped.get("step", hang.step)
        waiting = sorted({ln.rank for ln in self.canary.of(CanaryEvent.STALLED, self.before_fault)
                          if ln.mono >= self.instants["fault"].mono})
        others = (f"; rank(s) {', '.join(map(str, waiting))} waited in the all-reduce (their stalled lines)"
                  if waiting else "")
        return (f"the platform never named job {spec.name} hung: worker {hang.rank} (pod {hang.pod} on {hang.node}) "
                f"stopped inside the step after {at}{others}, and no pod of the job was restarted (the canaries' own "
                "lines and the harness's pod watch)")

    def observe_not_restarted(self, limit: float) -> None:
        """For ``limit`` seconds from the fault (or from now, where the scenario injects nothing) the job is left
        alone: no pod of it deleted or replaced, the platform names no hang.  A pause that never outlasted the
        stated threshold proves nothing: INCONCLUSIVE."""
        assert self.spec is not None, "start the canary job first"
        clock = self.target.timeline.clock
        with self._cond:
            if "fault" not in self.instants:
                self._mark_before_fault()
                self._alive = {p["metadata"]["uid"] for p in self._running_pods()}
            start = self.instants["fault"].mono if "fault" in self.instants else clock.mono()
        until = start + limit
        self._wait(lambda: self._restarted() is not None or clock.mono() >= until, max(0.0, until - clock.mono()) + 0.5)
        with self._cond:
            how = self._restarted()
            now = clock.mono()
            writes = [w for w in checkpoint_writes(self.canary.snapshot()) if w.began < min(now, until)
                      and (w.done is None or w.done > start)]
            longest = max((w.seconds(now) - max(0.0, start - w.began) for w in writes), default=0.0)
            self.result.measure(Measurement("restarts", 0.0 if how is None else 1.0, "restarts",
                                            note=how or f"none within {limit:g} s"))
            self.result.measure(Measurement("longest checkpoint pause", round(longest, 3), "s",
                                            note="the longest checkpoint write the canary declared in the window "
                                                 "(checkpoint-begin to checkpoint)"))
            if how is not None:
                self.result.fail(self._restarted_wrongly(how, start, writes))
                return
            pause = self.stall.seconds if self.stall is not None else longest
            if self.threshold is not None and pause < self.threshold:
                self.result.inconclusive(f"no pause outlasted the stated threshold of {self.threshold:g} s (the "
                                         f"longest was {pause:.1f} s), so leaving the job alone proves nothing")

    def _restarted_wrongly(self, how: str, start: float, writes: list[CheckpointWrite]) -> str:
        """Under the lock: the finding of a job restarted during a pause."""
        assert self.spec is not None
        now = self.target.timeline.clock.mono()
        open_write = next((w for w in reversed(writes) if w.done is None or w.done >= now - 1.0), None)
        cause = (f"the checkpoint storage had stopped answering {now - start:.1f} s before" if self.stall is not None
                 else "nothing had hung")
        during = (f" while rank 0 was writing checkpoint {open_write.step} (pod {open_write.pod}, begun "
                  f"{now - open_write.began:.1f} s earlier and declared in its log: checkpoint-begin)"
                  if open_write is not None else "")
        return (f"the platform restarted job {self.spec.name}{during}: {how}; {cause}, so it took a declared pause "
                "for a hang (the canary's own lines and the harness's pod watch)")

    def observe_carried_on(self, limit: float) -> None:
        """After the storage answers again (``t_answer``), within ``limit`` (and grace) the checkpoint write the
        stall met completes and the job steps past where it stood, in the same pods: ``carried on`` =
        ``t_carried - t_answer``."""
        stall = self.stall
        if stall is None or "fault" not in self.instants or self.spec is None:
            return
        clock, fault = self.target.timeline.clock, self.instants["fault"].mono
        answer = fault + stall.seconds
        allowed = limit + self._grace(limit)

        def carried() -> float | None:
            writes = [w for w in checkpoint_writes(self.canary.snapshot())
                      if w.uid in self.before_fault and w.began < answer and (w.done is None or w.done > fault)]
            if not writes or any(w.done is None for w in writes):
                return None
            past = max(w.step for w in writes)
            first = next((p for p in whole_steps(self.canary.snapshot(), self.spec.workers, self.before_fault)
                          if p.step > past), None)
            if first is None:
                return None
            return max(first.mono, *(w.done for w in writes if w.done is not None))
        self._wait(lambda: carried() is not None or clock.mono() >= answer + allowed,
                   max(0.0, answer + allowed - clock.mono()) + 0.5)
        with self._cond:
            at = carried()
            met = [w for w in checkpoint_writes(self.canary.snapshot())
                   if w.uid in self.before_fault and w.began < answer and (w.done is None or w.done > fault)]
            value = None if at is None else max(0.0, at - answer)
            self.result.measure(Measurement("carried on", value, "s", note=(
                "the write the stall met complete and the job past it, after the storage answered again"
                if at is not None else f"not within {allowed:g} s of the storage answering again")))
            self.result.details["stall"] = {"seconds": stall.seconds, "writes_met": [
                {"step": w.step, "began_after_fault_s": round(w.began - fault, 3),
                 "took_s": None if w.done is None else round(w.done - w.began, 3)} for w in met]}
            if not met:
                self.result.inconclusive(f"no checkpoint write met the {stall.seconds:g} s storage stall (the "
                                         "canary's own checkpoint-begin lines), so nothing was tested")
            elif at is None:
                open_write = next((w for w in met if w.done is None), None)
                what = (f"checkpoint {open_write.step} (begun {open_write.began - fault:+.1f} s from the stall) never "
                        "completed" if open_write is not None else "the job never stepped past it")
                self.result.fail(f"job {self.spec.name} did not carry on after its checkpoint storage answered again: "
                                 f"{what} within {allowed:g} s (the canary's own lines)")

    def _measure(self) -> None:
        super()._measure()
        with self._cond:
            if self.naming:
                self.result.details["naming"] = self.naming

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Remove the hang or stall entries, then what :class:`TrainingRun` undoes. Never raises."""
        for node in sorted(set(self._injected)):
            try:
                self.target.clear_throttle(node)
            except KubeError as exc:
                self.result.details.setdefault("rollback", []).append(f"the injection on {node}: {exc}")
        super().rollback()
