"""The pod status a node agent reports, as a plain JSON dict (pure; unit-tested
against the official client's strict ``V1Pod`` model).

The kubelet owns the conditions ``PodReadyToStartContainers``, ``Initialized``,
``ContainersReady`` and ``Ready`` (and adds ``PodScheduled`` if the scheduler
did not); any other condition already on the pod (e.g. ``DisruptionTarget``) is
kept as it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from refplatform.agent.clock import rfc3339
from refplatform.agent.workload import FENCED_REASON, Exit

__all__ = [
    "ContainerRun",
    "HOST_IP",
    "container_id",
    "image_id",
    "pod_ip_for",
    "pod_status",
    "terminal_phase",
]

Obj = dict[str, Any]

HOST_IP = "127.0.0.1"
_OWNED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
# Container exit reasons that also become the pod's ``status.reason`` (a fenced rank: "pod Failed, reason Fenced";
# a pod refused at admission, as the kubelet reports it).
POD_LEVEL_REASONS = frozenset({FENCED_REASON, "OutOfMemory", "UnexpectedAdmissionError"})
GPU_XID_PREFIX = "GPUXid"
"""A pod failed by an injected GPU Xid (``GPUXid94``...) also carries the reason at pod level."""
DEFAULT_IMAGE = "firedrill.dev/simulated:latest"


def pod_ip_for(uid: str) -> str:
    """A stable loopback address for a pod: ``127.1.x.y`` (never a private range)."""
    d = hashlib.sha256(uid.encode()).digest()
    return f"127.1.{d[0]}.{1 + d[1] % 254}"


def image_id(image: str) -> str:
    """A digest-pinned image reference, like the runtime reports."""
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return f"{name}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def container_id(pod_uid: str, container: str, restart_count: int) -> str:
    return "containerd://" + hashlib.sha256(f"{pod_uid}/{container}/{restart_count}".encode()).hexdigest()


@dataclass(frozen=True)
class ContainerRun:
    """What the agent knows about the pod's (simulated) containers' current run."""

    started_at: datetime
    restart_count: int = 0
    exit: Exit | None = None
    last_terminated: Obj | None = None
    """``lastState.terminated`` of the previous run, if any."""
    container_exits: Mapping[str, Exit] | None = None
    """Real processes: the containers that ended, by name (the others run); ``None``: every container
    shares :attr:`exit` (a simulated workload)."""

    def exit_of(self, container: str) -> Exit | None:
        """How ``container`` ended (``None``: it runs)."""
        if self.container_exits is not None and container in self.container_exits:
            return self.container_exits[container]
        return self.exit


def terminal_phase(run: ContainerRun) -> str | None:
    if run.exit is None:
        return None
    return "Succeeded" if run.exit.code == 0 else "Failed"


def _containers(pod: Obj) -> list[tuple[str, str]]:
    spec = pod.get("spec") or {}
    out = [(str(c.get("name") or "main"), str(c.get("image") or DEFAULT_IMAGE)) for c in spec.get("containers") or []]
    return out or [("main", DEFAULT_IMAGE)]


def _condition(ctype: str, status: str, now: datetime, previous: Obj | None, reason: str | None = None) -> Obj:
    transition = rfc3339(now)
    if previous and previous.get("status") == status and previous.get("lastTransitionTime"):
        transition = str(previous["lastTransitionTime"])
    cond: Obj = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": transition}
    if reason:
        cond["reason"] = reason
    return cond


def pod_status(pod: Obj, run: ContainerRun, now: datetime, pod_ip: str | None = None, host_ip: str = HOST_IP,
               probed: Mapping[str, bool] | None = None) -> Obj:
    """The full ``status`` of ``pod`` (the server's copy) given the agent's ``run``.

    ``pod_ip``: the pod's address (default: :func:`pod_ip_for` its uid).  ``probed``: the containers
    that have a readiness probe, by name, and whether it passes (:mod:`refplatform.agent.probes`); such
    a container is ready only when it runs and its probe passes, any other one while it runs.
    ``ContainersReady`` and ``Ready`` are True when every container is ready.
    """
    meta = pod.get("metadata") or {}
    uid = str(meta.get("uid") or meta.get("name") or "")
    old = pod.get("status") or {}
    phase = terminal_phase(run) or "Running"
    running = run.exit is None and not run.container_exits
    done_reason = None if run.exit is None else "PodCompleted"
    probed = probed or {}
    probes_pass = all(probed.values())
    ready = running and probes_pass
    not_ready_reason = done_reason or (None if ready or not running else "ContainersNotReady")

    previous = {c.get("type"): c for c in old.get("conditions") or [] if isinstance(c, dict)}
    conditions: list[Obj] = []
    if "PodScheduled" in previous:
        conditions.append(previous["PodScheduled"])
    else:
        conditions.append(_condition("PodScheduled", "True", now, None))
    conditions += [
        _condition("PodReadyToStartContainers", "True" if run.exit is None else "False", now,
                   previous.get("PodReadyToStartContainers")),
        _condition("Initialized", "True", now, previous.get("Initialized"), done_reason),
        _condition("ContainersReady", "True" if ready else "False", now, previous.get("ContainersReady"),
                   not_ready_reason),
        _condition("Ready", "True" if ready else "False", now, previous.get("Ready"), not_ready_reason),
    ]
    conditions += [c for t, c in previous.items() if t not in _OWNED_CONDITIONS and t != "PodScheduled"]

    statuses = []
    started = rfc3339(run.started_at)
    for name, image in _containers(pod):
        cid = container_id(uid, name, run.restart_count)
        ended = run.exit_of(name)
        if ended is None:
            state: Obj = {"running": {"startedAt": started}}
        else:
            terminated: Obj = {
                "exitCode": ended.code,
                "reason": ended.reason,
                "startedAt": started,
                "finishedAt": rfc3339(ended.finished_at),
                "containerID": cid,
            }
            if ended.message:
                terminated["message"] = ended.message
            state = {"terminated": terminated}
        statuses.append(
            {
                "name": name,
                "image": image,
                "imageID": image_id(image),
                "containerID": cid,
                "ready": ended is None and probed.get(name, True),
                "started": ended is None,
                "restartCount": run.restart_count,
                "state": state,
                "lastState": {"terminated": run.last_terminated} if run.last_terminated else {},
            }
        )

    pod_ip = pod_ip or pod_ip_for(uid)
    extra: Obj = {}
    if run.exit is not None and (run.exit.reason in POD_LEVEL_REASONS or run.exit.reason.startswith(GPU_XID_PREFIX)):
        extra = {"reason": run.exit.reason, "message": run.exit.message}
    return {
        **extra,
        "phase": phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": str(old.get("startTime") or started),
        "containerStatuses": statuses,
    }
