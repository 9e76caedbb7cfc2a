"""A real Ray cluster on this machine, on loopback only: a head and worker nodes, each its own raylet.

Each node is one `ray start --block` (through tests/realray/raynode.py, which keeps every address on
127.0.0.1) started in a session of its own. The raylet and its agents share the launcher's process group;
the workers the raylet spawns each lead a process group of their own (Ray 2.60 does that) but stay in the
node's session. So a node's processes are its session's, read from /proc: killing them all is a node failure
(the raylet and its workers die at once, not the workers seconds later when they miss their raylet), and
stopping the cluster signals only the sessions this module started. GPUs are declared (`--num-gpus`),
no hardware is needed; each worker node also carries a resource of its own (`fd_node_<name>: 1`) so a test
can find which Ray node id belongs to which node it started, and the resource `firedrill: 1`, which marks the
nodes a drill may pull (a profile's `safety.allow_resource`); the head never has it.

The cluster keeps a state file, `<root>/cluster.json`: per node its name, whether it is the head, its current
session (the launcher's pid), every session it ever had, its node id, and the argv and environment that start it
again. `tests/realray/nodectl.py` (a profile's fault and restore command, another process) reads it to signal a
node's session or start the node again, and writes the new session back; `RayCluster.stop` reads it, so nodes
restarted from another process are stopped too.

Run it with the Ray suite's interpreter (tests/realray/setup.sh makes it): `ray` is not in the main
environment.
"""

from __future__ import annotations

import fcntl
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
STATE_FILE = "cluster.json"
"""In the cluster's root: what another process needs to act on its nodes."""
ALLOW_RESOURCE = "firedrill"
"""The custom resource of every worker node (never the head): the nodes a drill may pull."""
NODE_PORTS = ("node-manager-port", "object-manager-port", "metrics-export-port", "dashboard-agent-listen-port",
              "dashboard-agent-grpc-port", "runtime-env-agent-port")
"""The ports each node gets of its own (several raylets on one host); a restarted node gets fresh ones."""

# Ray 2.60's GCS health-check settings (src/ray/common/ray_config_def.h) and their defaults; set them with
# the head's `--system-config` JSON (or RAY_<name> in the head's environment).
HEALTH_CHECK_DEFAULTS = {
    "health_check_initial_delay_ms": 5000,
    "health_check_period_ms": 3000,
    "health_check_timeout_ms": 10000,
    "health_check_failure_threshold": 5,
}
TUNED = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
         "health_check_failure_threshold": 3}
"""The settings the suite runs with: a dead node is DEAD after 3 missed checks 1 s apart (about 3 s)."""


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


# --- sessions: a node's processes ---------------------------------------------------------------------------
def session_pids(sid: int) -> list[int]:
    """The live processes of session `sid` (read from /proc), zombies left out. While any process of a session
    lives, Linux does not hand its id to another process, so a recorded session names only what it started."""
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
        if int(rest[3]) == sid and rest[0] != "Z":
            pids.append(int(entry))
    return pids


def process_state(pid: int) -> str | None:
    """The one-letter state of a process (`T` when stopped), None if it is gone."""
    try:
        return Path("/proc", str(pid), "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def signal_session(sid: int, sig: int, rounds: int = 20) -> list[int]:
    """`sig` to every process of session `sid`; with SIGKILL, again until none is left, and with SIGSTOP until
    every one is stopped (a raylet can spawn a worker meanwhile). Returns the pids signalled."""
    hit: list[int] = []
    for _ in range(rounds if sig in (signal.SIGKILL, signal.SIGSTOP) else 1):
        pids = session_pids(sid)
        if sig == signal.SIGSTOP:
            pids = [pid for pid in pids if process_state(pid) not in ("T", "t", None)]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
                if pid not in hit:
                    hit.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return hit


# --- the state file -----------------------------------------------------------------------------------------
def read_state(root: Path) -> dict:
    """The state file of the cluster started in `root`; a RuntimeError if there is none."""
    try:
        return json.loads((Path(root) / STATE_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"no Ray cluster of tests/realray was started in {root} ({exc})") from None


def update_state(root: Path, change) -> dict:
    """Read, change (`change(state)` edits it in place) and write back the state file, under a lock, atomically
    (a temporary file renamed over it): the cluster's process and nodectl.py may both write it."""
    root = Path(root)
    with open(root / (STATE_FILE + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads((root / STATE_FILE).read_text())
        except FileNotFoundError:
            state = {}
        change(state)
        tmp = root / f".{STATE_FILE}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the nodes' environment
        with os.fdopen(fd, "w") as fh:
            json.dump(state, fh, indent=1)
        os.replace(tmp, root / STATE_FILE)
    return state


def recorded_sessions(root: Path) -> dict[str, list[int]]:
    """Node name -> every session the state file records for it (none if there is no state file)."""
    try:
        nodes = read_state(root).get("nodes", {})
    except RuntimeError:
        return {}
    return {name: list(entry.get("sessions", [])) for name, entry in nodes.items()}


def fresh_ports(argv: list[str]) -> list[str]:
    """`argv` with a new free port after each of a node's own port flags (the old ones may still be in
    TIME_WAIT after a kill)."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg.startswith("--") and arg[2:] in NODE_PORTS:
            out[i + 1] = str(free_port())
    return out


def launch(argv: list[str], env: dict[str, str], log: Path, cwd: str | None = None) -> subprocess.Popen:
    """One node's `ray start --block`, in a session of its own, its output appended to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True)


def alive_node_ids(dashboard: str, name: str, timeout: float = 5.0) -> list[str]:
    """The ids of the ALIVE Ray nodes carrying worker node `name`'s own resource (the state API over HTTP)."""
    with urllib.request.urlopen(dashboard + "/api/v0/nodes?detail=1&limit=1000", timeout=timeout) as r:
        nodes = json.load(r)["data"]["result"]["result"]
    return [n["node_id"] for n in nodes if n["state"] == "ALIVE" and node_resource(name) in n["resources_total"]]


def relaunch(root: Path, name: str, timeout: float = 60.0, on_start=None) -> tuple[subprocess.Popen, str]:
    """Start worker node `name` again from the state file (its argv with fresh ports, its environment), record the
    new session, and wait until a new Ray node with its resource is ALIVE; the process and the new node id.
    `on_start(proc)` is called as soon as it is started. A RuntimeError if the node still has processes, or is
    not ALIVE in time (its new session is then killed)."""
    state = read_state(root)
    entry = state["nodes"].get(name)
    if entry is None:
        raise RuntimeError(f"{name} is not a node of the cluster in {root} ({', '.join(state['nodes'])})")
    if entry["head"]:
        raise RuntimeError("the head holds the GCS; it is never pulled")
    if any(session_pids(sid) for sid in entry["sessions"]):
        raise RuntimeError(f"{name} still has processes running: kill it before starting it again")
    before = set(_try(lambda: alive_node_ids(state["dashboard"], name)) or []) | {entry.get("node_id")}
    argv = fresh_ports(entry["argv"])
    proc = launch(argv, entry["env"], Path(entry["log"]), entry.get("cwd"))
    if on_start is not None:
        on_start(proc)

    def record(s: dict) -> None:
        node = s["nodes"][name]
        node.update(argv=argv, session=proc.pid, launcher_pid=proc.pid, node_id=None)
        node["sessions"].append(proc.pid)

    update_state(root, record)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [i for i in (_try(lambda: alive_node_ids(state["dashboard"], name)) or []) if i not in before]
        if new:
            update_state(root, lambda s: s["nodes"][name].update(node_id=new[0]))
            return proc, new[0]
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    signal_session(proc.pid, signal.SIGKILL)
    tail = Path(entry["log"]).read_bytes()[-2000:].decode(errors="replace")
    raise RuntimeError(f"{name} started again (session {proc.pid}) but not ALIVE within {timeout:.0f} s:\n{tail}")


def _try(read):
    """`read()`, or None when the dashboard does not answer."""
    try:
        return read()
    except OSError:
        return None


@dataclass
class RayNode:
    name: str
    head: bool
    num_gpus: int
    log: Path
    proc: subprocess.Popen | None = None
    node_id: str | None = None
    ports: dict[str, int] = field(default_factory=dict)

    session: int | None = None
    argv: list[str] = field(default_factory=list)

    @property
    def sid(self) -> int:
        # start_new_session: the launcher's pid is the session's id (and its process group's); a node started
        # again by another process (nodectl.py) has the session the state file records
        if self.session is not None:
            return self.session
        assert self.proc is not None
        return self.proc.pid

    def group_pids(self) -> list[int]:
        """The live processes of this node's session (read from /proc; only this session's), zombies left out."""
        return session_pids(self.sid)

    def signal(self, sig: int, rounds: int = 20) -> None:
        """`sig` to every process of the node's session; with SIGKILL, again until none is left (a raylet can
        spawn a worker while it is being killed)."""
        signal_session(self.sid, sig, rounds)

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
        self._procs: list[tuple[str, subprocess.Popen]] = []  # (node, launcher) this process started, reaped at stop

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
        ports = node.ports = {flag: free_port() for flag in NODE_PORTS}
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
            args += ["--address", self.gcs_address,
                     "--resources", json.dumps({node_resource(node.name): 1, ALLOW_RESOURCE: 1}),
                     "--include-log-monitor", "false"]
        return args

    def _spawn(self, node: RayNode) -> None:
        args = node.argv = self._node_args(node)
        env = _loopback_env()
        print(f"[realray] start {node.name}: {' '.join(a for a in args[1:])}", flush=True)
        node.proc = launch(args, env, node.log)
        node.session, node.node_id = node.proc.pid, None
        self._procs.append((node.name, node.proc))
        self.nodes[node.name] = node
        if warden is not None:  # the node's group dies with this process however it ends (refplatform.warden)
            warden().watch(node.proc.pid)
        self._record(node, env)

    def _record(self, node: RayNode, env: dict[str, str] | None = None) -> None:
        """Write this node's entry of the state file (its new session added to those it had)."""
        def change(state: dict) -> None:
            state.update(root=str(self.root), gcs_address=self.gcs_address, dashboard=self.dashboard_url)
            entry = state.setdefault("nodes", {}).setdefault(node.name, {"sessions": []})
            entry.update(name=node.name, head=node.head, num_gpus=node.num_gpus, resource=None if node.head else node_resource(node.name),
                         session=node.sid, launcher_pid=node.sid, node_id=node.node_id, argv=node.argv,
                         log=str(node.log))
            if env is not None:
                entry.update(env=env, cwd=os.getcwd())  # a job's entrypoint runs where its node was started
            if node.sid not in entry["sessions"]:
                entry["sessions"].append(node.sid)

        update_state(self.root, change)

    def reload(self) -> None:
        """Take each node's current session and node id from the state file (another process, nodectl.py, may have
        started a node again)."""
        for name, entry in read_state(self.root).get("nodes", {}).items():
            node = self.nodes.get(name)
            if node is not None and entry.get("session") != node.sid:
                node.session, node.node_id, node.argv = entry["session"], entry.get("node_id"), entry["argv"]
                node.proc = None
            elif node is not None and entry.get("node_id"):
                node.node_id = entry["node_id"]

    def restart(self, name: str, timeout: float = 60.0) -> str:
        """Start worker node `name` again (same name, GPUs and resources, fresh ports): a new Ray node id (the GCS
        keeps the old one as DEAD). Waits until it is ALIVE and returns its new node id. Its processes must all be
        gone first (kill it)."""
        self.reload()
        node = self.nodes[name]

        def started(proc: subprocess.Popen) -> None:
            self._procs.append((name, proc))
            if warden is not None:
                warden().watch(proc.pid)

        node.proc, node.node_id = relaunch(self.root, name, timeout, on_start=started)
        node.session, node.argv = node.proc.pid, read_state(self.root)["nodes"][name]["argv"]
        return node.node_id

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
                    if node.node_id != n["node_id"]:
                        node.node_id = n["node_id"]
                        self._record(node)
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

    def sessions(self) -> list[int]:
        """Every session of this cluster's nodes, the worker nodes' first and the head's last: those this process
        started and those the state file records (nodes started again by nodectl.py from another process)."""
        recorded = recorded_sessions(self.root)
        order: list[int] = []
        for head in (False, True):
            for name in (n.name for n in self.nodes.values() if n.head == head):
                for sid in [*(p.pid for owner, p in self._procs if owner == name), *recorded.get(name, [])]:
                    if sid not in order:
                        order.append(sid)
        return order

    def stop(self, grace: float = 8.0) -> None:
        """SIGTERM each node's processes (the worker nodes first, the head last), then SIGKILL what is left; every
        session of every node, restarted ones included."""
        order = self.sessions()
        for sid in order:
            signal_session(sid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(session_pids(sid) for sid in order):
            time.sleep(0.2)
        for sid in order:
            signal_session(sid, signal.SIGKILL)
        for _, p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

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
        self.reload()
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
