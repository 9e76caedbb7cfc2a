"""Jobs and nodes as Slurm reports them, typed (pure: no command runs here).

``squeue --json`` and ``sinfo --json`` (Slurm 21.08 and later) are read into :class:`SlurmJob` and
:class:`SlurmNode`.  Releases differ in small ways this module absorbs: a job's ``job_state`` is a string in 22.05
and a list from 23.02; a node's ``state`` is a lowercase string with its flags beside it (``state_flags``) in
22.05 and a list of upper-case names later.  Node lists come compressed (``gpu-[0-3,7]``); they are expanded with
python-hostlist, the library Slurm sites use for it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import hostlist

from drills.errors import FiredrillError

__all__ = ["JobState", "NodeFlag", "SlurmError", "SlurmJob", "SlurmNode", "by_name", "expand_nodes", "gres_count",
           "parse_jobs", "parse_nodes"]


class SlurmError(FiredrillError):
    """A Slurm command failed or answered what the harness cannot read; the message names the command and why."""


class JobState(enum.Enum):
    """A job's base state (``squeue``'s ``job_state``)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    CONFIGURING = "CONFIGURING"
    RESIZING = "RESIZING"
    REVOKED = "REVOKED"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    UNKNOWN = "UNKNOWN"
    """A state this module does not know (a newer release's): read as neither running nor ended."""

    @property
    def ended(self) -> bool:
        return self in _ENDED


_ENDED = frozenset({JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL,
                    JobState.PREEMPTED, JobState.BOOT_FAIL, JobState.DEADLINE, JobState.OUT_OF_MEMORY,
                    JobState.REVOKED})


class NodeFlag(enum.Enum):
    """The node states and flags the drills read (``sinfo``'s ``state`` and ``state_flags``)."""

    IDLE = "IDLE"
    MIXED = "MIXED"
    ALLOCATED = "ALLOCATED"
    DOWN = "DOWN"
    ERROR = "ERROR"
    FUTURE = "FUTURE"
    UNKNOWN = "UNKNOWN"
    DRAIN = "DRAIN"
    DRAINING = "DRAINING"
    NOT_RESPONDING = "NOT_RESPONDING"
    COMPLETING = "COMPLETING"
    MAINTENANCE = "MAINTENANCE"
    RESERVED = "RESERVED"
    REBOOT_REQUESTED = "REBOOT_REQUESTED"
    POWERED_DOWN = "POWERED_DOWN"
    INVALID = "INVALID"


_NODE_ALIASES = {"ALLOC": NodeFlag.ALLOCATED, "MIX": NodeFlag.MIXED, "INVAL": NodeFlag.INVALID,
                 "DRAINED": NodeFlag.DRAIN, "NO_RESPOND": NodeFlag.NOT_RESPONDING}


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``squeue --json`` shows it."""

    job_id: int
    name: str
    state: JobState
    reason: str
    """``state_reason``: why it pends (``Resources``, ``BeginTime``, ...), ``None`` otherwise."""
    nodes: tuple[str, ...]
    """The nodes it holds (or held), expanded; empty while it pends."""
    restarts: int
    """``restart_cnt``: how many times Slurm requeued it."""
    requeue: bool
    """Whether Slurm requeues it when a node fails under it."""
    partition: str
    gres_per_node: int
    """GPUs it asked for per node (``tres_per_node`` ``gres:gpu:N``), 0 for none."""
    batch_host: str
    eligible_at: int
    """Epoch seconds from which it may start (a requeued job waits out its credential's lifetime)."""
    started_at: int
    user: str = ""
    account: str = ""
    qos: str = ""
    gpus_held: int = 0
    """GPUs allocated to it (``tres_alloc_str`` ``gres/gpu=N``), 0 while it pends."""


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``sinfo --json`` shows it."""

    name: str
    flags: frozenset[NodeFlag]
    gpus: int
    gpus_used: int
    reason: str
    features: frozenset[str] = frozenset()
    """Its features (slurm.conf ``Features=``, as ``sinfo`` reports them): the harness faults only nodes that carry
    the profile's ``safety.allow_feature``."""

    @property
    def down(self) -> bool:
        """Out of service: DOWN, or not answering its controller."""
        return bool(self.flags & {NodeFlag.DOWN, NodeFlag.NOT_RESPONDING})

    @property
    def serving(self) -> bool:
        """Up and schedulable: idle, mixed or allocated, and neither down nor drained."""
        return bool(self.flags & {NodeFlag.IDLE, NodeFlag.MIXED, NodeFlag.ALLOCATED}) and not (
            self.down or self.flags & {NodeFlag.DRAIN, NodeFlag.DRAINING, NodeFlag.INVALID})


def expand_nodes(text: str | None) -> tuple[str, ...]:
    """``gpu-[0-1,3]`` -> ``("gpu-0", "gpu-1", "gpu-3")``; empty for none."""
    if not text or not text.strip() or text.strip() == "(null)":
        return ()
    try:
        return tuple(hostlist.expand_hostlist(text.strip()))
    except hostlist.BadHostlist as exc:
        raise SlurmError(f"a node list Slurm gave cannot be read: {text!r} ({exc})") from None


_GRES = re.compile(r"(?:^|,)(?:gres[:/])?gpu(?::[^:,(]+)?:(\d+)")
_TRES_GPUS = re.compile(r"(?:^|,)gres/gpu=(\d+)")


def tres_gpus(text: str | None) -> int:
    """GPUs in a TRES count text (``cpu=2,mem=1G,node=1,gres/gpu=4``; a typed ``gres/gpu:h100=4`` is counted under
    its untyped total); 0 for none."""
    match = _TRES_GPUS.search(text or "")
    return int(match.group(1)) if match else 0


def gres_count(text: str | None) -> int:
    """GPUs in a GRES or TRES text: ``gpu:4``, ``gpu:h100:4(S:0)``, ``gres:gpu:2``, ``gres/gpu:2``; 0 for none."""
    match = _GRES.search(text or "")
    return int(match.group(1)) if match else 0


def _state(raw: Any) -> str:
    """A state that is a string (22.05) or a list of names (23.02 and later): its first name, upper case."""
    if isinstance(raw, list):
        raw = raw[0] if raw else ""
    return str(raw or "").strip().upper()


def _int(raw: Any) -> int:
    """A number that is plain (22.05) or ``{"set": .., "number": ..}`` (23.02 and later)."""
    if isinstance(raw, Mapping):
        return int(raw.get("number") or 0) if raw.get("set", True) else 0
    try:
        return int(raw or 0)
    except (TypeError, ValueError):
        return 0


def parse_jobs(document: Mapping[str, Any]) -> list[SlurmJob]:
    """The jobs of a ``squeue --json`` document; a document that is not one raises :class:`SlurmError`."""
    jobs = document.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmError("squeue --json gave no 'jobs' list: is this Slurm 21.08 or later?")
    out = []
    for j in jobs:
        try:
            state = JobState(_state(j.get("job_state")))
        except ValueError:
            state = JobState.UNKNOWN
        out.append(SlurmJob(
            job_id=_int(j.get("job_id")), name=str(j.get("name") or ""), state=state,
            reason=str(j.get("state_reason") or "None"), nodes=expand_nodes(j.get("nodes")),
            restarts=_int(j.get("restart_cnt")), requeue=bool(j.get("requeue")),
            partition=str(j.get("partition") or ""), gres_per_node=gres_count(j.get("tres_per_node")),
            batch_host=str(j.get("batch_host") or ""), eligible_at=_int(j.get("eligible_time")),
            started_at=_int(j.get("start_time")), user=str(j.get("user_name") or ""),
            account=str(j.get("account") or ""), qos=str(j.get("qos") or ""),
            gpus_held=tres_gpus(j.get("tres_alloc_str"))))
    return out


def _flags(node: Mapping[str, Any]) -> frozenset[NodeFlag]:
    names: list[str] = []
    for raw in (node.get("state"), node.get("state_flags")):
        names += [str(x) for x in raw] if isinstance(raw, list) else ([str(raw)] if raw else [])
    out = set()
    for name in names:
        key = name.strip().upper()
        flag = _NODE_ALIASES.get(key) or NodeFlag.__members__.get(key)
        if flag is not None:
            out.add(flag)
    return frozenset(out)


def _features(node: Mapping[str, Any]) -> frozenset[str]:
    """``features`` (a comma-separated string in 22.05, a list in later releases)."""
    raw = node.get("features")
    items = raw if isinstance(raw, list) else str(raw or "").split(",")
    return frozenset(str(f).strip() for f in items if str(f).strip())


def parse_nodes(document: Mapping[str, Any]) -> list[SlurmNode]:
    """The nodes of a ``sinfo --json`` document (each once); a document that is not one raises SlurmError."""
    nodes = document.get("nodes")
    if not isinstance(nodes, list):
        raise SlurmError("sinfo --json gave no 'nodes' list: is this Slurm 21.08 or later?")
    seen: dict[str, SlurmNode] = {}
    for n in nodes:
        name = str(n.get("name") or n.get("hostname") or "")
        if name and name not in seen:
            seen[name] = SlurmNode(name, _flags(n), gres_count(n.get("gres")), gres_count(n.get("gres_used")),
                                   str(n.get("reason") or ""), _features(n))
    return [seen[k] for k in sorted(seen)]


def by_name(nodes: Iterable[SlurmNode]) -> dict[str, SlurmNode]:
    return {n.name: n for n in nodes}
