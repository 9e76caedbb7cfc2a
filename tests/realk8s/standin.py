"""A minimal kubelet stand-in for the real control plane tests: a Node with simulated GPUs, registered
with the node's own credentials (user ``system:node:<name>``, group ``system:nodes``), and a Lease in
``kube-node-lease`` renewed on a background thread.

The refplatform node agent takes this role in the drills (issue 13, part 2); this stand-in only lets
the fixture's own tests watch the real node lifecycle controller work.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client

from tests.realk8s.cluster import StaticUser

NODE_LEASE_NAMESPACE = "kube-node-lease"
T = TypeVar("T")


def node_user(name: str) -> StaticUser:
    """The static-token identity a kubelet for node ``name`` uses (Node authorizer, NodeRestriction)."""
    return StaticUser(f"system:node:{name}", ("system:nodes",))


def api_client(url: str, ca_file: Path, token: str) -> client.ApiClient:
    cfg = client.Configuration(host=url)
    cfg.ssl_ca_cert = str(ca_file)
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


def micro_time(at: float) -> str:
    """A MicroTime as kube-apiserver parses it (RFC 3339 with exactly 6 fractional digits)."""
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | datetime.datetime) -> float:
    """Seconds since the epoch from an API timestamp (a string, or the client's datetime)."""
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns something other than None/False; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def gpu_node_manifest(name: str, gpus: int = 8, port: int = 10250) -> dict[str, Any]:
    """A Node as a GPU kubelet registers it: capacity with nvidia.com/gpu, GFD labels, Ready=True."""
    now = rfc3339(time.time())
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "spec": {},
        "status": {
            "capacity": resources, "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "firedrill kubelet stand-in is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        },
    }


@dataclass
class NodeStandIn:
    """One node's kubelet identity: registers its Node and creates/renews its Lease."""

    name: str
    api: client.ApiClient
    lease_duration_seconds: int = 40
    last_renew: float = 0.0
    """Wall-clock time of the last successful Lease write (0 before the first)."""

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    def register(self, gpus: int = 8) -> dict[str, Any]:
        created: dict[str, Any] = self.api.sanitize_for_serialization(
            self.core.create_node(gpu_node_manifest(self.name, gpus)))
        return created

    def renew(self) -> dict[str, Any]:
        """Create the Lease, or move its renewTime to now (what a kubelet does every renew interval)."""
        now = time.time()
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": NODE_LEASE_NAMESPACE},
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": self.lease_duration_seconds,
                         "renewTime": micro_time(now)}}
        if self.last_renew == 0.0:
            lease = self.coordination.create_namespaced_lease(NODE_LEASE_NAMESPACE, body)
        else:
            lease = self.coordination.patch_namespaced_lease(self.name, NODE_LEASE_NAMESPACE,
                                                             {"spec": body["spec"]})
        self.last_renew = now
        result: dict[str, Any] = self.api.sanitize_for_serialization(lease)
        return result


@dataclass
class Heartbeat:
    """Renews the Leases of the nodes it holds every ``interval`` seconds on one background thread."""

    interval: float
    _nodes: dict[str, NodeStandIn] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)

    def add(self, node: NodeStandIn) -> None:
        node.renew()
        with self._lock:
            self._nodes[node.name] = node

    def remove(self, name: str) -> float:
        """Stop renewing ``name``'s Lease; returns the wall time of its last renewal."""
        with self._lock:
            node = self._nodes.pop(name)
        return node.last_renew

    def start(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._run, name="realk8s-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                nodes = list(self._nodes.values())
                for node in nodes:
                    try:
                        node.renew()
                    except Exception as exc:  # noqa: BLE001 - recorded and asserted on by the tests
                        self.errors.append(f"{node.name}: {exc}")
