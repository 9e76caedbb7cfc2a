"""A real Ray cluster on this machine, on loopback only: a head and worker nodes, each its own raylet.

Each node is one `ray start --block` (through tests/realray/raynode.py, which keeps every address on
127.0.0.1) started in a session of its own. The raylet and its agents share the launcher's process group;
the workers the raylet spawns each lead a process group of their own (Ray 2.60 does that) but stay in the
node's session. So a node's processes are its session's, read from /proc: killing them all is a node failure
(the raylet and its workers die at once, not the workers seconds later when they miss their raylet), and
stopping the cluster signals only the sessions this module started. GPUs are declared (`--num-gpus`),
no hardware is needed; each worker node also carries a resource of its own (`fd_node_<name>: 1`) so a test
can find which Ray node id belongs to which node it started.

Run it with the Ray suite's interpreter (tests/realray/setup.sh makes it): `ray` is not in the main
environment.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

try:
    from refplatform.warden import warden
except ImportError:  # run from a checkout without the editable install: the `finally` still stops the nodes
    warden = None

LAUNCHER = Path(__file__).with_name("raynode.py")
LOOPBACK = "127.0.0.1"

# Ray 2.60's GCS health-check settings (src/ray/common/ray_config_def.h) and their defaults; set them with
# the head's `--system-config` JSON (or RAY_<name> in the head's environment).
HEALTH_CHECK_DEFAULTS = {
    "health_check_initial_delay_ms": 5000,
    "health_check_period_ms": 3000,
    "health_check_timeout_ms": 10000,
    "health_check_failure_threshold": 5,
}


def until(cond, timeout: float, what: str, poll: float = 0.1):
    """``cond()``'s first truthy value, looked at every ``poll`` s; an AssertionError naming ``what`` after
    ``timeout`` s (a condition wait with a deadline, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"not within {timeout} s: {what}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _loopback_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray process answers 127.0.0.1 for its own address
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def node_resource(name: str) -> str:
    return f"fd_node_{name}"


@dataclass
class RayNode:
    name: str
    head: bool
    num_gpus: int
    log: Path
    proc: subprocess.Popen | None = None
    node_id: str | None = None
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def sid(self) -> int:
        # start_new_session: the launcher's pid is the session's id (and its process group's)
        assert self.proc is not None
        return self.proc.pid

    def group_pids(self) -> list[int]:
        """The live processes of this node's session (read from /proc; only this session's), zombies left out."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path("/proc", entry, "stat").read_text()
            except OSError:
                continue
            # fields after the command's closing parenthesis: state ppid pgrp session ...
            rest = stat.rsplit(")", 1)[1].split()
            if int(rest[3]) == self.sid and rest[0] != "Z":
                pids.append(int(entry))
        return pids

    def signal(self, sig: int, rounds: int = 20) -> None:
        """`sig` to every process of the node's session; with SIGKILL, again until none is left (a raylet can
        spawn a worker while it is being killed)."""
        for _ in range(rounds if sig == signal.SIGKILL else 1):
            pids = self.group_pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def raylet_pid(self) -> int | None:
        for pid in self.group_pids():
            try:
                if Path("/proc", str(pid), "comm").read_text().strip() == "raylet":
                    return pid
            except OSError:
                continue
        return None

    def alive(self) -> bool:
        return bool(self.group_pids())


class RayCluster:
    """A head (no GPUs unless asked) and `workers` worker nodes of `gpus_per_worker` declared GPUs each."""

    def __init__(self, workers: int = 3, gpus_per_worker: int = 8, head_gpus: int = 0, cpus_per_node: int = 1,
                 system_config: dict | None = None, root: Path | None = None, start_timeout: float = 90.0):
        self.workers = workers
        self.gpus_per_worker = gpus_per_worker
        self.head_gpus = head_gpus
        self.cpus_per_node = cpus_per_node
        self.system_config = dict(system_config or {})
        self.start_timeout = start_timeout
        # unix socket paths must stay short: a root under the system's temp dir, not under pytest's tmp_path
        self._own_root = root is None
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="fdray-"))
        self.temp_dir = self.root / "ray"
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
        self.nodes: dict[str, RayNode] = {}

    # --- addresses -----------------------------------------------------------------------------------------
    @property
    def gcs_address(self) -> str:
        return f"{LOOPBACK}:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        """The dashboard: the Job Submission API and the state API (/api/v0/...) live here."""
        return f"http://{LOOPBACK}:{self.dashboard_port}"

    @property
    def env(self) -> dict[str, str]:
        """The environment a driver (or `ray job submit`) needs to reach this cluster on loopback."""
        return _loopback_env() | {"RAY_ADDRESS": self.gcs_address}

    def health_check(self) -> dict[str, int]:
        """The GCS health-check settings this cluster runs with (the defaults, then what was set)."""
        return {k: int(self.system_config.get(k, v)) for k, v in HEALTH_CHECK_DEFAULTS.items()}

    def detect_bound_s(self) -> float:
        """The longest a killed raylet should take to be marked dead: `threshold` missed checks a period
        apart, the last one timing out (a killed raylet refuses at once, so this is a generous bound)."""
        hc = self.health_check()
        return (hc["health_check_period_ms"] * hc["health_check_failure_threshold"]
                + hc["health_check_timeout_ms"]) / 1000

    # --- lifecycle -----------------------------------------------------------------------------------------
    def _node_args(self, node: RayNode) -> list[str]:
        ports = node.ports = {
            "node-manager-port": free_port(),
            "object-manager-port": free_port(),
            "metrics-export-port": free_port(),
            "dashboard-agent-listen-port": free_port(),
            "dashboard-agent-grpc-port": free_port(),
            "runtime-env-agent-port": free_port(),
        }
        args = [sys.executable, str(LAUNCHER), "start", "--block", "--disable-usage-stats",
                "--node-ip-address", LOOPBACK, "--node-name", node.name, "--temp-dir", str(self.temp_dir),
                "--num-cpus", str(self.cpus_per_node), "--num-gpus", str(node.num_gpus),
                "--object-store-memory", str(80 * 1024 * 1024),
                # workers take ports the kernel picks (on loopback: they bind the node's address)
                "--min-worker-port", "0", "--max-worker-port", "0"]
        for flag, port in ports.items():
            args += [f"--{flag}", str(port)]
        if node.head:
            ports["ray-client-server-port"] = free_port()
            args += ["--head", "--port", str(self.gcs_port), "--dashboard-host", LOOPBACK,
                     "--dashboard-port", str(self.dashboard_port),
                     "--ray-client-server-port", str(ports["ray-client-server-port"])]
            if self.system_config:
                args += ["--system-config", json.dumps(self.system_config)]
        else:
            args += ["--address", self.gcs_address, "--resources", json.dumps({node_resource(node.name): 1}),
                     "--include-log-monitor", "false"]
        return args

    def _spawn(self, node: RayNode) -> None:
        args = self._node_args(node)
        print(f"[realray] start {node.name}: {' '.join(a for a in args[1:])}", flush=True)
        with open(node.log, "wb") as log:
            node.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=_loopback_env(), start_new_session=True)
        self.nodes[node.name] = node
        if warden is not None:  # the node's group dies with this process however it ends (refplatform.warden)
            warden().watch(node.proc.pid)

    def start(self) -> "RayCluster":
        self.root.mkdir(parents=True, exist_ok=True)
        head = RayNode("head", True, self.head_gpus, self.root / "head.log")
        self._spawn(head)
        deadline = time.monotonic() + self.start_timeout
        self._wait(lambda: self._try_nodes() is not None, deadline, "the head's dashboard answering")
        # one node at a time: several `ray start` at once on a small machine time out registering (Ray 2.60
        # gives a node 30 s to see its raylet come up; three starting together on 2 cores missed it)
        for i in range(1, self.workers + 1):
            self._spawn(RayNode(f"w{i}", False, self.gpus_per_worker, self.root / f"w{i}.log"))
            self._wait(self._all_registered, deadline, f"worker node w{i} ALIVE")
        return self

    def _all_registered(self) -> bool:
        nodes = self._try_nodes() or []
        alive = [n for n in nodes if n["state"] == "ALIVE"]
        for node in self.nodes.values():
            for n in alive:
                if (node.head and n.get("is_head_node")) or (
                        not node.head and node_resource(node.name) in n["resources_total"]):
                    node.node_id = n["node_id"]
        return all(node.node_id for node in self.nodes.values())

    def _wait(self, cond, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            for node in self.nodes.values():
                if node.proc and node.proc.poll() is not None and node.node_id is None:
                    raise RuntimeError(f"ray node {node.name} exited ({node.proc.returncode}) before {what}:\n"
                                       + node.log.read_text()[-3000:])
            if cond():
                return
            time.sleep(0.3)
        raise TimeoutError(f"no {what} within {self.start_timeout:.0f} s; logs under {self.root}")

    def stop(self, grace: float = 8.0) -> None:
        """SIGTERM each node's processes (the worker nodes first, the head last), then SIGKILL what is left."""
        order = [n for n in self.nodes.values() if not n.head] + [n for n in self.nodes.values() if n.head]
        for node in order:
            self._signal(node, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(n.alive() for n in order):
            time.sleep(0.2)
        for node in order:
            self._signal(node, signal.SIGKILL)
            if node.proc:
                try:
                    node.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _signal(node: RayNode, sig: int) -> None:
        if node.proc is not None:
            node.signal(sig)

    def __enter__(self) -> "RayCluster":
        try:
            return self.start()
        except BaseException:
            self.stop(grace=2.0)
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- faults --------------------------------------------------------------------------------------------
    def kill(self, name: str) -> float:
        """SIGKILL every process of a node (the raylet, its agents, its workers). Returns the wall time."""
        node = self.nodes[name]
        assert not node.head, "the head holds the GCS: killing it is not a node pull"
        t = time.time()
        node.signal(signal.SIGKILL)
        return t

    # --- reading the cluster (the state API over HTTP: what a driver with no `ray` package can read) ------
    def get(self, path: str, timeout: float = 5.0):
        with urllib.request.urlopen(self.dashboard_url + path, timeout=timeout) as r:
            return json.load(r)

    def _try_nodes(self):
        try:
            return self.list_nodes()
        except OSError:
            return None

    def list_nodes(self) -> list[dict]:
        return self.get("/api/v0/nodes?detail=1&limit=1000")["data"]["result"]["result"]

    def node_state(self, node_id: str) -> dict | None:
        return next((n for n in self.list_nodes() if n["node_id"] == node_id), None)

    def wait_node_state(self, node_id: str, state: str, timeout: float, poll: float = 0.1) -> dict:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.node_state(node_id)
            if last and last["state"] == state:
                return last
            time.sleep(poll)
        raise TimeoutError(f"node {node_id[:12]} not {state} within {timeout:.1f} s (last seen: {last})")
