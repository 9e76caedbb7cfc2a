"""The telemetry drill's load: one canary pod on a chosen idle node, followed through its log.

The pod runs the training canary as a job of one rank (:func:`drills.workloads.canaryjob.gpu_holder`) asking
for whole GPUs, pinned to the node by its ``kubernetes.io/hostname`` label.  Each step it waits a second on its
input (the GPU idle) and computes a second (on the reference platform the node's simulated GPU counts it as a
kernel running): a load that comes and goes, so live telemetry moves with it.  Its ``start`` line names the
GPUs it was given (``NVIDIA_VISIBLE_DEVICES``): the truth the drill follows the GPU by.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from drills.kube.driver import POD, KubeError
from drills.kube.flavors import RUN_LABEL
from drills.kube.logs import LogFollower, LogLine
from drills.records.verdict import DrillInconclusive
from drills.target.connect import Target
from drills.workloads.canaryjob import gpu_holder, gpu_taint_toleration
from drills.workloads.canarylog import CanaryEvent, CanaryLine, CanaryLog, parse_line
from drills.workloads.training import GPU_INDEX_ANNOTATION

__all__ = ["HOSTNAME_LABEL", "INPUT_SECONDS", "CanaryPod"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]
HOSTNAME_LABEL = "kubernetes.io/hostname"
INPUT_SECONDS = 1.0
"""Each step waits this long on its input before its second of compute: the GPU is busy one second in two."""
START_TIMEOUT, SAID_TIMEOUT, GONE_TIMEOUT = 30.0, 20.0, 20.0
"""Seconds for the pod to run, for its canary to say which GPUs it was given, and for the pod to be gone."""
POLL = 0.1


@dataclass
class CanaryPod:
    """The canary pod of one scenario: started on ``node``, followed until deleted."""

    target: Target
    run_id: str
    node: str
    gpus: int = 1
    name: str = ""
    uid: str = ""
    log: CanaryLog = field(default_factory=CanaryLog)
    start_line: CanaryLine | None = None
    pod: Obj = field(default_factory=dict)
    _follower: LogFollower | None = None

    def __post_init__(self) -> None:
        self.name = self.name or f"metrics-{self.run_id}"

    @property
    def clock(self) -> Any:
        return self.target.timeline.clock

    @property
    def uuids(self) -> tuple[str, ...]:
        """The GPUs the canary said it was given (its start line's ``gpus``)."""
        named = self.start_line.fields.get("gpus") if self.start_line is not None else None
        return tuple(str(g) for g in named or ())

    @property
    def gpu_index(self) -> int | None:
        """The minor number of its first GPU as the reference platform's binding says (to aim an injection)."""
        raw = ((self.pod.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX_ANNOTATION) or ""
        indices = [int(i) for i in raw.split(",") if i.strip().isdigit()]
        return indices[0] if indices else None

    def manifest(self, hostname: str) -> Obj:
        profile = self.target.profile
        spec: Obj = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {HOSTNAME_LABEL: hostname},
                     "tolerations": list(gpu_taint_toleration(profile.gpu_resource)),
                     "containers": [gpu_holder(profile, self.gpus, input_seconds=INPUT_SECONDS)]}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": profile.namespace, "labels": {RUN_LABEL: self.run_id}},
                "spec": spec}

    # ---------------------------------------------------------------- start
    def start(self, hostname: str) -> None:
        """Create the pod, wait until it runs on the node, follow its log and wait for its start line; INCONCLUSIVE
        (the load never ran: no claim) when any of it does not come."""
        driver, ns = self.target.driver, self.target.profile.namespace
        created = driver.create(self.manifest(hostname), ns)
        self.uid = str((created.get("metadata") or {}).get("uid") or "")
        running = self._until(lambda: self._running(), START_TIMEOUT)
        if running is None:
            phase = (self.pod.get("status") or {}).get("phase") or "not created"
            raise DrillInconclusive(f"the canary pod {self.name} did not run on {self.node} within "
                                    f"{START_TIMEOUT:g} s (phase {phase}), so no GPU of it was loaded")
        self._follower = LogFollower(driver, self._on_line, self.clock)
        self._follower.follow(running)
        said = self._until(lambda: next(iter(self.log.of(CanaryEvent.START)), None), SAID_TIMEOUT)
        if said is None or not said.fields.get("gpus"):
            raise DrillInconclusive(f"the canary of pod {self.name} on {self.node} did not say which GPUs it was "
                                    f"given within {SAID_TIMEOUT:g} s (no start line naming NVIDIA_VISIBLE_DEVICES), "
                                    "so its GPU cannot be followed in the telemetry")
        self.start_line = said

    def _running(self) -> Obj | None:
        pod = self.target.driver.find(POD, self.name, self.target.profile.namespace)
        if pod is None:
            return None
        self.pod = pod
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        if status.get("phase") in ("Failed", "Succeeded"):
            raise DrillInconclusive(f"the canary pod {self.name} ended ({status.get('phase')}) before it ran: "
                                    f"{status.get('message') or status.get('reason') or 'no reason given'}")
        return pod if status.get("phase") == "Running" and spec.get("nodeName") == self.node else None

    def _until(self, found: Any, timeout: float) -> Any:
        deadline = self.clock.mono() + timeout
        while True:
            value = found()
            if value is not None or self.clock.mono() >= deadline:
                return value
            threading.Event().wait(POLL)

    def _on_line(self, line: LogLine) -> None:
        parsed = parse_line(line.text, pod=line.pod, uid=line.uid, node=line.node, mono=line.mono, wall=line.wall)
        if parsed is not None:
            self.log.add(parsed)

    # ------------------------------------------------------------- questions
    def steps_between(self, since: float, until: float) -> int:
        """Steps the canary logged that the harness received between two instants of its monotonic clock."""
        return sum(1 for ln in self.log.of(CanaryEvent.STEP) if since <= ln.mono <= until)

    def lost_gpu_after(self, since: float) -> CanaryLine | None:
        """The canary's exit line after ``since`` if it exited on an error (a lost GPU fails its next call)."""
        return next((ln for ln in self.log.of(CanaryEvent.EXIT)
                     if ln.mono >= since and ln.fields.get("reason") == "error"), None)

    # -------------------------------------------------------------- rollback
    def delete(self) -> None:
        """Stop following, delete the pod and wait until it is gone; never raises."""
        if self._follower is not None:
            self._follower.stop()
        driver, ns = self.target.driver, self.target.profile.namespace
        try:
            driver.delete(POD, self.name, ns, grace_seconds=0)
            if self._until(lambda: True if driver.find(POD, self.name, ns) is None else None, GONE_TIMEOUT) is None:
                log.warning("canary pod %s still exists %g s after its deletion", self.name, GONE_TIMEOUT)
        except KubeError as exc:
            log.warning("rollback of canary pod %s incomplete: %s", self.name, exc)
