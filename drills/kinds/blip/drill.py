"""The blip drill: the control plane, or most nodes' link to it, goes away for a while; training must not notice.

Steady state before (the canary job training whole, a checkpoint written) -> act (the outage: the embedded API
server stopped, or N nodes partitioned from the control plane, for the sentence's seconds; a
writer keeps creating Leases the whole time) -> observe -> judge -> rollback (every fault undone, the Leases and
the job deleted).

Truth from the workload and the harness's own watches, never from the platform's claim:

- ``t_fault``: the outage began (the signal returned); ``t_end``: it ended (the fault undone);
- **training through the outage**: each rank's step lines (the canary's own ``ts``), read after the outage from
  its log; the longest pause is the longest gap between steps of one rank inside [t_fault, t_end], edges
  included;
- **undisturbed**: every pod of the job at the fault is, a settle time after t_end, still Running, not deleted,
  with the same container restart count, and no new pod of the job exists;
- **acknowledged writes**: every Lease the API server answered 201 for is there after the outage;
- ``t_ready``: every node Ready before the outage has renewed its Lease after t_end (its agent talks to the
  control plane again) and is Ready and free of ``unreachable``/``not-ready`` taints.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar

from drills.errors import FiredrillError
from drills.kube.driver import NODE, RESOURCES, KubeError
from drills.kube.timeline import parse_time
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import Permission, grant
from drills.target.faults import FaultRecord
from drills.target.profile import FaultMethod, TargetProfile
from drills.target.safety import check_blast_radius, eligible_nodes
from drills.target.service import describe, not_back, snapshot
from drills.workloads.canarylog import CanaryEvent
from drills.workloads.training import (
    TERMINAL, UNHEALTHY_TAINTS, Instant, Obj, TrainingRun, rank_of, training_job_problem, training_permissions,
)

__all__ = ["BlipDrill", "Outage"]

log = logging.getLogger(__name__)

LEASE = RESOURCES[("coordination.k8s.io/v1", "Lease")]
NODE_LEASES = "kube-node-lease"
"""Where every node's heartbeat Lease lives."""
WRITE_EVERY_S = 0.1
"""How often the writer creates a Lease, from before the outage to after it."""
WRITE_TIMEOUT_S = 30.0
"""How long one write may wait for its answer (a stopped API server answers when it is continued)."""
ROLLBACK_READY_S = 30.0
"""Seconds the rollback waits for every node Ready before the outage to be Ready and untainted again."""
ROLLBACK_READY_AFTER_MISS_S = 5.0
"""The same wait once the scenario found them not back within its promise and grace."""
CATCH_UP_S = 10.0
"""How long after the outage the canary's log may take to reach the harness (its followers reconnect)."""
CONTROL_PLANE_ONLY = ("stopping the control plane is a reference-platform fault (SIGSTOP of the API server this "
                      "harness started); on a real cluster the harness never signals processes it "
                      "did not start, so this scenario cannot act there")


@dataclass
class Outage:
    """What went away, and for how long."""

    what: str
    """``control-plane`` or ``nodes``."""
    seconds: float
    nodes: tuple[str, ...] = ()
    """The partitioned nodes (``nodes`` outages)."""
    records: list[FaultRecord] = field(default_factory=list)


@dataclass(frozen=True)
class Disturbed:
    """What the outage did to the job's pods: how many of them, and each finding in words."""

    pods: int
    found: list[str]


@register
@dataclass
class BlipDrill(TrainingRun, Drill):
    """A control-plane or network blip under a training job: nothing may be evicted, restarted or lost."""

    kind: ClassVar[str] = "blip"
    needs_whole_cluster: ClassVar[str] = "it cuts off the control plane, or most nodes, of the whole cluster at once"
    CHAIN: ClassVar[tuple[str, ...]] = ("end", "ready")
    STARTS: ClassVar[dict[str, str]] = {"end": "fault", "ready": "end", "total": "fault"}
    AFTER_RESUME: ClassVar[tuple[str, ...]] = ()
    outage: Outage | None = None
    ready_before: set[str] = field(default_factory=set)
    restarts_before: dict[str, int] = field(default_factory=dict)
    acked: list[str] = field(default_factory=list)
    unanswered: int = 0
    """Writes that got no answer or an error (never acknowledged, so never owed)."""
    steps_seen: list[dict[str, float]] = field(default_factory=list)
    """The chart's series: per step line inside the outage window (seconds since t_fault, rank, step)."""
    marked: set[str] = field(default_factory=set)
    """Nodes Ready before the outage that the control plane marked not Ready (or tainted) since: context, never a
    verdict (whether a platform marks a quiet node is its business; evicting its training is not)."""
    renewed: dict[str, float] = field(default_factory=dict)
    """Node -> its Lease's newest ``renewTime`` (epoch seconds), from the harness's watch."""
    _writer: threading.Thread | None = None
    _writer_stop: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return training_job_problem(profile)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        return (training_permissions(profile, "blip")
                + grant(profile.namespace, "coordination.k8s.io", "leases", ("create", "list", "delete"),
                        "blip: the writes acknowledged during the outage, read back after it")
                + grant(NODE_LEASES, "coordination.k8s.io", "leases", ("list", "watch"),
                        "blip: each node's heartbeat after the outage (its Lease renewals)"))

    # ----------------------------------------------------------------- act
    def control_plane_outage(self, seconds: float) -> None:
        """Stop the API server and the controllers for ``seconds`` (reference platform only)."""
        if self.target.embedded is None:
            raise DrillInconclusive(CONTROL_PLANE_ONLY)
        self._outage(Outage("control-plane", seconds), lambda: [self.target.hang_control_plane()])

    def nodes_outage(self, count: int, seconds: float, method: FaultMethod) -> None:
        """Cut ``count`` nodes, the job's first, off the control plane for ``seconds`` with ``method``."""
        assert self.spec is not None, "start the canary job first"
        with self._cond:
            job_nodes = sorted({(p.get("spec") or {}).get("nodeName", "") for p in self._running_pods()} - {""})
            ready = sorted(n for n in self.nodes if self._node_healthy(n))
        others = [n for n in ready if n not in job_nodes]
        chosen = (job_nodes + others)[:count]
        if len(chosen) < count:
            raise DrillInconclusive(f"the scenario cuts {count} nodes off the control plane, but the cluster has "
                                    f"{len(ready)} Ready node(s): {', '.join(ready) or 'none'}; lower the number "
                                    "in your copy of the feature")
        if self.target.embedded is None:
            all_nodes = self.target.driver.list(NODE)
            allowed = {n["metadata"]["name"] for n in eligible_nodes(all_nodes, self.target.profile.safety)}
            refused = [n for n in chosen if n not in allowed]
            if refused:
                raise DrillInconclusive(f"node(s) {', '.join(refused)} are not eligible for faults: they lack the "
                                        f"allow label {self.target.profile.safety.allow_label} or are control-plane "
                                        "nodes")
            check_blast_radius([n for n in all_nodes if n["metadata"]["name"] in chosen], all_nodes,
                               self.target.profile.safety, self.target.profile.gpu_resource)
        def cut_all() -> list[FaultRecord]:  # at once: on a real cluster each fault waits for its confirmation
            with ThreadPoolExecutor(max_workers=len(chosen)) as pool:
                return list(pool.map(lambda n: self.target.pull(n, method, self.run_id), chosen))
        self._outage(Outage("nodes", seconds, tuple(chosen)), cut_all)

    def _outage(self, outage: Outage, inject: Callable[[], list[FaultRecord]]) -> None:
        assert self.spec is not None, "start the canary job first"
        clock = self.target.timeline.clock
        with self._cond:
            self._mark_before_fault()
            self.restarts_before = {p["metadata"]["uid"]: _restarts(p) for p in self.pods.values()}
            self.ready_before = {n for n in self.nodes if self._node_healthy(n)}
        self.outage = outage
        self.target.driver.watch(LEASE, NODE_LEASES, on_event=self._on_lease, record=False)
        self._start_writer()
        if not self._wait(lambda: bool(self.acked), 5.0):
            self._stop_writer()
            raise DrillInconclusive(f"the API server acknowledged none of the drill's Lease writes in 5 s before the "
                                    f"outage ({self.unanswered} unanswered), so no write can be followed through it")
        began = Instant(clock.mono(), clock.wall())  # the outage counts from the first action, confirmed or not yet
        try:
            outage.records = inject()
        except FiredrillError as exc:
            self._stop_writer()
            raise DrillInconclusive(f"the {outage.what} outage could not be started: {exc}") from None
        with self._cond:
            self._stamp("fault", began)
            self.result.details["fault"] = {"what": outage.what, "seconds": outage.seconds, "nodes": list(outage.nodes),
                                            "method": ", ".join(sorted({r.method.value for r in outage.records})),
                                            "confirmed": all(r.confirmed for r in outage.records),
                                            "detail": "; ".join(r.detail for r in outage.records)}
        unconfirmed = [r for r in outage.records if not r.confirmed]
        until = self.instants["fault"].mono + outage.seconds
        self._wait(lambda: clock.mono() >= until, outage.seconds + 1.0)  # the outage lasts what the sentence says
        problems = []
        for record in outage.records:
            try:
                self.target.restore(record)
            except Exception as exc:  # noqa: BLE001 - every fault must be tried; the rollback tries again
                problems.append(f"{record.node}: {exc}")
        with self._cond:
            self._stamp("end", Instant(clock.mono(), clock.wall()))
            self._advance()
        threading.Thread(target=self._stop_writer_later, name="blip-writer-stop", daemon=True).start()
        if problems:
            self.result.inconclusive(f"the {outage.what} outage could not be undone: {'; '.join(problems)}")
        if unconfirmed:
            self.result.inconclusive(f"the {outage.what} outage was not confirmed ("
                                     f"{'; '.join(r.detail for r in unconfirmed)}); no verdict is claimed")

    # -------------------------------------------------------------- writer
    def _start_writer(self) -> None:
        self._writer = threading.Thread(target=self._write_loop, name="blip-writer", daemon=True)
        self._writer.start()

    def _write_loop(self) -> None:
        ns, driver, n = self.target.profile.namespace, self.target.driver, 0
        while not self._writer_stop.is_set():
            n += 1
            name = f"fd-blip-{self.run_id}-{n}"[:63]
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": ns, "labels": {"firedrill.dev/drill-run": self.run_id}},
                    "spec": {"holderIdentity": "firedrill-blip"}}
            try:
                driver._request_once("POST", LEASE.path(ns), body, None, "application/json",  # noqa: SLF001
                                     timeout=WRITE_TIMEOUT_S)
            except FiredrillError:
                with self._cond:
                    self.unanswered += 1
            else:
                with self._cond:
                    self.acked.append(name)
                    self._cond.notify_all()
            self._writer_stop.wait(WRITE_EVERY_S)

    def _stop_writer_later(self, after: float = 1.0) -> None:
        self._writer_stop.wait(after)
        self._stop_writer()

    def _stop_writer(self) -> None:
        self._writer_stop.set()
        if self._writer is not None:
            self._writer.join(WRITE_TIMEOUT_S + 1)

    # ------------------------------------------------------------- observe
    def _on_lease(self, event: str, obj: Obj) -> None:
        renew = parse_time((obj.get("spec") or {}).get("renewTime"))
        if event != "DELETED" and renew is not None:
            with self._cond:
                self.renewed[obj["metadata"]["name"]] = renew
                self._advance()
                self._cond.notify_all()

    def _advance(self) -> None:
        """Under the lock: ``t_ready`` once every node Ready before the outage has renewed its Lease since the end
        and is Ready and untainted (a node object the harness saw before the outage proves nothing)."""
        if "fault" in self.instants and "ready" not in self.instants:
            self.marked |= {n for n in self.ready_before if not self._node_healthy(n)}
        if "end" in self.instants and "ready" not in self.instants:
            end = self.instants["end"].wall
            if all(self.renewed.get(n, 0.0) > end and self._node_healthy(n) for n in self.ready_before):
                self._stamp("ready")

    def observe_ready(self, limit: float) -> None:
        self.observe_phase("ready", limit)

    # --------------------------------------------------------------- judge
    def judge_training(self, limit: float) -> None:
        """Every rank training at the fault kept stepping through the outage: the longest gap between its steps
        inside [t_fault, t_end] (edges included) is at most ``limit``."""
        if "end" not in self.instants:
            return
        fault, end = self.instants["fault"].wall, self.instants["end"].wall
        stepping = self.canary.stepping(self.before_fault)  # the ranks training at the fault, gone since or not

        def caught_up() -> bool:  # every rank's log has reached past the end, or its pod is gone
            live = {p["metadata"]["uid"] for p in self._running_pods()}
            return all(uid not in live or any(ln.ts >= end for ln in self.canary.of(CanaryEvent.STEP, [uid]))
                       for uid in stepping)
        self._wait(caught_up, CATCH_UP_S)
        with self._cond:
            worst: tuple[float, str, int, float, float] | None = None
            fewest: int | None = None
            self.steps_seen = []
            for uid in sorted(stepping):
                steps = self.canary.of(CanaryEvent.STEP, [uid])
                lines = [ln for ln in steps if fault <= ln.ts <= end]
                stamps = [fault, *sorted(ln.ts for ln in lines), end]
                gap, a, b = max((b - a, a, b) for a, b in zip(stamps, stamps[1:]))
                rank, pod = steps[-1].rank, steps[-1].pod
                self.steps_seen += [{"t": round(ln.ts - fault, 3), "rank": rank, "step": ln.step or 0} for ln in lines]
                if worst is None or gap > worst[0]:
                    worst = (gap, pod, rank, a - fault, b - fault)
                fewest = len(lines) if fewest is None else min(fewest, len(lines))
            if worst is None:
                self.result.inconclusive("no rank of the canary job was training at the outage, so whether training "
                                         "carried on through it cannot be judged")
                return
            gap, pod, rank, a, b = worst
            self.result.measure(Measurement("longest training pause", gap, "s",
                                            note=f"rank {rank} ({pod}), {a:.2f} s to {b:.2f} s after t_fault, by the "
                                                 "canary's own step times"))
            self.result.measure(Measurement("steps during the outage", float(fewest or 0), "steps",
                                            note="the fewest any rank logged inside the outage"))
            self.result.details["outage-steps"] = list(self.steps_seen)
            self.result.details["step_times"] = self._chart(stepping, fault, end)
            if gap > limit:
                what = self.outage.what if self.outage else ""
                self.result.fail(f"training paused for {gap:.2f} s during the {what} outage, more than {limit:g} s: "
                                 f"rank {rank} ({pod}) logged no step from {a:.2f} s to {b:.2f} s after it began "
                                 "(the canary's own log)")

    def _chart(self, uids: set[str], fault: float, end: float, margin: float = 2.0) -> dict[str, object]:
        """Under the lock: each rank's time since its previous step, from ``margin`` seconds before the outage to as
        long after it, by the canary's own clock (a pause shows as a spike): the report's step chart."""
        points = []
        for uid in sorted(uids):
            stamps = sorted((ln.ts, ln.rank, ln.generation) for ln in self.canary.of(CanaryEvent.STEP, [uid]))
            for (a, _, _), (b, rank, generation) in zip(stamps, stamps[1:]):
                if fault - margin <= b <= end + margin:
                    points.append({"t": round(b - fault, 3), "rank": rank, "generation": generation,
                                   "interval_s": round(b - a, 4)})
        return {"value": "interval_s", "marks": ["end", "ready"], "points": points,
                "caption": "seconds from the outage's start (each canary's own clock); each rank's time since its "
                           "previous step: a pause is a spike"}

    def judge_undisturbed(self, settle: float) -> None:
        """For ``settle`` seconds after the outage, no pod of the job is evicted, deleted, restarted or replaced
        (ends at once when one is)."""
        if "end" not in self.instants:
            return
        clock = self.target.timeline.clock
        until = self.instants["end"].mono + settle
        self._wait(lambda: bool(self._disturbed().found) or clock.mono() >= until, settle + 1.0)
        with self._cond:
            disturbed = self._disturbed()
            found = disturbed.found
            self.result.measure(Measurement("job pods evicted or restarted", float(disturbed.pods), "pods",
                                            note=f"watched until {settle:g} s after the outage"))
            if found:
                self.result.fail(f"the {self.outage.what if self.outage else ''} outage of "
                                 f"{self.outage.seconds if self.outage else 0:g} s disturbed the training it should "
                                 f"have left alone: {'; '.join(found)} (the harness's watch of the job's pods)")

    def _disturbed(self) -> Disturbed:
        """Under the lock: what happened to the job's pods since the fault. The count is of pods, not of findings: a
        rank's replacement is the same rank disturbed, counted as a pod only when no pod the job had at the fault
        shows what happened to it."""
        found = []
        by_uid = {p["metadata"]["uid"]: p for p in self.pods.values()}
        for uid in sorted(self.before_fault):
            pod = by_uid.get(uid)
            if pod is None:
                found.append(f"a pod (uid {uid[:8]}) was deleted")
                continue
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp"):
                found.append(f"{name} was evicted (deletionTimestamp set)")
            elif (pod.get("status") or {}).get("phase") in TERMINAL:
                found.append(f"{name} ended {(pod.get('status') or {}).get('phase')}")
            elif _restarts(pod) > self.restarts_before.get(uid, 0):
                found.append(f"{name} restarted ({_restarts(pod)} restarts, {self.restarts_before.get(uid, 0)} "
                             "before)")
        touched = len(found)
        fresh = sorted(p["metadata"]["name"] for uid, p in by_uid.items() if uid not in self.before_fault)
        if fresh:
            found.append(f"new pod(s) {', '.join(fresh)} replaced the job's ranks")
        return Disturbed(pods=touched or len(fresh), found=found)

    def judge_writes(self) -> None:
        """Every Lease the API server acknowledged, before, during or after the outage, is there now."""
        if "end" not in self.instants:
            return
        self._stop_writer()
        try:
            present = {o["metadata"]["name"] for o in self.target.driver.list(
                LEASE, self.target.profile.namespace, label_selector=f"firedrill.dev/drill-run={self.run_id}")}
        except KubeError as exc:
            self.result.inconclusive(f"the drill's Leases could not be listed after the outage: {exc}")
            return
        with self._cond:
            lost = [n for n in self.acked if n not in present]
            self.result.measure(Measurement("acknowledged writes lost", float(len(lost)), "writes",
                                            note=f"{len(self.acked)} acknowledged, {self.unanswered} unanswered "
                                                 "(never owed)"))
            if lost:
                self.result.fail(f"{len(lost)} of the {len(self.acked)} writes the API server acknowledged around "
                                 f"the outage are gone: {', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''}")

    def _measure(self) -> None:
        with self._cond:
            t = self.instants
            for phase, (a, b) in {"outage": ("fault", "end"), "ready": ("end", "ready")}.items():
                if a in t and b in t:
                    self.result.measure(Measurement(phase, max(0.0, t[b].mono - t[a].mono), "s"))
                elif phase not in self.result.measurements:
                    late = self._not_ready_again() if phase == "ready" and "end" in t else ""
                    self.result.measure(Measurement(phase, None, "s", note=f"t_{b} never observed"
                                                    + (f"; not back: {late}" if late else "")))
            self.result.details["instants"] = {k: {"mono": v.mono, "wall": v.wall} for k, v in t.items()}
            if "fault" in t:
                self.result.measure(Measurement("nodes marked not Ready", float(len(self.marked)), "nodes",
                                                note=", ".join(sorted(self.marked)) or "none: the outage was shorter "
                                                "than the control plane's grace period, or it was never told"))

    def _not_ready_again(self) -> str:
        """Under the lock: the nodes Ready before the outage that are not Ready and untainted again, each with
        what keeps it out (:mod:`drills.target.service`), or whose Lease was not renewed since the end."""
        end = self.instants["end"].wall
        out = not_back(self.target.service_before, snapshot(self.nodes.values(), self.target.profile.gpu_resource),
                       sorted(self.ready_before))
        for name in sorted(self.ready_before):
            if self.renewed.get(name, 0.0) <= end:
                out.setdefault(name, []).append("no Lease renewal since the outage ended")
        return describe(out)

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Undo the outage (if a step ended early), stop the writer, delete its Leases, then what
        :class:`TrainingRun` undoes; wait for every node Ready before the outage to be Ready again. Never raises."""
        self.target.restore_all()
        self._stop_writer()
        ns = self.target.profile.namespace
        try:
            for name in self.target.driver.list(LEASE, ns, label_selector=f"firedrill.dev/drill-run={self.run_id}"):
                self.target.driver.delete(LEASE, name["metadata"]["name"], ns)
        except KubeError as exc:
            log.warning("rollback of blip drill %s: its Leases: %s", self.run_id, exc)
        super().rollback()
        clock = self.target.timeline.clock
        # nodes the scenario already found not back within the promise and its grace get a short wait only: the
        # platform had its time, and the next scenario names what it left (docs/SAFETY.md, "Back in service")
        missed = "end" in self.instants and "ready" not in self.instants and "ready" in self.result.measurements
        deadline = clock.mono() + (ROLLBACK_READY_AFTER_MISS_S if missed else ROLLBACK_READY_S)
        while self.ready_before and clock.mono() < deadline:
            try:
                nodes = {n["metadata"]["name"]: n for n in self.target.driver.list(NODE)}
            except KubeError:
                nodes = {}
            if all(_ready(nodes.get(n) or {}) for n in self.ready_before):
                return
            threading.Event().wait(0.2)


def _restarts(pod: Obj) -> int:
    return sum(int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])


def _ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or []) and not any(
        t.get("key") in UNHEALTHY_TAINTS for t in (node.get("spec") or {}).get("taints") or [])
