"""The leak identification drill: open one hole of a known size, read the leak report, judge its answer.

Steady state before (enough free GPUs for the mix) -> act (inject the mix; once it leaks steadily, open the
window [t0, t1) on the harness's wall clock) -> observe (read the leak report for that window from the
configured source) -> judge (the named hole, then its size against the truth) -> rollback (delete what the
drill made, undo the fault, and wait until it is gone so the next scenario starts clean).

The injections, sized to the target's free GPUs:

- data pipeline / communication: a canary training job of 2 ranks asked to wait on input (or in its
  collectives) for half of each step, the other for a twentieth; the window opens once every rank logs steps.
  Truth = each rank's GPUs x the seconds it measured itself waiting, over the steps it logged inside the window
  (the canary's own log, read through ``pods/log``).
- fragmentation: idle pods leave ``KEEP_FREE`` GPUs free on each node, then one pod needs more than any node
  has free but no more than the cluster's free total; the window opens once it is seen Pending.
  Truth = min(free, its GPUs) x window (the drill's own arithmetic, never the scheduler's say-so).
- fault tolerance: a canary training job with no stalls; the node of rank 0 is pulled inside the window, which
  stays open until the harness sees the resume (a replacement rank's first step beyond its resume point, in its
  own log), plus a margin.  Truth = GPUs x (t_resume - t_fault) + GPUs x the canary's measured step time x
  (the highest step logged before the fault - the step the job resumed from).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

from drills.kinds.leak.judge import cannot_measure, judge_naming, judge_size, unmeasurable
from drills.kinds.leak.truth import Truth, fault_truth, fragmentation_truth, measured_stall_truth
from drills.kube.driver import POD, KubeError
from drills.kube.flavors import RUN_LABEL, run_selector
from drills.records.verdict import DrillInconclusive
from drills.records.verdict import Comparison, Measurement, Threshold
from drills.scenario.drill import Drill, register
from drills.target.capacity import free_gpus_per_node
from drills.target.leakreport.model import Hole, LeakReading, ReportMalformed, ReportUnavailable
from drills.target.leakreport.promql import UNMEASURED as PROMETHEUS_UNMEASURED
from drills.target.leakreport.source import LeakSource, rfc3339, source_for
from drills.target.access import CLUSTER, Permission, grant
from drills.target.faults import fault_permissions
from drills.target.profile import TargetProfile
from drills.workloads.training import TrainingRun, training_job_problem, training_permissions

log = logging.getLogger(__name__)
Obj = dict[str, Any]

STEP_SECONDS = 0.1
"""The step time every training rank is asked for (it logs what each step really took)."""
LOG_SETTLE = 1.0
"""Seconds after a window before its last canary lines are counted (they travel through pods/log)."""
STALL_SHARE, OTHER_SHARE = 0.5, 0.05
"""The stall share of the hole under test, and the small share of the other stall (so it is not zero)."""
WORKERS, GPUS_PER_WORKER = 2, 4
KEEP_FREE = 2
"""Fragmentation: GPUs each node keeps free after the fill."""
CHECKPOINT_EVERY = 10
FAULT_LEAD = 2.0
"""Fault tolerance: seconds of normal training inside the window before the node is pulled."""
RESUME_MARGIN = 2.0
"""Fault tolerance: seconds the window stays open after the harness saw the resume."""
READY_TIMEOUT, GONE_TIMEOUT, RESUME_TIMEOUT = 60.0, 60.0, 120.0
VERDICT_TIMEOUT = 10.0
"""Fragmentation: how long the blocked pod may wait Pending for the scheduler's word that it cannot be placed;
past it the window opens anyway (a scheduler that never says so: the verdict's absence is in the evidence)."""
SIZE = "hole size error"
"""The measurement judged against the feature's tolerance: |reported - injected| / injected, in %."""


def unschedulable(pod: Obj | None) -> bool:
    """The scheduler's word on a pod: ``PodScheduled`` False with reason ``Unschedulable`` (kube-scheduler's,
    Volcano's and the reference platform's alike)."""
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in conditions)


@register
@dataclass
class LeakDrill(Drill):
    kind: ClassVar[str] = "leak-identification"

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return training_job_problem(profile)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        ns, why = profile.namespace, "leak identification"
        out = training_permissions(profile, why)
        out += grant(ns, "", "pods", ("create",), f"{why}: the fragmentation fill")
        out += grant(CLUSTER, "", "pods", ("list",), f"{why}: free capacity (GPUs held in every namespace)")
        if profile.leak_report.url is None and profile.leak_report.prometheus_url is None:
            out += grant(CLUSTER, "firedrill.dev", "leakreport", ("list",), f"{why}: the platform's leak report")
        if not profile.fault.method.reference_only:  # the fault-tolerance hole pulls with the profile's method
            out += fault_permissions(profile.fault.method, profile)
        return out

    source: LeakSource | None = None
    hole: Hole | None = None
    truth: Truth | None = None
    window: tuple[float, float] | None = None
    reading: LeakReading | None = None
    pods: list[str] = field(default_factory=list)
    """Names of the plain pods the drill created (fragmentation)."""
    node_pull: TrainingRun | None = None

    # ------------------------------------------------------------------ helpers
    @property
    def clock(self) -> Any:
        return self.target.timeline.clock

    def _until(self, wall: float) -> None:
        """Let real time pass until the wall clock reaches ``wall`` (the window is real time on the platform)."""
        while (left := wall - self.clock.wall()) > 0:
            self.pause(min(left, 0.2))

    def _poll(self, predicate: Any, timeout: float, interval: float = 0.25) -> bool:
        deadline = self.clock.mono() + timeout
        while not predicate():
            if self.clock.mono() >= deadline:
                return False
            self.pause(interval)
        return True

    def _mine(self) -> list[Obj]:
        return self.target.driver.list(POD, self.target.profile.namespace, label_selector=run_selector(self.run_id))

    # ----------------------------------------------------------------- inject
    def inject(self, hole: Hole, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError(f"the leak window must be longer than 0 s, got {seconds:g}")
        self.hole = hole
        self.result.details["leak"] = {"hole": hole.value, "words": hole.words, "seconds": seconds}
        self._source_answers(hole)
        if hole in (Hole.DATA_PIPELINE, Hole.COMMUNICATION):
            self._stalls(hole, seconds)
        elif hole is Hole.FRAGMENTATION:
            self._fragmentation(seconds)
        else:
            self._fault(seconds)
        assert self.truth is not None and self.window is not None
        self.result.details["leak"].update({
            "expected": {"hole": self.truth.hole.value, "gpuHours": self.truth.gpu_hours,
                         "gpuSeconds": round(self.truth.gpu_seconds, 3), "formula": self.truth.formula},
            "window": {"start": rfc3339(self.window[0]), "end": rfc3339(self.window[1])}})
        self.target.timeline.action("leak-window", target=hole.value, start=rfc3339(self.window[0]),
                                    end=rfc3339(self.window[1]))

    def _need_training_job(self) -> None:
        why = self.unsupported(self.target.profile, reference=self.target.embedded is not None)
        if why:
            raise DrillInconclusive(why)

    def _source_answers(self, hole: Hole) -> None:
        """Before anything moves: the configured leak report is there to be read and can measure ``hole`` (a
        platform that does not serve the contract, or a Prometheus source and a hole its metrics cannot show, is
        INCONCLUSIVE at once, not after minutes of injected leak).  A Prometheus source is not asked: it is
        judged on the window's own samples."""
        self.source = self.source or source_for(self.target.profile, self.target.driver)
        self.result.details["leak"]["source"] = {"kind": self.source.kind, "where": self.source.description}
        if self.source.kind == "prometheus":
            if hole in PROMETHEUS_UNMEASURED:
                why = cannot_measure(hole, PROMETHEUS_UNMEASURED[hole], self.source.description,
                                     "the hole (asked before injecting anything)")
                self.result.details["leak"]["unmeasured"] = why
                self.result.inconclusive(why)
                raise DrillInconclusive(why)
            return
        now = self.clock.wall()
        try:
            self.source.read(now - 2.0, now - 1.0)
        except ReportUnavailable as exc:
            self.result.inconclusive(f"{exc} (asked before injecting anything)")
            raise DrillInconclusive(f"{exc} (asked before injecting anything)") from None
        except ReportMalformed:
            pass  # judged, and failed, on the window itself

    def _stalls(self, hole: Hole, seconds: float) -> None:
        self._need_training_job()
        free = free_gpus_per_node(self.target)
        if sum(1 for g in free.values() if g >= GPUS_PER_WORKER) < WORKERS:
            raise DrillInconclusive(f"the stall mix needs {WORKERS} nodes with {GPUS_PER_WORKER} free GPUs; "
                                    f"free GPUs per node: {free or 'none'}")
        shares = {Hole.DATA_PIPELINE: (STALL_SHARE, OTHER_SHARE), Hole.COMMUNICATION: (OTHER_SHARE, STALL_SHARE)}
        input_share, comm_share = shares[hole]
        compute_share = 1.0 - input_share - comm_share
        npd = TrainingRun(self.target, self.result, self.run_id, step_seconds=STEP_SECONDS * compute_share)
        self.node_pull = npd
        npd.start_canary(WORKERS, GPUS_PER_WORKER, 0, input_seconds=STEP_SECONDS * input_share,
                         comm_seconds=STEP_SECONDS * comm_share)
        assert npd.spec is not None
        t0 = self.clock.wall()
        self.window = (t0, t0 + seconds)
        self._until(self.window[1])
        running = [p for p in self._mine() if (p.get("status") or {}).get("phase") == "Running"]
        if len(running) < WORKERS:
            raise DrillInconclusive(f"a rank of {npd.spec.name} stopped inside the window ({len(running)} of "
                                    f"{WORKERS} Running at its end): the injected stall is not what leaked")
        self._until(self.window[1] + LOG_SETTLE)  # the lines of the window's last steps reach the harness
        ranks = npd.canary.totals({p["metadata"]["uid"] for p in running}, *self.window)
        if len(ranks) < WORKERS:
            raise DrillInconclusive(f"only {len(ranks)} of {WORKERS} ranks logged steps inside the window; the "
                                    "canary's own account of its stalls is incomplete")
        self.truth = measured_stall_truth(hole, GPUS_PER_WORKER, ranks)
        self.result.details["leak"]["mix"] = {
            "asked": {"input_seconds": STEP_SECONDS * input_share, "comm_seconds": STEP_SECONDS * comm_share,
                      "compute_seconds": STEP_SECONDS * compute_share},
            "measured_by_the_canary": {uid: vars(t) for uid, t in ranks.items()}}

    def _plain_pod(self, name: str, gpus: int, node: str | None) -> Obj:
        profile = self.target.profile
        spec: Obj = {"restartPolicy": "Never", "containers": [{
            "name": "hold", "image": profile.canary_image,
            "resources": {"limits": {profile.gpu_resource: str(gpus)}, "requests": {profile.gpu_resource: str(gpus)}}}]}
        if node is not None:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": profile.namespace, "labels": {RUN_LABEL: self.run_id},
                             "annotations": {"firedrill.dev/workload": "idle"}},
                "spec": spec}

    def _fragmentation(self, seconds: float) -> None:
        free = free_gpus_per_node(self.target)
        usable = {n: g for n, g in free.items() if g >= KEEP_FREE}
        total = KEEP_FREE * len(usable)
        blocked = min(total, 2 * KEEP_FREE)
        if len(usable) < 2 or blocked <= KEEP_FREE:
            raise DrillInconclusive(f"fragmentation needs at least 2 nodes with {KEEP_FREE} or more free GPUs; "
                                    f"free GPUs per node: {free or 'none'}")
        fill = {n: g - KEEP_FREE for n, g in sorted(usable.items()) if g > KEEP_FREE}
        for i, (node, gpus) in enumerate(fill.items()):
            name = f"leak-{self.run_id}-fill-{i}"
            self.pods.append(name)
            self.target.driver.create(self._plain_pod(name, gpus, node))

        def filled() -> bool:
            bound = {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") for p in self._mine()}
            return all(bound.get(f"leak-{self.run_id}-fill-{i}") for i in range(len(fill)))
        if not self._poll(filled, READY_TIMEOUT):
            raise DrillInconclusive(f"the fill pods were not all placed within {READY_TIMEOUT:g} s; the cluster "
                                    "cannot be fragmented as planned")
        after = free_gpus_per_node(self.target)
        left = {n: after.get(n, 0) for n in usable}
        if max(left.values()) >= blocked or sum(left.values()) < blocked:
            raise DrillInconclusive(f"after the fill the free GPUs per node are {left}; a pod of {blocked} GPUs "
                                    "would not be blocked by fragmentation alone (something else changed them)")
        name = f"leak-{self.run_id}-blocked"
        self.pods.append(name)
        self.target.driver.create(self._plain_pod(name, blocked, None))

        def pending() -> Obj | None:
            pod = next((p for p in self._mine() if p["metadata"]["name"] == name), None)
            if pod is None or (pod.get("spec") or {}).get("nodeName") or \
                    (pod.get("status") or {}).get("phase", "Pending") != "Pending":
                return None
            return pod
        if not self._poll(pending, READY_TIMEOUT):
            raise DrillInconclusive(f"pod {name} ({blocked} GPUs) was never seen Pending")
        seen = self.clock.wall()
        # The hole opens when the scheduler says the pod cannot be placed (PodScheduled False, Unschedulable:
        # what kube-state-metrics' kube_pod_status_unschedulable and the platform's own account read), not when
        # the pod was made; and a sampling source (Prometheus) first shows it one scrape later.
        verdict = self._poll(lambda: unschedulable(pending()), VERDICT_TIMEOUT)
        said = self.clock.wall()
        assert self.source is not None  # inject() asked it first (_source_answers)
        self._until(said + self.source.lag)
        t0 = self.clock.wall()
        self.window = (t0, t0 + seconds)
        self.result.details["leak"]["mix"] = {
            "free_before": free, "fill": fill, "free_after_fill": left, "blocked_gpus": blocked,
            "unschedulable_after_s": round(said - seen, 3) if verdict else None,
            "window_opened_after_s": round(t0 - seen, 3)}
        self._until(self.window[1])
        pod = next((p for p in self._mine() if p["metadata"]["name"] == name), None)
        if pod is None or (pod.get("spec") or {}).get("nodeName"):
            raise DrillInconclusive(f"pod {name} was placed or removed inside the window: the cluster changed "
                                    "under the drill, so the injected fragmentation is not known")
        self.truth = fragmentation_truth(blocked, sum(left.values()), seconds)

    def _fault(self, seconds: float) -> None:
        self._need_training_job()
        npd = TrainingRun(self.target, self.result, self.run_id, step_seconds=STEP_SECONDS)
        self.node_pull = npd
        npd.start_canary(WORKERS, GPUS_PER_WORKER, CHECKPOINT_EVERY)
        npd.wait_checkpoint(READY_TIMEOUT)
        assert npd.spec is not None
        t0 = self.clock.wall()
        self._until(t0 + FAULT_LEAD)
        npd.pull(0, self.target.profile.fault.method)
        if "fault" not in npd.instants:
            raise DrillInconclusive("; ".join(self.result.findings) or "the fault was not confirmed")
        npd.observe_until("resume", RESUME_TIMEOUT)
        if "resume" not in npd.instants or npd.resumption is None:
            raise DrillInconclusive(f"the harness never saw training resume within {RESUME_TIMEOUT:g} s of the "
                                    "fault, so the fault-tolerance hole has no end to measure")
        t_fault, t_resume = npd.instants["fault"].wall, npd.instants["resume"].wall
        self.window = (t0, max(t0 + seconds, t_resume + RESUME_MARGIN))
        self._until(self.window[1])
        step_seconds = npd.canary.median_step_seconds(before=t_fault) or STEP_SECONDS
        gpus = npd.spec.workers * npd.spec.gpus_per_worker
        self.truth = fault_truth(gpus, t_fault, t_resume, step_seconds, npd.step_at_fault,
                                 npd.resumption.from_step, self.window)
        self.result.details["leak"]["mix"] = {
            "t_fault": rfc3339(t_fault), "t_resume": rfc3339(t_resume), "steps_at_fault": npd.step_at_fault,
            "resumed_from": npd.resumption.from_step, "step_seconds_measured": step_seconds}

    # ------------------------------------------------------------------ observe
    def read(self) -> None:
        """Read the leak report for the window from the configured source (after the settle time)."""
        if self.window is None or self.truth is None:
            raise DrillInconclusive("no leak was injected, so there is no window to read")
        self.source = self.source or source_for(self.target.profile, self.target.driver)
        info = self.result.details["leak"]
        info["source"] = {"kind": self.source.kind, "where": self.source.description}
        self._until(self.window[1] + self.source.settle)
        try:
            self.reading = self.source.read(*self.window)
        except ReportUnavailable as exc:
            self.result.inconclusive(str(exc))
            raise DrillInconclusive(str(exc)) from None
        except ReportMalformed as exc:
            self.result.fail(str(exc))
            return
        info["report"] = dict(self.reading.raw)
        why = unmeasurable(self.truth, self.reading, self.source.description)
        if why is not None:  # e.g. a Prometheus source and the communication hole: unknown, not zero
            info["unmeasured"] = why
            self.result.inconclusive(why)
            raise DrillInconclusive(why)
        largest = Hole(self.reading.largest) if self.reading.largest else None
        info["reported"] = {"largest": self.reading.largest, "gpuHours": self.reading.gpu_hours(self.truth.hole),
                            "largestGpuHours": self.reading.gpu_hours(largest) if largest else 0.0,
                            "summary": self.reading.summary}

    # -------------------------------------------------------------------- judge
    def judge_named(self, hole: Hole) -> None:
        self._same_hole(hole)
        if self.reading is None or self.truth is None:
            return  # a malformed report already failed the scenario
        naming = judge_naming(self.truth, self.reading)
        where = self.source.description if self.source is not None else "the leak report"
        if naming.ok:
            self.result.details["leak"]["named"] = naming.message
        else:
            self.result.fail(f"{naming.message} (source: {where})")

    def judge_size(self, hole: Hole, tolerance_percent: float) -> None:
        self._same_hole(hole)
        threshold = Threshold(SIZE, tolerance_percent, "%", Comparison.AT_MOST)
        if self.reading is None or self.truth is None:
            self.result.measure(Measurement(SIZE, None, "%", note="no leak report was read"))
            self.result.check(threshold)
            return
        sizing = judge_size(self.truth, self.reading, tolerance_percent)
        self.result.measure(Measurement(f"{self.truth.hole.words} GPU-hours", self.truth.gpu_hours, "GPU-h",
                                        platform=sizing.reported_gpu_hours,
                                        note="harness: injected; platform: the leak report"))
        self.result.measure(Measurement(SIZE, sizing.error_percent, "%", note=sizing.message))
        self.result.check(threshold)
        if not sizing.ok:
            where = self.source.description if self.source is not None else "the leak report"
            self.result.findings.append(f"{sizing.message} (source: {where})")

    def _same_hole(self, hole: Hole) -> None:
        if self.hole is not None and hole is not self.hole:
            raise ValueError(f"the scenario opened {self.hole.words} but judges {hole.words}; name the same hole "
                             "in the Given and the Then steps")

    # ----------------------------------------------------------------- rollback
    def rollback(self) -> None:
        """Delete everything the drill made, undo the fault, and wait until it is all gone; never raises."""
        driver, ns = self.target.driver, self.target.profile.namespace
        if self.node_pull is not None:
            self.node_pull.rollback()
        try:  # the training job went with node_pull.rollback(); the fragmentation pods are the drill's own
            for pod in self._mine():
                driver.delete(POD, pod["metadata"]["name"], ns, grace_seconds=0)
            if not self._poll(lambda: not self._mine(), GONE_TIMEOUT, 0.5):
                log.warning("pods of leak drill %s still exist %g s after the rollback", self.run_id, GONE_TIMEOUT)
        except KubeError as exc:
            log.warning("rollback of leak drill %s incomplete: %s", self.run_id, exc)


__all__ = ["LeakDrill", "SIZE"]
