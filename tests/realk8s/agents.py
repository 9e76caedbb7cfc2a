"""refplatform node agents as the kubelets of a :class:`~tests.realk8s.cluster.RealCluster`.

The very processes ``firedrill up`` starts (``python -m refplatform.agent``), pointed at the real
kube-apiserver with a node's identity: a static token of user ``system:node:<name>`` in group
``system:nodes`` (the cluster's ``extra_users``), so the Node authorizer and NodeRestriction admission
limit them as they limit a kubelet.  Each agent

- registers its Node with simulated GPUs (``--simulate-gpus``, ``nvidia.com/gpu`` and GFD labels) and
  renews its Lease in ``kube-node-lease`` every ``heartbeat`` seconds;
- runs the pods the real kube-scheduler binds to it as processes, from its pod range
  ``127.30.<i>.0/24``;
- serves ``/containerLogs`` over HTTPS with a serving cert from the cluster CA (SAN 127.0.0.1 and the
  node name), answering only clients whose certificate that CA signed: kube-apiserver, which has
  ``--kubelet-certificate-authority`` and ``--kubelet-client-certificate`` (``cluster.py``).

Every agent starts in a session of its own, so its process group holds it and the pods it runs:
:meth:`RefAgents.kill` SIGKILLs that group (a node lost with its pods, as ``firedrill``'s ``kill``
fault does).  Files: ``WORK/agents/<node>.token``, ``WORK/agents/pki/``, ``WORK/agents/<node>.log``,
and the agents' shared data directory ``WORK/agents/data`` (its ``nfs/`` is what an ``nfs`` volume maps
to on every agent, the reference platform's NFS server).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.realk8s.cluster import RealCluster, RealClusterError, log_tail
from tests.realk8s.standin import NODE_LEASE_NAMESPACE, api_client, node_user, wait_for

POD_RANGE_ENV = "FIREDRILL_REALK8S_POD_RANGE"
POD_RANGE = os.environ.get(POD_RANGE_ENV, "127.30.{index}.0/24")
"""Each agent's ``--pod-cidr`` (loopback; apart from the embedded platform's 127.10.x ranges).  ``.ci/run`` runs the
suite as two pytest processes side by side and gives the second ``$FIREDRILL_REALK8S_POD_RANGE=127.31.{index}.0/24``,
so the agents of the two never hand out the same pod address (test_agents.py, which checks the default, runs in
the first)."""
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


@dataclass
class RefAgent:
    """One running agent process."""

    name: str
    index: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    data_dir: Path
    argv: tuple[str, ...] = ()
    """The command line it was started with (to start it again the same way, e.g. from a restore command)."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def state(self) -> dict[str, Any]:
        """What the agent wrote to ``DATA/agents/<node>.json`` (pid, logPort, logScheme, podCIDR ...)."""
        loaded: dict[str, Any] = json.loads((self.data_dir / "agents" / f"{self.name}.json").read_text())
        return loaded

    def group_alive(self) -> bool:
        """Whether any process of the agent's process group (agent or pod) still exists."""
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def tail(self) -> str:
        return log_tail(self.log_path)


@dataclass
class RefAgents:
    """Starts, kills and stops refplatform agents against one real cluster; cleans up their Nodes."""

    cluster: RealCluster
    work_dir: Path
    gpus: int = 8
    heartbeat: float = 1.0
    pod_range: str = POD_RANGE
    """Each agent's ``--pod-cidr``, ``{index}`` its number: loopback, or a range local to a network namespace
    the test made (``tests/realk8s/netns.py``)."""
    agents: dict[str, RefAgent] = field(default_factory=dict)
    _admin: client.ApiClient | None = None
    _pids: set[int] = field(default_factory=set)
    """Every agent process this object started itself (an agent the power-on tool started again is not one)."""

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def admin(self) -> client.ApiClient:
        if self._admin is None:
            self._admin = api_client(self.cluster.url, self.cluster.ca_file, self.cluster.admin_token)
        return self._admin

    def start(self, name: str, *, wait_ready: bool = True, extra: tuple[str, ...] = ()) -> RefAgent:
        """Start the agent of node ``name`` (its user must be in the cluster's static tokens) and, by default,
        wait until the real node lifecycle controller sees its Node Ready and untainted."""
        user = node_user(name).name
        if user not in self.cluster.tokens:
            raise RealClusterError(f"no static token for {user}: add node_user({name!r}) to the cluster's extra_users")
        if name in self.agents and self.agents[name].alive():
            raise RealClusterError(f"agent {name} runs already (pid {self.agents[name].pid})")
        index = self.agents[name].index if name in self.agents else len(self.agents)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        token_file = self.work_dir / f"{name}.token"
        token_file.write_text(self.cluster.tokens[user])
        token_file.chmod(0o600)
        cert, key = self.cluster.pki.kubelet_serving_cert(self.work_dir / "pki", name)
        argv = [sys.executable, "-m", "refplatform.agent", "--api", self.cluster.url,
                "--token-file", str(token_file), "--ca-file", str(self.cluster.ca_file), "--node", name,
                "--data-dir", str(self.data_dir), "--simulate-gpus", "--gpus", str(self.gpus),
                "--heartbeat", f"{self.heartbeat:g}", "--pod-cidr", self.pod_range.format(index=index),
                "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
                "--client-ca-file", str(self.cluster.ca_file), *extra]
        log_path = self.work_dir / f"{name}.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        log_file.write(f"$ {' '.join(argv)}\n".encode())
        log_file.flush()
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self._pids.add(popen.pid)
        agent = self.agents[name] = RefAgent(name, index, popen, log_path, log_file, self.data_dir, tuple(argv))
        if wait_ready:
            self.wait_ready(name)
        return agent

    def node(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.admin.sanitize_for_serialization(client.CoreV1Api(self.admin).read_node(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def wait_ready(self, name: str, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """The Node once Ready=True and without taints (the lifecycle controller lifted not-ready)."""
        agent = self.agents[name]
        deadline = time.monotonic() + timeout
        while True:
            if not agent.alive() and self.restarted_pid(name) is None:
                raise RealClusterError(f"agent {name} exited with code {agent.popen.returncode}; "
                                       f"last lines of {agent.log_path}:\n{agent.tail()}")
            node = self.node(name)
            if node is not None:
                ready = any(c["type"] == "Ready" and c["status"] == "True"
                            for c in node["status"].get("conditions") or [])
                if ready and not node["spec"].get("taints"):
                    return node
            if time.monotonic() >= deadline:
                raise RealClusterError(f"node {name} not Ready and untainted within {timeout:.0f}s: {node}; "
                                       f"agent log:\n{agent.tail()}")
            time.sleep(0.2)

    def kill(self, name: str) -> float:
        """SIGKILL the agent's process group (the agent and its pods); returns the wall time of the kill."""
        agent = self.agents[name]
        if not agent.alive():
            raise RealClusterError(f"agent {name} is not running")
        at = time.time()
        os.killpg(agent.popen.pid, signal.SIGKILL)
        agent.popen.wait(timeout=STOP_TIMEOUT_S)
        agent.log_file.close()
        return at

    def stop(self, name: str) -> None:
        """SIGTERM the agent (it ends its pods first), SIGKILL its group after the timeout."""
        agent = self.agents[name]
        if agent.alive():
            agent.popen.send_signal(signal.SIGTERM)
            try:
                agent.popen.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(agent.popen.pid, signal.SIGKILL)
                agent.popen.wait(timeout=STOP_TIMEOUT_S)
        agent.log_file.close()

    def forget_node(self, name: str) -> None:
        """Delete the node's Lease, its pods (force) and its Node, as an operator removes a dead node."""
        core = client.CoreV1Api(self.admin)
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
            _ignore_404(lambda p=pod: core.delete_namespaced_pod(p.metadata.name, p.metadata.namespace,
                                                                 grace_period_seconds=0))
        _ignore_404(lambda: client.CoordinationV1Api(self.admin).delete_namespaced_lease(name, NODE_LEASE_NAMESPACE))
        _ignore_404(lambda: core.delete_node(name))

    def write_power_on(self, path: Path, kubeconfig: Path) -> Path:
        """The power-on tool of these agents' hosts, for a profile's ``fault.restore_template``
        (``python PATH {node}``): it starts a node's agent again as :meth:`start` did, in a session of its own,
        and returns once the Node is Ready and untainted (docs/REAL_CLUSTERS.md, step 6)."""
        config = {"data_dir": str(self.data_dir), "kubeconfig": str(kubeconfig), "timeout": READY_TIMEOUT_S,
                  "argv": {n: list(a.argv) for n, a in self.agents.items()},
                  "logs": {n: str(a.log_path) for n, a in self.agents.items()}}
        path.write_text(POWER_ON.format(config=json.dumps(config)))
        return path

    def restarted_pid(self, name: str) -> int | None:
        """The pid of node ``name``'s agent when the power-on tool started it again and it runs (None otherwise)."""
        try:
            pid = int(self.agents[name].state()["pid"])
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                running = b"refplatform.agent" in cmdline.read()
        except (OSError, ValueError, KeyError):
            return None
        return pid if running and pid not in self._pids and not _zombie(pid) else None

    def stop_restarted(self) -> None:
        """SIGTERM (then SIGKILL) the process group of each agent the power-on tool started again: not a child of
        this process, so no :class:`RefAgent` holds it; its pid is in the agent's own state file."""
        for name in self.agents:
            pid = self.restarted_pid(name)
            if pid is None:
                continue
            os.killpg(pid, signal.SIGTERM)
            try:
                wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists() or _zombie(pid), STOP_TIMEOUT_S,
                         f"the restarted agent of {name} to stop")
            except AssertionError:
                os.killpg(pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop every agent this object started (and each one its power-on tool started again) and remove their
        Nodes."""
        self.stop_restarted()
        for name in list(self.agents):
            self.stop(name)
        for name in list(self.agents):
            self.forget_node(name)
        self.agents.clear()
        if self._admin is not None:
            self._admin.close()
            self._admin = None


POWER_ON = """\
# The customer's power-on tool, the profile's fault.restore_template (docs/REAL_CLUSTERS.md, step 6): starts the
# node's agent again (as its host would boot it) and returns once the node is Ready and untainted.
import json, os, subprocess, sys, time

CONFIG = json.loads({config!r})
node = sys.argv[1]
state = os.path.join(CONFIG["data_dir"], "agents", node + ".json")
try:
    pid = json.load(open(state))["pid"]
    alive = "refplatform.agent" in open(f"/proc/{{pid}}/cmdline").read().replace("\\0", " ")
except (OSError, ValueError, KeyError):
    alive = False
if not alive:
    with open(CONFIG["logs"][node], "ab") as log:
        subprocess.Popen(CONFIG["argv"][node], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
deadline = time.monotonic() + CONFIG["timeout"]
while time.monotonic() < deadline:
    got = subprocess.run(["kubectl", "--kubeconfig", CONFIG["kubeconfig"], "get", "node", node, "-o", "json"],
                         capture_output=True, text=True, timeout=30)
    if got.returncode == 0:
        obj = json.loads(got.stdout)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in obj["status"].get("conditions") or [])
        if ready and not obj["spec"].get("taints"):
            print(f"power-on: node {{node}} is Ready again" + ("" if not alive else " (it was running)"))
            sys.exit(0)
    time.sleep(0.3)
print(f"power-on: node {{node}} not Ready within {{CONFIG['timeout']}}s", file=sys.stderr)
sys.exit(1)
"""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def _ignore_404(call: Any) -> None:
    try:
        call()
    except ApiException as exc:
        if exc.status != 404:
            raise
