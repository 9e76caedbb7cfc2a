"""A fleet of hollow nodes: their registration, heartbeats and pods, in one process."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from refplatform.agent.clock import SystemClock
from refplatform.agent.gpus import GpuInventory, lookup_model
from refplatform.agent.heartbeat import NodeHeartbeat
from refplatform.agent.node import NodeConfig
from refplatform.client import RestClient
from refplatform.errors import RefPlatformError
from refplatform.hollow.errors import HollowError
from refplatform.hollow.heartbeats import HeartbeatWheel
from refplatform.hollow.kubelet import HollowKubelet

__all__ = ["FleetSpec", "HollowFleet"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FleetSpec:
    """What the fleet simulates and how hard it works."""

    api: str
    tokens: Mapping[str, str]
    """Each node's token, by node name: the fleet's nodes are exactly these."""
    ca_file: Path | None = None
    gpus: int = 8
    gpu_model: str = "H100-80GB"
    heartbeat: float = 10.0
    """Seconds between Lease renewals of each node (the profile's heartbeat)."""
    status_every: int = 10
    """Every how many beats a node also refreshes its Node's conditions (the agents' default)."""
    workers: int = 8
    """Threads for registration and heartbeats, and as many again for pod writes."""
    connections: int = 16
    """Connections to the API server, shared by all identities."""

    def __post_init__(self) -> None:
        if not self.tokens:
            raise HollowError("a fleet needs at least one node (and its token)")
        if self.gpus < 0:
            raise HollowError(f"--gpus must be >= 0, not {self.gpus}")
        if self.heartbeat <= 0:
            raise HollowError(f"--heartbeat must be > 0 seconds, not {self.heartbeat}")
        try:
            lookup_model(self.gpu_model)
        except RefPlatformError as exc:
            raise HollowError(f"--gpu-model: {exc}") from None


class HollowFleet:
    """Registers every node, then keeps their Leases fresh and starts the pods bound to them."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self.stop_event = threading.Event()
        self.clock = SystemClock()
        self._base = RestClient(spec.api, None, ca_file=spec.ca_file, maxsize=spec.connections,
                                user_agent=f"refplatform-hollow/{os.getpid()}")
        self.clients = {node: self._base.with_token(token) for node, token in sorted(spec.tokens.items())}
        model = lookup_model(spec.gpu_model)
        inventory = GpuInventory(spec.gpus, model.product, model.memory_mib, simulated=True, note="hollow node")
        self.heartbeats = [NodeHeartbeat(client, NodeConfig(name=node, gpus=inventory, gpu_model=model.name),
                                         self.clock, spec.heartbeat, status_every=spec.status_every,
                                         stop_event=self.stop_event)
                           for node, client in self.clients.items()]
        self.wheel = HeartbeatWheel(self.heartbeats, spec.heartbeat, workers=spec.workers,
                                    stop_event=self.stop_event)
        first = next(iter(self.clients.values()))
        self.kubelet = HollowKubelet(first, self.clients, workers=spec.workers, clock=self.clock,
                                     stop_event=self.stop_event)

    @property
    def nodes(self) -> list[str]:
        return list(self.clients)

    def register(self) -> bool:
        """Register every node (Node and its status; the Lease comes with the first beat), ``workers`` at a
        time; False if stopped first."""
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.spec.workers, thread_name_prefix="hollow-register") as pool:
            done = list(pool.map(lambda hb: hb.register(), self.heartbeats))
        if not all(done):
            return False
        log.info("registered %d hollow nodes in %.1fs", len(self.heartbeats), time.monotonic() - started)
        return True

    def start(self) -> bool:
        """Register, then start the heartbeats and the pod watch; False if stopped while registering."""
        if not self.register():
            return False
        self.wheel.start()
        self.kubelet.start()
        return True

    def stop(self) -> None:
        self.stop_event.set()
        self.kubelet.stop()
        self.wheel.stop()
        self._base.close()
