"""Confirming a node fault on a real cluster by the node itself: its Lease stops, or its Ready condition leaves True.

A real-cluster fault (``kubelet-stop``, ``command``) is an action whose own
success says nothing about the node: a privileged pod cannot report Succeeded
once the kubelet it stopped is gone, and an IPMI or cloud CLI that exits 0 has
only accepted a request.  So the fault is confirmed by what the node's kubelet
stops doing, read through the API:

- **the Lease stops.**  A kubelet renews its Lease in ``kube-node-lease``
  every ``leaseDurationSeconds`` x 0.25 (the kubelet's fixed renew fraction:
  a 40 s lease is renewed every 10 s).  The Lease counts as stopped once its
  ``renewTime`` has stayed the same, by the harness's own monotonic clock, for
  longer than two renew intervals (:data:`MISSED_RENEWALS`), i.e. half the
  lease duration: at least one renewal was missed by a whole interval of
  slack.  The clock starts when the harness first saw that ``renewTime``
  value, never at the server's timestamp, so a skew between the harness's and
  the server's clocks cannot confirm a fault early.
- **Ready leaves True.**  The node's Ready condition was True before the
  fault and is now False or Unknown (or gone): the control plane itself has
  noticed.
- **the Node is gone**: deleted after the fault (a cloud's controller removes
  the Node of a terminated instance).

Whichever comes first confirms the fault.  Nothing else does: past the
deadline the fault is unconfirmed and the drill INCONCLUSIVE, never PASS.

:class:`NodeDownWatch` is pure: it is fed the Node and Lease objects as the API
returns them and the harness's monotonic instant of each observation, and
reads no clock itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "MISSED_RENEWALS",
    "RENEW_FRACTION",
    "ConfirmedBy",
    "NodeConfirmation",
    "NodeDownWatch",
    "ready_status",
    "renew_interval",
    "stale_after",
]

Obj = Mapping[str, Any]

RENEW_FRACTION = 0.25
"""The kubelet renews its Lease every ``leaseDurationSeconds`` x this (nodeLeaseRenewIntervalFraction)."""
MISSED_RENEWALS = 2
"""A Lease is stopped once its renewTime stayed the same for longer than this many renew intervals."""
DEFAULT_LEASE_SECONDS = 40
"""The kubelet's default ``nodeLeaseDurationSeconds``, assumed when a Lease does not say."""


class ConfirmedBy(Enum):
    """What showed that the node went down."""

    LEASE_STOPPED = "lease-stopped"
    """The node's Lease was not renewed for longer than :data:`MISSED_RENEWALS` renew intervals."""
    NOT_READY = "not-ready"
    """The node's Ready condition, True before the fault, left True."""
    NODE_DELETED = "node-deleted"
    """The Node object, present before the fault, is gone."""


@dataclass(frozen=True, slots=True)
class NodeConfirmation:
    """The outcome of watching a node after a fault."""

    node: str
    confirmed: bool
    by: ConfirmedBy | None
    """What confirmed it; None when unconfirmed."""
    detail: str
    """One sentence for the evidence: what was seen, or why nothing was confirmed."""
    last_renew_time: str | None = None
    """The last ``renewTime`` the Lease showed (the server's clock): the kubelet was alive then."""
    unchanged_seconds: float = 0.0
    """How long (harness clock) the last ``renewTime`` stayed the same when the watch ended."""
    renewals_seen: int = 0
    """How many times the watch saw the Lease renewed after it started."""
    at: float | None = None
    """The harness's monotonic instant of the observation that confirmed the fault."""

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "confirmed": self.confirmed, "by": self.by.value if self.by else None,
                "detail": self.detail, "last_renew_time": self.last_renew_time,
                "unchanged_seconds": round(self.unchanged_seconds, 3), "renewals_seen": self.renewals_seen}


def ready_status(node: Obj | None) -> str | None:
    """The status of the node's Ready condition ("True", "False", "Unknown"), None when it has none."""
    for condition in ((node or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status"))
    return None


def _duration(lease: Obj | None) -> float:
    value = ((lease or {}).get("spec") or {}).get("leaseDurationSeconds")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return float(DEFAULT_LEASE_SECONDS)
    return float(value)


def renew_interval(lease: Obj | None) -> float:
    """Seconds between a healthy kubelet's renewals of ``lease``: ``leaseDurationSeconds`` x 0.25."""
    return _duration(lease) * RENEW_FRACTION


def stale_after(lease: Obj | None) -> float:
    """Seconds a ``renewTime`` must stay the same before the Lease counts as stopped (two renew intervals)."""
    return MISSED_RENEWALS * renew_interval(lease)


def _renew_time(lease: Obj | None) -> str | None:
    value = ((lease or {}).get("spec") or {}).get("renewTime")
    return str(value) if value else None


class NodeDownWatch:
    """Decides, observation by observation, whether a node went down after a fault (pure; no clock).

    ``before_node`` and ``before_lease`` are the objects read just before the fault (None: absent);
    ``now`` is the harness's monotonic instant of that read.  Feed every later read to :meth:`observe`;
    it returns the confirmation once there is one.  :meth:`unconfirmed` says why there was none.
    """

    def __init__(self, node: str, before_node: Obj | None, before_lease: Obj | None, now: float) -> None:
        self.node = node
        self.started = now
        self.was_ready = ready_status(before_node) == "True"
        self.had_node = before_node is not None
        self.lease: Obj | None = before_lease
        self.renew_time = _renew_time(before_lease)
        self.since = now
        """When the harness first saw the current ``renew_time``."""
        self.renewals = 0
        self.last_ready = ready_status(before_node)
        self.confirmation: NodeConfirmation | None = None

    def _confirm(self, by: ConfirmedBy, detail: str, now: float) -> NodeConfirmation:
        self.confirmation = NodeConfirmation(self.node, True, by, detail, self.renew_time, now - self.since,
                                             self.renewals, now)
        return self.confirmation

    def observe(self, node: Obj | None, lease: Obj | None, now: float) -> NodeConfirmation | None:
        """One read of the Node and its Lease at harness instant ``now``; the confirmation once there is one."""
        if self.confirmation is not None:
            return self.confirmation
        if now < self.since:
            raise ValueError(f"observations must not go back in time ({now} < {self.since})")
        renew = _renew_time(lease)
        if lease is not None:
            self.lease = lease
        if renew is not None and renew != self.renew_time:
            if self.renew_time is not None:
                self.renewals += 1
            self.renew_time, self.since = renew, now
        if node is None and self.had_node:
            return self._confirm(ConfirmedBy.NODE_DELETED, f"the Node {self.node} was deleted", now)
        status = ready_status(node)
        self.last_ready = status
        if self.was_ready and status != "True":
            shown = "no Ready condition" if status is None else f"Ready={status}"
            return self._confirm(ConfirmedBy.NOT_READY, f"node {self.node} left Ready=True ({shown})", now)
        if self.renew_time is not None and now - self.since > stale_after(self.lease):
            return self._confirm(
                ConfirmedBy.LEASE_STOPPED,
                f"the Lease of {self.node} was not renewed for {now - self.since:.1f} s (more than "
                f"{MISSED_RENEWALS} x its {renew_interval(self.lease):g} s renew interval; last renewTime "
                f"{self.renew_time})", now)
        return None

    def unconfirmed(self, now: float, timeout: float) -> NodeConfirmation:
        """The outcome when the deadline passed without a confirmation: what the node did instead."""
        if self.confirmation is not None:
            return self.confirmation
        need = stale_after(self.lease)
        if self.renew_time is None:
            lease = f"node {self.node} has no Lease in kube-node-lease to watch"
        elif self.renewals:
            lease = (f"its Lease was renewed {self.renewals} time(s) after the fault (last renewTime "
                     f"{self.renew_time})")
        else:
            lease = (f"its Lease's renewTime {self.renew_time} stayed the same for only {now - self.since:.1f} s "
                     f"of the {need:g} s the rule needs")
        ready = ("Ready stayed True" if self.was_ready else
                 f"Ready was not True before the fault (Ready={self.last_ready}), so it cannot leave True")
        hint = ""
        if timeout <= need:
            hint = (f"; fault.timeout_seconds ({timeout:g} s) is not longer than the {need:g} s a stopped Lease "
                    "takes to show: raise it")
        detail = (f"not confirmed within {timeout:g} s: {lease}, and {ready}; the node did not go down"
                  + hint)
        return NodeConfirmation(self.node, False, None, detail, self.renew_time, now - self.since, self.renewals)
