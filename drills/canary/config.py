"""The canary's settings: command-line options and environment variables, checked, as one :class:`Config`.

Every bad value raises :class:`UsageError` naming the option or variable and what it got.
"""

from __future__ import annotations

import argparse
import enum
import ipaddress
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from drills.canary.errors import UsageError

__all__ = ["Config", "RendezvousMode", "build_parser", "parse_config"]

PROG = "firedrill-canary"
GENERATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_PAYLOAD = 1 << 30

ENVIRONMENT = """\
environment (torch.distributed style; an empty variable counts as unset):
  MASTER_ADDR, MASTER_PORT   rank 0 listens there and the other ranks connect (TCP rendezvous);
                             when MASTER_ADDR is unset, --rendezvous-dir is used instead
  RANK                       this process's rank, 0..WORLD_SIZE-1; falls back to VC_TASK_INDEX
                             (Volcano), then JOB_COMPLETION_INDEX (indexed Job), then SLURM_PROCID
                             (a task of a Slurm step), then 0
  WORLD_SIZE                 number of ranks; falls back to SLURM_NTASKS (default 1)
  POD_IP                     the address rank 0 listens on (downward API status.podIP);
                             default 127.0.0.1 for a file rendezvous, MASTER_ADDR otherwise
  FIREDRILL_CHECKPOINT_DIR   default of --checkpoint-dir
  FIREDRILL_RENDEZVOUS_DIR   default of --rendezvous-dir
  FIREDRILL_GENERATION       default of --generation; falls back to SLURM_RESTART_COUNT (how many
                             times Slurm requeued the job), then 0
  NVIDIA_VISIBLE_DEVICES     the GPUs this process was given, logged in its start line; falls back
                             to SLURM_STEP_GPUS (the node's GPU indexes Slurm gave the step; its
                             CUDA_VISIBLE_DEVICES restarts at 0 under ConstrainDevices=yes), then
                             to CUDA_VISIBLE_DEVICES
  SLURMD_NODENAME            the Slurm node this task runs on, logged in its start line's config
  SLURM_JOB_GPUS             the GPUs of this node the whole Slurm job holds, logged in the start
                             line's config (job_gpus): what two jobs must never share
  FIREDRILL_DEVICE_SOCKET    path of the node's (simulated) GPU driver socket, a UNIX datagram
                             socket; the canary sends it each state change (input, compute, comm,
                             idle); unset: nothing is sent
  FIREDRILL_DEVICE_CLOCKS    path of the driver's clocks file (JSON: {"gpus": {uuid: speed},
                             "input_delay_s": s, "storage_stalled_until": epoch s,
                             "atomic_rename": bool}); each step's compute is stretched by 1/speed of
                             the slowest GPU of NVIDIA_VISIBLE_DEVICES and its input by the delay;
                             a checkpoint write waits while the storage is stalled, and goes
                             straight under its final name when atomic_rename is false;
                             unset or unreadable: full speed, storage that answers, atomic
  FIREDRILL_LINK_BANDWIDTH   this node's link to its peers, in bytes per second (a fabric that
                             imposes it; the reference platform's agent sets it): each connection
                             sends no faster than the slower of its two ends' links; unset: as
                             fast as the sockets go (a real fabric is what it is)

output: one JSON object per line on stdout (events start, rendezvous, resumed, step,
checkpoint-begin, checkpoint, stalled, unstalled, peer_lost, exit), each with seq, ts,
event, rank, world_size and generation; the fields of each event are in docs/WORKLOAD.md.

signals: SIGTERM stops the rank (exit 143); SIGUSR1: its GPU failed (exit 1); SIGUSR2: its
GPU is stuck in a kernel (the current or next compute never ends, silently, until SIGTERM).

exit codes: 0 steps-total reached, 143 SIGTERM, 1 peer timeout, rendezvous timeout or
another error, 2 a bad option or environment variable.
"""


class RendezvousMode(enum.Enum):
    """How the ranks find rank 0."""

    NONE = "none"
    """A world of one rank: nothing to find."""
    TCP = "tcp"
    """``MASTER_ADDR``/``MASTER_PORT``: rank 0 listens on a known port."""
    FILE = "file"
    """``--rendezvous-dir``: rank 0 listens on any port and publishes it in ``master-<generation>.json``."""


@dataclass(frozen=True)
class Config:
    """Everything the canary was asked to do, checked."""

    steps_total: int
    compute_seconds: float
    input_seconds: float
    comm_seconds: float
    checkpoint_every: int
    checkpoint_dir: Path | None
    keep_checkpoints: int
    rendezvous_dir: Path | None
    generation: str
    stall_after: float
    peer_timeout: float
    payload_bytes: int
    rendezvous_timeout: float
    rank: int
    rank_from: str
    """The variable the rank came from (``RANK``, ``VC_TASK_INDEX``, ``JOB_COMPLETION_INDEX``, or ``default``)."""
    world_size: int
    master_addr: str | None
    master_port: int | None
    pod_ip: str | None
    device_socket: str | None
    checkpoint_on_sigterm: bool = False
    """Rank 0 checkpoints the last completed step when SIGTERM arrives (a preempted job keeps its work)."""
    device_clocks: str | None = None
    """The simulated driver's clocks file (``FIREDRILL_DEVICE_CLOCKS``): a throttled GPU's speed, an input delay."""
    link_bandwidth: float | None = None
    """This node's link in bytes per second (``FIREDRILL_LINK_BANDWIDTH``), which the rendezvous tells every
    peer; each connection is paced to the slower end's (None: unpaced)."""
    gpus: tuple[str, ...] | None = None
    """The GPUs this process was given, as ``NVIDIA_VISIBLE_DEVICES`` names them (UUIDs or indexes; on Slurm
    ``SLURM_STEP_GPUS``, the node's indexes, where that is unset); None when none is set (the ``start`` line's ``gpus``, which
    the harness checks no other pod holds)."""
    node: str | None = None
    """The Slurm node this task runs on (``SLURMD_NODENAME``); None elsewhere (a pod's node is the API's)."""
    job_gpus: tuple[str, ...] | None = None
    """On Slurm, the GPUs of the node the whole job holds (``SLURM_JOB_GPUS``, the node's indexes): a task bound to
    some of them under ``ConstrainDevices=yes`` is told its own renumbered from 0 (two tasks of a job on a node are
    both told ``0,1,2,3``), so exclusivity between jobs is judged from this; None elsewhere."""
    checkpoint_seconds: float = 0.0
    """How long rank 0's every checkpoint write takes (``--checkpoint-seconds``): the bytes go to storage in chunks,
    each followed by a paced wait SIGTERM cuts short; 0: one write, as fast as the storage goes."""

    @property
    def rendezvous(self) -> RendezvousMode:
        if self.world_size == 1:
            return RendezvousMode.NONE
        return RendezvousMode.TCP if self.master_addr is not None else RendezvousMode.FILE

    @property
    def checkpoints(self) -> bool:
        """Whether rank 0 writes checkpoints (and resumes from them)."""
        return self.checkpoint_dir is not None and self.checkpoint_every > 0

    def as_log(self) -> dict[str, Any]:
        """The settings as the ``start`` line's ``config``."""
        return {
            "steps_total": self.steps_total, "compute_seconds": self.compute_seconds,
            "input_seconds": self.input_seconds, "comm_seconds": self.comm_seconds,
            "checkpoint_every": self.checkpoint_every,
            "checkpoint_dir": None if self.checkpoint_dir is None else str(self.checkpoint_dir),
            "keep_checkpoints": self.keep_checkpoints,
            "rendezvous": self.rendezvous.value,
            "rendezvous_dir": None if self.rendezvous_dir is None else str(self.rendezvous_dir),
            "stall_after": self.stall_after, "peer_timeout": self.peer_timeout,
            "payload_bytes": self.payload_bytes, "rendezvous_timeout": self.rendezvous_timeout,
            "rank_from": self.rank_from, "master_addr": self.master_addr, "master_port": self.master_port,
            "pod_ip": self.pod_ip, "device_socket": self.device_socket, "device_clocks": self.device_clocks,
            "checkpoint_on_sigterm": self.checkpoint_on_sigterm, "checkpoint_seconds": self.checkpoint_seconds,
            "link_bandwidth": self.link_bandwidth,
            "node": self.node, "job_gpus": None if self.job_gpus is None else list(self.job_gpus),
        }


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _count(minimum: int, maximum: int | None = None) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise argparse.ArgumentTypeError(f"expected an integer {bound}, got {value}")
        return value
    return parse


def _seconds(positive: bool) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"expected seconds {'> 0' if positive else '>= 0'}, got {text!r}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Firedrill's training canary: a distributed training job in "
                                            "miniature whose own log is the truth a drill judges by.",
                     epilog="run `firedrill-canary train --help` for the options; the contract is "
                            "docs/WORKLOAD.md.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="train",
                                parser_class=_Parser)
    train = sub.add_parser(
        "train", help="run one rank of a synchronous data-parallel training job",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one rank. Each step: wait --input-seconds on the input pipeline, compute "
                    "--compute-seconds, then all-reduce --payload-bytes through rank 0 over TCP (plus "
                    "--comm-seconds of transfer time). A dead or frozen rank stalls the others. Rank 0 "
                    "checkpoints to --checkpoint-dir and every start resumes from the newest valid checkpoint.",
        epilog=ENVIRONMENT)
    add = train.add_argument
    add("--steps-total", type=_count(0), default=0, metavar="N",
        help="stop with exit 0 after step N (0: train until stopped; default 0)")
    add("--compute-seconds", type=_seconds(False), default=0.05, metavar="S",
        help="seconds of compute ('kernel' time) per step (default 0.05)")
    add("--input-seconds", type=_seconds(False), default=0.0, metavar="S",
        help="seconds per step waiting on the input pipeline (default 0)")
    add("--comm-seconds", type=_seconds(False), default=0.0, metavar="S",
        help="seconds of non-overlapped transfer time added inside each step's collective (default 0)")
    add("--checkpoint-every", type=_count(0), default=10, metavar="K",
        help="rank 0 checkpoints after every K-th step (0: never; default 10)")
    add("--checkpoint-dir", default=None, metavar="DIR",
        help="storage every rank reaches for checkpoints (default $FIREDRILL_CHECKPOINT_DIR; "
             "none: no checkpoints, every start is step 0)")
    add("--checkpoint-on-sigterm", action="store_true",
        help="on SIGTERM, rank 0 first checkpoints the last completed step (logged as a checkpoint with "
             "trigger 'sigterm'), then the rank exits 143; for a job that may be preempted within its "
             "grace period (default: off, SIGTERM exits at once)")
    add("--checkpoint-seconds", type=_seconds(False), default=0.0, metavar="S",
        help="rank 0's every checkpoint write takes about S seconds: written in chunks, each followed by a "
             "paced wait that SIGTERM cuts short (a large model on slow storage; default 0: one write)")
    add("--keep-checkpoints", type=_count(0), default=5, metavar="N",
        help="rank 0 deletes all but the N newest checkpoints after each new one is durable "
             "(0: keep all; default 5)")
    add("--rendezvous-dir", default=None, metavar="DIR",
        help="file rendezvous when MASTER_ADDR is unset: rank 0 writes DIR/master-<generation>.json, "
             "the others read it (default $FIREDRILL_RENDEZVOUS_DIR)")
    add("--generation", default=None, metavar="G",
        help="names this start of the job, so a restart never meets the ranks of an older one "
             "(default $FIREDRILL_GENERATION, else '0')")
    add("--stall-after", type=_seconds(True), default=1.0, metavar="S",
        help="a collective waiting longer than this logs 'stalled' (default 1.0)")
    add("--peer-timeout", type=_seconds(True), default=300.0, metavar="S",
        help="a collective waiting this long gives up: exit 1 (default 300)")
    add("--payload-bytes", type=_count(0, MAX_PAYLOAD), default=4096, metavar="N",
        help="bytes each rank contributes to each step's all-reduce (default 4096)")
    add("--rendezvous-timeout", type=_seconds(True), default=120.0, metavar="S",
        help="give up (exit 1) when the world is not complete after this long (default 120)")
    return parser


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _env_int(env: Mapping[str, str], name: str, minimum: int, maximum: int | None = None) -> int | None:
    text = _env(env, name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{PROG}: environment variable {name}: expected an integer, got {text!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise UsageError(f"{PROG}: environment variable {name}: expected an integer {bound}, got {value}")
    return value


def _rank(env: Mapping[str, str]) -> tuple[int, str]:
    for name in ("RANK", "VC_TASK_INDEX", "JOB_COMPLETION_INDEX", "SLURM_PROCID"):
        value = _env_int(env, name, 0)
        if value is not None:
            return value, name
    return 0, "default"


def parse_config(argv: Sequence[str], env: Mapping[str, str]) -> Config:
    """The settings of ``firedrill-canary train ARGV...`` under ``env``; raises :class:`UsageError`."""
    args = build_parser().parse_args(list(argv))
    world = _env_int(env, "WORLD_SIZE", 1)
    world = _env_int(env, "SLURM_NTASKS", 1) if world is None else world
    world = 1 if world is None else world
    rank, rank_from = _rank(env)
    if rank >= world:
        size_from = "WORLD_SIZE" if _env(env, "WORLD_SIZE") is not None or _env(env, "SLURM_NTASKS") is None \
            else "SLURM_NTASKS"
        raise UsageError(f"{PROG}: environment variable {rank_from}: rank {rank} is not below {size_from}={world}")
    generation = args.generation if args.generation is not None else (
        _env(env, "FIREDRILL_GENERATION") or _env(env, "SLURM_RESTART_COUNT") or "0")
    if not GENERATION.fullmatch(generation):
        where = "--generation" if args.generation is not None else "environment variable FIREDRILL_GENERATION"
        raise UsageError(f"{PROG}: {where}: expected 1-64 letters, digits, '.', '_' or '-' "
                         f"(it names files), got {generation!r}")
    master_addr = _env(env, "MASTER_ADDR")
    master_port = _env_int(env, "MASTER_PORT", 1, 65535)
    if master_addr is not None and master_port is None:
        raise UsageError(f"{PROG}: environment variable MASTER_PORT: required with MASTER_ADDR={master_addr}")
    if master_addr is None and master_port is not None:
        raise UsageError(f"{PROG}: environment variable MASTER_ADDR: required with MASTER_PORT={master_port}")
    pod_ip = _env(env, "POD_IP")
    if pod_ip is not None:
        try:
            ipaddress.ip_address(pod_ip)
        except ValueError:
            raise UsageError(f"{PROG}: environment variable POD_IP: expected an IP address, got {pod_ip!r}") from None
    ckpt = args.checkpoint_dir if args.checkpoint_dir is not None else _env(env, "FIREDRILL_CHECKPOINT_DIR")
    rdv = args.rendezvous_dir if args.rendezvous_dir is not None else _env(env, "FIREDRILL_RENDEZVOUS_DIR")
    if world > 1 and master_addr is None and rdv is None:
        raise UsageError(f"{PROG}: WORLD_SIZE={world} needs a rendezvous: set MASTER_ADDR and MASTER_PORT, "
                         f"or --rendezvous-dir (environment variable FIREDRILL_RENDEZVOUS_DIR)")
    return Config(
        steps_total=args.steps_total, compute_seconds=args.compute_seconds, input_seconds=args.input_seconds,
        comm_seconds=args.comm_seconds, checkpoint_every=args.checkpoint_every,
        checkpoint_dir=None if not ckpt else Path(ckpt), keep_checkpoints=args.keep_checkpoints,
        rendezvous_dir=None if not rdv else Path(rdv), generation=generation,
        stall_after=args.stall_after, peer_timeout=args.peer_timeout, payload_bytes=args.payload_bytes,
        rendezvous_timeout=args.rendezvous_timeout, rank=rank, rank_from=rank_from, world_size=world,
        master_addr=master_addr, master_port=master_port, pod_ip=pod_ip,
        device_socket=_env(env, "FIREDRILL_DEVICE_SOCKET"), checkpoint_on_sigterm=args.checkpoint_on_sigterm,
        checkpoint_seconds=args.checkpoint_seconds,
        gpus=visible_gpus(env), device_clocks=_env(env, "FIREDRILL_DEVICE_CLOCKS"),
        link_bandwidth=_env_rate(env, "FIREDRILL_LINK_BANDWIDTH"), node=_env(env, "SLURMD_NODENAME"),
        job_gpus=_indexes(_env(env, "SLURM_JOB_GPUS")))


def _indexes(raw: str | None) -> tuple[str, ...] | None:
    return None if raw is None else tuple(d.strip() for d in raw.split(",") if d.strip())


def _env_rate(env: Mapping[str, str], name: str) -> float | None:
    """A positive, finite number of bytes per second from ``name`` (None when unset)."""
    text = _env(env, name)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{PROG}: environment variable {name}: expected bytes per second > 0, got {text!r}")
    return value


def visible_gpus(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The devices ``NVIDIA_VISIBLE_DEVICES`` names (``GPU-...,GPU-...``), else the node's GPU indexes Slurm gave the
    step (``SLURM_STEP_GPUS``: ``2,3``), else those ``CUDA_VISIBLE_DEVICES`` names; None when all are unset or empty.
    Slurm's ``CUDA_VISIBLE_DEVICES`` is no identity where ``ConstrainDevices=yes`` hides the other GPUs: it counts
    from 0 in every job (two jobs on one node are both told ``0,1``), while ``SLURM_STEP_GPUS`` names the node's
    (for a step of one task per node; tasks bound to some of the step's GPUs are told theirs from 0 too, which is
    why the Slurm watch judges jobs by ``SLURM_JOB_GPUS``: :attr:`Config.job_gpus`)."""
    raw = _env(env, "NVIDIA_VISIBLE_DEVICES") or _env(env, "SLURM_STEP_GPUS") or _env(env, "CUDA_VISIBLE_DEVICES")
    return None if raw is None else tuple(d.strip() for d in raw.split(",") if d.strip())
