"""Start and stop a whole reference cluster: the API server and one agent process per node.

Used by ``firedrill up``, by the harness's embedded target and by the
integration tests, so all three start the platform the same way.  Everything
lives under one data directory::

    DIR/store.sqlite3      objects, change log
    DIR/audit.log          the API server's audit log (audit.k8s.io/v1 Events, one JSON line each)
    DIR/apiserver.json     the server's URL and pid while it runs
    DIR/pod-range          the first second octet of its nodes' pod ranges (refplatform.podranges)
    DIR/tokens.yaml        bearer tokens (mode 0600), kept across restarts: one identity per component
                           (refplatform.credentials: admin, controllers, scheduler, each node, the tenants)
    DIR/*-token, DIR/node-<node>.token   each process's own token (0600)
    DIR/agent-clients.yaml who may call the agents' endpoints (token digests; refplatform.agent.access)
    DIR/pki/               the cluster's CA and the API server's TLS certificate
    DIR/kubeconfig         for kubectl and the kubernetes client, as firedrill-admin (mode 0600)
    DIR/tenant-a.kubeconfig, DIR/tenant-b.kubeconfig, DIR/node-<node>.kubeconfig   the same, as that identity
    DIR/nodes/<node>/audit.log   each agent's record of the calls it refused
    DIR/logs/*.log         each process's own log

No token is ever written to a log or printed: processes read theirs from a file.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from refplatform import autogroup, bootstrap
from refplatform.credentials import (ADMIN, AGENT_CLIENTS_FILE, CONTROLLER, KUBECONFIG_FILE, SCHEDULER, TENANTS,
                                     TOKENS_FILE, Credentials, CredentialsError, node_user)
from refplatform.defects import DefectError, parse_defects
from refplatform.errors import RefPlatformError
from refplatform.fabric import LINK_BANDWIDTH, node_link
from refplatform.pki import ensure_pki
from refplatform.podranges import OctetClaim, PodRangeError, claim_octets
from refplatform.profiles import DEFAULT_PROFILE, Profile, get_profile
from refplatform.warden import warden

ADDRESS_FILE = "apiserver.json"
POD_RANGE_FILE = "pod-range"
"""The first second octet this cluster's pod ranges had (:mod:`refplatform.podranges`), tried first on a restart."""
AUDIT_LOG_FILE = "audit.log"
SPARE_LABEL = SPARE_TAINT = "firedrill.dev/spare"
"""The healer's spare pool label and taint key (:mod:`refplatform.core.healing`, which the harness's side of this
module may not import: tests/unit/test_layers.py keeps the two equal)."""
QUARANTINE_LABEL = "firedrill.dev/quarantine"
RACK_LABEL = "cloud.provider.com/topology-rack"
"""The node label naming a node's rack: the label Kueue's and KAI's topology-aware scheduling examples use."""
BLOCK_LABEL = "cloud.provider.com/topology-block"
"""The node label naming the block (a group of racks under one spine) a node's rack is in."""
__all__ = ["AUDIT_LOG_FILE", "BLOCK_LABEL", "KUBECONFIG_FILE", "RACK_LABEL", "TOKENS_FILE", "Cluster", "ClusterError",
           "ClusterSpec", "ManagedProcess", "wait_until"]


class ClusterError(RefPlatformError):
    """The cluster could not be started or stopped; the message says which process and where its log is."""


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass (then raise, naming ``what``)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class ManagedProcess:
    """A child process this code started, with its log file.  Only ever signals its own child (and its group).

    Every one is started in a new session, so its process group is its own pid and holds
    exactly what it started itself and did not move elsewhere: a node agent's pods.  The
    process's warden (:mod:`refplatform.warden`) kills the group if this process dies first.
    """

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] | None = None

    @classmethod
    def spawn(cls, name: str, argv: list[str], log_path: Path) -> "ManagedProcess":
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")
        popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        warden().watch(popen.pid)  # it dies with this process, even by SIGKILL (refplatform.warden)
        autogroup.follow(popen.pid)  # its new session as nice as this one's (a held --parallel pool's: 19)
        return cls(name, popen, log_path, log)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        """Signal the process alone (an agent's ``partition``: its pods keep running)."""
        if self.alive():
            self.popen.send_signal(sig)

    def signal_group(self, sig: int) -> None:
        """Signal the process and everything in its process group (a node: the agent and its pods).

        Only while the process is unreaped, so the group id is still ours (its pid).
        """
        if self.alive():
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL to the process group: the abrupt death of a node (agent and pods) or server, as a fault."""
        self.signal_group(signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._close()

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it does not exit within ``timeout``."""
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._close()
        return self.popen.returncode

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass(frozen=True)
class ClusterSpec:
    """The shape of a reference cluster."""

    data_dir: Path
    nodes: int = 4
    gpus_per_node: int = 8
    gpu_model: str = "H100-80GB"
    port: int = 0
    heartbeat: float | None = None
    """Seconds between Lease renewals of each agent; ``None``: the profile's."""
    node_prefix: str = "gpu-node"
    bookmark_interval: float = 10.0
    scheduler_profile: str = "gang"
    """``gang`` (all-or-nothing) or ``no-gang`` (pods bound one by one: the deadlock baseline)."""
    controllers: tuple[str, ...] | None = None
    """Controllers to run (None: all; empty: no controller process)."""
    extra_server_args: tuple[str, ...] = ()
    profile: str = DEFAULT_PROFILE
    """Healing profile (:mod:`refplatform.profiles`): ``tuned`` or ``k8s-defaults``; gives the agents their
    heartbeat and the controllers their grace period, default toleration and healer switches."""
    defects: tuple[str, ...] = ()
    """Defects from the zoo (:mod:`refplatform.defects`, docs/DEFECTS.md) every process starts with."""
    spares: int = 0
    """Spare nodes started beyond ``nodes`` (named on from the working nodes) and put into the healer's
    spare pool at start.  ``firedrill up`` defaults it to the profile's count (``tuned``: 1)."""
    open_api: bool = False
    """Start the API server without its tokens file and audit log: every caller is cluster-admin and nothing is
    audited.  Only the baseline of the governance benchmark (tests/bench/bench_api.py --governance); never a
    platform anyone drills.  The processes still use their own tokens (the server ignores them)."""
    real_gpus: bool = False
    """Report the GPUs NVML finds on this machine instead of simulating ``gpus_per_node`` x ``gpu_model``
    (``firedrill up/run --real-gpus``).  False: every agent gets ``--simulate-gpus``, so the platform behaves
    the same on a machine with a GPU as on one without."""
    nodes_per_rack: int = 2
    """Nodes are racked in order, this many to a rack: node ``i`` (working nodes, then spares) carries
    ``cloud.provider.com/topology-rack: rack-<i // nodes_per_rack>`` and, two racks to a block,
    ``cloud.provider.com/topology-block: block-<i // (2 * nodes_per_rack)>`` (docs/TOPOLOGY.md); 0: no topology
    labels.  Labels only: the nodes, their GPUs and every count a drill makes stay the same."""

    link_bandwidth: float = LINK_BANDWIDTH
    """The link every node's inventory states, bytes per second (:mod:`refplatform.fabric`): each agent tells its
    containers its node's link, and the training canary paces its connections to it."""

    def __post_init__(self) -> None:
        get_profile(self.profile)  # an unknown name fails here, naming the known ones
        try:
            parse_defects(self.defects)
        except DefectError as exc:
            raise ClusterError(str(exc)) from None
        if self.spares < 0:
            raise ClusterError("spares must be >= 0")
        if self.nodes_per_rack < 0:
            raise ClusterError("nodes_per_rack must be >= 0")

    @property
    def healing(self) -> Profile:
        return get_profile(self.profile)

    @property
    def agent_heartbeat(self) -> float:
        return self.healing.heartbeat if self.heartbeat is None else self.heartbeat

    def defect_args(self) -> list[str]:
        """``--defect NAME`` for each defect, as every platform process takes it."""
        return [arg for name in self.defects for arg in ("--defect", name)]

    def node_names(self) -> list[str]:
        """The working nodes."""
        return [f"{self.node_prefix}-{i}" for i in range(self.nodes)]

    def spare_names(self) -> list[str]:
        """The spare nodes: numbered on after the working ones."""
        return [f"{self.node_prefix}-{i}" for i in range(self.nodes, self.nodes + self.spares)]

    def all_node_names(self) -> list[str]:
        return self.node_names() + self.spare_names()

    def link_of(self, name: str) -> float:
        """The link node ``name`` really has (:func:`refplatform.fabric.node_link`: the stated one, or a quarter of
        it on the last working node with the ``slow-link`` defect)."""
        return node_link(name, self.node_names(), self.link_bandwidth, parse_defects(self.defects))

    def topology_labels(self, name: str) -> dict[str, str]:
        """The rack and block labels of node ``name`` (see :attr:`nodes_per_rack`); none for a node started beyond
        the spec, or with racks switched off."""
        names = self.all_node_names()
        if not self.nodes_per_rack or name not in names:
            return {}
        i = names.index(name)
        return {RACK_LABEL: f"rack-{i // self.nodes_per_rack}", BLOCK_LABEL: f"block-{i // (2 * self.nodes_per_rack)}"}


@dataclass
class Cluster:
    """A running reference cluster.  ``start()`` is idempotent over the same data directory."""

    spec: ClusterSpec
    server: ManagedProcess | None = None
    controller_manager: ManagedProcess | None = None
    agents: dict[str, ManagedProcess] = field(default_factory=dict)
    pod_cidrs: dict[str, str] = field(default_factory=dict)
    """Each node's pod range (``--pod-cidr`` of its agent), by node name."""
    pod_octets: OctetClaim | None = field(default=None, repr=False)
    """The second octets of 127.x.x.x this cluster holds while it runs: no other reference cluster on this machine
    hands out its pods' addresses (:mod:`refplatform.podranges`)."""
    url: str = ""
    token: str = ""
    """The cluster-admin's token (firedrill-admin): the harness's.  Never print it."""
    kubeconfig: Path | None = None
    ca_file: Path | None = None
    """The CA that signed the API server's certificate: give it to every client (verify=...)."""
    tokens: dict[str, str] = field(default_factory=dict, repr=False)
    """Tokens by user of the identities the cluster started with (admin, controllers, scheduler, tenants)."""

    def __post_init__(self) -> None:
        self.credentials = Credentials(self.spec.data_dir)

    @property
    def data_dir(self) -> Path:
        return self.spec.data_dir

    @property
    def tokens_file(self) -> Path:
        return self.data_dir / TOKENS_FILE

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (``--audit-log-path``): audit.k8s.io/v1 Events, one JSON line each."""
        return self.data_dir / AUDIT_LOG_FILE

    def agent_audit_log(self, node: str) -> Path:
        """Where the node's agent records the calls to its endpoints it refused."""
        return self.data_dir / "nodes" / node / AUDIT_LOG_FILE

    def tenant_kubeconfig(self, user: str) -> Path:
        """``DIR/<tenant>.kubeconfig`` of ``tenant-a`` or ``tenant-b``."""
        return self.data_dir / next(t for t in TENANTS if t.user == user).kubeconfig_name

    def node_kubeconfig(self, node: str) -> Path:
        """``DIR/node-<node>.kubeconfig``: the node identity of that node's agent (written when it starts)."""
        return self.data_dir / f"node-{node}.kubeconfig"

    def secrets(self) -> list[str]:
        """Every token of this cluster, for checks that none of them leaked into output or an archive."""
        return self.credentials.all_tokens()

    def _server_args(self) -> list[str]:
        """The API server's identity and governance flags (issue 15): its tokens file and audit log (not with
        ``open_api``), the token it presents to the agents for logs, the priority class only a quota unlocks."""
        args = ["--no-audit-log"] if self.spec.open_api else ["--tokens-file", str(self.tokens_file),
                                                              "--audit-log-path", str(self.audit_log)]
        return [*args, "--kubelet-client-token-file", str(self.credentials.kubelet_client()),
                "--limited-priority-class", bootstrap.LIMITED_PRIORITY_CLASS]

    def start_server(self, timeout: float = 30.0) -> str:
        try:
            # The known nodes' identities too, so the server starts knowing them; later ones are appended.
            self.tokens = self.credentials.bootstrap(self.spec.all_node_names())
        except CredentialsError as exc:
            raise ClusterError(str(exc)) from None
        self.token = self.tokens[ADMIN.user]
        pki = ensure_pki(self.data_dir)
        self.ca_file = pki.ca_cert
        address = self.data_dir / ADDRESS_FILE
        address.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "refplatform.api", "--data-dir", str(self.data_dir),
                "--port", str(self.spec.port), *self._server_args(),
                "--bookmark-interval", str(self.spec.bookmark_interval),
                "--tls-cert-file", str(pki.server_cert), "--tls-private-key-file", str(pki.server_key),
                *self.spec.defect_args(), *self.spec.extra_server_args]
        self.server = ManagedProcess.spawn("apiserver", argv, self.data_dir / "logs" / "apiserver.log")
        server = self.server

        def announced() -> bool:
            if not server.alive():
                raise ClusterError(f"the API server exited with code {server.popen.returncode}; "
                                   f"its log ({server.log_path}) ends with:\n{server.tail()}")
            return address.exists()
        wait_until(announced, timeout, f"the API server to listen (log: {server.log_path})")
        self.url = json.loads(address.read_text())["url"]
        self.kubeconfig = self.credentials.kubeconfig(KUBECONFIG_FILE, self.url, ADMIN.user, self.token, pki.ca_cert)
        for tenant in TENANTS:
            self.credentials.kubeconfig(tenant.kubeconfig_name, self.url, tenant.user, self.tokens[tenant.user],
                                        pki.ca_cert, tenant.namespace)
        for node in self.agents:  # a restarted server on a new port: the nodes' kubeconfigs follow
            self._node_kubeconfig(node, self.credentials.node(node)[0])
        with self.http_client() as http:
            try:
                bootstrap.apply(http)
            except (bootstrap.BootstrapError, httpx.HTTPError) as exc:
                raise ClusterError(f"{exc} (API server log: {server.log_path})") from None
        return self.url

    def _node_kubeconfig(self, node: str, token: str) -> Path:
        assert self.ca_file is not None
        return self.credentials.kubeconfig(self.node_kubeconfig(node).name, self.url, node_user(node), token,
                                           self.ca_file)

    def start_controllers(self) -> ManagedProcess | None:
        if self.spec.controllers == ():
            return None
        _, controller_token = self.credentials.component(CONTROLLER)
        _, scheduler_token = self.credentials.component(SCHEDULER)
        argv = [sys.executable, "-m", "refplatform.controllers", "--api", self.url,
                "--token-file", str(controller_token), "--scheduler-token-file", str(scheduler_token),
                "--ca-file", str(self.ca_file),
                "--scheduler-profile", self.spec.scheduler_profile, "--profile", self.spec.profile,
                *self.spec.defect_args()]
        if self.spec.spares:
            argv += ["--spare-nodes", ",".join(self.spec.spare_names())]
        if self.spec.controllers is not None:
            argv += ["--controllers", ",".join(self.spec.controllers)]
        self.controller_manager = ManagedProcess.spawn("controllers", argv,
                                                       self.data_dir / "logs" / "controllers.log")
        return self.controller_manager

    def pod_cidr(self, name: str) -> str:
        """The node's pod range: ``127.<k>.<i>.0/24`` for the node's index ``i`` (past 255: ``k + 1``), where ``k``
        is the first second octet this cluster claimed (127.10 when no other reference cluster runs here), the
        same on every restart of its agent."""
        if name not in self.pod_cidrs:
            names = self.spec.all_node_names()
            extra = sum(1 for n in self.pod_cidrs if n not in names)  # nodes started beyond the spec
            index = names.index(name) if name in names else len(names) + extra
            self.pod_cidrs[name] = self._pod_claim().cidr(index)
        return self.pod_cidrs[name]

    def _pod_claim(self) -> OctetClaim:
        if self.pod_octets is None:
            marker = self.data_dir / POD_RANGE_FILE
            before = marker.read_text().strip() if marker.exists() else ""
            try:
                self.pod_octets = claim_octets(len(self.spec.all_node_names()),
                                               prefer=int(before) if before.isdigit() else None)
            except PodRangeError as exc:
                raise ClusterError(str(exc)) from None
            self.data_dir.mkdir(parents=True, exist_ok=True)
            marker.write_text(f"{self.pod_octets.octets[0]}\n")
        return self.pod_octets

    def start_agent(self, name: str, gpus: int | None = None, gpu_model: str | None = None,
                    extra: tuple[str, ...] = ()) -> ManagedProcess:
        token, token_file = self.credentials.node(name)  # its own identity, system:node:<name>
        self._node_kubeconfig(name, token)
        argv = [sys.executable, "-m", "refplatform.agent", "--api", self.url, "--token-file", str(token_file),
                "--client-tokens-file", str(self.data_dir / AGENT_CLIENTS_FILE), "--node", name,
                "--gpus", str(self.spec.gpus_per_node if gpus is None else gpus),
                "--gpu-model", gpu_model or self.spec.gpu_model, "--heartbeat", str(self.spec.agent_heartbeat),
                "--ca-file", str(self.ca_file), "--data-dir", str(self.data_dir), *self.spec.defect_args(), *extra]
        if "--pod-cidr" not in extra:
            argv += ["--pod-cidr", self.pod_cidr(name)]
        argv += ["--link-bandwidth", f"{self.spec.link_of(name):g}"]
        racked = self.spec.topology_labels(name)
        if racked:
            argv += ["--node-labels", ",".join(f"{k}={v}" for k, v in racked.items())]
        if not self.spec.real_gpus:
            argv.append("--simulate-gpus")
        if "--burn-in-seconds" not in extra:
            argv += ["--burn-in-seconds", f"{self.spec.healing.gpu_burn_in_seconds:g}"]
        if "--flap-window" not in extra:
            argv += ["--flap-window", f"{self.spec.healing.gpu_flap_window:g}"]
        fence_after = self.spec.healing.fence_after()
        if fence_after is not None and "--fence-after" not in extra:
            argv += ["--fence-after", str(fence_after), "--unhealthy-zone-threshold",
                     str(self.spec.healing.unhealthy_zone_threshold), "--large-cluster-size-threshold",
                     str(self.spec.healing.large_cluster_size_threshold)]
        proc = ManagedProcess.spawn(f"agent {name}", argv, self.data_dir / "logs" / f"agent-{name}.log")
        self.agents[name] = proc
        return proc

    def http_client(self, token: str | None = None, timeout: float = 10.0) -> httpx.Client:
        """An httpx client for this cluster's API, trusting its CA and sending a token (None: the admin's;
        "": none at all, for testing refusals)."""
        headers = {} if token == "" else {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.url, verify=self.ssl_context(), headers=headers, timeout=timeout)

    def ssl_context(self) -> ssl.SSLContext:
        """TLS settings that trust exactly this cluster's CA."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    def start(self, timeout: float = 30.0) -> "Cluster":
        self.start_server(timeout)
        self.start_controllers()
        for name in self.spec.all_node_names():
            self.start_agent(name)
        return self

    def readiness(self, http: httpx.Client) -> tuple[int, int, int]:
        """(working nodes Ready, their GPUs, spares Ready in the spare pool), by role, not by name: after a
        pull the promoted spare works and the returned node is the spare."""
        try:
            nodes = http.get("/api/v1/nodes", timeout=2).json().get("items", [])
        except (httpx.HTTPError, ValueError):
            return 0, 0, 0
        ready = gpus = pool = 0
        for node in nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            if not any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (node.get("status") or {}).get("conditions") or []):
                continue
            if labels.get(SPARE_LABEL) == "true":
                pool += 1
            elif QUARANTINE_LABEL not in labels:
                ready += 1
                gpus += int(((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu", "0"))
        return ready, gpus, pool

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every working node is Ready and every spare is Ready and in the spare pool."""
        with self.http_client() as http:
            want = (len(self.spec.node_names()), len(self.spec.spare_names()))

            def ready() -> bool:
                nodes, _, pool = self.readiness(http)
                return nodes >= want[0] and pool >= want[1]
            wait_until(ready, timeout, f"{want[0]} Ready nodes and {want[1]} enrolled spare(s)", interval=0.1)

    def restore_roles(self, timeout: float = 30.0) -> bool:
        """Put the spare pool back as the spec made it (a lab reset between drills, not healing): the configured
        spares in the pool, every other node at work.  Once no node is quarantined (a pulled node returns to the
        pool as a spare), each configured spare that was promoted goes back to the pool and each other node found
        in the pool works again, whether or not a spare was promoted for it (the healer promotes one only when one
        is Ready at the loss).  Racks are physical (:meth:`ClusterSpec.topology_labels`), so after a pull the pool
        would otherwise hold another rack's node, or two nodes, and every later scenario would find other racks,
        or fewer working nodes, than the first did.  True when the roles are the spec's (False: a node still
        quarantined at ``timeout``, nothing changed)."""
        configured, ours = set(self.spec.spare_names()), set(self.spec.all_node_names())
        with self.http_client() as http:
            deadline = time.monotonic() + timeout
            while True:
                nodes = {n["metadata"]["name"]: n for n in http.get("/api/v1/nodes", timeout=5).json().get("items", [])
                         if n["metadata"]["name"] in ours}
                if not any(QUARANTINE_LABEL in (n["metadata"].get("labels") or {}) for n in nodes.values()):
                    break
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.1)
            pooled = {name for name, n in nodes.items()
                      if (n["metadata"].get("labels") or {}).get(SPARE_LABEL) == "true"}
            for name in sorted((configured & set(nodes)) - pooled):  # the pool grows first: no moment without a spare
                self._set_spare(http, nodes[name], True)
            for name in sorted(pooled - configured):
                self._set_spare(http, nodes[name], False)
            return True

    @staticmethod
    def _set_spare(http: httpx.Client, node: dict, spare: bool, attempts: int = 10) -> None:
        """Label and taint ``node`` as in the spare pool (or not): a merge patch naming the resourceVersion it was
        computed from, read again and retried on a conflict (the healer and the node lifecycle write nodes too)."""
        name = node["metadata"]["name"]
        for _ in range(attempts):
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != SPARE_TAINT]
            if spare:
                taints.append({"key": SPARE_TAINT, "value": "true", "effect": "NoSchedule"})
            patch = {"metadata": {"labels": {SPARE_LABEL: "true" if spare else None},
                                  "resourceVersion": node["metadata"]["resourceVersion"]},
                     "spec": {"taints": taints or None}}
            answer = http.patch(f"/api/v1/nodes/{name}", content=json.dumps(patch),
                                headers={"Content-Type": "application/merge-patch+json"}, timeout=5)
            if answer.status_code != 409:
                break
            node = http.get(f"/api/v1/nodes/{name}", timeout=5).json()
        if answer.status_code >= 300:
            raise ClusterError(f"could not {'return' if spare else 'take'} node {name} "
                               f"{'to' if spare else 'out of'} the spare pool: {answer.status_code} {answer.text[:200]}")

    def stop(self) -> None:
        for proc in self.agents.values():  # every agent winds down at once; then each is waited for
            proc.signal(signal.SIGTERM)
        for proc in self.agents.values():
            proc.stop()
        if self.controller_manager is not None:
            self.controller_manager.stop()
        if self.server is not None:
            self.server.stop()
        if self.pod_octets is not None:  # the pods are gone: another cluster may have their addresses
            self.pod_octets.release()
            self.pod_octets = None
            self.pod_cidrs.clear()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
