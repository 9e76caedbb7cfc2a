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
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import ClassVar

from drills.kube.driver import NODE, KubeError
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.capacity import allocatable_gpus
from drills.target.profile import TargetProfile
from drills.target.faults import FaultError
from drills.target.xid import (APPLICATION_XIDS, NO_XID_COMMAND, XID_METRIC, dcgm_last_xid, inject_by_uuid,
                               unhealthy_gpus, wait_seen)
from drills.workloads.canarylog import CanaryEvent, CanaryLine
from drills.workloads.training import (GPU_INDEX_ANNOTATION, Instant, Obj, TrainingRun, training_job_problem,
                                      training_permissions)

__all__ = ["APPLICATION_XIDS", "FailedGpu", "GpuFaultDrill"]

BACK_IN_SERVICE_S = 15.0
"""How long the rollback waits for the GPU to be allocatable again, so the next scenario finds the cluster whole."""


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
        after = self.instants["fault"].mono
        return sorted({line.pod for line in self.canary.of(CanaryEvent.START)
                       if line.mono >= after and line.uid not in self.before_fault and self._names_failed(line)})

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

    def _measure(self) -> None:
        super()._measure()
        with self._cond:
            self.result.details["allocatable"] = [{"t": round(t, 3), "gpus": g} for t, g in self.allocatable_seen]

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Remove the injection (the GPU returns to service), then what :class:`TrainingRun` undoes; wait for the
        GPU to be allocatable again so the next scenario finds the cluster whole. Never raises."""
        failed = self.failed
        if failed is not None and self.target.embedded is None:
            super().rollback()  # the restore command (a GPU reset) is among the target's faults
            return
        if failed is not None:
            try:
                self.target.clear_xids(failed.node)
            except KubeError as exc:
                self.result.details.setdefault("rollback", []).append(f"the injection on {failed.node}: {exc}")
        super().rollback()
        if failed is None:
            return
        clock = self.target.timeline.clock
        deadline = clock.mono() + BACK_IN_SERVICE_S
        # the GPU works again once the agent has read the removal, whatever the platform reports of it
        wait_seen(self.target.driver, failed.node, clock.mono, BACK_IN_SERVICE_S)
        while clock.mono() < deadline:
            try:
                node = self.target.driver.get(NODE, failed.node)
            except KubeError:
                node = {}
            if allocatable_gpus(node, self.target.profile.gpu_resource) == failed.allocatable_before:
                return
            threading.Event().wait(0.2)
