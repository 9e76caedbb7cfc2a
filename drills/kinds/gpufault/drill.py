"""The GPU fault drill: a rank's GPU takes an Xid while its node lives; time detect, off, replace, resume.

Steady state before (the canary job training whole, a checkpoint written) -> act (an Xid on the GPU under one
rank: the reference platform's node agent applies it as the GPU's driver would report it) -> observe -> judge ->
rollback (the injection removed: the GPU returns to service; everything the drill made deleted).

Instants (the harness's monotonic clock; truth from the workload and the harness's own watches):

- ``t_fault``: the injection was written;
- ``t_detect``: the GPU left service: the node's allocatable GPUs fell below what they were before the fault
  (the kubelet drops a device its plugin calls Unhealthy);
- ``t_off``: no pod that held the GPU at the fault is running any more (its canary failed on the lost GPU);
- ``t_replace``: the job again has minMember pods Running, none of them the pods of the fault, each of whose
  canaries has said which GPUs it was given, and none was given the failed GPU;
- ``t_resume``: a replacement rank logs a step beyond the step it resumed from.

An application Xid (13, 31, 43, 45, 68) is the program's fault: the rank restarts, the GPU stays in service.

The GPU's way back (docs/HEALING.md, "A GPU's way back") is watched for the rest of the scenario from the node's
allocatable: every return (the node's allocatable GPUs back to what they were) must follow a repair (the Xid
removed: the drill's own, or the back-in-service undo) and a burn-in the platform passed after it, by its own
record (the reference platform's ``firedrill.dev/gpu-health``); a GPU that returns while its fault stands ends the
scenario at once. The repair, a burn-in made to fail, a second Xid after the return and what must follow are
their own sentences (issue 49).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import ClassVar

from drills.kube.driver import NODE, KubeError
from drills.records.verdict import DrillInconclusive, Measurement, Threshold
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.capacity import allocatable_gpus
from drills.target.profile import TargetProfile
from drills.target.faults import FaultError
from drills.target.gpuhealth import DIAG_ANNOTATION, BurnIn, gpu_health
from drills.target.xid import (APPLICATION_XIDS, INJECT_ANNOTATION, NO_XID_COMMAND, XID_METRIC, dcgm_last_xid,
                               inject_by_uuid, unhealthy_gpus, wait_seen)
from drills.workloads.canarylog import CanaryEvent, CanaryLine
from drills.workloads.training import (GPU_INDEX_ANNOTATION, Instant, Obj, TrainingRun, training_job_problem,
                                      training_permissions)

__all__ = ["APPLICATION_XIDS", "FailedGpu", "GpuFaultDrill"]

BACK_IN_SERVICE_S = 15.0
"""How long the rollback waits for the GPU to be allocatable again, so the next scenario finds the cluster whole."""
RETURN_WAIT_S = 30.0
"""How long after a repair the drill waits for the GPU's burn-in and return before it says neither came."""
OUT_AGAIN_WAIT_S = 10.0
"""How long after a second Xid the drill waits for the GPU to leave service again."""
STAMP_SLACK_S = 0.25
"""Slack between the agent's stamps of a burn-in and the harness's of a repair or a return (one machine's clock;
the agent publishes a burn-in before the allocatable it frees)."""
NO_BURN_IN_RECORD = ("a GPU's way back is judged against the platform's own record of its burn-in (the reference "
                     "platform's firedrill.dev/gpu-health) and its repair is the removal of the reference platform's "
                     "Xid injection; Firedrill does not yet read a real health system's burn-in record (NVSentinel's, "
                     "the GPU operator's health checks), so on a real cluster it cannot tell a proven return from an "
                     "unproven one")


@dataclass(frozen=True)
class FailedGpu:
    """The GPU the drill failed."""

    node: str
    index: int | None
    """Its minor number where the platform says it (the reference platform's binding); None on a real cluster."""
    uuid: str
    """Its identity as the rank's canary logged it (``NVIDIA_VISIBLE_DEVICES``)."""
    xid: int
    rank: int
    allocatable_before: int

    @property
    def label(self) -> str:
        """How a finding names it: its index, or its UUID where no index is known (a real cluster)."""
        return self.uuid if self.index is None else str(self.index)

    @property
    def application(self) -> bool:
        return self.xid in APPLICATION_XIDS


@register
@dataclass
class GpuFaultDrill(TrainingRun, Drill):
    """One rank's GPU fails: detect (out of service), off (the rank's pod gone from it), replace, resume."""

    kind: ClassVar[str] = "gpu-fault"
    CHAIN: ClassVar[tuple[str, ...]] = ("detect", "off", "replace", "resume")
    STARTS: ClassVar[dict[str, str]] = {"detect": "fault", "off": "fault", "replace": "off", "resume": "replace",
                                        "total": "fault"}
    failed: FailedGpu | None = None
    holders: set[str] = field(default_factory=set)
    """UIDs of the pods that held the failed GPU at the fault."""
    allocatable_seen: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since the fault, allocatable GPUs of the failed GPU's node) at each change: the chart's series."""
    bound_to_failed: dict[str, str] = field(default_factory=dict)
    """Pods created after the fault that the platform bound to the failed GPU (its ``firedrill.dev/gpu-index``
    binding, where the platform writes one), by name: the GPU indexes each was bound to."""
    repairs: list[Instant] = field(default_factory=list)
    """Each repair of the failed GPU (its Xid removed), the drill's or the back-in-service undo's."""
    refaults: list[Instant] = field(default_factory=list)
    """Each later Xid on the same GPU (:meth:`fail_again`)."""
    returns: list[Instant] = field(default_factory=list)
    """Each time the failed GPU's node had its GPUs allocatable again after the GPU left service."""
    burn_in_made_to_fail: bool = False
    _out: bool = False
    _seq: int = 0
    _cause_named: bool = False

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return training_job_problem(profile) or (None if reference or profile.fault.xid is not None
                                                 else NO_XID_COMMAND)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        return (training_permissions(profile, "GPU fault")
                + grant(CLUSTER, "", "nodes", ("get", "patch"), "GPU fault: the Xid injection on the node"))

    # ----------------------------------------------------------------- act
    def fail_gpu(self, rank: int, xid: int) -> None:
        """Fail the first GPU of worker ``rank``'s pod with ``xid``: through the node's agent on the reference
        platform, through the profile's ``fault.xid`` command on a real cluster."""
        assert self.spec is not None, "start the canary job first"
        gpu = self.target.profile.gpu_resource
        real = self.target.embedded is None
        with self._cond:
            _, node, index, uuid = self._rank_gpu(rank, "failed", index_needed=not real)
            before = allocatable_gpus(self.nodes.get(node) or {}, gpu)
            if before is None:
                raise DrillInconclusive(f"node {node} reports no allocatable {gpu}")
            self.failed = FailedGpu(node, index, uuid, xid, rank, before)
            self.holders = {line.uid for line in self.canary.of(CanaryEvent.START,
                                                                 [p["metadata"]["uid"] for p in self._running_pods()])
                            if self._names_failed(line)}
            self.victims = set(self.holders)
            self._mark_before_fault()
        self._seq += 1
        detail: dict[str, object] = {"method": "xid"}
        if real:
            detail = self._inject_by_command(node, uuid, xid)
        else:
            self.target.inject_xid(node, {"id": f"{self.run_id}-gpu-{self._seq}", "gpu": index,
                                                  "instance": None, "xid": xid})
        with self._cond:
            clock = self.target.timeline.clock
            self._stamp("fault", Instant(clock.mono(), clock.wall()))
            self.allocatable_seen.append((0.0, before))
            self.result.details["fault"] = {"node": node, "gpu": index, "uuid": uuid, "xid": xid,
                                            "rank": rank, "application": self.failed.application,
                                            "allocatable_before": before, **detail}
            self._advance()

    def _inject_by_command(self, node: str, uuid: str, xid: int) -> dict[str, object]:
        """A real cluster: the profile's ``fault.xid`` command, behind the blast-radius check; its restore (a GPU
        reset) is the rollback's. INCONCLUSIVE when it cannot be aimed or run."""
        self.target.touched.add(node)  # its back in service is judged, and the abort guard leaves it alone
        try:
            return inject_by_uuid(self.target.driver, self.target.profile, self.target.faults_done, node, xid, uuid,
                                  who="the rank's canary", intend=self.target.intend)
        except FaultError as exc:
            raise DrillInconclusive(str(exc)) from None

    def _dcgm_saw_it(self) -> tuple[bool | None, str]:
        """A real cluster: did DCGM see the Xid on the failed GPU (through the profile's Prometheus)? (None: it
        cannot be known, and why.)"""
        failed = self.failed
        assert failed is not None
        seen, why = dcgm_last_xid(self.target.profile.leak_report.prometheus_url, failed.uuid)
        if seen is None:
            return None, why
        return seen == failed.xid, f"DCGM's {XID_METRIC} for {failed.uuid} is {seen}"

    # ------------------------------------------------------------- observe
    def _out_of_service(self, node: Obj) -> bool:
        """The node's allocatable GPUs fell below what they were before the fault: what every scheduler honours
        (the reference agent's ``firedrill.dev/unhealthy-gpus`` is its own word, never the verdict's)."""
        failed = self.failed
        assert failed is not None
        alloc = allocatable_gpus(node, self.target.profile.gpu_resource)
        return alloc is not None and alloc < failed.allocatable_before

    def _names_failed(self, line: CanaryLine) -> bool:
        """Does this canary start line name the failed GPU among the devices it was given?"""
        assert self.failed is not None
        return self.failed.uuid in [str(g) for g in line.fields.get("gpus") or []]

    def _given_failed(self, uid: str) -> bool | None:
        """Was this pod given the failed GPU, by its canary's own start line (None: it has not said yet)?"""
        start = next(iter(self.canary.of(CanaryEvent.START, [uid])), None)
        return None if start is None else self._names_failed(start)

    def _advance(self) -> None:
        """Under the lock, on every change: stamp each instant the moment its condition first holds."""
        failed = self.failed
        if failed is None or "fault" not in self.instants:
            return
        node = self.nodes.get(failed.node) or {}
        alloc = allocatable_gpus(node, self.target.profile.gpu_resource)
        if alloc is not None and (not self.allocatable_seen or self.allocatable_seen[-1][1] != alloc):
            self.allocatable_seen.append((self.target.timeline.clock.mono() - self.instants["fault"].mono, alloc))
        if "detect" not in self.instants and self._out_of_service(node):
            self._stamp("detect")
        self._follow_way_back(alloc)
        if failed.index is not None and not failed.application:
            self._note_bound_to_failed(failed)
        running = self._running_pods()
        if "off" not in self.instants and not any(p["metadata"]["uid"] in self.holders for p in running):
            self._stamp("off")
        if "off" in self.instants and "replace" not in self.instants and self.spec is not None:
            fresh = [p for p in running if p["metadata"]["uid"] not in self.before_fault]
            said = [self._given_failed(p["metadata"]["uid"]) for p in fresh]
            # after a GPU's Xid the failed GPU must be out of service and no replacement on it; after an
            # application's, the GPU is healthy and may serve the replacement
            healthy = failed.application or ("detect" in self.instants and not any(said))
            if len(fresh) >= self.spec.min_available and None not in said and healthy:
                self._stamp("replace")
        self._stamp_resume()

    def _note_bound_to_failed(self, failed: FailedGpu) -> None:
        """Under the lock: each pod created after the fault that the platform bound to the failed GPU's index on its
        node (the pod may never start: the node refuses it, and no canary line says so).  Once the GPU is out of
        service, the first one ends the scenario at once, FAILed naming it: the promise that no pod is given the
        failed GPU is broken."""
        if not self._out_of_order_at(self.target.timeline.clock.mono()):
            return  # back in service after a proven repair: a pod may be given it
        for pod in self.pods.values():
            meta = pod["metadata"]
            if meta["uid"] in self.before_fault or meta["name"] in self.bound_to_failed \
                    or (pod.get("spec") or {}).get("nodeName") != failed.node:
                continue
            bound = [i for i in str((meta.get("annotations") or {}).get(GPU_INDEX_ANNOTATION) or "").split(",")
                     if i.strip().isdigit()]
            if str(failed.index) in bound:
                self.bound_to_failed[meta["name"]] = ",".join(bound)
        # Once the GPU is out of service (detect), a binding to it is the scheduler handing out a dead GPU: a broken
        # promise already, no phase after it is worth waiting for.  Before that, the platform never took it out
        # of service, which end_if_never("detect") names as the first cause.
        if self.bound_to_failed and "detect" in self.instants and not self._cause_named:
            self.result.halt(self._given_finding(failed))

    def _handed_out(self) -> str:
        """Under the lock: the pods given the failed GPU since the fault, by their canaries' start lines or by the
        platform's binding, in words ("" when none)."""
        given = set(self._given_again())
        bound = {n: gpus for n, gpus in self.bound_to_failed.items() if n not in given}
        return ", ".join([f"{n} (its canary named it)" for n in sorted(given)]
                         + [f"{n} (bound to GPUs {gpus})" for n, gpus in sorted(bound.items())])

    # --------------------------------------------------------------- judge
    def judge_never_given(self) -> None:
        """No pod started after the fault was given the failed GPU while the fault stands (the canaries' own start
        lines): a dead GPU handed out again fails every job placed on it."""
        failed = self.failed
        if failed is None or "fault" not in self.instants:
            return
        with self._cond:
            given = set(self._given_again()) | set(self.bound_to_failed)
            self.result.measure(Measurement("pods given the failed GPU", float(len(given)), "pods",
                                            note=f"GPU {failed.label} ({failed.uuid}) of {failed.node}, by each "
                                                 "canary's start line and the platform's binding"))
            if given and not self._cause_named:
                self.result.fail(self._given_finding(failed))

    def _given_again(self) -> list[str]:
        """Pods started after the fault whose canaries named the failed GPU (under the lock)."""
        failed = self.failed
        assert failed is not None
        return sorted({line.pod for line in self.canary.of(CanaryEvent.START)
                       if self._out_of_order_at(line.mono) and line.uid not in self.before_fault
                       and self._names_failed(line)})

    def _given_finding(self, failed: FailedGpu) -> str:
        """Under the lock: the finding that names the pods the failed GPU was handed to again."""
        self._cause_named = True
        return (f"the failed GPU {failed.label} of {failed.node} ({failed.uuid}, Xid {failed.xid}) was given again "
                f"while it was out of order, to {self._handed_out()}: the platform kept handing it out")

    def end_if_never(self, phase: str, limit: float) -> None:
        """As :meth:`TrainingRun.end_if_never`; a GPU never taken out of service is named first, with what the
        node showed instead and the pods given the dead GPU since; a replacement that never came because the
        failed GPU was handed to it again says so first."""
        failed = self.failed
        if failed is not None and phase in ("replace", "resume") and "detect" in self.instants \
                and phase not in self.instants:
            with self._cond:
                if self._handed_out() and not self._cause_named:
                    self.result.fail(self._given_finding(failed))
        if failed is not None and phase == "detect" and "fault" in self.instants and "detect" not in self.instants:
            if self.target.embedded is None:
                saw, why = self._dcgm_saw_it()
                if not saw:  # the injection itself is unconfirmed: no claim about the platform
                    raise DrillInconclusive(
                        f"GPU {failed.uuid} of {failed.node} never left allocatable after the Xid {failed.xid} "
                        f"injection, and the injection cannot be confirmed: {why}; point prometheus.url at a "
                        "Prometheus that scrapes dcgm-exporter, or check fault.xid.command_template")
            with self._cond:
                node = self.nodes.get(failed.node) or {}
                alloc = allocatable_gpus(node, self.target.profile.gpu_resource)
                said = ("though its agent named it unhealthy" if failed.index in unhealthy_gpus(node)
                        else "no GPU was named unhealthy")  # context only: the verdict is allocatable's
                again = self._given_again()
            self.result.fail(f"the platform kept the failed GPU {failed.label} of {failed.node} in service after Xid "
                             f"{failed.xid}: allocatable stayed {alloc} of {failed.allocatable_before} and {said}"
                             + (f"; {len(again)} pod(s) were given the dead GPU again since: {', '.join(again)}"
                                if again else ""))
        super().end_if_never(phase, limit)

    def watch_in_service(self, seconds: float) -> None:
        """For ``seconds`` after the fault, the GPU stays in service: the node's allocatable GPUs stay what they were
        (an application Xid is the program's fault)."""
        failed = self.failed
        if failed is None or "fault" not in self.instants:
            return
        clock = self.target.timeline.clock
        until = self.instants["fault"].mono + seconds
        withdrawn_at: list[float] = []

        def out() -> bool:
            if self._out_of_service(self.nodes.get(failed.node) or {}):
                withdrawn_at.append(clock.mono() - self.instants["fault"].mono)
                return True
            return clock.mono() >= until
        self._wait(out, max(0.0, until - clock.mono()) + 0.5)
        if not withdrawn_at and self.target.embedded is None:
            saw, why = self._dcgm_saw_it()
            if not saw:  # a GPU that stayed in service proves nothing if the Xid never reached it
                raise DrillInconclusive(f"GPU {failed.uuid} of {failed.node} stayed allocatable after the Xid "
                                        f"{failed.xid} injection, but the injection cannot be confirmed: {why}")
        self.result.measure(Measurement("GPUs taken out of service", float(bool(withdrawn_at)), "GPUs",
                                        note=(f"GPU {failed.label} of {failed.node} left allocatable "
                                              f"{withdrawn_at[0]:.2f} s after Xid {failed.xid}") if withdrawn_at
                                        else f"GPU {failed.label} of {failed.node} stayed allocatable for "
                                             f"{seconds:g} s after Xid {failed.xid}"))
        if withdrawn_at:
            self.result.fail(f"the platform took GPU {failed.label} of {failed.node} out of service after Xid "
                             f"{failed.xid}, an application error (the program's fault, not the GPU's): a healthy "
                             "GPU is lost to every later job")

    # ------------------------------------------------------------ way back
    def _follow_way_back(self, alloc: int | None) -> None:
        """Under the lock, on every change: note the repairs the target made, and each time the GPU leaves service
        and comes back (the node's allocatable); a return while the Xid still stands ends the scenario at once."""
        failed = self.failed
        assert failed is not None
        cleared = getattr(self.target, "xids_cleared", {}).get(failed.node)
        if cleared is not None and (not self.repairs or self.repairs[-1].mono < cleared[0]):
            self.repairs.append(Instant(*cleared))
        if alloc is None or failed.application:
            return
        if alloc < failed.allocatable_before:
            self._out = True
            return
        if not self._out:
            return
        self._out = False
        clock = self.target.timeline.clock
        back = Instant(clock.mono(), clock.wall())
        self.returns.append(back)
        self.target.timeline.action("GPU back in allocatable", target=failed.node)
        fault = self._latest_fault()
        if failed.index is not None and (not self.repairs or self.repairs[-1].mono < fault.mono) \
                and not self._cause_named:
            self._cause_named = True
            self.result.halt(f"GPU {failed.label} of {failed.node} ({failed.uuid}) returned to allocatable "
                             f"{back.mono - fault.mono:.2f} s after its Xid {failed.xid}, though its fault still "
                             "stood (nobody had repaired it): the platform gave back a GPU it had no reason to trust")

    def _latest_fault(self) -> Instant:
        return self.refaults[-1] if self.refaults else self.instants["fault"]

    def _out_of_order_at(self, mono: float) -> bool:
        """Was the failed GPU out of order at ``mono``: after a fault on it, and no return since the latest one?"""
        marks = sorted([(self.instants["fault"].mono, True), *((f.mono, True) for f in self.refaults),
                        *((r.mono, False) for r in self.returns)])
        state = False
        for at, out in marks:
            if at > mono:
                break
            state = out
        return state

    def _last_repair(self) -> Instant | None:
        return self.repairs[-1] if self.repairs else None

    def _returned_since(self, since: Instant) -> Instant | None:
        return next((r for r in self.returns if r.mono >= since.mono), None)

    def _burn_ins_since(self, since: Instant) -> list[BurnIn]:
        failed = self.failed
        assert failed is not None and failed.index is not None
        return gpu_health(self.nodes.get(failed.node) or {}).since(failed.index, since.wall - STAMP_SLACK_S)

    def _state_words(self) -> str:
        """Under the lock: what the platform says of the failed GPU now, and its burn-ins since the last repair."""
        failed = self.failed
        assert failed is not None and failed.index is not None
        record = gpu_health(self.nodes.get(failed.node) or {})
        state = record.gpus.get(failed.index)
        words = [f"its node says {state.state}: {state.reason}" if state is not None else "its node says it is in "
                 "service"]
        repair = self._last_repair()
        if repair is not None:
            done = self._burn_ins_since(repair)
            words.append("burn-ins since the repair: " + (", ".join(
                f"{'passed' if b.passed else 'failed'} after {b.ended - b.started:.1f} s ({b.detail})"
                for b in done) if done else "none"))
        return "; ".join(words)

    def repair(self, burn_in_fails: bool = False) -> None:
        """Repair the failed GPU once the platform took it out of service: its Xid removed (a reset, a swap), so
        the platform may return it after its burn-in; with ``burn_in_fails`` every burn-in of it fails first."""
        failed = self.failed
        if failed is None or "fault" not in self.instants:
            return
        if failed.index is None:
            raise DrillInconclusive(NO_BURN_IN_RECORD)
        if not self._wait(lambda: self._out, OUT_AGAIN_WAIT_S):
            self.end_if_never("detect", 0.0)
            raise DrillInconclusive(f"GPU {failed.label} of {failed.node} never left service, so it cannot be "
                                    "repaired and followed back")
        if burn_in_fails:
            self._seq += 1
            self.burn_in_made_to_fail = True
            self.target.inject_diag(failed.node, failed.index, f"{self.run_id}-diag-{self._seq}")
        self.target.clear_xids(failed.node)
        with self._cond:
            self._advance()
            repair = self._last_repair()
            self.result.details.setdefault("repairs", []).append(
                {"t": round(repair.mono - self.instants["fault"].mono, 3) if repair else None,
                 "burn_in_made_to_fail": burn_in_fails})

    def fail_again(self, xid: int, delay: float) -> None:
        """Once the repaired GPU is back in service, wait ``delay`` and fail it again with ``xid``; then it must
        leave service again."""
        failed = self.failed
        repair = self._last_repair()
        if failed is None or repair is None or failed.index is None:
            raise DrillInconclusive("the GPU fails again only after it failed and was repaired: put 'When the GPU of "
                                    "worker 0 fails with Xid 79' and 'When the GPU is repaired' before it")
        if not self._wait(lambda: self._returned_since(repair) is not None, RETURN_WAIT_S):
            with self._cond:
                state = self._state_words()
            raise DrillInconclusive(f"the repaired GPU {failed.label} of {failed.node} did not return to service "
                                    f"within {RETURN_WAIT_S:g} s of its repair ({state}), so it cannot fail again "
                                    "after its return")
        back = self._returned_since(repair)
        assert back is not None
        clock = self.target.timeline.clock
        self._wait(lambda: clock.mono() >= back.mono + delay, delay + 1.0)
        self._seq += 1
        self.target.inject_xid(failed.node, {"id": f"{self.run_id}-gpu-{self._seq}", "gpu": failed.index,
                                             "instance": None, "xid": xid})
        with self._cond:
            again = Instant(clock.mono(), clock.wall())
            self.refaults.append(again)
            self.target.timeline.action("t_refault", target=failed.node)
            self.result.measure(Measurement("second fault after the return", again.mono - back.mono, "s",
                                            note=f"Xid {xid} on GPU {failed.label} of {failed.node}"))
        if not self._wait(lambda: self._out and self._out_of_order_at(clock.mono()), OUT_AGAIN_WAIT_S):
            with self._cond:
                alloc = allocatable_gpus(self.nodes.get(failed.node) or {}, self.target.profile.gpu_resource)
            self._cause_named = True
            self.result.halt(f"the platform kept GPU {failed.label} of {failed.node} in service after its second Xid "
                             f"{xid}, {again.mono - back.mono:.1f} s after its return: allocatable stayed {alloc} of "
                             f"{failed.allocatable_before}")

    def judge_return_after_burn_in(self, limit: float) -> None:
        """After the last repair, the GPU returns within ``limit`` of a burn-in it passed, and not before one."""
        failed = self.failed
        repair = self._last_repair()
        if failed is None or failed.index is None or repair is None:
            raise DrillInconclusive("the GPU's return is judged after its repair: put 'When the GPU is repaired' "
                                    "before it")
        clock = self.target.timeline.clock
        allowed = limit + self._grace(limit)

        def settled() -> bool:
            if self._returned_since(repair) is not None:
                return True
            done = self._burn_ins_since(repair)
            passed = next((b for b in done if b.passed), None)
            return (passed is not None and clock.wall() >= passed.ended + allowed) or any(not b.passed for b in done)
        self._wait(settled, RETURN_WAIT_S + allowed)
        with self._cond:
            back = self._returned_since(repair)
            done = self._burn_ins_since(repair)
            passed = next((b for b in done if b.passed), None)
            name = "return after its burn-in"
            if back is not None:
                unproven = self._unproven(back, repair)
                if unproven:
                    self.result.measure(Measurement(name, None, "s", note="returned unproven"))
                    self._fail_once(unproven)
                else:
                    proof = gpu_health(self.nodes.get(failed.node) or {}).passed_between(
                        failed.index, repair.wall - STAMP_SLACK_S, back.wall + STAMP_SLACK_S)
                    assert proof is not None
                    self.result.measure(Measurement(
                        name, max(0.0, back.wall - proof.ended), "s",
                        note=f"repaired, burn-in of {proof.ended - proof.started:.2f} s passed ({proof.detail}) "
                             f"{proof.ended - repair.wall:.2f} s after the repair, allocatable "
                             f"{back.mono - repair.mono:.2f} s after it"))
            elif passed is not None:
                self.result.measure(Measurement(name, None, "s", note="passed its burn-in, never returned"))
                self._fail_once(f"GPU {failed.label} of {failed.node} ({failed.uuid}) passed its burn-in "
                                f"{passed.ended - repair.wall:.2f} s after its repair ({passed.detail}) but was still "
                                f"out of service {allowed:g} s later ({self._state_words()}): a healthy GPU kept from "
                                "every job")
            else:
                self.result.measure(Measurement(name, None, "s", note="no burn-in passed"))
                self._fail_once(f"GPU {failed.label} of {failed.node} ({failed.uuid}) did not come back after its "
                                f"repair: no burn-in passed and it stayed out of service ({self._state_words()})")
        self.result.check(Threshold(name, limit, "s"))

    def judge_stays_out(self, seconds: float) -> None:
        """From the last repair, the GPU stays out of service for ``seconds``: a burn-in made to fail, or a second
        failure soon after a return, keeps it out until a person clears it."""
        failed = self.failed
        repair = self._last_repair()
        if failed is None or failed.index is None or repair is None:
            raise DrillInconclusive("whether the GPU stays out is judged after its repair: put 'When the GPU is "
                                    "repaired' before it")
        clock = self.target.timeline.clock
        self._wait(lambda: self._returned_since(repair) is not None or clock.mono() >= repair.mono + seconds,
                   seconds + 1.0)
        name = "returns before a person cleared it"
        with self._cond:
            back = self._returned_since(repair)
            if back is None or back.mono > repair.mono + seconds:
                self.result.measure(Measurement(name, 0.0, "returns", note=(
                    f"GPU {failed.label} of {failed.node} stayed out {seconds:g} s after its repair; "
                    + self._state_words())))
            else:
                self.result.measure(Measurement(name, 1.0, "returns", note=f"allocatable again "
                                                f"{back.mono - repair.mono:.2f} s after the repair"))
                self._fail_once(f"GPU {failed.label} of {failed.node} ({failed.uuid}) returned to allocatable "
                                f"{back.mono - repair.mono:.2f} s after its repair though {self._why_out()} "
                                f"({self._state_words()}): the platform gave it back to the next job")
        self.result.check(Threshold(name, 0.0, "returns"))

    def _why_out(self) -> str:
        """Under the lock: why the GPU had to stay out, in words."""
        failed = self.failed
        assert failed is not None
        if self.refaults and len(self.returns) >= 1:
            first_back = next((r for r in self.returns if r.mono <= self.refaults[-1].mono), None)
            if first_back is not None:
                return (f"it had failed again {self.refaults[-1].mono - first_back.mono:.1f} s after its previous "
                        "return (a flapping GPU)")
        if self.burn_in_made_to_fail:
            return "its burn-in was made to fail"
        return "nothing proved it healthy"

    def _unproven(self, back: Instant, repair: Instant) -> str:
        """Under the lock: the finding for a return after ``repair`` that no passed burn-in preceded ("" when one
        did)."""
        failed = self.failed
        assert failed is not None and failed.index is not None
        node = self.nodes.get(failed.node) or {}
        if gpu_health(node).passed_between(failed.index, repair.wall - STAMP_SLACK_S, back.wall + STAMP_SLACK_S):
            return ""
        return (f"GPU {failed.label} of {failed.node} ({failed.uuid}) returned to allocatable "
                f"{back.mono - repair.mono:.2f} s after its repair with no passed burn-in on record before it "
                f"({self._state_words()}): the platform gave back a GPU it had not proven healthy")

    def _fail_once(self, finding: str) -> None:
        if not self._cause_named:
            self._cause_named = True
            self.result.fail(finding)

    def judge_returns(self) -> None:
        """Every return of the failed GPU so far came after a repair and a burn-in it passed (the reference
        platform's record); the first that did not FAILs the scenario, named. Called after back in service."""
        failed = self.failed
        if failed is None or failed.index is None or failed.application or "fault" not in self.instants:
            return
        try:
            node = self.target.driver.get(NODE, failed.node)
        except KubeError:
            return
        with self._cond:
            self.nodes[failed.node] = node
            for back in self.returns:
                repair = next((r for r in reversed(self.repairs) if r.mono <= back.mono), None)
                if repair is not None:
                    unproven = self._unproven(back, repair)
                    if unproven:
                        self._fail_once(unproven)
                        return

    def _measure(self) -> None:
        super()._measure()
        with self._cond:
            self.result.details["allocatable"] = [{"t": round(t, 3), "gpus": g} for t, g in self.allocatable_seen]

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Remove the injection (the GPU returns to service), then what :class:`TrainingRun` undoes; wait for the
        GPU to be allocatable again so the next scenario finds the cluster whole. Never raises."""
        failed = self.failed
        with self._cond:
            if self.repairs or self.refaults:  # the way back, as the scenario saw it (seconds after the fault)
                t0 = self.instants["fault"].mono
                self.result.details["way_back"] = {
                    "repairs": [round(r.mono - t0, 3) for r in self.repairs],
                    "returns": [round(r.mono - t0, 3) for r in self.returns],
                    "refaults": [round(r.mono - t0, 3) for r in self.refaults]}
        if failed is not None and self.target.embedded is None:
            super().rollback()  # the restore command (a GPU reset) is among the target's faults
            return
        removed = False
        if failed is not None:
            for annotation in (INJECT_ANNOTATION, DIAG_ANNOTATION):
                removed = removed or (failed.node, annotation) in self.target.annotated  # this run's, still standing
                try:
                    self.target.clear_annotation(failed.node, annotation)
                except KubeError as exc:
                    self.result.details.setdefault("rollback", []).append(f"{annotation} on {failed.node}: {exc}")
        super().rollback()
        if failed is None:
            return
        clock = self.target.timeline.clock
        deadline = clock.mono() + BACK_IN_SERVICE_S
        if removed:  # the GPU works again once the agent has read the removal, whatever the platform reports of it;
            # a scenario that repaired the GPU itself (its back-in-service step) left nothing for the agent to read
            wait_seen(self.target.driver, failed.node, clock.mono, BACK_IN_SERVICE_S)
        if failed.index is not None:  # its burn-in, a hold cleared, its return forgotten
            self.target.settle_gpus([failed.node], BACK_IN_SERVICE_S)
        while clock.mono() < deadline:
            try:
                node = self.target.driver.get(NODE, failed.node)
            except KubeError:
                node = {}
            if allocatable_gpus(node, self.target.profile.gpu_resource) == failed.allocatable_before:
                return
            threading.Event().wait(0.2)
