"""Node registration and heartbeats.

- :meth:`NodeHeartbeat.register` creates the Node (or, when it exists already,
  e.g. after an agent restart, merges our labels into it and rewrites its
  status), retrying with backoff until it succeeds or the agent stops.
- :meth:`NodeHeartbeat.beat`, every heartbeat interval, renews the Lease
  ``kube-node-lease/<node>`` (PUT with the last known resourceVersion, like the
  kubelet; on 409 it rereads, on 404 it recreates), and every
  ``status_every`` beats, or right after a failure or a stall, refreshes the
  Node's conditions (``lastHeartbeatTime``; ``lastTransitionTime`` moves only
  when a status changes, e.g. back from a controller's Ready=Unknown).  A Node
  that disappeared is registered again.
- :meth:`NodeHeartbeat.health` says whether the node is healthy: registered and
  its last heartbeat succeeded within the lease duration.  The Ready condition
  is ``True``/``KubeletReady`` while the agent's own ``ready_check`` passes, and
  ``False``/``KubeletNotReady`` (with its message) when it does not; a change is
  written on the next beat.

Nothing here raises out of the loop: the API server may restart at any time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from tenacity import (
    Retrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_when_event_set,
    wait_exponential_jitter,
)
from tenacity.wait import wait_base

from refplatform.agent.clock import Clock
from refplatform.agent.node import LEASE_NAMESPACE, NodeConfig, build_lease, build_node, lease_duration_seconds, node_status
from refplatform.client import (
    MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiStatusError, ApiUnreachable, RestClient, resource_path,
)
from refplatform.gpu.health import UNHEALTHY_ANNOTATION, format_unhealthy
from refplatform.gpu.lifecycle import GPU_HEALTH_ANNOTATION
from refplatform.gpu.throttle import THROTTLED_ANNOTATION

__all__ = ["NodeHeartbeat"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class NodeHeartbeat:
    """Registers the Node and keeps its Lease and Ready condition fresh."""

    def __init__(
        self,
        client: RestClient,
        config: NodeConfig,
        clock: Clock,
        interval: float,
        *,
        status_every: int = 10,
        stop_event: threading.Event | None = None,
        register_wait: wait_base | None = None,
        ready_check: Callable[[], str | None] | None = None,
        on_node: Callable[[Obj], None] | None = None,
    ) -> None:
        """``ready_check``: ``None`` while the node can run pods, else why not (reported as Ready=False);
        ``on_node``: called with the Node read on every beat (the agent reads its fault-injection annotation);
        without it a beat reads the Node only when it refreshes the status."""
        self.client = client
        self.config = config
        self.clock = clock
        self.interval = interval
        self.status_every = max(1, status_every)
        self.lease_duration = lease_duration_seconds(interval)
        self.stop_event = stop_event or threading.Event()
        self.register_wait = register_wait or wait_exponential_jitter(multiplier=0.2, max=5.0, jitter=0.2)
        self.node_uid: str | None = None
        self.registered = threading.Event()
        self.beats = 0
        self.renewals = 0
        self._lease: Obj | None = None
        self._last_ok: float | None = None
        self._failed = False
        self._last_error = ""
        self._since_status = 0
        self.ready_check = ready_check or (lambda: None)
        self.on_node = on_node
        self._reported_not_ready: str | None = None
        self._kick = threading.Event()
        self.unhealthy_gpus: Callable[[], tuple[int, ...]] = tuple
        """The whole GPUs out of service (the pod sync's device health); reported in allocatable and the
        ``firedrill.dev/unhealthy-gpus`` annotation at the next beat after a change."""
        self._reported_unhealthy: tuple[int, ...] | None = None
        self.withdrawn: Callable[[], Mapping[str, int]] = dict
        """On a partitioned node: what its slices out of service take off each advertised resource (they change
        with :attr:`unhealthy_gpus`, whose indexes the ``unhealthy-gpus`` annotation then leaves out: the scheduler
        reads them as indexes of ``nvidia.com/gpu``, which are slices there)."""
        self.gpu_health: Callable[[], str | None] = lambda: None
        """The ``firedrill.dev/gpu-health`` annotation's value (None: absent): each GPU out of service with its state
        and the last burn-ins (:mod:`refplatform.gpu.lifecycle`); written at the next beat after a change, before
        the allocatable it explains."""
        self._reported_gpu_health: str | None = None
        self.throttled_gpus: Callable[[], tuple[int, ...]] = tuple
        """The GPUs whose clocks the driver holds below full speed; reported in the ``firedrill.dev/throttled-gpus``
        annotation at the next beat after a change."""
        self._reported_throttled: tuple[int, ...] | None = None
        self.extra_state: Callable[[], object] = lambda: None
        """What the agent's own conditions beside the kubelet's say now (``GpuFault``:
        :mod:`refplatform.agent.healthfault`); a change is written at the next beat."""
        self.extra_conditions: Callable[[datetime, list[Obj] | None], list[Obj]] = lambda now, previous: []
        """Those conditions at ``now``, given the Node's current ones (their ``lastTransitionTime``)."""
        self._reported_extra: object = None
        self._node_path = resource_path("", "v1", "nodes", None, config.name)
        self._lease_path = resource_path("coordination.k8s.io", "v1", "leases", LEASE_NAMESPACE, config.name)

    # -- registration ------------------------------------------------------

    def register(self) -> bool:
        """Create or update the Node, retrying with backoff; False if stopped first."""
        retrying = Retrying(
            retry=retry_if_exception_type((ApiUnreachable, ApiStatusError)),
            wait=self.register_wait,
            stop=stop_when_event_set(self.stop_event),
            sleep=self._sleep,
            before_sleep=before_sleep_log(log, logging.INFO),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    if self.stop_event.is_set():
                        return False
                    self._register_once()
        except (ApiUnreachable, ApiStatusError) as err:
            log.warning("registration abandoned (stopping): %s", err)
            return False
        return True

    def _register_once(self) -> None:
        now = self.clock.now()
        body = build_node(self.config, now)
        previous_conditions = None
        try:
            node = self.client.create(resource_path("", "v1", "nodes"), body)
            log.info("registered node %s", self.config.name)
        except ApiStatusError as err:
            if not err.conflict:
                raise
            patch = {"metadata": {"labels": body["metadata"]["labels"], "annotations": body["metadata"]["annotations"]}}
            if body.get("spec"):
                patch["spec"] = body["spec"]  # the pod range (this agent's --pod-cidr)
            node = self.client.patch(self._node_path, patch, MERGE_PATCH)
            previous_conditions = (node.get("status") or {}).get("conditions")
            log.info("node %s exists; updated it", self.config.name)
        # Write the status through the status subresource too: a create may drop it, an update must.
        not_ready = self.ready_check()
        node = self.client.patch(
            self._node_path + "/status", {"status": node_status(self.config, now, previous_conditions, not_ready)},
            STRATEGIC_MERGE_PATCH,  # others' conditions (RemediationHeld) outlive an agent restart
        )
        self._reported_not_ready = not_ready
        self.node_uid = str((node.get("metadata") or {}).get("uid") or "") or None
        self._since_status = 0
        self.registered.set()

    def _sleep(self, seconds: float) -> None:
        """Backoff that a stop interrupts."""
        self.stop_event.wait(seconds)

    # -- health ------------------------------------------------------------

    def health(self) -> tuple[bool, str]:
        """``(True, "ok")`` while registered and heartbeating, else ``(False, why)``."""
        if not self.registered.is_set():
            return False, "not registered yet"
        if self._failed:
            return False, f"heartbeat failing: {self._last_error}"
        last = self._last_ok
        if last is None:
            return False, "no heartbeat yet"
        age = time.monotonic() - last
        if age > self.lease_duration:
            return False, f"last heartbeat {age:.1f}s ago (lease {self.lease_duration}s)"
        return True, "ok"

    def last_renewal(self) -> float | None:
        """``time.monotonic()`` of the last successful heartbeat (None: none yet)."""
        return self._last_ok

    def kick(self) -> None:
        """Beat now (e.g. the network is back) instead of at the next interval."""
        self._kick.set()

    # -- heartbeat ---------------------------------------------------------

    def run(self) -> None:
        """Register, then beat every interval until stopped."""
        if not self.register():
            return
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            self.beat()
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:  # we fell behind (stall, slow server): do not burst
                next_at = now + self.interval
            if self._kick.wait(next_at - now):
                self._kick.clear()
                next_at = time.monotonic()

    def beat(self) -> bool:
        """One heartbeat; True if the lease was renewed."""
        self.beats += 1
        mono = time.monotonic()
        stalled = self._last_ok is not None and mono - self._last_ok > self.lease_duration
        try:
            self._renew_lease()
            self._since_status += 1
            changed = (self.ready_check() != self._reported_not_ready
                       or self.unhealthy_gpus() != (self._reported_unhealthy or ())
                       or self.gpu_health() != self._reported_gpu_health
                       or self.throttled_gpus() != (self._reported_throttled or ())
                       or self.extra_state() != self._reported_extra)
            if self._failed or stalled or changed or self._since_status >= self.status_every:
                self._refresh_status()
            elif self.on_node is not None:
                self._notify(self.client.get(self._node_path))
        except (ApiUnreachable, ApiStatusError) as err:
            if not self._failed:
                log.warning("heartbeat failed: %s", err)
            else:
                log.debug("heartbeat failed again: %s", err)
            self._failed = True
            self._last_error = str(err)
            return False
        if self._failed:
            log.info("heartbeat recovered")
        self._failed = False
        self._last_ok = mono
        return True

    def _renew_lease(self) -> None:
        for _ in range(2):
            now = self.clock.now()
            if self._lease is None:
                try:
                    self._lease = self.client.get(self._lease_path)
                except ApiStatusError as err:
                    if not err.not_found:
                        raise
                    self._lease = self._create_lease(now)
                    self.renewals += 1
                    return
            body = build_lease(self.config.name, self.node_uid, self.lease_duration, now, self._lease)
            try:
                self._lease = self.client.update(self._lease_path, body)
                self.renewals += 1
                return
            except ApiStatusError as err:
                self._lease = None
                if not (err.conflict or err.not_found):
                    raise
                log.debug("lease renewal %s; rereading", err.reason or err.code)
        raise ApiStatusError(409, "Conflict", "lease kept changing under us")

    def _create_lease(self, now: datetime) -> Obj:
        body = build_lease(self.config.name, self.node_uid, self.lease_duration, now)
        body["metadata"].pop("resourceVersion", None)
        path = resource_path("coordination.k8s.io", "v1", "leases", LEASE_NAMESPACE)
        try:
            return self.client.create(path, body)
        except ApiStatusError as err:
            if not err.not_found:
                raise
        # The namespace itself is missing: create it (ignoring a race), then the lease.
        try:
            self.client.create(
                resource_path("", "v1", "namespaces"),
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}},
            )
        except ApiStatusError as err:
            if not err.conflict:
                raise
        return self.client.create(path, body)

    def _notify(self, node: Obj) -> None:
        if self.on_node is None:
            return
        try:
            self.on_node(node)
        except Exception:  # a bad annotation must never stop the heartbeat
            log.exception("node callback failed")

    def _refresh_status(self) -> None:
        now = self.clock.now()
        try:
            node = self.client.get(self._node_path)
        except ApiStatusError as err:
            if not err.not_found:
                raise
            log.warning("node %s disappeared; registering again", self.config.name)
            self._register_once()
            self._lease = None  # its owner changed
            return
        self._notify(node)
        uid = (node.get("metadata") or {}).get("uid")
        if uid and uid != self.node_uid:
            self.node_uid = str(uid)
            self._lease = None
        conditions = (node.get("status") or {}).get("conditions")
        not_ready = self.ready_check()
        unhealthy = self.unhealthy_gpus()
        status = node_status(self.config, now, conditions, not_ready, len(unhealthy), self.withdrawn())
        extra = self.extra_state()
        patch: Obj = {"conditions": status["conditions"] + self.extra_conditions(now, conditions)}
        throttled = self.throttled_gpus()
        annotations: Obj = {}
        if unhealthy != self._reported_unhealthy:
            patch["allocatable"] = status["allocatable"]
            # the scheduler's word for which GPUs, as the kubelet's device manager knows which devices
            whole = self.config.partition is None or self.config.partition.mode == "none"
            annotations[UNHEALTHY_ANNOTATION] = (format_unhealthy(unhealthy) if whole else "") or None
        if throttled != self._reported_throttled:
            annotations[THROTTLED_ANNOTATION] = format_unhealthy(throttled) or None
        gpu_health = self.gpu_health()
        if gpu_health != self._reported_gpu_health:
            annotations[GPU_HEALTH_ANNOTATION] = gpu_health
        if annotations:
            self.client.patch(self._node_path, {"metadata": {"annotations": annotations}}, MERGE_PATCH)
        # Strategic merge, as the kubelet patches its status: conditions merge by type, so one the agent does not
        # own (the healer's RemediationHeld) is never wiped by a beat; a merge patch would replace the list.
        self.client.patch(self._node_path + "/status", {"status": patch}, STRATEGIC_MERGE_PATCH)
        self._reported_extra = extra
        self._reported_unhealthy = unhealthy
        self._reported_throttled = throttled
        self._reported_gpu_health = gpu_health
        self._reported_not_ready = not_ready
        if not_ready:
            log.warning("node %s reported not ready: %s", self.config.name, not_ready)
        self._since_status = 0
