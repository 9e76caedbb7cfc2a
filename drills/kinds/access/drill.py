"""The accelerator access drill: a pod reaches exactly the GPUs it asked for (docs/ACCESS.md).

Steady state before (a node of whole GPUs with enough of them free, not one whose GPUs are shared by
promise) -> act (probe pods on that node: one that requests no GPU while its environment asks for every one,
as CUDA images do; or pods that request N each, side by side; then each pod tries to open every GPU of the
node after the others hold theirs) -> observe (each pod's own probe lines, read through ``pods/log``: the
device nodes in its ``/dev``, NVML's count, ``NVIDIA_VISIBLE_DEVICES``, which GPUs a real ``open()``
reached; :mod:`drills.workloads.accessprobe`) -> judge (:mod:`drills.kinds.access.judge`) -> rollback
(every probe pod deleted).

Truth comes from the workload: the platform's own account of which GPUs it gave whom (the scheduler's
annotations, the device plugin's checkpoint) is never read.  A pod whose probe never reported, or could not
say which GPUs it holds, makes the promise INCONCLUSIVE with what to fix, never PASS.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from drills.kube.driver import NODE, POD, KubeError
from drills.kube.flavors import RUN_LABEL
from drills.kube.logs import LogFollower, LogLine
from drills.kinds.access.judge import Judged, ProbePod, crossings, exactly_own, opened_beyond, seen_beyond
from drills.records.verdict import Comparison, DrillInconclusive, Measurement, Threshold
from drills.scenario.drill import Drill, register
from drills.scenario.invariants import node_shares_gpus
from drills.target.access import CLUSTER, Permission, grant
from drills.target.capacity import free_gpus_per_node
from drills.target.profile import TargetProfile
from drills.workloads.accessprobe import AccessReport, access_args, access_pod, parse_access_line
from drills.workloads.canaryjob import gpu_taint_toleration
from drills.workloads.slurmtraining import slurm_storage_problem

__all__ = ["AccessDrill", "whole_gpu_node"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]
PARTITION_LABELS = ("firedrill.dev/partition-mode", "nvidia.com/mig.strategy")
_TERMINAL = ("Succeeded", "Failed")


def whole_gpu_node(node: Obj) -> bool:
    """A node whose pods get whole GPUs of their own: neither partitioned (MIG, whose instances share their GPU's
    device node) nor shared by promise (time-slicing, MPS, replicas), where two pods reaching one GPU is the
    promise, not a breach."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    partitioned = any(labels.get(k) not in (None, "", "none") for k in PARTITION_LABELS)
    return not partitioned and not node_shares_gpus(node)


def _phase(pod: Obj | None) -> str:
    return str(((pod or {}).get("status") or {}).get("phase") or "Pending")


def _why_not_running(pod: Obj | None) -> str:
    """What a pod that never ran says about itself: its PodScheduled condition's message, or its phase."""
    if pod is None:
        return "it vanished"
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") != "True" and cond.get("message"):
            return f"not scheduled: {cond['message']}"
    return f"it is {_phase(pod)}" + (f" ({pod['status'].get('reason')})" if (pod.get("status") or {}).get("reason")
                                     else "")


@register
@dataclass
class AccessDrill(Drill):
    """Probe pods on one node of whole GPUs: what each sees and can open, judged against what it asked for."""

    kind: ClassVar[str] = "accelerator-access"
    ray_absent: ClassVar[str] = ("Ray only tells a worker its GPU ids (CUDA_VISIBLE_DEVICES) and isolates no "
                                 "device, so any worker may open any GPU of its node")

    @classmethod
    def unsupported_on_slurm(cls, profile: TargetProfile) -> str | None:
        return slurm_storage_problem(profile)  # each probe's output is read there (drills.kinds.access.slurm)

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        ns, why = profile.namespace, "accelerator access: the probe pods"
        out = grant(ns, "", "pods", ("get", "create", "delete"), why)
        out += grant(ns, "", "pods", ("get",), f"{why}' own reports", subresource="log")
        out += grant(CLUSTER, "", "nodes", ("list",), "accelerator access: a node of whole GPUs, free capacity")
        return out + grant(CLUSTER, "", "pods", ("list",), "accelerator access: free capacity (GPUs held in every "
                                                            "namespace)")

    node: str = ""
    node_gpus: int = 0
    """The node's GPUs (its capacity): the probes try ``nvidia0`` up to this many."""
    requested: dict[str, int] = field(default_factory=dict)
    """The probe pods, by name, and the GPUs each requested."""
    reports: dict[str, list[AccessReport]] = field(default_factory=dict)
    follower: LogFollower | None = None
    period: float = 0.5
    """Seconds between a probe's rounds."""
    rounds: int = 120
    run_timeout: float = 30.0
    """How long a probe pod may take to run and report before the scenario is INCONCLUSIVE."""
    report_timeout: float = 15.0
    """How long the pods may take to try each other's GPUs once all hold theirs."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _heard: threading.Event = field(default_factory=threading.Event)

    # ---------------------------------------------------------------- steady state
    def use_node(self, free: int) -> None:
        """The first node (by name) of whole GPUs with at least ``free`` of them free; none: INCONCLUSIVE."""
        per_node = free_gpus_per_node(self.target)
        nodes = {n["metadata"]["name"]: n for n in self.target.driver.list(NODE)}
        whole = {name: f for name, f in per_node.items() if name in nodes and whole_gpu_node(nodes[name])}
        chosen = sorted(name for name, f in whole.items() if f >= free)
        if not chosen:
            seen = ", ".join(f"{n}: {f}" for n, f in sorted(whole.items())) or "none"
            raise DrillInconclusive(f"no schedulable, Ready node of whole GPUs has {free} GPUs free (free GPUs per "
                                    f"node: {seen}; nodes whose GPUs are partitioned or shared by promise are left "
                                    "out): free some, or ask for fewer")
        self.node = chosen[0]
        status = nodes[self.node].get("status") or {}
        gpu = self.target.profile.gpu_resource
        raw = (status.get("capacity") or {}).get(gpu, (status.get("allocatable") or {}).get(gpu, 0))
        try:
            self.node_gpus = int(str(raw))
        except ValueError:
            self.node_gpus = 0
        self.result.details["access"] = {"node": self.node, "node_gpus": self.node_gpus, "free_gpus": whole[self.node],
                                         "pods": {}}

    # ------------------------------------------------------------------------ act
    def start(self, requests: list[int], *, ask_all: bool = False) -> None:
        """Start one probe pod per entry of ``requests`` (the GPUs it requests) on the node; wait until each
        runs and has reported once.  ``ask_all``: the pods' environment asks for every GPU
        (``NVIDIA_VISIBLE_DEVICES=all``)."""
        if not self.node:
            raise DrillInconclusive("no node was chosen before the probe pods were started")
        profile = self.target.profile
        args = access_args(attempt=max(self.node_gpus, 1), period=self.period, rounds=self.rounds)
        names = []
        for gpus in requests:
            name = f"acc-{self.run_id}-{len(self.requested) + 1}"
            pod = access_pod(name, profile.namespace, profile.canary_image, resource=profile.gpu_resource, gpus=gpus,
                             node=self.node, args=args, labels={RUN_LABEL: self.run_id}, ask_all=ask_all,
                             tolerations=gpu_taint_toleration(profile.gpu_resource))
            self.target.driver.create(pod)
            self.requested[name] = gpus
            names.append(name)
        self.target.timeline.action("start-probes", target=self.node, pods=names, gpus=requests, ask_all=ask_all)
        self._wait_reported(names)

    def _follow(self, pod: Obj) -> None:
        if self.follower is None:
            self.follower = LogFollower(self.target.driver, self._on_line, self.target.timeline.clock)
        self.follower.follow(pod)

    def _on_line(self, line: LogLine) -> None:
        self._take(line.pod, line.text)

    def _take(self, probe: str, text: str) -> None:
        """One line of probe ``probe``'s output: its report, where it is one."""
        report = parse_access_line(text)
        if report is None:
            return
        with self._lock:
            seen = self.reports.setdefault(probe, [])
            if all(r.round != report.round for r in seen):  # a re-followed log repeats itself
                seen.append(report)
                seen.sort(key=lambda r: r.round)
        self._heard.set()

    def _wait_reported(self, names: list[str]) -> None:
        """Until every pod of ``names`` runs and has reported; a pod that cannot: INCONCLUSIVE, saying why."""
        clock = self.target.timeline.clock
        ns = self.target.profile.namespace
        deadline = clock.mono() + self.run_timeout
        waiting = list(names)
        pods: dict[str, Obj | None] = {}
        while waiting:
            self.result.raise_if_halted()
            for name in list(waiting):
                try:
                    pods[name] = pod = self.target.driver.find(POD, name, ns)
                except KubeError as exc:
                    log.debug("access: pod %s: %s", name, exc)
                    continue
                if pod is not None and (pod.get("spec") or {}).get("nodeName"):
                    self._follow(pod)
                if _phase(pod) in _TERMINAL or pod is None:
                    raise DrillInconclusive(f"probe pod {name} ended before it reported ({_why_not_running(pod)}); "
                                            "its log says why")
                with self._lock:
                    reported = bool(self.reports.get(name))
                if reported:
                    waiting.remove(name)
            if not waiting:
                return
            if clock.mono() >= deadline:
                why = "; ".join(f"{n}: " + (_why_not_running(pods.get(n)) if _phase(pods.get(n)) != "Running" else
                                            f"running, but it wrote no access report (does {self.target.profile.canary_image}"
                                            " have python3?)") for n in waiting)
                raise DrillInconclusive(f"probe pods never reported within {self.run_timeout:g} s: {why}")
            self._heard.wait(0.25)
            self._heard.clear()

    def try_each_other(self) -> None:
        """Wait until each pod has made a round of attempts begun after every other pod reported holding its GPUs
        (at most :attr:`report_timeout`); what never came is judged INCONCLUSIVE by :meth:`judge_crossings`."""
        clock = self.target.timeline.clock
        deadline = clock.mono() + self.report_timeout
        self.target.timeline.action("try-each-other", target=self.node, pods=sorted(self.requested))
        while clock.mono() < deadline:
            self.result.raise_if_halted()
            probes = self.probe_pods()
            if all(p.since(h.first.ts) is not None for h in probes if h.first is not None
                   for p in probes if p is not h):
                return
            self._heard.wait(0.25)
            self._heard.clear()

    # ------------------------------------------------------------- observe, judge
    def probe_pods(self) -> list[ProbePod]:
        with self._lock:
            return [ProbePod(name, self.node, gpus, tuple(self.reports.get(name, ())), self._label(name))
                    for name, gpus in self.requested.items()]

    def _label(self, probe: str) -> str:
        """How findings name a probe ("" for ``pod <name>``)."""
        return ""

    def _record(self, name: str, value: float | None, limit: int, judged: Judged, note: str) -> None:
        self.result.measure(Measurement(name, value, "GPUs", note=note))
        self.result.check(Threshold(name, float(limit), "GPUs", Comparison.AT_MOST))
        self._conclude(judged)

    def _conclude(self, judged: Judged) -> None:
        for finding in judged.broken:
            self.result.fail(finding)
        for finding in judged.unsettled:
            self.result.inconclusive(finding)

    def judge_seen(self, limit: int) -> None:
        """Every probe pod sees at most ``limit`` GPUs."""
        pods = self.probe_pods()
        counts = [max(r.seen_count for r in p.reports) for p in pods if p.reports]
        self._record("GPUs seen", float(max(counts)) if counts else None, limit, seen_beyond(pods, limit),
                     "the most any probe pod saw: its device nodes, the devices it opened, or NVML's count")

    def judge_opened(self, limit: int) -> None:
        """Every probe pod opens at most ``limit`` of the node's GPUs."""
        pods = self.probe_pods()
        counts = [len({d for r in p.reports for d in r.opened}) for p in pods if p.reports]
        self._record("GPUs opened", float(max(counts)) if counts else None, limit, opened_beyond(pods, limit),
                     f"the most any probe pod opened of the node's {self.node_gpus} GPUs")

    def judge_own(self) -> None:
        """Every probe pod sees exactly the GPUs it requested, and they are the ones it was told it holds."""
        pods = self.probe_pods()
        judged = exactly_own(pods)
        self.result.measure(Measurement("pods seeing other than their own GPUs", float(judged.count), "pods",
                                        note=f"of {len(pods)} on {self.node}: a count other than requested, or "
                                             "devices other than those NVIDIA_VISIBLE_DEVICES names"))
        self.result.check(Threshold("pods seeing other than their own GPUs", 0.0, "pods", Comparison.AT_MOST))
        self._conclude(judged)

    def judge_crossings(self) -> None:
        """No probe pod opened a GPU another one holds."""
        pods = self.probe_pods()
        judged = crossings(pods)
        self._record("GPUs opened that another pod holds", float(judged.count), 0, judged,
                     f"{len(pods)} pods on {self.node}, each trying the GPUs the others hold")

    # ----------------------------------------------------------------- rollback
    def rollback(self) -> None:
        """Delete every probe pod; record what each reported; never raises."""
        if self.follower is not None:
            self.follower.stop()
        ns = self.target.profile.namespace
        for name in self.requested:
            try:
                self.target.driver.delete(POD, name, ns, grace_seconds=0)
            except KubeError as exc:
                log.warning("rollback of access drill %s: pod %s: %s", self.run_id, name, exc)
        if self.node:
            self.result.details.setdefault("access", {})["pods"] = {p.name: summary(p) for p in self.probe_pods()}


def summary(pod: ProbePod) -> dict[str, Any]:
    """For the evidence: what one probe pod asked for and reported (its first and last rounds)."""
    def one(r: AccessReport | None) -> dict[str, Any] | None:
        if r is None:
            return None
        return {"round": r.round, "device_nodes": list(r.nodes), "opened": list(r.opened),
                "identities": {d: r.identity(d) for d in r.seen if r.identity(d)}, "visible": r.visible,
                "nvml_count": r.nvml_count, "nvml_error": r.nvml_error,
                "refused": {a.device: a.made or a.outcome.value for a in r.attempts if not a.opened}}
    return {"requested": pod.requested, "rounds": len(pod.reports), "first": one(pod.first),
            "last": one(pod.reports[-1] if pod.reports else None)}
