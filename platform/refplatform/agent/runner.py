"""The node agent: log server + registration/heartbeat + pod sync + job polls + pod Events, in one process.

Every API call goes through one :class:`~refplatform.agent.partition.PartitionGate`
(:meth:`Agent.partition` / :meth:`Agent.heal`, wired to SIGUSR1 / SIGUSR2 by
``__main__``).  A :class:`~refplatform.agent.freeze.FreezeDetector` notices when
the process was frozen (SIGSTOP) and has the pod sync thaw and resync.
:meth:`Agent.health` backs ``GET /healthz`` on the log server; :class:`~refplatform.agent.metrics.GpuMetrics`
backs ``GET /metrics`` (DCGM-exporter-style GPU metrics).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refplatform.agent.access import AuditLog, ClientList, EndpointGuard
from refplatform.agent.clock import Clock, SystemClock, rfc3339
from refplatform.agent.device import Device, socket_path_for
from refplatform.agent.events import PodEventRecorder
from refplatform.agent.fence import PEER_PROBE_S, SelfFence, monotonic_age, peer_health_urls
from refplatform.agent.freeze import FreezeDetector
from refplatform.agent.gpus import GpuInventory, select_inventory
from refplatform.agent.healthfault import InjectedHealth
from refplatform.agent.heartbeat import NodeHeartbeat
from refplatform.agent.jobs import DEFAULT_POLL, STALE_POLLS, JobCoordinator
from refplatform.agent.logs import LogServer, LogStore, ServingTLS
from refplatform.agent.metrics import GpuCollector, GpuMetrics
from refplatform.agent.node import NodeConfig
from refplatform.agent.partition import GatedClient, PartitionGate
from refplatform.agent.podip import PodAddressPool, default_pod_cidr
from refplatform.agent.pods import PodSync
from refplatform.agent.volumes import NodeDirs
from refplatform.core.disruption import DisruptionPolicy
from refplatform.client import RestClient
from refplatform.defects import Defect
from refplatform.gpu.device import DeviceSet
from refplatform.gpu.lifecycle import LifecycleRules
from refplatform.gpu.partition import PartitionConfig, load_partition_config

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
    peer_poll: float = DEFAULT_POLL
    """Seconds between two polls of a job's pods (one poll per job on this node)."""
    peer_stale: float | None = None
    """A gang view older than this stalls the ranks (default: 3 polls)."""
    freeze_threshold: float = 2.0
    """A wait that overruns by this many seconds means the process was frozen (SIGSTOP)."""
    fence_after: float | None = None
    """Fence this node (kill its pods) after this many seconds without a Lease renewal while a peer reaches
    the API (``--fence-after``; :mod:`refplatform.agent.fence`); None: never, like upstream's kubelet."""
    disruption: DisruptionPolicy = field(default_factory=DisruptionPolicy)
    """The control plane's disruption flags: a node cut off in a disruption does not fence itself."""
    defects: frozenset[Defect] = frozenset()
    """Defects from the defect zoo this agent runs with (``--defect``; docs/DEFECTS.md)."""
    partition_config: Path | None = None
    """``--partition-config``: GPU partitioning (docs/PARTITIONING.md); None keeps plain ``nvidia.com/gpu``."""
    pod_cidr: str | None = None
    """``--pod-cidr``: the loopback range of this node's pod IPs (None: derived from the node name)."""
    shutdown_grace: float = 2.0
    """On a graceful stop, seconds the pods' processes get between SIGTERM and SIGKILL."""
    serving_tls: ServingTLS | None = None
    """``--tls-cert-file``/``--tls-private-key-file``/``--client-ca-file``: the log server speaks HTTPS, as a
    real kube-apiserver expects of a kubelet (None: plain HTTP on loopback, as the reference API server proxies)."""
    client_tokens_file: Path | None = None
    """``--client-tokens-file``: who may call the log server's endpoints (:mod:`refplatform.agent.access`);
    None: they stay open (only ``/containerLogs`` behind ``--client-ca-file``), as before issue 15."""
    audit_log_path: Path | None = None
    """``--audit-log-path``: where refused calls to the endpoints are recorded (None: DIR/nodes/NODE/audit.log)."""
    node_labels: Mapping[str, str] = field(default_factory=dict)
    """``--node-labels``: extra labels the Node registers with (its rack, its NVLink domain), as the kubelet's."""
    link_bandwidth: float | None = None
    """``--link-bandwidth``: the node's link to the fabric in bytes per second, told to every container it runs
    (:mod:`refplatform.fabric`); None: nothing is told."""
    burn_in_seconds: float = 2.0
    """``--burn-in-seconds``: how long a whole GPU whose Xid cleared (or whose hold a person cleared) is burnt in
    (a diagnostic and a collective) before it returns to service (:mod:`refplatform.gpu.lifecycle`)."""
    flap_window: float = 60.0
    """``--flap-window``: a GPU that fails again within this many seconds of its return is held until a person
    clears it."""

    def __post_init__(self) -> None:
        if self.heartbeat <= 0:
            raise ValueError("heartbeat must be > 0 seconds")
        if self.peer_poll <= 0 or (self.peer_stale is not None and self.peer_stale <= 0):
            raise ValueError("peer poll interval and staleness bound must be > 0 seconds")
        if not self.node:
            raise ValueError("node name must not be empty")


class Agent:
    """One simulated node.  ``start()``, then ``stop()`` (idempotent)."""

    def __init__(self, config: AgentConfig, *, clock: Clock | None = None, gpus: GpuInventory | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.gpus = gpus or select_inventory(config.gpu_model, config.gpus, force_simulated=config.simulate_gpus)
        # An invalid partition config raises PartitionError here, before anything starts (the CLI exits 2).
        self.gpu_partition: PartitionConfig | None = None
        self.devices: DeviceSet | None = None
        gpu_model = config.gpu_model if self.gpus.simulated else self.gpus.product
        if config.partition_config is not None:
            self.gpu_partition = load_partition_config(config.partition_config)
            self.devices = DeviceSet(self.gpu_partition, gpu_model, self.gpus.count, self.gpus.memory_mib,
                                     leaky=Defect.LEAKY_MIG in config.defects,
                                     shared_health_lost=Defect.SHARED_HEALTH_LOST in config.defects)
        self.stop_event = threading.Event()
        agent = f"refplatform-agent/{config.node}"
        self.gate = PartitionGate()
        self.client = GatedClient(
            RestClient(config.api_url, config.token, ca_file=config.ca_file, timeout=5.0, user_agent=agent), self.gate
        )
        # Heartbeats get their own pool and a shorter timeout, so slow pod traffic never delays them.
        self.hb_client = GatedClient(
            RestClient(
                config.api_url, config.token, ca_file=config.ca_file, timeout=max(1.0, 2 * config.heartbeat), user_agent=agent
            ),
            self.gate,
        )
        # Peer polls too: a poll slower than the staleness bound is worthless anyway.
        stale = config.peer_stale if config.peer_stale is not None else STALE_POLLS * config.peer_poll
        self.jobs_client = GatedClient(
            RestClient(config.api_url, config.token, ca_file=config.ca_file, timeout=max(1.0, stale), user_agent=agent),
            self.gate,
        )
        # Pod Events are written off the pod sync thread, on their own pool, and dropped while partitioned.
        self.events_client = GatedClient(
            RestClient(config.api_url, config.token, ca_file=config.ca_file, timeout=2.0, user_agent=agent), self.gate
        )
        self.events = PodEventRecorder(self.events_client, config.node)
        # The container runtime: pod IPs from this node's range (a bad --pod-cidr raises PodAddressError here),
        # pod directories and volumes, and the simulated GPU driver the processes report to.
        self.pod_cidr = config.pod_cidr or default_pod_cidr(config.node)
        self.addresses = PodAddressPool(self.pod_cidr)
        self.dirs = NodeDirs(config.data_dir, config.node, config.defects)
        self.driver = Device(socket_path_for(config.data_dir, config.node), self.clock,
                             stalls_as_compute=Defect.STALLS_AS_COMPUTE in config.defects)
        self.logs = LogStore(config.data_dir / "logs" / config.node)
        self.audit: AuditLog | None = None
        guard = None
        if config.client_tokens_file is not None:
            clients = ClientList(config.client_tokens_file)  # a bad file: ClientListError, the CLI exits 1
            self.audit = AuditLog(config.audit_log_path or config.data_dir / "nodes" / config.node / "audit.log")
            guard = EndpointGuard(config.node, clients, self.audit)
        self.log_server = LogServer(self.logs, port=config.log_port, health=self.health, clock=self.clock,
                                    tls=config.serving_tls, guard=guard,
                                    api_probe=lambda: self.client.reachable(PEER_PROBE_S))
        self.node_config = NodeConfig(
            name=config.node,
            gpus=self.gpus,
            cpu=config.cpu,
            memory=config.memory,
            pods=str(config.max_pods),
            node_group=config.node_group,
            log_port=self.log_server.port,
            partition=self.gpu_partition,
            gpu_model=gpu_model,
            pod_cidr=self.pod_cidr,
            extra_labels=dict(config.node_labels),
        )
        self.heartbeat = NodeHeartbeat(
            self.hb_client,
            self.node_config,
            self.clock,
            config.heartbeat,
            status_every=config.status_every,
            stop_event=self.stop_event,
            ready_check=self._not_ready,
        )
        self.jobs = JobCoordinator(self.jobs_client, self.clock, poll_interval=config.peer_poll, stale_after=stale)
        self.pods = PodSync(
            self.client,  # type: ignore[arg-type]  # the gated client has the same verbs
            config.node,
            self.logs,
            self.clock,
            tick=config.tick,
            watch_timeout=config.watch_timeout,
            jobs=self.jobs,
            freeze_threshold=config.freeze_threshold,
            events=self.events,
            devices=self.devices,
            dirs=self.dirs,
            addresses=self.addresses,
            driver=self.driver,
            shutdown_grace=config.shutdown_grace,
            ignore_grace=Defect.DROP_IN_FLIGHT in config.defects,
            gpu_count=self.gpus.count,
            mistell_gpus=Defect.GPU_DOUBLE_BOOK in config.defects,
            sick_gpu_stays=Defect.SICK_GPU_STAYS in config.defects,
            gpu_stays_out=Defect.GPU_STAYS_OUT in config.defects,
            overreact_app_xid=Defect.OVERREACT_APP_XID in config.defects,
            gpu_lifecycle=LifecycleRules(config.burn_in_seconds, config.flap_window,
                                         burn_in=Defect.RETURN_WITHOUT_BURN_IN not in config.defects,
                                         hold_flapping=Defect.FLAP_BACK not in config.defects),
            link_bandwidth=config.link_bandwidth,
            visible_to_all=Defect.VISIBLE_TO_ALL in config.defects,
            api_seconds=self._api_seconds,
            atomic_rename=Defect.RESUME_TORN not in config.defects,
        )
        for defect, what in ((Defect.SICK_GPU_STAYS, "never reports a failed GPU unhealthy: it stays allocatable"),
                             (Defect.GPU_STAYS_OUT, "never returns a GPU an Xid took out of service"),
                             (Defect.OVERREACT_APP_XID, "takes a GPU out of service on an application Xid too"),
                             (Defect.RETURN_WITHOUT_BURN_IN, "returns a GPU at once when its Xid clears, no burn-in"),
                             (Defect.FLAP_BACK, "never holds a GPU that fails again soon after its return"),
                             (Defect.SHARED_HEALTH_LOST, "takes out only the one slice of a partitioned GPU an Xid "
                                                         "was seen on, and fails only its tenant")):
            if defect in config.defects:
                log.warning("defect %s: node %s %s", defect.value, config.node, what)
        if Defect.GPU_DOUBLE_BOOK in config.defects:
            log.warning("defect gpu-double-book: node %s tells every pod it holds its first GPUs (or the first slice "
                        "of its kind), whatever the books say", config.node)
        if Defect.VISIBLE_TO_ALL in config.defects:
            log.warning("defect visible-to-all: node %s gives every container every GPU's device node, and tells a "
                        "container that requested no GPU NVIDIA_VISIBLE_DEVICES=all", config.node)
        if Defect.RESUME_TORN in config.defects:
            log.warning("defect resume-torn: node %s tells every container its storage does not rename atomically "
                        "(\"atomic_rename\": false in the clocks file)", config.node)
        if Defect.DROP_IN_FLIGHT in config.defects:
            log.warning("defect drop-in-flight: node %s kills a deleted pod at once, ignoring its grace period",
                        config.node)
        self.metrics = GpuMetrics(GpuCollector(config.node, self.pods, self.gpus.count, self.gpus.product, gpu_model,
                                               misattribute=Defect.MISATTRIBUTED_METRICS in config.defects),
                                  stale=Defect.STALE_METRICS in config.defects)
        if Defect.MISATTRIBUTED_METRICS in config.defects:
            log.warning("defect misattributed-metrics: node %s labels each GPU's metrics with the next GPU's UUID",
                        config.node)
        if Defect.STALE_METRICS in config.defects:
            log.warning("defect stale-metrics: node %s's GPU metrics answer their first scrape forever", config.node)
        self.log_server.serve_metrics(self.metrics.render)
        if self.devices is not None:
            self.node_config.gpu_advertisement()  # validates against the model (PartitionError)
        # Xid injections: on MIG slices (the partition drill) and on whole GPUs (the GPU fault drill)
        self.heartbeat.on_node = self._note_node
        # Fleet faults (firedrill.dev/inject-health): the GpuFault condition, posted beside the kubelet's own
        self.injected_health = InjectedHealth(config.node, self.clock, on_change=self.heartbeat.kick)
        self.heartbeat.extra_state = self.injected_health.state
        self.heartbeat.extra_conditions = self.injected_health.conditions
        self.heartbeat.unhealthy_gpus = self.pods.reported_unhealthy
        self.heartbeat.withdrawn = self.pods.withdrawn
        self.heartbeat.gpu_health = self.pods.gpu_health.annotation
        self.heartbeat.throttled_gpus = self.pods.throttled_gpus
        self.pods.on_health = self.heartbeat.kick
        self.fence: SelfFence | None = None
        if config.fence_after is not None:
            if Defect.SPLIT_BRAIN in config.defects:
                log.warning("defect split-brain: node %s never fences itself when cut off", config.node)
            else:
                self.fence = SelfFence(config.node, config.fence_after, min(config.heartbeat, config.fence_after / 2),
                                       monotonic_age(self.heartbeat.last_renewal),
                                       lambda: peer_health_urls(config.data_dir, config.node), self.pods.fence,
                                       token=config.token, reach_api=lambda: self.client.reachable(PEER_PROBE_S),
                                       disruption=config.disruption)
        self.freeze = FreezeDetector(config.freeze_threshold)
        self.freeze.on_freeze(self._on_freeze)
        self.gate.on_change(self._on_partition)
        self._hb_thread: threading.Thread | None = None
        self._stopped = False

    @property
    def state_file(self) -> Path:
        return self.config.data_dir / "agents" / f"{self.config.node}.json"

    def start(self) -> None:
        self.driver.start()
        self.log_server.start()
        # before the first heartbeat: once the node is Ready, `firedrill up` says so, and whoever then reads this
        # agent's state (its pid, its log port) must find it
        self._write_state()
        self._hb_thread = threading.Thread(target=self.heartbeat.run, name="heartbeat", daemon=True)
        self._hb_thread.start()
        self.jobs.start()
        self.events.start()
        self.pods.start()
        self.freeze.start()
        if self.fence is not None:
            self.fence.start()
        log.info(
            "agent %s: %d x %s GPU(s)%s, log server on %s://127.0.0.1:%d, API %s",
            self.config.node,
            self.gpus.count,
            self.gpus.product,
            " (simulated)" if self.gpus.simulated else "",
            self.log_server.scheme,
            self.log_server.port,
            self.config.api_url,
        )

    # -- faults and health -----------------------------------------------------

    def partition(self) -> None:
        """Simulate a network partition: every API call fails as unreachable until :meth:`heal`."""
        if not self.gate.partition():
            log.info("partition requested, but already partitioned")

    def heal(self) -> None:
        """End the simulated partition: resync pods, poll jobs and heartbeat at once."""
        if not self.gate.heal():
            log.info("heal requested, but not partitioned")

    def _on_partition(self, partitioned: bool) -> None:
        if partitioned:
            log.warning("network partition: all API traffic of node %s stopped; pods keep running locally", self.config.node)
            return
        log.warning("network partition healed: node %s resyncs its pods, jobs and heartbeat", self.config.node)
        self.pods.resync()
        self.jobs.poll_now()
        self.heartbeat.kick()

    def _on_freeze(self, seconds: float) -> None:
        self.pods.note_freeze(seconds)
        self.jobs.poll_now()
        self.heartbeat.kick()

    def _note_node(self, node: dict[str, Any]) -> None:
        """The Node as the heartbeat just read it: its fault injections (Xids, throttles, fleet faults)."""
        try:
            self.pods.note_node(node)
        finally:  # one injection's trouble never hides another's
            self.injected_health.note_node(node)

    def _api_seconds(self, thread: int) -> float:
        """How long ``thread`` has waited for the API server, through any of the agent's clients."""
        return sum(c.api_seconds(thread) for c in (self.client, self.hb_client, self.jobs_client, self.events_client))

    def _not_ready(self) -> str | None:
        """Why this node cannot run pods although it heartbeats (``None``: it can)."""
        stalled = self.pods.stalled_for()
        limit = max(2.0, 20 * self.config.tick)
        if stalled is not None and stalled > limit:
            return f"pod sync loop stalled for {stalled:.1f}s"
        return None

    def health(self) -> tuple[bool, str]:
        """``(True, "ok")`` while heartbeating, not partitioned, and the pod sync loop runs; else ``(False, why)``."""
        if self.gate.partitioned:
            return False, f"partitioned for {self.gate.partitioned_for():.1f}s: no API traffic"
        healthy, why = self.heartbeat.health()
        if not healthy:
            return False, why
        not_ready = self._not_ready()
        if not_ready:
            return False, not_ready
        return True, "ok"

    def _write_state(self) -> None:
        state = {
            "node": self.config.node,
            "pid": os.getpid(),
            "logPort": self.log_server.port,
            "logScheme": self.log_server.scheme,
            "bootID": self.node_config.boot_id,
            "startedAt": rfc3339(self.clock.now()),
            "podCIDR": self.pod_cidr,
            "deviceSocket": str(self.driver.path),
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
        self.heartbeat.kick()
        self.injected_health.stop()
        self.freeze.stop()
        if self.fence is not None:
            self.fence.stop()
        self.pods.stop(timeout)  # ends the pods' processes first (SIGTERM, shutdown grace, SIGKILL)
        self.driver.stop()
        self.jobs.stop(timeout)
        self.events.stop(min(timeout, 2.0))
        if self._hb_thread is not None:
            self._hb_thread.join(timeout)
        self.log_server.stop()
        if self.audit is not None:
            self.audit.close()
        self.client.close()
        self.hb_client.close()
        self.jobs_client.close()
        self.events_client.close()
        log.info("agent %s stopped", self.config.node)
