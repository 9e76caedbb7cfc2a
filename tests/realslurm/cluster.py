"""A real Slurm cluster on this one machine, from the distribution's daemons (issue 47, item 4).

``munged`` with a key of its own (its socket in the cluster's folder, so nothing of the machine's munge is
touched), ``slurmctld``, and one ``slurmd`` per simulated node in Slurm's multiple-slurmd mode (``slurmd -N
<node>``: Debian's 22.05 build has it; each node its own port on loopback, its own spool folder and log).
Every node declares its GPUs as GRES ``gpu`` over character devices this cluster makes in its own folder
(``mknod``, NVIDIA's major 195, one minor per GPU; no driver answers them), so Slurm binds GPUs to steps and
tells each step which ones it holds (``CUDA_VISIBLE_DEVICES``, ``SLURM_STEP_GPUS``) as on a real GPU node.
``SlurmdParameters=config_overrides`` lets a node declare more CPUs than this machine has.

A node's processes are its ``slurmd`` (started here with ``FIREDRILL_SLURM_NODE=<node>`` in its environment), the
``slurmstepd`` of each step it runs (they hold that node's log file open: multiple-slurmd mode gives each node its
own) and their descendants, the job's tasks: :meth:`SlurmCluster.kill_node` SIGKILLs exactly those, a host crash;
:meth:`SlurmCluster.restore_node` starts the node's ``slurmd`` again.  Nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.slurm.driver import SlurmDriver
from drills.slurm.state import SlurmError as DriverError

__all__ = ["SLURM_BINARIES", "SlurmCluster", "SlurmClusterSpec", "SlurmError", "missing_binaries", "running"]

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel")
NODE_ENV = "FIREDRILL_SLURM_NODE"
"""Set on each slurmd this cluster starts: which node's daemon a process is."""
ATTACH_FILE = "cluster.json"
"""Written in the cluster's folder at start: what another process needs to act on its nodes (:meth:`attach`)."""
CGROUP_ROOT = "/sys/fs/cgroup"
GPU_MAJOR = 195
"""NVIDIA's character device major; the simulated GPU files carry it, one minor each."""


class SlurmError(RuntimeError):
    """The cluster could not be started, or a command against it failed; the message says which and why."""


def missing_binaries() -> list[str]:
    """The Slurm and munge commands this machine lacks (the Debian packages slurmctld, slurmd, slurm-client, munge
    provide them)."""
    return [b for b in SLURM_BINARIES if shutil.which(b) is None]


def _free_ports(count: int) -> list[int]:
    """Ports free on loopback now (each bound and released; the daemons bind them a moment later)."""
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass(frozen=True)
class SlurmClusterSpec:
    """What to start, and the knobs the drills meet (docs: issue 47)."""

    work_dir: Path
    nodes: int = 4
    gpus_per_node: int = 8
    cpus_per_node: int = 16
    memory_mb: int = 64000
    partition: str = "gpu"
    slurmd_timeout: int = 300
    """``SlurmdTimeout``: seconds before slurmctld sets a silent node DOWN (upstream default 300)."""
    job_requeue: bool = True
    """``JobRequeue``: whether a batch job on a failed node is requeued by default (upstream default 1)."""
    cred_expire: int | None = None
    """``AuthInfo=cred_expire``: seconds a job credential lives, and so how long slurmctld holds a requeued batch
    job before it may start again (upstream default 120; None: the default)."""
    message_timeout: int | None = None
    """``MessageTimeout``: seconds slurmctld waits for a node's answer to a ping before it counts the node as not
    responding (upstream 10; None: the default)."""
    scheduler_parameters: str | None = None
    """``SchedulerParameters`` (None: upstream's, whose main loop runs every 60 s and backfill every 30 s)."""
    return_to_service: int = 2
    """``ReturnToService``: 2, a DOWN node that registers with a valid configuration is up again."""
    constrain_devices: bool = False
    """Confine each step to its GPUs' device files (``TaskPlugin=task/cgroup``, ``ProctrackType=proctrack/cgroup``,
    ``ConstrainDevices=yes`` in cgroup.conf, the devices controller of cgroup v1); False: ``task/none``, every
    process of a node reaches every device file of it."""
    node_prefix: str = "slurm-node"
    features: tuple[str, ...] = ("firedrill",)
    """Every node's ``Features=`` (a profile's ``safety.allow_feature`` is one of them)."""
    extra_conf: tuple[str, ...] = ()
    """More slurm.conf lines, appended."""

    def node_names(self) -> list[str]:
        return [f"{self.node_prefix}-{i}" for i in range(self.nodes)]


@dataclass
class SlurmCluster:
    """A running cluster; :meth:`stop` ends every process it started."""

    spec: SlurmClusterSpec
    ports: dict[str, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    sockets: Path | None = None
    """A short folder of its own under the system's temp folder for the daemons' unix sockets (munge's, each
    node's spool with its step sockets): a socket path may not exceed 108 bytes, and a test's tmp_path can."""

    # ------------------------------------------------------------- files
    @property
    def root(self) -> Path:
        return self.spec.work_dir

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def short(self) -> Path:
        if self.sockets is None:
            self.sockets = Path(tempfile.mkdtemp(prefix="fdslurm-"))
        return self.sockets

    @property
    def munge_socket(self) -> Path:
        return self.short / "munge.sock"

    def spool(self, node: str) -> Path:
        return self.short / "spool" / node

    def env(self) -> dict[str, str]:
        """The environment a Slurm command needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def gpu_files(self, node: str) -> list[Path]:
        return [self.root / "dev" / node / f"nvidia{g}" for g in range(self.spec.gpus_per_node)]

    def _log(self, name: str) -> Path:
        return self.root / "log" / f"{name}.log"

    def _write_config(self) -> None:
        spec, root = self.spec, self.root
        for sub in ("etc", "state", "log", "run", "dev", "munge"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        names = spec.node_names()
        ports = _free_ports(1 + len(names))
        self.ports = {"slurmctld": ports[0], **dict(zip(names, ports[1:]))}
        lines = [
            "ClusterName=firedrill",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={self.ports['slurmctld']}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}" + (f",cred_expire={spec.cred_expire}" if spec.cred_expire else ""),
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={self.short / 'spool'}/%n",
            f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={self._log('slurmctld')}",
            f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
            *(["ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup"] if spec.constrain_devices else
              ["ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none"]), "MpiDefault=none",
            "SwitchType=switch/none", "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            *([f"SchedulerParameters={spec.scheduler_parameters}"] if spec.scheduler_parameters else []),
            "GresTypes=gpu",
            f"SlurmdTimeout={spec.slurmd_timeout}",
            *([f"MessageTimeout={spec.message_timeout}"] if spec.message_timeout else []),
            f"JobRequeue={1 if spec.job_requeue else 0}",
            f"ReturnToService={spec.return_to_service}",
            "MinJobAge=600",
            *[f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={self.ports[n]} "
              f"CPUs={spec.cpus_per_node} RealMemory={spec.memory_mb} Gres=gpu:{spec.gpus_per_node} State=UNKNOWN"
              + (f" Features={','.join(spec.features)}" if spec.features else "")
              for n in names],
            f"PartitionName={spec.partition} Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP",
            *spec.extra_conf,
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        gres = ["AutoDetect=off"]
        for i, node in enumerate(names):
            files = self.gpu_files(node)
            files[0].parent.mkdir(parents=True, exist_ok=True)
            for g, path in enumerate(files):
                if not path.exists():
                    os.mknod(path, 0o600 | 0o020000, os.makedev(GPU_MAJOR, i * spec.gpus_per_node + g))
            gres.append(f"NodeName={node} Name=gpu File={files[0].parent}/nvidia[0-{spec.gpus_per_node - 1}]")
        (root / "etc" / "gres.conf").write_text("\n".join(gres) + "\n")
        if spec.constrain_devices:
            (root / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n"
                                                      "CgroupAutomount=yes\n")
        (root / ATTACH_FILE).write_text(json.dumps({"short": str(self.short), "nodes": names,
                                                    "node_prefix": spec.node_prefix,
                                                    "gpus_per_node": spec.gpus_per_node}))

    @classmethod
    def attach(cls, root: Path) -> SlurmCluster:
        """The cluster started in ``root`` by another process (its node tool, a profile's fault command): its
        nodes can be killed and restored from here; :meth:`stop` stays with the process that started it."""
        try:
            saved = json.loads((root / ATTACH_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise SlurmError(f"no cluster was started in {root} ({exc})") from None
        made = cls(SlurmClusterSpec(root, nodes=len(saved["nodes"]), gpus_per_node=saved["gpus_per_node"],
                                    node_prefix=saved["node_prefix"]))
        made.sockets = Path(saved["short"])
        return made

    # ------------------------------------------------------------- start, stop
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        out = open(self._log(f"{name}.stdout"), "ab")  # noqa: SIM115 - kept open for the daemon's life
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env or self.env(), cwd=self.root, start_new_session=True)
        out.close()
        self.procs[name] = proc
        return proc

    def start(self, timeout: float = 30.0) -> None:
        """munged, slurmctld and every node's slurmd; returns once every node is idle."""
        missing = missing_binaries()
        if missing:
            raise SlurmError(f"Slurm is not installed here (missing {', '.join(missing)}): install the Debian "
                             "packages slurmctld slurmd slurm-client munge")
        self._write_config()
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o600)
        (self.root / "munge").chmod(0o700)
        self._spawn("munged", ["munged", "-F", "-f", f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                               f"--log-file={self._log('munged')}", f"--seed-file={self.root / 'munge' / 'seed'}"])
        self._wait(lambda: self.munge_socket.exists(), 10, "munged never opened its socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for node in self.spec.node_names():
            self.restore_node(node)
        self.wait_nodes(self.spec.node_names(), ("IDLE",), timeout)

    def restore_node(self, node: str) -> None:
        """Start the node's slurmd (again): after :meth:`kill_node`, a host coming back up."""
        self.spool(node).mkdir(parents=True, exist_ok=True)
        self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-f", str(self.conf), "-N", node],
                    env={**self.env(), NODE_ENV: node})

    def stop(self) -> None:
        """SIGKILL every process this cluster started (its daemons, their step daemons and tasks)."""
        for node in self.spec.node_names():
            self.kill_node(node)
        for name in ("slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)
        if self.spec.constrain_devices:
            self._remove_cgroups()

    def _remove_cgroups(self) -> None:
        """The cgroups task/cgroup made for this cluster's nodes (``slurm_<node>`` under each v1 controller), now
        empty: removed deepest first, so the machine is left as it was."""
        for node in self.spec.node_names():
            for top in Path(CGROUP_ROOT).glob(f"*/slurm_{node}"):
                for path in sorted((p for p in [top, *top.rglob("*")] if p.is_dir()), key=lambda p: -len(p.parts)):
                    try:
                        path.rmdir()
                    except OSError:
                        pass

    # ------------------------------------------------------------- faults
    def node_pids(self, node: str) -> list[int]:
        """The node's processes: its slurmd, the slurmstepd of each step it runs (they hold its log open) and
        their descendants."""
        log = str(self.root / "log" / f"slurmd-{node}.log")
        children: dict[int, list[int]] = {}
        roots: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(pid)
                cmd = (entry / "cmdline").read_bytes().split(b"\0")[0]
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if cmd.endswith(b"slurmd") and str(self.conf).encode() in argv and \
                        f"{NODE_ENV}={node}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    roots.append(pid)
                elif cmd.startswith(b"slurmstepd") and any(
                        os.readlink(fd) == log for fd in (entry / "fd").iterdir()):
                    roots.append(pid)
            except (OSError, ValueError, IndexError):
                continue
        out, todo = [], list(roots)
        while todo:
            pid = todo.pop()
            if pid not in out:
                out.append(pid)
                todo += children.get(pid, [])
        return sorted(out)

    def kill_node(self, node: str) -> list[int]:
        """A host crash: SIGKILL the node's processes (:meth:`node_pids`); the pids signalled."""
        pids = self.node_pids(node)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc = self.procs.get(f"slurmd-{node}")
        if proc is not None:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        return pids

    # ------------------------------------------------------------- reads
    def run(self, *argv: str, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env(), timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=self.root)
        if check and proc.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    @property
    def driver(self) -> SlurmDriver:
        """The harness's own Slurm driver, pointed at this cluster."""
        return SlurmDriver(conf=self.conf, workdir=self.root)

    def json(self, command: str, *argv: str) -> dict[str, Any]:
        """``command --json argv...``, parsed."""
        return self.driver.json(command, *argv)

    def node_states(self) -> dict[str, set[str]]:
        """Node -> its state flags (``IDLE``, ``MIXED``, ``DOWN``, ``NOT_RESPONDING``, ...), as the driver reads
        them from ``sinfo --json``."""
        return {n.name: {f.value for f in n.flags} for n in self.driver.nodes()}

    def wait_nodes(self, nodes: Iterable[str], states: tuple[str, ...], timeout: float) -> None:
        wanted = list(nodes)
        last: dict[str, set[str]] = {}

        def ready() -> bool:
            nonlocal last
            try:
                last = self.node_states()
            except (SlurmError, DriverError):  # slurmctld not answering yet
                return False
            return all(last.get(n, set()) & set(states) for n in wanted)
        self._wait(ready, timeout, lambda: f"nodes never reached {'/'.join(states)}: {last}; slurmctld log: "
                                           f"{self._tail('slurmctld')}")

    def _tail(self, name: str, lines: int = 5) -> str:
        try:
            return " | ".join(self._log(name).read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @staticmethod
    def _wait(predicate: Callable[[], bool], timeout: float, why: str | Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() >= deadline:
                raise SlurmError(why() if callable(why) else why)
            time.sleep(0.2)


@contextmanager
def running(spec: SlurmClusterSpec) -> Iterator[SlurmCluster]:
    """A started cluster of ``spec``, stopped (every process it started killed) on the way out."""
    made = SlurmCluster(spec)
    try:
        made.start()
        yield made
    finally:
        made.stop()
