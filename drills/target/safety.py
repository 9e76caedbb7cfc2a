"""The safety checks that stand between a drill and a customer's cluster.

Pulling a node on a real cluster is destructive, so before any fault a drill
asks three questions, answered here by pure functions over the objects as the
API returns them (node and pod dicts) and the profile's
:class:`~drills.target.profile.SafetySettings`:

- :func:`eligible_nodes`: which nodes may be touched at all: they carry the
  allow label, are not control-plane nodes, and are Ready (a node that is
  already down cannot be pulled, only mis-measured).
- :func:`check_blast_radius`: would this choice remove more nodes, or a larger
  share of the cluster's GPUs, than the profile allows?
- :func:`preflight`: is the cluster already degraded (a NotReady node, an
  unreachable or not-ready taint, pods stuck Terminating, GPUs the device
  plugin reports unhealthy)?  A drill on a sick cluster measures the sickness.

Refusals raise :class:`SafetyError`, worded for the platform engineer who has
to decide what to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from drills.errors import FiredrillError
from drills.target.profile import SafetySettings

__all__ = [
    "CONTROL_PLANE_LABELS",
    "DEGRADED_TAINTS",
    "BlastRadius",
    "SafetyError",
    "check_blast_radius",
    "eligible_nodes",
    "ineligible_reasons",
    "is_control_plane",
    "is_ready",
    "preflight",
    "require_preflight",
]

Obj = Mapping[str, Any]

CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
DEGRADED_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready",
                   "node.kubernetes.io/out-of-service")
GPU = "nvidia.com/gpu"
STUCK_TERMINATING_AFTER = timedelta(seconds=60)


class SafetyError(FiredrillError):
    """A drill refused because it would touch what the target profile protects, or the cluster is degraded."""


# --- reading nodes -----------------------------------------------------------------------------------------


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", "<unnamed>"))


def _labels(obj: Obj) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _ready_condition(node: Obj) -> Obj | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return None


def is_ready(node: Obj) -> bool:
    """The node's Ready condition is True."""
    condition = _ready_condition(node)
    return condition is not None and condition.get("status") == "True"


def is_control_plane(node: Obj) -> bool:
    """The node carries a control-plane role label (any value, as kubeadm writes it empty)."""
    labels = _labels(node)
    return any(label in labels for label in CONTROL_PLANE_LABELS)


def _gpus(node: Obj, section: str, resource: str) -> int:
    """Whole GPUs in ``status.<section>``; a missing or non-integer quantity counts 0."""
    value = ((node.get("status") or {}).get(section) or {}).get(resource, "0")
    try:
        return int(str(value))
    except ValueError:
        return 0


def _capacity(node: Obj, resource: str) -> int:
    return _gpus(node, "capacity", resource) or _gpus(node, "allocatable", resource)


def ineligible_reasons(node: Obj, safety: SafetySettings) -> list[str]:
    """Why a drill may not touch ``node`` (empty: it may)."""
    reasons: list[str] = []
    labels = _labels(node)
    key, value = safety.allow_label_key, safety.allow_label_value
    if labels.get(key) != value:
        found = f" (it has {key}={labels[key]})" if key in labels else ""
        reasons.append(f"it lacks the allow label {safety.allow_label}{found}")
    if safety.refuse_control_plane and is_control_plane(node):
        reasons.append("it is a control-plane node")
    if not is_ready(node):
        reasons.append("it is not Ready")
    return reasons


def eligible_nodes(nodes: Iterable[Obj], safety: SafetySettings) -> list[Obj]:
    """The nodes a drill may pull: allow label present, not control plane (unless allowed), Ready."""
    return [node for node in nodes if not ineligible_reasons(node, safety)]


# --- blast radius ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BlastRadius:
    """What a fault on the chosen nodes removes from the cluster."""

    nodes: tuple[str, ...]
    gpus: int
    """GPU capacity of the chosen nodes."""
    total_gpus: int
    """GPU capacity of the whole cluster."""

    @property
    def gpu_share(self) -> float:
        return self.gpus / self.total_gpus if self.total_gpus else 0.0

    def describe(self) -> str:
        return (f"{len(self.nodes)} node(s) ({', '.join(self.nodes) or 'none'}) holding {self.gpus} of "
                f"{self.total_gpus} GPUs ({self.gpu_share:.1%})")


def check_blast_radius(chosen_nodes: Iterable[Obj], all_nodes: Iterable[Obj], safety: SafetySettings,
                       gpu_resource: str = GPU) -> BlastRadius:
    """Refuse a choice that touches an ineligible node or exceeds ``max_nodes`` or ``max_gpu_share``.

    GPUs are counted in ``gpu_resource``: pass the profile's, or a MIG cluster (``nvidia.com/mig-1g.10gb``) would
    count none and never reach ``max_gpu_share``. Returns the blast radius (for the evidence) when the choice is
    allowed; the dry run never connects, so it has none.
    """
    cluster = {_name(node): node for node in all_nodes}
    chosen: dict[str, Obj] = {}
    for node in chosen_nodes:
        chosen.setdefault(_name(node), node)
    unknown = sorted(set(chosen) - set(cluster))
    if unknown:
        raise SafetyError(f"refusing to pull {', '.join(unknown)}: not in the cluster's node list (deleted, or "
                          "a stale list); list the nodes again and re-plan")
    refused = [f"{name}: {'; '.join(reasons)}" for name, node in sorted(chosen.items())
               if (reasons := ineligible_reasons(cluster[name], safety))]
    if refused:
        raise SafetyError("refusing to pull nodes the target profile protects: " + " | ".join(refused)
                          + f". Choose nodes labelled {safety.allow_label} that are Ready and not control-plane, "
                          f"or label a node with `kubectl label node NAME {safety.allow_label}`")
    radius = BlastRadius(nodes=tuple(sorted(chosen)),
                         gpus=sum(_capacity(cluster[name], gpu_resource) for name in chosen),
                         total_gpus=sum(_capacity(node, gpu_resource) for node in cluster.values()))
    if len(radius.nodes) > safety.max_nodes:
        raise SafetyError(f"refusing to pull {radius.describe()}: safety.max_nodes is {safety.max_nodes}. "
                          "Pull fewer nodes, or raise safety.max_nodes in the target profile")
    if radius.gpu_share > safety.max_gpu_share + 1e-9:
        raise SafetyError(f"refusing to pull {radius.describe()}: safety.max_gpu_share is "
                          f"{safety.max_gpu_share:.1%} of the cluster's {gpu_resource} capacity. Pull a smaller "
                          "node, or raise safety.max_gpu_share in the target profile")
    return radius


# --- pre-flight --------------------------------------------------------------------------------------------


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _node_problems(node: Obj, gpu_resource: str) -> list[str]:
    name, problems = _name(node), []
    condition = _ready_condition(node)
    if condition is None:
        problems.append(f"node {name} reports no Ready condition (its kubelet never posted status)")
    elif condition.get("status") != "True":
        detail = ", ".join(f"{k} {condition[k]}" for k in ("reason", "lastTransitionTime") if condition.get(k))
        problems.append(f"node {name} is NotReady (Ready={condition.get('status')}"
                        + (f"; {detail}" if detail else "") + ")")
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("key") in DEGRADED_TAINTS:
            problems.append(f"node {name} has the taint {taint['key']}:{taint.get('effect', '')}")
    capacity, allocatable = _gpus(node, "capacity", gpu_resource), _gpus(node, "allocatable", gpu_resource)
    if allocatable < capacity:
        problems.append(f"node {name} has {allocatable} of {capacity} {gpu_resource} allocatable: the device "
                        f"plugin reports {capacity - allocatable} GPU(s) unhealthy")
    return problems


def _pod_problem(pod: Obj, now: datetime, stuck_after: timedelta) -> str | None:
    meta = pod.get("metadata") or {}
    deadline = _parse_time(meta.get("deletionTimestamp"))
    if deadline is None or now - deadline < stuck_after:
        return None
    stuck = int((now - deadline).total_seconds())
    node = (pod.get("spec") or {}).get("nodeName") or "no node"
    return (f"pod {meta.get('namespace', 'default')}/{meta.get('name', '<unnamed>')} on {node} has been "
            f"Terminating {stuck} s past its grace period (a finalizer or an unreachable kubelet holds it)")


def preflight(nodes: Iterable[Obj], pods: Iterable[Obj], safety: SafetySettings, *,
              gpu_resource: str = GPU, now: datetime | None = None,
              stuck_after: timedelta = STUCK_TERMINATING_AFTER) -> list[str]:
    """What makes the cluster already degraded, one line each (empty: healthy).

    ``now`` is the clock a pod's ``deletionTimestamp`` is compared against (default: the current UTC
    time); a pod counts as stuck Terminating ``stuck_after`` past that timestamp, which the API server
    sets to the end of the grace period.  ``safety`` is accepted for symmetry; the list does not depend
    on it (see :func:`require_preflight`).
    """
    del safety
    now = now or datetime.now(timezone.utc)
    problems = [problem for node in nodes for problem in _node_problems(node, gpu_resource)]
    problems += [problem for pod in pods if (problem := _pod_problem(pod, now, stuck_after)) is not None]
    return problems


def require_preflight(nodes: Iterable[Obj], pods: Iterable[Obj], safety: SafetySettings, *,
                      gpu_resource: str = GPU, now: datetime | None = None) -> list[str]:
    """Raise :class:`SafetyError` on a degraded cluster when ``safety.require_healthy``; else return the
    problems (for the run to report as warnings)."""
    problems = preflight(nodes, pods, safety, gpu_resource=gpu_resource, now=now)
    if problems and safety.require_healthy:
        listing = "\n".join(f"  - {problem}" for problem in problems)
        raise SafetyError(f"refusing to drill: the cluster is already degraded ({len(problems)} problem(s)):\n"
                          f"{listing}\nA drill would measure this damage, not the fault it injects. Fix these "
                          "first, or set safety.require_healthy: false in the target profile to drill anyway")
    return problems
