"""The node pull drill: a node dies under a training job; time detect, evict, replace, resume.

Steady state before (a canary job running whole, a checkpoint written) ->
act (pull the node hosting one rank, confirm the fault) -> observe (each
phase instant, from the harness's watches and from the platform's Events) ->
steady state after (the job trains again) -> rollback (the fault undone,
everything the drill made deleted).

Instants, exactly as DESIGN.md defines them (all on the harness's monotonic
clock, with the wall clock and the platform's stamp beside them):

- ``t_fault``: the fault action returned and was confirmed;
- ``t_detect``: the node's Ready condition leaves True, or an
  unreachable/not-ready taint appears;
- ``t_evict``: no pod of the job remains bound to the pulled node in a
  non-terminal phase;
- ``t_replace``: the job again has minMember pods Running, all on healthy nodes;
- ``t_resume``: the workload reports a training step beyond the checkpoint.

A fault that cannot be confirmed makes the scenario INCONCLUSIVE, never PASS.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from drills.connect import Target
from drills.gang import DrillInconclusive
from drills.kube.driver import EVENT, NODE, POD, RESOURCES, KubeError
from drills.kube.flavors import GangFlavor, GangSpec, VolcanoForm, gang_manifests, locate, run_selector
from drills.kube.timeline import parse_time
from drills.safety import check_blast_radius, eligible_nodes
from drills.target import FaultMethod
from drills.verdict import DrillResult, Measurement

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
PHASES = ("detect", "evict", "replace", "resume", "total")
STEP = "firedrill.dev/step"
CHECKPOINT = "firedrill.dev/checkpoint-step"
JOB = RESOURCES[("batch.volcano.sh/v1alpha1", "Job")]
UNHEALTHY_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def event_time(event: Obj, since: float) -> float | None:
    """The platform's stamp of an Event's occurrence at or after ``since``: a repeat of the same Event
    keeps its first eventTime and stamps the new one in series.lastObservedTime (both microseconds)."""
    for raw in ((event.get("series") or {}).get("lastObservedTime"), event.get("eventTime"),
                event.get("lastTimestamp")):
        ts = parse_time(raw)
        if ts is not None and ts >= since:
            return ts
    return None


@dataclass
class Instant:
    mono: float
    wall: float
    server: float | None = None


@dataclass
class NodePullDrill:
    target: Target
    result: DrillResult
    run_id: str
    spec: GangSpec | None = None
    step_seconds: float = 0.1
    pods: dict[str, Obj] = field(default_factory=dict)
    nodes: dict[str, Obj] = field(default_factory=dict)
    job: Obj = field(default_factory=dict)
    events: list[Obj] = field(default_factory=list)
    pulled: str | None = None
    victims: set[str] = field(default_factory=set)
    """UIDs of the job's pods on the pulled node at the fault."""
    before_fault: set[str] = field(default_factory=set)
    """UIDs of every pod of the job at the fault (their Events are not the recovery's)."""
    checkpoint_at_fault: int = 0
    step_at_fault: int = 0
    instants: dict[str, Instant] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    # ----------------------------------------------------------- steady state
    def start_canary(self, workers: int, gpus: int, checkpoint_every: int) -> None:
        profile = self.target.profile
        if profile.flavor is not GangFlavor.VOLCANO:
            raise DrillInconclusive("the node-pull drill restarts the job through a Volcano Job; "
                                    f"flavor {profile.flavor.value} is not supported by this drill yet")
        self.spec = GangSpec(name=f"canary-{self.run_id}"[:40], run_id=self.run_id, workers=workers,
                             gpus_per_worker=gpus, image=profile.canary_image, namespace=profile.namespace,
                             queue=profile.queue, gpu_resource=profile.gpu_resource, annotations={
                                 "firedrill.dev/workload": "training",
                                 "firedrill.dev/step-seconds": f"{self.step_seconds:g}",
                                 "firedrill.dev/checkpoint-every": str(checkpoint_every)})
        driver, ns = self.target.driver, profile.namespace
        driver.watch(NODE, on_event=self._on(self.nodes))
        driver.watch(POD, ns, label_selector=run_selector(self.run_id), on_event=self._on(self.pods))
        driver.watch(JOB, ns, field_selector=f"metadata.name={self.spec.name}", on_event=self._on_job)
        driver.watch(EVENT, on_event=self._on_event)
        for obj in gang_manifests(self.spec, profile.flavor, VolcanoForm.JOB):
            driver.create(obj)
        if not self._wait(lambda: len(self._running_pods()) >= self.spec.min_available, 60):
            raise DrillInconclusive(f"the canary job {self.spec.name} never ran whole within 60 s, so no node "
                                    f"can be pulled under it; pods: {self._pod_summary()}")

    def wait_checkpoint(self, limit: float) -> None:
        if not self._wait(lambda: self._checkpoint() > 0, limit):
            raise DrillInconclusive(f"the canary job wrote no checkpoint within {limit:g} s; resumption cannot "
                                    "be judged")

    # ------------------------------------------------------------- watches
    def _on(self, store: dict[str, Obj]) -> Any:
        def handle(event: str, obj: Obj) -> None:
            with self._cond:
                name = obj["metadata"]["name"]
                if event == "DELETED":
                    store.pop(name, None)
                else:
                    store[name] = obj
                self._advance()
                self._cond.notify_all()
        return handle

    def _on_job(self, event: str, obj: Obj) -> None:
        with self._cond:
            self.job = obj if event != "DELETED" else {}
            self._cond.notify_all()

    def _on_event(self, event: str, obj: Obj) -> None:
        if event == "ADDED" or event == "MODIFIED":
            with self._cond:
                self.events.append(obj)
                if obj.get("reason") == "Resumed" and self._recovery_pod_event(obj):
                    self._advance(resumed=True)
                self._cond.notify_all()

    def _recovery_pod_event(self, ev: Obj) -> bool:
        """An Event about a pod of the job that did not exist at the fault (a replacement rank)."""
        inv = ev.get("involvedObject") or {}
        return "fault" in self.instants and inv.get("kind") == "Pod" and \
            inv.get("name") in self.pods and inv.get("uid") not in self.before_fault

    # ------------------------------------------------------------- helpers
    def _wait(self, predicate: Any, timeout: float) -> bool:
        clock = self.target.timeline.clock
        deadline = clock.mono() + timeout
        with self._cond:
            while not predicate():
                remaining = deadline - clock.mono()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.5))
            return True

    def _checkpoint(self) -> int:
        raw = ((self.job.get("metadata") or {}).get("annotations") or {}).get(CHECKPOINT, "0")
        return int(raw) if str(raw).isdigit() else 0

    def _running_pods(self) -> list[Obj]:
        return [p for p in self.pods.values() if (p.get("status") or {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]

    def _pod_summary(self) -> str:
        return ", ".join(f"{n}={(p.get('status') or {}).get('phase')}@{(p.get('spec') or {}).get('nodeName')}"
                         for n, p in sorted(self.pods.items())) or "none"

    def _node_healthy(self, name: str) -> bool:
        node = self.nodes.get(name) or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [])
        return ready and not any(t.get("key") in UNHEALTHY_TAINTS for t in (node.get("spec") or {}).get("taints") or [])

    def _stamp(self, name: str) -> None:
        if name not in self.instants:
            clock = self.target.timeline.clock
            self.instants[name] = Instant(clock.mono(), clock.wall())
            self.target.timeline.action(f"t_{name}", target=self.pulled or "")

    def _advance(self, resumed: bool = False) -> None:
        """Called under the lock on every change: stamp each instant the moment its condition first holds.
        ``resumed``: a replacement rank just reported (Event ``Resumed``) a step beyond its checkpoint."""
        if "fault" not in self.instants or self.pulled is None:
            return
        if "detect" not in self.instants and not self._node_healthy(self.pulled):
            self._stamp("detect")
        if "evict" not in self.instants and not any(
                (p.get("spec") or {}).get("nodeName") == self.pulled and
                (p.get("status") or {}).get("phase") not in TERMINAL for p in self.pods.values()):
            self._stamp("evict")
        if "evict" in self.instants and "replace" not in self.instants:
            running = self._running_pods()
            if self.spec is not None and len(running) >= self.spec.min_available and all(
                    (p.get("spec") or {}).get("nodeName") != self.pulled and
                    self._node_healthy((p.get("spec") or {}).get("nodeName", "")) for p in running):
                self._stamp("replace")
        if "replace" in self.instants and "resume" not in self.instants:
            steps = [int(v) for p in self._running_pods() if p["metadata"].get("uid") not in self.before_fault
                     and str(v := ((p["metadata"].get("annotations") or {}).get(STEP, ""))).isdigit()]
            if resumed or (steps and max(steps) > self.checkpoint_at_fault):
                self._stamp("resume")

    # ----------------------------------------------------------------- act
    def pull(self, rank: int, method: FaultMethod) -> None:
        assert self.spec is not None, "start the canary job first"
        with self._cond:
            pod = next((p for p in self._running_pods()
                        if (p["metadata"].get("annotations") or {}).get("firedrill.dev/rank") == str(rank)
                        or p["metadata"]["name"].endswith(f"-{rank}")), None)
            if pod is None:
                raise DrillInconclusive(f"worker {rank} of the canary job is not running; pods: {self._pod_summary()}")
            node = pod["spec"]["nodeName"]
            self.victims = {p["metadata"]["uid"] for p in self.pods.values()
                            if (p.get("spec") or {}).get("nodeName") == node}
            self.before_fault = {p["metadata"]["uid"] for p in self.pods.values()}
            self.checkpoint_at_fault = self._checkpoint()
            self.step_at_fault = max((int(v) for p in self._running_pods()
                                      if str(v := (p["metadata"].get("annotations") or {}).get(STEP, "")).isdigit()),
                                     default=0)
        if self.target.embedded is None:
            all_nodes = self.target.driver.list(NODE)
            chosen = [n for n in eligible_nodes(all_nodes, self.target.profile.safety) if n["metadata"]["name"] == node]
            if not chosen:
                raise DrillInconclusive(f"node {node} (worker {rank}) is not eligible for faults: it lacks the allow "
                                        f"label {self.target.profile.safety.allow_label} or is a control-plane node")
            check_blast_radius(chosen, all_nodes, self.target.profile.safety)
        self.pulled = node
        record = self.target.pull(node, method, self.run_id)
        with self._cond:
            self.result.details["fault"] = {"node": node, "method": method.value, "rank": rank,
                                            "confirmed": record.confirmed, "detail": record.detail,
                                            "checkpoint_at_fault": self.checkpoint_at_fault,
                                            "step_at_fault": self.step_at_fault}
            if not record.confirmed:
                self.result.inconclusive(f"the {method.value} fault on {node} could not be confirmed "
                                         f"({record.detail}); no timing is claimed")
                return
            self._stamp("fault")
            self._advance()

    # ------------------------------------------------------------- observe
    def observe_until(self, phase: str, timeout: float) -> None:
        """Wait (up to ``timeout``) for the instants a phase needs, then record the phase measurements."""
        if "fault" not in self.instants:
            return  # inconclusive already recorded by pull()
        needed = {"detect": "detect", "evict": "evict", "replace": "replace", "resume": "resume",
                  "total": "resume"}[phase]
        self._wait(lambda: needed in self.instants, timeout)
        self._measure()

    def _measure(self) -> None:
        with self._cond:
            t = self.instants
            pairs = {"detect": ("fault", "detect"), "evict": ("detect", "evict"), "replace": ("evict", "replace"),
                     "resume": ("replace", "resume"), "total": ("fault", "resume")}
            server = self._server_instants()
            for phase, (a, b) in pairs.items():
                if a in t and b in t:
                    platform = None
                    sa = server.get(a, t[a].wall if a == "fault" else None)
                    sb = server.get(b)
                    if sa is not None and sb is not None:
                        platform = max(0.0, sb - sa)
                    self.result.measure(Measurement(phase, max(0.0, t[b].mono - t[a].mono), "s", platform))
                elif phase not in self.result.measurements:
                    self.result.measure(Measurement(phase, None, "s", note=f"t_{b} never observed"))
            lost = self.step_at_fault - self.checkpoint_at_fault
            self.result.measure(Measurement("lost steps", float(max(0, lost)), "steps"))
            if self.spec is not None and "resume" in t:
                gpus = self.spec.workers * self.spec.gpus_per_worker
                total = t["resume"].mono - t["fault"].mono
                self.result.measure(Measurement("GPU-seconds lost", gpus * (total + max(0, lost) * self.step_seconds),
                                                "GPU-s"))
            self.result.details["instants"] = {k: {"mono": v.mono, "wall": v.wall, "server": server.get(k)}
                                               for k, v in t.items()}

    def _server_instants(self) -> dict[str, float]:
        """The same instants as the platform stamped them in its Events (eventTime, microseconds):
        detect = the pulled node's NodeNotReady; evict = the last eviction (Evicted/Killing) of a pod that was
        on the pulled node; replace = the last Started of the replacement ranks; resume = their first Resumed."""
        out: dict[str, float] = {}
        fault_wall = self.instants["fault"].wall if "fault" in self.instants else 0.0

        def stamps(reasons: tuple[str, ...], accept: Any) -> dict[str, float]:
            """uid (or name) -> the earliest matching eventTime at or after the fault."""
            found: dict[str, float] = {}
            for e in self.events:
                inv = e.get("involvedObject") or {}
                ts = event_time(e, fault_wall - 0.001)
                if e.get("reason") in reasons and ts is not None and accept(inv):
                    key = inv.get("uid") or inv.get("name", "")
                    found[key] = min(ts, found.get(key, ts))
            return found
        detect = stamps(("NodeNotReady",), lambda inv: inv.get("kind") == "Node" and inv.get("name") == self.pulled)
        if detect:
            out["detect"] = min(detect.values())
        evicted = stamps(("Evicted", "Killing"), lambda inv: inv.get("uid") in self.victims)
        if evicted:
            out["evict"] = max(evicted.values())
        replacements = {p["metadata"]["uid"] for p in self._running_pods()
                        if p["metadata"].get("uid") not in self.before_fault}
        started = stamps(("Started",), lambda inv: inv.get("uid") in replacements)
        if started and self.spec is not None and len(started) >= self.spec.min_available:
            out["replace"] = max(started.values())
        resumed = stamps(("Resumed",), lambda inv: inv.get("uid") in replacements)
        if resumed:
            out["resume"] = min(resumed.values())
        return out

    # ------------------------------------------------------------ rollback
    def rollback(self) -> None:
        """Undo the fault, delete the job and its pods; never raises."""
        self.target.restore_all()
        driver, ns = self.target.driver, self.target.profile.namespace
        try:
            if self.spec is not None:
                loc = locate(self.spec, self.target.profile.flavor, VolcanoForm.JOB)
                driver.delete(JOB, loc.group.name, ns)
                for pod in driver.list(POD, ns, label_selector=run_selector(self.run_id)):
                    driver.delete(POD, pod["metadata"]["name"], ns, grace_seconds=0)
        except KubeError as exc:
            log.warning("rollback of node-pull drill %s incomplete: %s", self.run_id, exc)
