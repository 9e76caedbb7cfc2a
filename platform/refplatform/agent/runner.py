"""The node agent: log server + registration/heartbeat + pod sync, in one process."""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from refplatform.agent.clock import Clock, SystemClock, rfc3339
from refplatform.agent.gpus import GpuInventory, select_inventory
from refplatform.agent.heartbeat import NodeHeartbeat
from refplatform.agent.logs import LogServer, LogStore
from refplatform.agent.node import NodeConfig
from refplatform.agent.pods import PodSync
from refplatform.client import RestClient

__all__ = ["Agent", "AgentConfig"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentConfig:
    """Everything one node agent needs (the CLI's flags)."""

    api_url: str
    node: str
    data_dir: Path
    token: str | None = None
    ca_file: Path | None = None
    """CA bundle that verifies an https API server."""
    gpus: int = 8
    gpu_model: str = "H100-80GB"
    heartbeat: float = 1.0
    node_group: str | None = None
    simulate_gpus: bool = False
    """Ignore real GPUs even when NVML finds some."""
    cpu: str = "64"
    memory: str = "512Gi"
    max_pods: int = 110
    status_every: int = 10
    """Refresh the Node's conditions every N heartbeats."""
    log_port: int = 0
    watch_timeout: int = 30
    tick: float = 0.1

    def __post_init__(self) -> None:
        if self.heartbeat <= 0:
            raise ValueError("heartbeat must be > 0 seconds")
        if not self.node:
            raise ValueError("node name must not be empty")


class Agent:
    """One simulated node.  ``start()``, then ``stop()`` (idempotent)."""

    def __init__(self, config: AgentConfig, *, clock: Clock | None = None, gpus: GpuInventory | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.gpus = gpus or select_inventory(config.gpu_model, config.gpus, force_simulated=config.simulate_gpus)
        self.stop_event = threading.Event()
        agent = f"refplatform-agent/{config.node}"
        self.client = RestClient(config.api_url, config.token, ca_file=config.ca_file, timeout=5.0, user_agent=agent)
        # Heartbeats get their own pool and a shorter timeout, so slow pod traffic never delays them.
        self.hb_client = RestClient(
            config.api_url, config.token, ca_file=config.ca_file, timeout=max(1.0, 2 * config.heartbeat), user_agent=agent
        )
        self.logs = LogStore(config.data_dir / "logs" / config.node)
        self.log_server = LogServer(self.logs, port=config.log_port)
        self.node_config = NodeConfig(
            name=config.node,
            gpus=self.gpus,
            cpu=config.cpu,
            memory=config.memory,
            pods=str(config.max_pods),
            node_group=config.node_group,
            log_port=self.log_server.port,
        )
        self.heartbeat = NodeHeartbeat(
            self.hb_client,
            self.node_config,
            self.clock,
            config.heartbeat,
            status_every=config.status_every,
            stop_event=self.stop_event,
        )
        self.pods = PodSync(
            self.client, config.node, self.logs, self.clock, tick=config.tick, watch_timeout=config.watch_timeout
        )
        self._hb_thread: threading.Thread | None = None
        self._stopped = False

    @property
    def state_file(self) -> Path:
        return self.config.data_dir / "agents" / f"{self.config.node}.json"

    def start(self) -> None:
        self.log_server.start()
        self._hb_thread = threading.Thread(target=self.heartbeat.run, name="heartbeat", daemon=True)
        self._hb_thread.start()
        self.pods.start()
        self._write_state()
        log.info(
            "agent %s: %d x %s GPU(s)%s, log server on 127.0.0.1:%d, API %s",
            self.config.node,
            self.gpus.count,
            self.gpus.product,
            " (simulated)" if self.gpus.simulated else "",
            self.log_server.port,
            self.config.api_url,
        )

    def _write_state(self) -> None:
        state = {
            "node": self.config.node,
            "pid": os.getpid(),
            "logPort": self.log_server.port,
            "bootID": self.node_config.boot_id,
            "startedAt": rfc3339(self.clock.now()),
            "gpus": {"count": self.gpus.count, "product": self.gpus.product, "simulated": self.gpus.simulated},
        }
        path = self.state_file
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def stop(self, timeout: float = 5.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.stop_event.set()
        self.pods.stop(timeout)
        if self._hb_thread is not None:
            self._hb_thread.join(timeout)
        self.log_server.stop()
        self.client.close()
        self.hb_client.close()
        log.info("agent %s stopped", self.config.node)
