"""The accelerator metrics drill: the GPU telemetry a customer pays for is complete, live and about the right GPU.

Steady state (the target's GPU metrics source read once: each reference node agent's own endpoint, or the
profile's Prometheus scraping dcgm-exporter) -> act (a canary computes on one GPU of an idle node, one second in
two; or an Xid is injected on the canary's GPU) -> observe (the canary's node read every quarter second) ->
judge -> rollback (the injection removed, the canary pod deleted).

What is expected never comes from the telemetry under test:

- which GPUs exist: each Ready node's capacity of the profile's GPU resource (what the device plugin
  advertises and the scheduler hands out);
- which GPU computes, and that it does: the canary's own log (its ``start`` line names the GPUs it was given,
  each ``step`` line says a second of compute was done);
- that an Xid reached the GPU: on the reference platform, the canary's own exit line (its next call failed on the
  lost GPU); on a real cluster, the node's allocatable GPUs falling (a GPU-class Xid), else nothing (an
  application Xid that never shows is INCONCLUSIVE, never a FAIL).

Instants are the harness's monotonic clock: ``t_start`` when it received the canary's start line, ``t_xid`` when
the injection was written.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

from drills.kinds.telemetry.canary import HOSTNAME_LABEL, CanaryPod
from drills.kinds.telemetry.judge import (Point, changes, first_above, first_xid, frozen_words, inventory_gaps,
                                          other_peaks, utilization_series)
from drills.kube.driver import NODE, KubeError
from drills.kube.timeline import wait_for
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, READ, Permission, grant
from drills.target.capacity import allocatable_gpus, free_gpus_per_node
from drills.target.faults import FaultError
from drills.target.gpumetrics import XID, GpuMetricsSource, MetricsUnavailable, Reading, source_for
from drills.target.gpumetrics.source import source_problem
from drills.target.profile import TargetProfile
from drills.target.safety import ineligible_reasons
from drills.target.xid import APPLICATION_XIDS, inject_by_uuid, wait_seen

__all__ = ["CHANGES", "INVENTORY", "OTHERS", "RISE", "TelemetryDrill", "XID_SHOWN"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]

INVENTORY = "GPUs without utilization or memory"
RISE = "utilization rise"
OTHERS = "other GPUs that rose"
XID_SHOWN = "Xid shown"
CHANGES = "utilization changes"
SAMPLE_EVERY = 0.25
ELSEWHERE_PERCENT = 50.0
"""Where the canary's GPU's series did not follow its load, another GPU of its node reading above this while only
the canary computed there names the cause: its load reported under that GPU's identity."""
"""Seconds between two readings of the canary's node while a load runs."""
INVENTORY_EVERY = 0.5
BACK_IN_SERVICE_S = 15.0
"""How long the rollback waits for a GPU an injected GPU-class Xid took out of service to be allocatable again."""


def _gpu_capacity(node: Obj, gpu_resource: str) -> int:
    try:
        return int(str(((node.get("status") or {}).get("capacity") or {}).get(gpu_resource, 0)))
    except ValueError:
        return 0


def _ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


@register
@dataclass
class TelemetryDrill(Drill):
    """Reads the GPU telemetry and judges it against the GPUs the nodes have and what the canary says it does."""

    kind: ClassVar[str] = "accelerator-metrics"

    source: GpuMetricsSource | None = None
    expected: dict[str, int] = field(default_factory=dict)
    """Ready nodes that have GPUs -> how many (their capacity)."""
    baseline: Reading | None = None
    """The first reading of every node (the steady state)."""
    canary: CanaryPod | None = None
    readings: list[Reading] = field(default_factory=list)
    """The canary node's readings, oldest first, from the moment its pod was created."""
    xid: int | None = None
    t_xid: float | None = None
    allocatable_before: int | None = None
    _injected_on: str | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None
    _sampling_error: str = ""

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        return source_problem(profile, reference=reference)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        ns, why = profile.namespace, "accelerator metrics"
        out = grant(ns, "", "pods", ("create", "get", "list", "watch", "delete"), f"{why}: the canary pod that "
                                                                                   "loads one GPU")
        out += grant(ns, "", "pods", ("get",), f"{why}: the canary's log, the drill's truth", subresource="log")
        out += grant(CLUSTER, "", "nodes", READ, f"{why}: each node's GPUs (capacity) and an idle node to load")
        out += grant(CLUSTER, "", "pods", ("list",), f"{why}: free capacity (GPUs held in every namespace)")
        return out

    @property
    def clock(self) -> Any:
        return self.target.timeline.clock

    # ------------------------------------------------------------ steady state
    def read_all(self) -> None:
        """Find the source and read every node that has GPUs once (INCONCLUSIVE when there is no source, or it
        cannot be read at all)."""
        self.source = source_for(self.target)
        if self.source is None:
            raise DrillInconclusive(source_problem(self.target.profile, reference=False) or "no metrics source")
        gpu = self.target.profile.gpu_resource
        nodes = self.target.driver.list(NODE)
        self.expected = {n["metadata"]["name"]: _gpu_capacity(n, gpu) for n in nodes
                         if _ready(n) and _gpu_capacity(n, gpu) > 0}
        if not self.expected:
            raise DrillInconclusive(f"no Ready node has {gpu} capacity: there is no GPU whose telemetry to read")
        reading = self.baseline = self._read(self.expected)
        self.result.details["telemetry"] = {
            "source": self.source.kind, "where": self.source.description,
            "nodes": {n: {"gpus": c, "answered": len(a.gpus) if (a := reading.answers.get(n)) else 0}
                      for n, c in sorted(self.expected.items())}}

    def _read(self, nodes: Any) -> Reading:
        assert self.source is not None
        try:
            return self.source.read(list(nodes))
        except MetricsUnavailable as exc:
            raise DrillInconclusive(str(exc)) from None

    def _need_source(self) -> GpuMetricsSource:
        if self.source is None:
            raise ValueError("no metrics source was read in this scenario; start it with 'Given the GPU metrics of "
                             "every node are read'")
        return self.source

    # ------------------------------------------------------------------ judge
    def judge_inventory(self, limit: float) -> None:
        """Within ``limit`` seconds, every GPU of every node reports utilization and memory; FAIL naming each
        node, and each GPU, that does not."""
        source = self._need_source()
        deadline = self.clock.mono() + limit
        while True:
            reading = self._read(self.expected)
            gaps = inventory_gaps(self.expected, reading)
            if not gaps or self.clock.mono() >= deadline:
                break
            self.pause(min(INVENTORY_EVERY, max(0.0, deadline - self.clock.mono())))
        unreported = sum(g.unreported for g in gaps)
        total = sum(self.expected.values())
        self.result.measure(Measurement(INVENTORY, float(unreported), "GPUs",
                                        note=f"{total} GPUs on {len(self.expected)} nodes, read from "
                                             f"{source.description}"))
        self.result.details["telemetry"]["gaps"] = [g.message for g in gaps]
        for gap in gaps:
            self.result.fail(f"{gap.message} (in {source.description} for {limit:g} s)")

    # ------------------------------------------------------------------- act
    def start_canary(self, gpus: int) -> None:
        """A canary holding ``gpus`` whole GPUs on an idle node (every GPU free, none of it loaded by anything
        else), the node read every quarter second from the moment its pod is created."""
        self._need_source()
        if self.canary is not None:
            raise ValueError("this scenario already runs a canary; a scenario loads one GPU")
        node, hostname = self._idle_node(gpus)
        self.canary = CanaryPod(self.target, self.run_id, node, gpus)
        self._sampler = threading.Thread(target=self._sample, args=(node,), name="telemetry-sampler", daemon=True)
        self._sampler.start()
        self.canary.start(hostname)
        self.result.details["telemetry"]["canary"] = {"pod": self.canary.name, "node": node,
                                                      "gpus": list(self.canary.uuids),
                                                      "index": self.canary.gpu_index}
        self.target.timeline.action("t_start", target=node)

    def _idle_node(self, gpus: int) -> tuple[str, str]:
        """A node whose every GPU is free and that the drill may use: (name, its hostname label); the first by name
        among those whose GPUs reported no Xid in the steady state (an Xid injected there shows apart from any
        earlier one, so a repeated scenario finds a fresh node), else the first by name. On a real cluster only
        nodes the profile's safety settings allow (an Xid may be injected there)."""
        free = free_gpus_per_node(self.target)
        real = self.target.embedded is None
        gpu = self.target.profile.gpu_resource
        for node in sorted(self.target.driver.list(NODE), key=lambda n: (self._had_xid(n["metadata"]["name"]),
                                                                           n["metadata"]["name"])):
            name = node["metadata"]["name"]
            alloc = allocatable_gpus(node, gpu) or 0
            if name not in free or free[name] < max(gpus, alloc) or alloc < gpus:
                continue
            if real and ineligible_reasons(node, self.target.profile.safety):
                continue
            return name, str((node["metadata"].get("labels") or {}).get(HOSTNAME_LABEL) or name)
        raise DrillInconclusive(f"no Ready, schedulable node has all of its {gpu} free (at least {gpus})"
                                + (f" and carries {self.target.profile.safety.allow_label}" if real else "")
                                + ": the canary needs an idle node, so that nothing else moves its GPUs' telemetry")

    def _had_xid(self, node: str) -> bool:
        """Did any GPU of ``node`` report an Xid in the steady state's reading?"""
        answer = self.baseline.answers.get(node) if self.baseline is not None else None
        return answer is not None and any(g.xid for g in answer.gpus)

    def _sample(self, node: str) -> None:
        assert self.source is not None
        while not self._stop.is_set():
            try:
                reading = self.source.read([node])
            except MetricsUnavailable as exc:
                self._sampling_error = str(exc)
            else:
                with self._cond:
                    self.readings.append(reading)
                    self._cond.notify_all()
            self._stop.wait(SAMPLE_EVERY)

    def inject(self, xid: int) -> None:
        """Inject Xid ``xid`` on the canary's GPU: through its node's agent on the reference platform, through the
        profile's ``fault.xid`` command (aimed by the GPU's UUID) on a real cluster."""
        pod = self._canary()
        uuid, node = pod.uuids[0], pod.node
        before = self._read([node]).gpu(node, uuid)
        if before is not None and before.xid == xid:
            raise DrillInconclusive(f"{before.name} of {node} already reports Xid {xid} as its last ({XID}) before "
                                    "the injection, so the metrics could not show this one apart from it: write "
                                    "another Xid in the sentence, or reset the GPU's DCGM state first")
        self.allocatable_before = allocatable_gpus(self.target.driver.get(NODE, node), self.target.profile.gpu_resource)
        detail: dict[str, Any]
        if self.target.embedded is not None:
            index = pod.gpu_index
            if index is None:
                raise DrillInconclusive(f"the canary pod {pod.name} carries no firedrill.dev/gpu-index binding, so "
                                        "its GPU cannot be aimed at")
            self._injected_on = node
            self.target.inject_xid(node, {"id": f"{self.run_id}-metrics", "gpu": index, "instance": None,
                                                  "xid": xid})
            detail = {"method": "xid", "gpu": index}
        else:
            detail = self._inject_by_command(node, uuid, xid)
        self.xid, self.t_xid = xid, self.clock.mono()
        self.result.details["telemetry"]["xid"] = {"node": node, "uuid": uuid, "xid": xid,
                                                   "before": None if before is None else before.xid, **detail}
        self.target.timeline.action("t_xid", target=node)

    def _inject_by_command(self, node: str, uuid: str, xid: int) -> dict[str, Any]:
        """A real cluster: the profile's ``fault.xid`` command aimed by the canary's UUID (its restore, if any, is
        among the target's faults the scenario's rollback undoes); INCONCLUSIVE when it cannot be aimed or run."""
        try:
            return inject_by_uuid(self.target.driver, self.target.profile, self.target.faults_done, node, xid, uuid,
                                  intend=self.target.intend)
        except FaultError as exc:
            raise DrillInconclusive(str(exc)) from None

    # ------------------------------------------------------------------ judge
    def _canary(self) -> CanaryPod:
        if self.canary is None or not self.canary.uuids:
            raise ValueError("no canary runs in this scenario; start one with 'When a canary computes on 1 GPU of "
                             "an idle node' or 'Given a canary holds 1 GPU of an idle node'")
        return self.canary

    def _wait_until(self, done: Any, until: float) -> None:
        """Wait for ``done()`` over the readings, at most until the monotonic instant ``until`` (plus one reading)."""
        wait_for(self._cond, done, max(0.0, until - self.clock.mono()) + SAMPLE_EVERY, self.clock,
                 poll=SAMPLE_EVERY, check=self.result.raise_if_halted)

    def _series(self, since: float) -> list[Point]:
        pod = self._canary()
        with self._cond:
            return utilization_series(list(self.readings), pod.node, pod.uuids[0], since)

    def _gpu_name(self) -> str:
        pod = self._canary()
        with self._cond:
            named = next((s for r in reversed(self.readings) if (s := r.gpu(pod.node, pod.uuids[0])) is not None),
                         None)
        return named.name if named is not None else f"GPU {pod.uuids[0]}"

    def _elsewhere(self, since: float, percent: float) -> str:
        """When the canary's GPU never read above ``percent`` but another GPU of its node did while only the canary
        computed there: the load reported under another GPU's identity, in words ("" otherwise)."""
        pod = self._canary()
        with self._cond:
            readings = [r for r in self.readings if r.mono >= since]
        peaks = other_peaks(readings, pod.node, pod.uuids, since, percent)
        if not peaks:
            return ""
        seen = [p.value for p in self._series(since) if p.value is not None]
        mine = f"at most {max(seen):g} %" if seen else "nothing"
        return (f"{self._gpu_name()}, the canary's own by its start line, read {mine} while "
                f"{peaks[0].name} of the same node read {peaks[0].percent:g} %, though only the canary computed "
                "there: the telemetry reports the canary's load under another GPU's identity")

    def _empty_answers(self, since: float) -> str:
        """Why the canary's node answered nothing useful since ``since`` ("" when it answered with its GPU)."""
        pod = self._canary()
        with self._cond:
            answers = [r.answers.get(pod.node) for r in self.readings if r.mono >= since]
        if not answers:
            return f"no reading of {pod.node} was had" + (f" ({self._sampling_error})" if self._sampling_error else "")
        if all(a is not None and a.empty for a in answers):
            return f"{pod.node} answered {len(answers)} times with no GPU sample at all (empty answers)"
        problems = {a.problem for a in answers if a is not None and a.problem}
        if problems and all(a is not None and a.problem for a in answers):
            return f"{pod.node} could not be read: {sorted(problems)[0]}"
        return ""

    def _computed(self, since: float, until: float) -> int:
        """Steps the canary logged in the window: it really computed; none makes the judgment INCONCLUSIVE."""
        pod = self._canary()
        steps = pod.steps_between(since, until + 1.0)  # a step's line arrives just after it ends
        if steps == 0:
            raise DrillInconclusive(f"the canary on {pod.node} logged no step in the window, so it may not have "
                                    "computed: no claim either way about its GPU's telemetry")
        return steps

    def judge_rise(self, percent: float, limit: float) -> None:
        """The canary's GPU reads above ``percent`` utilization within ``limit`` seconds of the canary's start."""
        pod = self._canary()
        t0 = self._t_start()
        self._wait_until(lambda: first_above(self._series(t0), percent) is not None, t0 + limit)
        points = self._series(t0)
        hit = first_above(points, percent)
        name = self._gpu_name()
        where = self._need_source().description
        if hit is not None:
            self.result.measure(Measurement(RISE, hit.mono - t0, "s", note=f"{name} of {pod.node} read {hit.value:g} "
                                            f"% {hit.mono - t0:.2f} s after its canary started, in {where}"))
            return
        steps = self._computed(t0, self.clock.mono())
        seen = [p.value for p in points if p.value is not None]
        why = (self._empty_answers(t0) or self._elsewhere(t0, percent) or frozen_words(points)
               or (f"its highest was {max(seen):g} %" if seen else f"no utilization series names {pod.uuids[0]}"))
        self.result.measure(Measurement(RISE, None, "s", note=why))
        self.result.fail(f"{name} of {pod.node}, on which the canary computed ({steps} steps in its own log), never "
                         f"read above {percent:g} % utilization within {limit:g} s in {where}: {why}")

    def judge_others(self, percent: float) -> None:
        """No other GPU of the canary's node read above ``percent`` while the canary computed (since its start)."""
        pod = self._canary()
        t0 = self._t_start()
        with self._cond:
            readings = [r for r in self.readings if r.mono >= t0]
        if not readings:
            raise DrillInconclusive(f"no reading of {pod.node} was had since the canary started"
                                    + (f" ({self._sampling_error})" if self._sampling_error else ""))
        peaks = other_peaks(readings, pod.node, pod.uuids, t0, percent)
        span = readings[-1].mono - t0
        self.result.measure(Measurement(OTHERS, float(len(peaks)), "GPUs",
                                        note=f"other GPUs of {pod.node} over {len(readings)} readings in {span:.1f} s"))
        for peak in peaks:
            self.result.fail(f"{peak.name} of {pod.node} read {peak.percent:g} % utilization {peak.mono - t0:.2f} s "
                             f"after the canary started, though only the canary computed on that node, on "
                             f"{self._gpu_name()}: the telemetry puts the load on the wrong GPU")

    def judge_xid(self, limit: float) -> None:
        """The canary's GPU reports the injected Xid as its last (``DCGM_FI_DEV_XID_ERRORS``) within ``limit``."""
        pod = self._canary()
        if self.xid is None or self.t_xid is None:
            raise ValueError("no Xid was injected in this scenario; put 'When the drill injects Xid <n> on the "
                             "canary's GPU' before it")
        xid, t_xid, uuid = self.xid, self.t_xid, pod.uuids[0]

        def shown() -> bool:
            return first_xid(list(self.readings), pod.node, uuid, xid, t_xid) is not None
        self._wait_until(shown, t_xid + limit)
        with self._cond:
            readings = list(self.readings)
        hit = first_xid(readings, pod.node, uuid, xid, t_xid)
        name, where = self._gpu_name(), self._need_source().description
        if hit is not None:
            self.result.measure(Measurement(XID_SHOWN, hit.mono - t_xid, "s",
                                            note=f"{name} of {pod.node} read Xid {xid} in {where}"))
            return
        confirmed, how = self._xid_confirmed()
        last = [s.xid for r in readings if r.mono >= t_xid and (s := r.gpu(pod.node, uuid)) is not None]
        said = self._empty_answers(t_xid) or (f"it stayed {last[-1]} over {len(last)} readings" + (
            ", never changing: frozen telemetry" if len(set(last)) == 1 and len(last) > 1 else "")
            if last else f"no {XID} series names {uuid}")
        if not confirmed:
            raise DrillInconclusive(f"{name} of {pod.node} never showed Xid {xid} in {where} within {limit:g} s "
                                    f"({said}), and the injection cannot be confirmed: {how}")
        self.result.measure(Measurement(XID_SHOWN, None, "s", note=said))
        self.result.fail(f"{name} of {pod.node} took Xid {xid} ({how}), but {XID} never showed it within {limit:g} "
                         f"s in {where}: {said}")

    def _xid_confirmed(self) -> tuple[bool, str]:
        """Did the Xid reach the GPU, by something other than the telemetry under test? (and how, or why not)"""
        pod = self._canary()
        assert self.t_xid is not None and self.xid is not None
        lost = pod.lost_gpu_after(self.t_xid)
        if lost is not None:
            return True, f"its canary logged that its GPU failed: {lost.fields.get('message') or 'an error'}"
        if self.target.embedded is not None:
            return False, "the canary on it never logged that its GPU failed"
        try:
            now = allocatable_gpus(self.target.driver.get(NODE, pod.node), self.target.profile.gpu_resource)
        except KubeError as exc:
            return False, f"the node cannot be read ({exc})"
        if self.allocatable_before is not None and now is not None and now < self.allocatable_before:
            return True, f"the node's allocatable GPUs fell from {self.allocatable_before} to {now}"
        if self.xid in APPLICATION_XIDS:
            return False, (f"Xid {self.xid} is an application error, which leaves the GPU in service and the canary "
                           "(no GPU kernels on a real cluster) unaware; write a GPU-class Xid such as 79 or 48, "
                           "which takes the GPU out of allocatable, for a confirmable injection")
        return False, "the node's allocatable GPUs did not fall, so the Xid may never have reached the GPU"

    def judge_changes(self, count: int, limit: float) -> None:
        """The canary's GPU's utilization changes at least ``count`` times within ``limit`` seconds of its start,
        while the canary computes one second in two: a series that answers and never moves is frozen."""
        pod = self._canary()
        t0 = self._t_start()
        self._wait_until(lambda: changes(self._series(t0)) >= count, t0 + limit)
        points = [p for p in self._series(t0) if p.mono <= t0 + limit + SAMPLE_EVERY]
        moved = changes(points)
        name, where = self._gpu_name(), self._need_source().description
        values = [p.value for p in points if p.value is not None]
        note = (f"{len(values)} readings of {name} of {pod.node} in {where}, values "
                f"{min(values):g} to {max(values):g} %" if values else "no utilization reading")
        self.result.measure(Measurement(CHANGES, float(moved), "changes", note=note))
        self.result.details["telemetry"]["series"] = [{"t": round(p.mono - t0, 3), "util": p.value} for p in points]
        if moved >= count:
            return
        steps = self._computed(t0, t0 + limit)
        why = (self._empty_answers(t0) or self._elsewhere(t0, ELSEWHERE_PERCENT) or frozen_words(points)
               or (f"it changed {moved} time(s) only" if values else f"no utilization series names {pod.uuids[0]}"))
        self.result.fail(f"the telemetry of {name} of {pod.node} did not follow its load: {why}, while the canary "
                         f"computed on it one second in two ({steps} steps in its own log over {limit:g} s), in "
                         f"{where}")

    def _t_start(self) -> float:
        pod = self._canary()
        assert pod.start_line is not None
        return pod.start_line.mono

    # --------------------------------------------------------------- rollback
    def rollback(self) -> None:
        """Stop reading, remove an injection made through the node's agent, delete the canary pod and wait until it
        is gone (and a GPU an Xid took out of service is allocatable again); never raises."""
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=5)
        node = self._injected_on
        if node is not None:
            try:
                self.target.clear_xids(node)
            except KubeError as exc:
                log.warning("rollback of telemetry drill %s: the injection on %s: %s", self.run_id, node, exc)
        if self.canary is not None:
            self.canary.delete()
        if node is not None and self.xid not in APPLICATION_XIDS:
            self._back_in_service(node)

    def _back_in_service(self, node: str) -> None:
        clock = self.clock
        wait_seen(self.target.driver, node, clock.mono, BACK_IN_SERVICE_S)
        deadline = clock.mono() + BACK_IN_SERVICE_S
        while clock.mono() < deadline:
            try:
                now = allocatable_gpus(self.target.driver.get(NODE, node), self.target.profile.gpu_resource)
            except KubeError:
                now = None
            if now is not None and now == self.allocatable_before:
                return
            threading.Event().wait(0.2)

