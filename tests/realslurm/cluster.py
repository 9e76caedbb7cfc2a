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
:meth:`SlurmCluster.restore_node` starts the node's ``slurmd`` again.  Every daemon is addressed on 127.0.0.1 only; slurmctld and
slurmd bind every address (Slurm's default) unless the cluster has accounting (below).

With ``SlurmClusterSpec(accounting=Accounting())`` the cluster also runs Slurm's accounting and a tenant's governance:
a MariaDB of its own (its datadir in the cluster's folder, on 127.0.0.1), ``slurmdbd``, the accounts, QOS and users
made through ``sacctmgr -i``, and a Unix user, the tenant, whose commands :meth:`SlurmCluster.as_tenant` runs.  Its
slurm.conf then lies under :attr:`SlurmCluster.short`, which the tenant reaches; the rest of the cluster's folder is
root's.  Where this machine's name resolves to loopback, its daemons bind 127.0.0.1 only
(``CommunicationParameters=NoCtldInAddrAny,NoInAddrAny``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.slurm.driver import SlurmDriver
from drills.slurm.state import SlurmError as DriverError

__all__ = ["ACCOUNTING_BINARIES", "SLURM_BINARIES", "Accounting", "SlurmCluster", "SlurmClusterSpec", "SlurmError",
           "REST_USER", "missing_accounting_binaries", "missing_binaries", "running"]

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel")
NODE_ENV = "FIREDRILL_SLURM_NODE"
"""Set on each slurmd this cluster starts: which node's daemon a process is."""
ATTACH_FILE = "cluster.json"
"""Written in the cluster's folder at start: what another process needs to act on its nodes (:meth:`attach`)."""
CGROUP_ROOT = "/sys/fs/cgroup"
GPU_MAJOR = 195
"""NVIDIA's character device major; the simulated GPU files carry it, one minor each."""
REST_USER, REST_GROUP = "nobody", "nogroup"
"""Who slurmrestd runs as (it refuses root) and whom the tests' tokens are for (it refuses root's): a user of every
Debian machine that owns nothing."""
ACCOUNTING_BINARIES = (("mariadbd", "mysqld"), ("mariadb-install-db", "mysql_install_db"), ("mariadb", "mysql"),
                       ("slurmdbd",), ("sacctmgr",), ("setpriv",), ("useradd",))
"""What an accounting cluster needs besides :data:`SLURM_BINARIES` (any one of each group): the Debian packages
mariadb-server (its client comes with it) and slurmdbd (sacctmgr comes with slurm-client; setpriv and useradd with
util-linux and passwd)."""
DB_NAME = "slurm_acct_db"
DB_OPTIONS = ("--innodb-log-file-size=8M", "--innodb-buffer-pool-size=64M", "--innodb-autoextend-increment=4",
              "--innodb-temp-data-file-path=ibtmp1:4M:autoextend", "--innodb-flush-log-at-trx-commit=0",
              "--skip-innodb-doublewrite", "--innodb-flush-method=nosync", "--innodb-lock-wait-timeout=900",
              "--skip-name-resolve", "--skip-log-bin")
"""MariaDB's settings for a throwaway accounting database: small files (the datadir about 30 MB, not 120), no
syncing (nothing of it outlives the cluster's folder), so it is made in under a second and starts in a fifth."""


class SlurmError(RuntimeError):
    """The cluster could not be started, or a command against it failed; the message says which and why."""


def missing_binaries() -> list[str]:
    """The Slurm and munge commands this machine lacks (the Debian packages slurmctld, slurmd, slurm-client, munge
    provide them)."""
    return [b for b in SLURM_BINARIES if shutil.which(b) is None]


def _signal(pids: list[int], sig: signal.Signals) -> list[int]:
    """Send ``sig`` to each of ``pids`` (the cluster's own processes; one gone already is passed over)."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return pids


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def missing_accounting_binaries() -> list[str]:
    """The commands an accounting cluster (:class:`Accounting`) needs that this machine lacks."""
    return ["/".join(group) for group in ACCOUNTING_BINARIES if not any(shutil.which(b) for b in group)]


def _which(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise SlurmError(f"none of {', '.join(names)} is installed here: apt-get install mariadb-server slurmdbd")


def hostname_is_loopback() -> bool:
    """Whether this machine's name resolves to a loopback address (then ``NoInAddrAny`` binds loopback only)."""
    try:
        return socket.gethostbyname(socket.gethostname()).startswith("127.")
    except OSError:
        return False


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
class Accounting:
    """Slurm's accounting and its governance, for the drills that test a tenant's limits (opt-in:
    ``SlurmClusterSpec(accounting=Accounting())``).  The cluster then also runs its own MariaDB (its datadir made
    once in the cluster's folder, listening on 127.0.0.1 only) and ``slurmdbd`` (on 127.0.0.1), registers itself
    with ``sacctmgr -i add cluster firedrill`` before slurmctld starts, enforces
    ``associations,limits,qos,safe``, and sets up, through ``sacctmgr -i``:

    * the accounts ``accounts`` (the tenant's first: the tenant's only one); root is in every one of them, and in
      its own ``root`` account (its default);
    * the QOS ``normal`` (Slurm's), ``limited_qos`` with ``GrpTRES=gres/gpu=<gpu_limit>`` (and ``DenyOnLimit``
      when ``deny_on_limit``), and ``withheld_qos``, which only root is given;
    * the Unix user ``tenant_user`` (made with ``useradd --system --no-create-home`` when missing) in the tenant
      account only, with the QOS ``limited_qos`` only (its default), so every job of it counts against the limit;
    * a second partition ``restricted_partition`` on the same nodes with ``AllowAccounts=<the other accounts>``.

    :meth:`SlurmCluster.as_tenant` runs a command as that user."""

    tenant_user: str = "firedrill-tenant"
    accounts: tuple[str, ...] = ("tenant-a", "tenant-b")
    limited_qos: str = "tenant-gpu"
    gpu_limit: int = 4
    """``GrpTRES=gres/gpu=N`` of ``limited_qos``: the GPUs all the tenant's running jobs may hold together."""
    deny_on_limit: bool = True
    """``Flags=DenyOnLimit`` on ``limited_qos``: a job over the limit by itself is refused at submission (else it
    is accepted and pends, reason ``QOSGrpGRES``)."""
    withheld_qos: str = "high"
    restricted_partition: str = "restricted"

    def __post_init__(self) -> None:
        if len(self.accounts) < 2:
            raise ValueError("Accounting.accounts names the tenant's account and at least one other (the "
                             "restricted partition allows only the others)")

    @property
    def tenant_account(self) -> str:
        return self.accounts[0]


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
    accounting: Accounting | None = None
    """Accounting and a tenant's governance (:class:`Accounting`); None: no accounting (``accounting_storage/none``),
    every user may run anything."""
    rest: bool = False
    """slurmrestd beside slurmctld, as sites serve it: JSON Web Tokens (``AuthAltTypes=auth/jwt``, a key of the
    cluster's own), ``rest_auth/jwt``, ``openapi/v0.0.38``, on a loopback port, dropped to ``nobody`` (it refuses
    to run as root); :meth:`SlurmCluster.rest_token` mints a token."""

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
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds each phase of :meth:`start` took: ``munged``; with accounting, ``tenant_user``, ``db_init``
    (``mariadb-install-db``; 0 where the datadir was made before), ``db_start`` (until it listens, and slurmdbd's
    database user made), ``slurmdbd`` (until it listens), ``sacctmgr`` (the governance, its last step while
    slurmctld starts: until slurmctld holds the GPU limit), ``accounting`` (all of these from ``tenant_user`` on);
    ``nodes`` (from slurmctld's start until every node is idle; it overlaps the last of ``sacctmgr``); ``total``."""

    # ------------------------------------------------------------- files
    @property
    def root(self) -> Path:
        return self.spec.work_dir

    @property
    def etc(self) -> Path:
        """The folder of slurm.conf, gres.conf (and cgroup.conf, slurmdbd.conf): the cluster's own; with accounting,
        one under :attr:`short`, which the tenant can reach (its commands read slurm.conf, and so does every step of
        its jobs: slurmd gives them ``SLURM_CONF`` naming its own); so too with ``rest``, for slurmrestd reads its
        configuration once it runs as ``nobody``."""
        shared = self.spec.accounting is not None or self.spec.rest
        return (self.short if shared else self.root) / "etc"

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"

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

    @property
    def tenant_dir(self) -> Path:
        """The tenant's own working folder (owned by it, mode 700): its scripts and its jobs' output go here.  It is
        under :attr:`short`, which every user may traverse: the cluster's folder may sit under a private one (a
        test's tmp_path does), and the tenant reaches nothing of it."""
        return self.short / "tenant"

    @property
    def dbd_conf(self) -> Path:
        """slurmdbd.conf (mode 600, root's): slurmdbd finds it beside ``SLURM_CONF``."""
        return self.etc / "slurmdbd.conf"

    @property
    def private(self) -> Path:
        """Root's own folder in the cluster's (mode 700): the database's password."""
        return self.root / "private"

    @property
    def datadir(self) -> Path:
        return self.root / "db"

    @property
    def jwt_key(self) -> Path:
        """The key slurmctld signs and checks JSON Web Tokens with (mode 600, root's; with ``rest``)."""
        return self.root / "jwt" / "jwt.key"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['slurmrestd']}"

    def rest_token(self, user: str = REST_USER, lifespan: int = 3600) -> str:
        """A JSON Web Token for ``user`` (``scontrol token``, as root: the token alone, without ``SLURM_JWT=``)."""
        said = self.run("scontrol", "token", f"username={user}", f"lifespan={lifespan}").stdout.strip()
        return said.removeprefix("SLURM_JWT=")

    def gpu_files(self, node: str) -> list[Path]:
        return [self.root / "dev" / node / f"nvidia{g}" for g in range(self.spec.gpus_per_node)]

    def log_path(self, name: str) -> Path:
        """A daemon's log file: ``slurmctld``, ``slurmdbd``, ``munged``, ``mariadb``, ``slurmd-<node>``."""
        return self.root / "log" / f"{name}.log"

    def log_mark(self, name: str = "slurmctld") -> int:
        """Where the daemon's log ends now; :meth:`log_since` reads what it wrote after."""
        try:
            return self.log_path(name).stat().st_size
        except FileNotFoundError:
            return 0

    def log_since(self, mark: int, name: str = "slurmctld") -> list[str]:
        """The lines the daemon's log gained after ``mark`` (:meth:`log_mark`)."""
        try:
            with open(self.log_path(name), "rb") as log:
                log.seek(mark)
                return log.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def _write_config(self) -> None:
        spec, root = self.spec, self.root
        for sub in ("state", "log", "run", "dev", "munge"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.etc.mkdir(parents=True, exist_ok=True)
        names = spec.node_names()
        acct = spec.accounting
        ports = _free_ports(1 + len(names) + (2 if acct else 0) + (1 if spec.rest else 0))
        self.ports = {"slurmctld": ports[0], **dict(zip(names, ports[1:1 + len(names)]))}
        if acct:
            self.ports.update(mariadb=ports[1 + len(names)], slurmdbd=ports[2 + len(names)])
        if spec.rest:
            self.ports["slurmrestd"] = ports[-1]
            jwt = self.root / "jwt"
            jwt.mkdir(mode=0o700, exist_ok=True)
            if not self.jwt_key.exists():
                self.jwt_key.write_bytes(os.urandom(32))
                self.jwt_key.chmod(0o600)
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
            f"SlurmctldLogFile={self.log_path('slurmctld')}",
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
            *([] if acct is None else [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=127.0.0.1",
                f"AccountingStoragePort={self.ports['slurmdbd']}",
                f"AccountingStoragePass={self.munge_socket}",  # the munge socket slurmdbd's connection signs with
                "AccountingStorageEnforce=associations,limits,qos,safe",
                "AccountingStorageTRES=gres/gpu",
                # a job for a partition its account may not use is refused at submission (upstream: NO, it pends)
                "EnforcePartLimits=ALL",
                # a job's priority is small (1: every weight is 0), so a user's own raising of it is one
                # (priority/basic gives each job about 2^32 less its number, and any number below is a lowering)
                "PriorityType=priority/multifactor",
                # slurmctld and slurmd bind the address this machine's name resolves to, not every address, where
                # that is loopback (Slurm has no setting for an address of one's choosing)
                *(["CommunicationParameters=NoCtldInAddrAny,NoInAddrAny"] if hostname_is_loopback() else []),
                f"PartitionName={acct.restricted_partition} Nodes={','.join(names)} Default=NO MaxTime=INFINITE "
                f"State=UP AllowAccounts={','.join(acct.accounts[1:])}"]),
            *(["AuthAltTypes=auth/jwt", f"AuthAltParameters=jwt_key={self.jwt_key}"] if spec.rest else []),
            *spec.extra_conf,
        ]
        if acct is not None:
            self._write_accounting_config()
        if spec.rest:  # slurmrestd, as nobody, reads slurm.conf and gres.conf there and lists nothing else
            self.short.chmod(0o711)
            self.etc.chmod(0o755)
        self.conf.write_text("\n".join(lines) + "\n")
        gres = ["AutoDetect=off"]
        for i, node in enumerate(names):
            files = self.gpu_files(node)
            files[0].parent.mkdir(parents=True, exist_ok=True)
            for g, path in enumerate(files):
                if not path.exists():
                    os.mknod(path, 0o600 | 0o020000, os.makedev(GPU_MAJOR, i * spec.gpus_per_node + g))
            gres.append(f"NodeName={node} Name=gpu File={files[0].parent}/nvidia[0-{spec.gpus_per_node - 1}]")
        (self.etc / "gres.conf").write_text("\n".join(gres) + "\n")
        if spec.constrain_devices:
            (self.etc / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n"
                                                      "CgroupAutomount=yes\n")
        (root / ATTACH_FILE).write_text(json.dumps({"short": str(self.short), "nodes": names,
                                                    "node_prefix": spec.node_prefix,
                                                    "gpus_per_node": spec.gpus_per_node,
                                                    "accounting": acct and dataclasses.asdict(acct)}))

    def _write_accounting_config(self) -> None:
        """slurmdbd.conf (600), the database's password (600, made once with the datadir); the cluster's folders
        closed to other users but :attr:`short` (711: the munge socket, the tenant's folder) and :attr:`etc` (755)."""
        acct = self.spec.accounting
        assert acct is not None
        self.private.mkdir(exist_ok=True)
        for sub in ("state", "log", "run", "munge", "private"):
            (self.root / sub).chmod(0o700)
        password_file = self.private / "db.password"
        if not password_file.exists():
            password_file.write_text(secrets.token_hex(16))
            password_file.chmod(0o600)
        self.dbd_conf.write_text("\n".join([
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "DbdHost=localhost",
            "DbdAddr=127.0.0.1",
            f"DbdPort={self.ports['slurmdbd']}",
            *(["CommunicationParameters=NoInAddrAny"] if hostname_is_loopback() else []),
            "SlurmUser=root",
            "DebugLevel=info",
            f"LogFile={self.log_path('slurmdbd')}",
            f"PidFile={self.root / 'run' / 'slurmdbd.pid'}",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={self.ports['mariadb']}",
            "StorageUser=slurm",
            f"StoragePass={password_file.read_text().strip()}",
            f"StorageLoc={DB_NAME}",
        ]) + "\n")
        self.dbd_conf.chmod(0o600)
        os.chown(self.dbd_conf, 0, 0)
        self.short.chmod(0o711)  # the tenant reaches the munge socket, etc and its own folder, lists nothing
        self.etc.chmod(0o755)

    @classmethod
    def attach(cls, root: Path) -> SlurmCluster:
        """The cluster started in ``root`` by another process (its node tool, a profile's fault command): its
        nodes can be killed and restored from here; :meth:`stop` stays with the process that started it."""
        try:
            saved = json.loads((root / ATTACH_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise SlurmError(f"no cluster was started in {root} ({exc})") from None
        acct = saved.get("accounting")
        made = cls(SlurmClusterSpec(root, nodes=len(saved["nodes"]), gpus_per_node=saved["gpus_per_node"],
                                    node_prefix=saved["node_prefix"],
                                    accounting=acct and Accounting(**{**acct, "accounts": tuple(acct["accounts"])})))
        made.sockets = Path(saved["short"])
        return made

    # ------------------------------------------------------------- start, stop
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        out = open(self.log_path(f"{name}.stdout"), "ab")  # noqa: SIM115 - kept open for the daemon's life
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env or self.env(), cwd=self.root, start_new_session=True)
        out.close()
        self.procs[name] = proc
        return proc

    def start(self, timeout: float = 30.0) -> None:
        """munged, (with accounting: MariaDB, slurmdbd, the cluster and its governance in sacctmgr,) slurmctld and
        every node's slurmd; returns once every node is idle."""
        began = time.monotonic()
        missing = missing_binaries()
        if missing:
            raise SlurmError(f"Slurm is not installed here (missing {', '.join(missing)}): install the Debian "
                             "packages slurmctld slurmd slurm-client munge")
        if self.spec.rest and shutil.which("slurmrestd") is None:
            raise SlurmError("slurmrestd is not installed here: install the Debian package slurmrestd")
        if self.spec.accounting is not None and missing_accounting_binaries():
            raise SlurmError(f"accounting needs {', '.join(missing_accounting_binaries())}: install the Debian "
                             "packages mariadb-server slurmdbd")
        self._write_config()
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o600)
        (self.root / "munge").chmod(0o700)
        self._spawn("munged", ["munged", "-F", "-f", f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                               f"--log-file={self.log_path('munged')}", f"--seed-file={self.root / 'munge' / 'seed'}"])
        self._wait(lambda: self.munge_socket.exists(), 10, "munged never opened its socket")
        self.timings["munged"] = time.monotonic() - began
        fresh = self.spec.accounting is not None and self._start_accounting(timeout)
        up = time.monotonic()
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for node in self.spec.node_names():
            self.restore_node(node)
        if fresh:  # while the nodes come up
            self._set_up_governance(timeout)
            self.timings["sacctmgr"] += time.monotonic() - up
            self.timings["accounting"] += time.monotonic() - up
        if self.spec.rest:  # while the nodes come up; it asks slurmctld nothing until a request comes
            listen = f"127.0.0.1:{self.ports['slurmrestd']}"
            self._spawn("slurmrestd", ["slurmrestd", "-f", str(self.conf), "-u", REST_USER, "-g", REST_GROUP, "-a",
                                       "rest_auth/jwt", "-s", "openapi/v0.0.38", listen],
                        env={**self.env(), "SLURM_JWT": "daemon"})  # daemon: pass each request's token through
        self.wait_nodes(self.spec.node_names(), ("IDLE",), timeout)
        self.timings["nodes"] = time.monotonic() - up
        if self.spec.rest:
            self._wait_listening("slurmrestd", timeout)
        self.timings["total"] = time.monotonic() - began

    def _start_accounting(self, timeout: float) -> bool:
        """The tenant's Unix user, MariaDB (its datadir made on the first start), slurmdbd, and on a fresh
        database the cluster in sacctmgr (slurmctld registers with it); whether the database is fresh (then
        :meth:`_set_up_governance` follows once slurmctld is up)."""
        acct = self.spec.accounting
        assert acct is not None
        began = mark = time.monotonic()

        def lap(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            self.timings[name] = now - mark
            mark = now
        tenant = self._ensure_user(acct.tenant_user)
        self.tenant_dir.mkdir(exist_ok=True)
        os.chown(self.tenant_dir, tenant.pw_uid, tenant.pw_gid)
        self.tenant_dir.chmod(0o700)
        lap("tenant_user")
        fresh = not (self.datadir / "mysql").is_dir()
        if fresh:
            shutil.rmtree(self.datadir, ignore_errors=True)
            self.run(_which("mariadb-install-db", "mysql_install_db"), "--no-defaults", f"--datadir={self.datadir}",
                     "--user=root", "--auth-root-authentication-method=socket", "--skip-test-db", *DB_OPTIONS,
                     timeout=120)
        self.datadir.chmod(0o700)
        lap("db_init")
        private = self.short / "mariadb"  # its unix socket, root's only (slurmdbd speaks TCP on loopback)
        private.mkdir(mode=0o700, exist_ok=True)
        db_socket = private / "mysqld.sock"
        (self.root / "db-tmp").mkdir(mode=0o700, exist_ok=True)
        self._spawn("mariadb", [_which("mariadbd", "mysqld"), "--no-defaults", f"--datadir={self.datadir}",
                                "--user=root", f"--socket={db_socket}", f"--log-error={self.log_path('mariadb')}",
                                f"--pid-file={self.root / 'run' / 'mariadb.pid'}", "--bind-address=127.0.0.1",
                                f"--port={self.ports['mariadb']}",
                                f"--tmpdir={self.root / 'db-tmp'}", *DB_OPTIONS])
        self._wait_listening("mariadb", timeout)
        if fresh:  # slurmdbd's own database user, over the socket as root (its unix_socket login)
            password = (self.private / "db.password").read_text().strip()
            self.run(_which("mariadb", "mysql"), "--no-defaults", f"--socket={db_socket}", "--user=root", "-e",
                     f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
                     f"GRANT ALL ON {DB_NAME}.* TO 'slurm'@'127.0.0.1';")
        lap("db_start")
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        self._wait_listening("slurmdbd", timeout)
        lap("slurmdbd")
        if fresh:
            self._add_associations()
        lap("sacctmgr")
        self.timings["accounting"] = time.monotonic() - began
        return fresh

    def _add_associations(self) -> None:
        """The cluster, accounts, QOS and users of :class:`Accounting` through ``sacctmgr -i``, before slurmctld
        starts (it loads them from slurmdbd as it starts; a change pushed to it while it loads can be lost: "Can't
        find parent id ... this should never happen"), all but the limited QOS's ``GrpTRES``
        (:meth:`_set_up_governance`).  Each sacctmgr command takes 0.4 to 0.7 s, its round trips to slurmdbd
        waiting on loopback's delayed ACKs rather than on the CPU, so what does not depend on another runs beside
        it."""
        acct = self.spec.accounting
        assert acct is not None
        self.sacctmgr("add", "cluster", "firedrill")
        with ThreadPoolExecutor(2) as pool:
            limited = pool.submit(self.sacctmgr, "add", "qos", acct.limited_qos,
                                  *(["Flags=DenyOnLimit"] if acct.deny_on_limit else []))
            withheld = pool.submit(self.sacctmgr, "add", "qos", acct.withheld_qos)
            self.sacctmgr("add", "account", ",".join(acct.accounts), "Cluster=firedrill")
            root = pool.submit(self.sacctmgr, "add", "user", "root", f"Account={','.join(acct.accounts)}")
            limited.result()
            self.sacctmgr("add", "user", acct.tenant_user, f"Account={acct.tenant_account}", f"QOS={acct.limited_qos}",
                          f"DefaultQOS={acct.limited_qos}")
            root.result()
            withheld.result()

    def _set_up_governance(self, timeout: float) -> None:
        """The limited QOS's ``GrpTRES=gres/gpu=N``, once slurmctld has registered with slurmdbd (its TRES, and
        ``gres/gpu`` with them, are known to slurmdbd only then, and a change is pushed to it only then); returns
        once slurmctld holds the limit."""
        acct = self.spec.accounting
        assert acct is not None

        def registered() -> bool:
            tres = self.sacctmgr("-nP", "show", "tres", "format=type,name").stdout.split()
            ctld = self.sacctmgr("-nP", "show", "cluster", "firedrill", "format=controlport").stdout.strip()
            return "gres|gpu" in tres and ctld not in ("", "0")
        self._wait(registered, timeout, lambda: f"slurmctld never registered with slurmdbd: "
                                                f"{self._tail('slurmctld')} | {self._tail('slurmdbd')}")
        self.sacctmgr("modify", "qos", acct.limited_qos, "set", f"GrpTRES=gres/gpu={acct.gpu_limit}")

        def held() -> bool:
            try:
                qos = self.run("scontrol", "show", "assoc_mgr", "flags=qos", f"qos={acct.limited_qos}").stdout
            except SlurmError:  # slurmctld not answering yet
                return False
            return f"gres/gpu={acct.gpu_limit}(" in qos
        self._wait(held, timeout, lambda: f"slurmctld never received {acct.limited_qos}'s GrpTRES: "
                                          f"{self._tail('slurmctld')}")

    @staticmethod
    def _ensure_user(name: str) -> pwd.struct_passwd:
        """The Unix user, made (a system user, no home) when this machine lacks it."""
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        try:
            return pwd.getpwnam(name)
        except KeyError:
            raise SlurmError(f"could not make the user {name}: useradd exited {made.returncode}: "
                             f"{made.stderr.strip()}") from None

    def _wait_listening(self, name: str, timeout: float) -> None:
        """Until the daemon ``name`` accepts a connection on its loopback port; fails at once if it exited."""
        proc, port = self.procs[name], self.ports[name]

        def up() -> bool:
            if proc.poll() is not None:
                raise SlurmError(f"{name} exited {proc.returncode}: {self._tail(name)} | "
                                 f"{self._tail(name + '.stdout')}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return True
            except OSError:
                return False
        self._wait(up, timeout, lambda: f"{name} never listened on 127.0.0.1:{port}: {self._tail(name)}")

    def restore_node(self, node: str) -> None:
        """Start the node's slurmd (again): after :meth:`kill_node`, a host coming back up."""
        self.spool(node).mkdir(parents=True, exist_ok=True)
        self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-f", str(self.conf), "-N", node],
                    env={**self.env(), NODE_ENV: node})

    def stop(self) -> None:
        """SIGKILL every process this cluster started (its daemons, their step daemons and tasks)."""
        for node in self.spec.node_names():
            self.kill_node(node)
        for name in ("slurmrestd", "slurmctld", "slurmdbd", "mariadb", "munged"):
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
        pids = _signal(self.node_pids(node), signal.SIGKILL)
        proc = self.procs.get(f"slurmd-{node}")
        if proc is not None:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        return pids

    def stop_node(self, node: str, *, daemon_only: bool) -> list[int]:
        """SIGSTOP the node's processes: its ``slurmd`` alone (``daemon_only``: the node cut off from slurmctld
        while its tasks run on, a network partition) or all of them (a hung host); the pids signalled."""
        return _signal([pid for pid in self.node_pids(node) if not daemon_only or _comm(pid) == "slurmd"],
                       signal.SIGSTOP)

    def continue_node(self, node: str) -> list[int]:
        """SIGCONT every process of the node (undoes :meth:`stop_node`; harmless on running ones)."""
        return _signal(self.node_pids(node), signal.SIGCONT)

    # ------------------------------------------------------------- reads
    def run(self, *argv: str, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env(), timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=self.root)
        if check and proc.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def sacctmgr(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``sacctmgr -i argv...`` as root (an accounting cluster's)."""
        return self.run("sacctmgr", "-i", *argv, check=check)

    def as_tenant(self, *argv: str, timeout: float = 30.0, check: bool = False) -> subprocess.CompletedProcess[str]:
        """``argv`` run as the tenant's Unix user (``setpriv``: its uid, gid and groups, no capability of root),
        in :attr:`tenant_dir`, with only ``PATH``, ``SLURM_CONF`` (:attr:`conf`), ``HOME``, ``USER``,
        ``LOGNAME`` and ``LC_ALL=C`` set; its exit status is not checked unless ``check``."""
        acct = self.spec.accounting
        if acct is None:
            raise SlurmError("this cluster has no tenant: start it with SlurmClusterSpec(accounting=Accounting())")
        user = pwd.getpwnam(acct.tenant_user)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_CONF": str(self.conf),
               "HOME": str(self.tenant_dir), "USER": user.pw_name, "LOGNAME": user.pw_name, "LC_ALL": "C"}
        proc = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
                               "--inh-caps=-all", "--", *argv], capture_output=True, text=True, env=env,
                              timeout=timeout, stdin=subprocess.DEVNULL, cwd=self.tenant_dir)
        if check and proc.returncode != 0:
            raise SlurmError(f"as {user.pw_name}: {' '.join(argv)} exited {proc.returncode}: "
                             f"{proc.stderr.strip() or proc.stdout.strip()}")
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
            return " | ".join(self.log_path(name).read_text().splitlines()[-lines:])
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
