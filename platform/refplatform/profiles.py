"""Healing profiles: how fast the reference platform notices a lost node and how it recovers.

A profile is one typed bundle of timers read by three parties:

- :mod:`refplatform.cluster` gives the node agents ``--heartbeat`` (their
  Lease renewal interval) and adds the profile's spare nodes;
- the controllers (``python -m refplatform.controllers --profile NAME``) take
  the node-monitor grace period, the default NoExecute toleration and the
  healer's switches from it;
- ``firedrill up --profile NAME`` picks one.

Two profiles exist:

``tuned``
    What a GPU platform that cares about fault-to-resume time configures:
    1 s heartbeats, a 3 s grace period, evict at once (toleration 0 s), force-
    delete pods on a quarantined node (the ``out-of-service`` taint) and keep
    one spare node ready to take a lost node's place.

``k8s-defaults``
    Stock Kubernetes timers, the anchor the ``tuned`` numbers are compared
    with: the kubelet renews its Lease every 10 s, kube-controller-manager
    declares a node lost after 50 s and the ``DefaultTolerationSeconds``
    admission plugin lets pods stay 300 s on an unreachable node.  Nobody puts
    the ``out-of-service`` taint on a node (upstream leaves that to an admin),
    so pods of a dead node stay ``Terminating``; no spares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from refplatform.errors import RefPlatformError

__all__ = ["DEFAULT_PROFILE", "PROFILES", "K8S_DEFAULTS", "TUNED", "Profile", "ProfileError", "get_profile"]


class ProfileError(RefPlatformError):
    """An unknown profile name."""


@dataclass(frozen=True)
class Profile:
    """The healing timers and switches of a reference cluster."""

    name: str
    heartbeat: float
    """Seconds between Lease renewals by each node agent (``--heartbeat``).

    Upstream: the kubelet's ``nodeLeaseDurationSeconds`` is 40 s and it renews
    every 0.25 x that, 10 s.  The agent writes ``leaseDurationSeconds`` = 4 x
    the heartbeat; the controllers judge staleness by :attr:`node_monitor_grace_period`,
    as kube-controller-manager does."""
    node_monitor_grace_period: float
    """Seconds a Lease may go unrenewed before the node's Ready condition becomes
    ``Unknown`` and it is tainted ``node.kubernetes.io/unreachable``.

    Upstream: kube-controller-manager ``--node-monitor-grace-period``, 40 s up to
    1.31 and 50 s from 1.32 (kubernetes/kubernetes#126287)."""
    node_monitor_period: float
    """Seconds between the node lifecycle controller's looks at the Leases.

    Upstream: ``--node-monitor-period``, 5 s."""
    default_toleration_seconds: float
    """``tolerationSeconds`` of the implicit ``not-ready``/``unreachable`` NoExecute
    tolerations given to pods that carry none of their own.

    Upstream: the ``DefaultTolerationSeconds`` admission plugin,
    ``--default-not-ready-toleration-seconds`` and
    ``--default-unreachable-toleration-seconds``, 300 s."""
    spares: int
    """Spare nodes kept beyond the working nodes (label ``firedrill.dev/spare=true``,
    taint ``firedrill.dev/spare:NoSchedule``), released when a node is lost.
    Upstream has no such thing (cluster autoscalers and node pools do it)."""
    quarantine: bool
    """Whether the healer quarantines a lost node: cordon, label
    ``firedrill.dev/quarantine`` and the ``node.kubernetes.io/out-of-service:NoExecute``
    taint, after which the pods stuck ``Terminating`` there are force-deleted
    (upstream's pod garbage collector does that once an admin sets the taint)."""
    quarantine_after: float = 0.0
    """Seconds a node must stay not-Ready (after the grace period) before it is quarantined."""
    health_check_timeout: float = 0.5
    """Seconds to wait for a node agent's ``GET /healthz`` before calling it unhealthy."""
    self_fence: bool = False
    """Whether node agents fence themselves (kill their pods) once cut off from the API for
    :meth:`fence_after` seconds while a peer still reaches it (:mod:`refplatform.agent.fence`).
    Upstream's kubelet does not; medik8s Self Node Remediation and watchdog reboots do."""
    hpa_sync_period: float = 15.0
    """Seconds between the horizontal pod autoscaler's looks at each HorizontalPodAutoscaler.

    Upstream: kube-controller-manager ``--horizontal-pod-autoscaler-sync-period``, 15 s."""
    node_eviction_rate: float = 0.1
    """Nodes per second the node lifecycle controller taints ``NoExecute`` (the taint that evicts) in a healthy
    zone (:mod:`refplatform.core.disruption`).  Upstream: ``--node-eviction-rate``, 0.1."""
    secondary_node_eviction_rate: float = 0.01
    """The same in a partially disrupted zone larger than :attr:`large_cluster_size_threshold`.
    Upstream: ``--secondary-node-eviction-rate``, 0.01."""
    unhealthy_zone_threshold: float = 0.55
    """The not-Ready fraction (of more than 2 nodes) that puts a zone in partial disruption.
    Upstream: ``--unhealthy-zone-threshold``, 0.55."""
    large_cluster_size_threshold: int = 50
    """A partially disrupted zone of at most this many nodes stops evicting.
    Upstream: ``--large-cluster-size-threshold``, 50."""
    gpu_burn_in_seconds: float = 2.0
    """How long a node agent burns in a whole GPU whose Xid cleared before it returns to service (agent
    ``--burn-in-seconds``; :mod:`refplatform.gpu.lifecycle`).  Upstream's device plugin has no burn-in; NVIDIA's
    health tooling runs diagnostics before a node returns (docs/HEALING.md, "A GPU's way back").  ``k8s-defaults``
    keeps the same value (there is no upstream number to anchor it)."""
    gpu_flap_window: float = 60.0
    """A GPU that fails again within this many seconds of its return is held until a person clears it (agent
    ``--flap-window``)."""
    remediation_share: float = 0.25
    """The remediation budget (:mod:`refplatform.core.remediation`): the share of the pool (working and spare
    nodes) the healer may quarantine for a ``GpuFault`` within :attr:`remediation_window`; one more trips the
    breaker.  Upstream has no such thing; NVSentinel's circuit breaker caps cordons the same way."""
    remediation_min_nodes: int = 1
    """The remediation budget is at least this many nodes, however small the pool."""
    remediation_window: float = 600.0
    """The remediation budget's sliding window, seconds."""
    drain_interval: float = 1.0
    """The pause between two evictions of a GPU-fault drain (:mod:`refplatform.core.drain`): a node is emptied pod
    by pod, so a fault that clears halfway leaves the rest of its work running.  Upstream's ``kubectl drain``
    evicts every pod at once; NVSentinel's node drainer paces them.  ``k8s-defaults`` keeps the same value."""

    def fence_after(self) -> float | None:
        """The safe time before a cut-off node fences itself: one heartbeat before the grace period ends, so
        its old pods are gone before the control plane declares it lost and replaces them."""
        if not self.self_fence:
            return None
        return max(self.heartbeat, self.node_monitor_grace_period - self.heartbeat)

    def lease_duration_seconds(self) -> int:
        """What the agents write as ``leaseDurationSeconds`` (4 x the heartbeat, rounded up)."""
        return max(1, math.ceil(4 * self.heartbeat - 1e-9))

    def detect_bounds(self) -> tuple[float, float]:
        """Earliest and latest fault-to-detection delay these timers allow, in seconds.

        A fault lands somewhere in a heartbeat interval after the last renewal, so
        detection comes ``grace - heartbeat`` to ``grace`` after it, plus up to one
        monitor period."""
        return (max(0.0, self.node_monitor_grace_period - self.heartbeat),
                self.node_monitor_grace_period + self.node_monitor_period)


TUNED = Profile(
    name="tuned",
    heartbeat=1.0,
    node_monitor_grace_period=3.0,
    node_monitor_period=0.1,
    default_toleration_seconds=0.0,
    spares=1,
    quarantine=True,
    self_fence=True,
    hpa_sync_period=1.0,
    # A drill loses nodes a second apart; one taint every 0.1 s keeps its timings those of the grace period.
    node_eviction_rate=10.0,
)

K8S_DEFAULTS = Profile(
    name="k8s-defaults",
    heartbeat=10.0,
    node_monitor_grace_period=50.0,
    node_monitor_period=5.0,
    default_toleration_seconds=300.0,
    spares=0,
    quarantine=False,
)

PROFILES: dict[str, Profile] = {p.name: p for p in (TUNED, K8S_DEFAULTS)}
"""Every profile, by name."""

DEFAULT_PROFILE = TUNED.name


def get_profile(name: str) -> Profile:
    """The profile called ``name``; :class:`ProfileError` naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}") from None
