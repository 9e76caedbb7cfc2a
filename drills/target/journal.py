"""The fault journal: what the harness does to a target that needs undoing, written down before it is done.

A harness that dies mid-drill (SIGKILL from a CI timeout, the OOM killer, a lost runner) runs no rollback: its
undo closures die with it.  So before each such action the harness appends an **intent** to a journal on disk,
flushed and fsynced: what it is about to do, to what, the exact undo (a command line, an object to delete, a
Node to recreate), and by when it must be undone.  When the action is undone (by the run's rollback, or later by
``firedrill recover``) a **closure** line says so.  An intent without a closure is a fault that may still stand.

The journal is JSON Lines, one object a line, appended only:

- a header (``"journal": 1``): the run id, the target's API server and profile, and the process writing it (pid
  and start time, so a reader tells a live run from a dead one);
- ``"intent"`` lines (:class:`Action`), each with an ``id`` unique in the journal;
- ``"closed"`` lines (:class:`Closure`) naming an intent's ``id`` and how it was undone.

A run killed in the middle of a write leaves at most a torn last line, which a reader skips and reports.

Where: ``<state>/journals/<target>/<run-id>.jsonl``, where ``<state>`` is ``$FIREDRILL_STATE_DIR``, else
``$XDG_STATE_HOME/firedrill``, else ``~/.local/state/firedrill``, and ``<target>`` a digest of the API server's URL
(:func:`target_key`), so a run killed before its archive exists is found by the next run against the same
cluster.  The journal is also sealed into the run's archive (``fault-journal.jsonl``), and its state copy removed
when the run ends with every intent closed.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from drills.errors import FiredrillError

__all__ = ["ARCHIVE_NAME", "Action", "Closure", "FaultJournal", "JournalError", "JournalState", "Undo", "UndoKind",
           "close_in", "journals_for", "process_alive", "process_start", "read_journal", "state_dir", "target_key"]

VERSION = 1
ARCHIVE_NAME = "fault-journal.jsonl"
"""The journal's name in a run's archive (``drills.records.evidence.statements.ARTIFACTS`` names it too)."""
STATE_ENV = "FIREDRILL_STATE_DIR"


class JournalError(FiredrillError):
    """The journal cannot be written or read; the message names the file."""


class UndoKind(str, Enum):
    COMMAND = "command"
    """Run ``argv`` (the profile's restore template, rendered for the node), without a shell."""
    DELETE = "delete"
    """Delete the object the run created (``api_version``, ``object_kind``, ``namespace``, ``name``)."""
    RECREATE = "recreate"
    """Create ``manifest`` again: a Node the run deleted."""
    PATCH = "patch"
    """Merge-patch the object (``api_version``, ``object_kind``, ``namespace``, ``name``) with ``manifest``: an
    annotation or taint put back as it was."""
    SIGNAL = "signal"
    """Embedded platform: send ``signal`` to the process groups of ``pids`` (each with its start time, so a
    recycled pid is never signalled)."""
    BY_HAND = "by-hand"
    """Nothing the harness can run: ``note`` tells a person what to do."""


@dataclass(frozen=True)
class Undo:
    """One step of undoing an action, complete enough to run from the journal alone."""

    kind: UndoKind
    argv: tuple[str, ...] = ()
    api_version: str = ""
    object_kind: str = ""
    name: str = ""
    namespace: str | None = None
    manifest: Mapping[str, Any] | None = None
    pids: tuple[tuple[int, int], ...] = ()
    """``(pid, start time in clock ticks since boot)`` of each process group leader."""
    signal: int = 0
    note: str = ""

    def describe(self) -> str:
        """The step as a person would type or read it."""
        import shlex

        if self.kind is UndoKind.COMMAND:
            return shlex.join(self.argv)
        if self.kind is UndoKind.DELETE:
            where = f" -n {self.namespace}" if self.namespace else ""
            return f"kubectl delete {self.object_kind.lower()} {self.name}{where} --ignore-not-found"
        if self.kind is UndoKind.PATCH:
            where = f" -n {self.namespace}" if self.namespace else ""
            body = json.dumps(dict(self.manifest or {}), separators=(",", ":"))
            return f"kubectl patch {self.object_kind.lower()} {self.name}{where} --type merge -p {shlex.quote(body)}"
        if self.kind is UndoKind.RECREATE:
            return f"recreate {self.object_kind or 'object'} {self.name} from the journal's manifest"
        if self.kind is UndoKind.SIGNAL:
            return f"kill -{self.signal} " + " ".join(f"-- -{pid}" for pid, _ in self.pids)
        return self.note

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value}
        for key, value in (("argv", list(self.argv)), ("apiVersion", self.api_version),
                           ("objectKind", self.object_kind), ("name", self.name), ("namespace", self.namespace),
                           ("manifest", dict(self.manifest) if self.manifest is not None else None),
                           ("pids", [list(p) for p in self.pids]), ("signal", self.signal), ("note", self.note)):
            if value:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Undo:
        return cls(UndoKind(data["kind"]), tuple(data.get("argv") or ()), data.get("apiVersion", ""),
                   data.get("objectKind", ""), data.get("name", ""), data.get("namespace"), data.get("manifest"),
                   tuple((int(p), int(t)) for p, t in data.get("pids") or ()), int(data.get("signal", 0)),
                   data.get("note", ""))


@dataclass(frozen=True)
class Action:
    """An intent: one thing done to the target that needs undoing."""

    id: str
    what: str
    """What is about to be done, in words: ``kill node gpu-3 by command: ipmitool ... power off``."""
    subject: str
    """The node (or ``control-plane``) it is done to."""
    method: str
    undo: tuple[Undo, ...]
    """The steps that undo it, in the order to run them; empty: it undoes itself (or nothing needs undoing)."""
    at: datetime
    undo_by: datetime | None = None
    """When it must be undone at the latest (the drill's own deadline for it)."""
    expires_by_itself: bool = False
    """The target undoes it on its own by ``undo_by`` (a fault that carries its own expiry)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"intent": self.id, "what": self.what, "subject": self.subject, "method": self.method,
                               "undo": [u.to_json() for u in self.undo], "at": _stamp(self.at),
                               "expiresByItself": self.expires_by_itself}
        if self.undo_by is not None:
            out["undoBy"] = _stamp(self.undo_by)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Action:
        undo_by = data.get("undoBy")
        return cls(str(data["intent"]), str(data.get("what", "")), str(data.get("subject", "")),
                   str(data.get("method", "")), tuple(Undo.from_json(u) for u in data.get("undo") or ()),
                   _parse(data["at"]), _parse(undo_by) if undo_by else None, bool(data.get("expiresByItself")))


@dataclass(frozen=True)
class Closure:
    """An intent's end: undone (by whom, how), or found already gone."""

    id: str
    at: datetime
    how: str

    def to_json(self) -> dict[str, Any]:
        return {"closed": self.id, "at": _stamp(self.at), "how": self.how}


def _stamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _now() -> datetime:
    return datetime.now(timezone.utc)


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where this user's Firedrill keeps what must outlive a run (its fault journals)."""
    env = os.environ if environ is None else environ
    if env.get(STATE_ENV):
        return Path(env[STATE_ENV]).expanduser()
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(base).expanduser() / "firedrill"


def target_key(server: str) -> str:
    """The journals' folder name for the cluster whose API server is at ``server`` (its URL, normalised)."""
    return hashlib.sha256(server.rstrip("/").lower().encode()).hexdigest()[:16]


def process_start(pid: int) -> int:
    """The process's start time in clock ticks since boot (0: unknown): a pid and its start time name one process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def process_alive(pid: int, start: int) -> bool:
    """Whether the process ``pid`` that started at ``start`` ticks still runs (a recycled pid is not it)."""
    return pid > 0 and start > 0 and process_start(pid) == start


class FaultJournal:
    """A run's journal, appended to as it acts; every line is on disk (fsynced) before the method returns."""

    def __init__(self, path: Path, run: str, server: str, profile: str = "") -> None:
        self.path = path
        self.run = run
        self.server = server
        self.profile = profile
        self._seq = 0
        self._open: dict[str, Action] = {}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "x", encoding="utf-8")  # noqa: SIM115 - held open for the run's appends
        except FileExistsError:
            raise JournalError(f"{path}: a journal of run {run} exists already; each run writes its own") from None
        except OSError as exc:
            raise JournalError(f"cannot create the fault journal {path}: {exc}") from None
        pid = os.getpid()
        self._write({"journal": VERSION, "run": run, "server": server, "profile": profile, "host": socket.gethostname(),
                     "pid": pid, "pidStart": process_start(pid), "started": _stamp(_now())})
        _fsync_dir(path.parent)

    @classmethod
    def for_target(cls, run: str, server: str, profile: str = "", root: Path | None = None) -> FaultJournal:
        """The journal of ``run`` in this user's state directory, under the target's key."""
        folder = (root or state_dir()) / "journals" / target_key(server)
        return cls(folder / f"{run}.jsonl", run, server, profile)

    @property
    def unfinished(self) -> list[Action]:
        """The intents not closed yet, oldest first."""
        return list(self._open.values())

    def intend(self, what: str, subject: str, method: str, undo: tuple[Undo, ...], *,
               undo_within: float | None = None, expires_by_itself: bool = False) -> str:
        """Write down, durably, an action about to be done; returns its id for :meth:`close`."""
        self._seq += 1
        at = _now()
        action = Action(f"{self._seq}", what, subject, method, undo, at,
                        at + timedelta(seconds=undo_within) if undo_within is not None else None, expires_by_itself)
        self._write(action.to_json())
        self._open[action.id] = action
        return action.id

    def intend_fault(self, what: str, subject: str, method: Any, undo: tuple[Undo, ...],
                     expires_in: float | None = None) -> str:
        """An :data:`drills.target.faults.Intend` that writes here (``method``: a FaultMethod or its name); a fault
        that expires on the target's side by itself (``expires_in`` seconds) is recorded so, with its instant."""
        return self.intend(what, subject, str(getattr(method, "value", method)), undo, undo_within=expires_in,
                           expires_by_itself=expires_in is not None)

    def close(self, action_id: str, how: str) -> None:
        """Write down that the action ``action_id`` is undone (or needs no undo), and how."""
        if self._open.pop(action_id, None) is None:
            return
        self._write(Closure(action_id, _now(), how).to_json())

    def archive(self, run_dir: Path) -> Path:
        """Copy the journal as it stands into the run's archive (``fault-journal.jsonl``, before it is sealed)."""
        copy = run_dir / ARCHIVE_NAME
        try:
            copy.write_bytes(self.path.read_bytes())
        except OSError as exc:
            raise JournalError(f"cannot copy the fault journal {self.path} into {run_dir}: {exc}") from None
        return copy

    def end(self) -> None:
        """The run is over: close the file and, when every intent is closed, remove it (nothing is left to
        recover; the archive holds its copy).  One left open keeps it for the next run and ``firedrill recover``."""
        if self._fh.closed:
            return
        self._fh.close()
        if not self._open:
            self.path.unlink(missing_ok=True)

    def _write(self, obj: Mapping[str, Any]) -> None:
        try:
            _append(self._fh, obj)
        except (OSError, ValueError) as exc:
            raise JournalError(f"cannot write the fault journal {self.path}: {exc}") from None


def _append(fh: Any, obj: Mapping[str, Any]) -> None:
    """One line, on disk before this returns."""
    fh.write(json.dumps(obj, separators=(",", ":"), sort_keys=True) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def close_in(path: Path, action_id: str, how: str) -> None:
    """Append a closure to a journal another process wrote (a dead run's), durably."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            _append(fh, Closure(action_id, _now(), how).to_json())
    except OSError as exc:
        raise JournalError(f"cannot write the fault journal {path}: {exc}") from None


def _fsync_dir(path: Path) -> None:
    """Make a new file's name durable too (its directory entry), not only its bytes."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass
class JournalState:
    """What one journal file says: its run, its intents and which of them are closed."""

    path: Path
    run: str
    server: str
    profile: str
    pid: int = 0
    pid_start: int = 0
    actions: list[Action] = field(default_factory=list)
    closures: dict[str, Closure] = field(default_factory=dict)
    torn: list[int] = field(default_factory=list)
    """Line numbers that could not be read (the last one, when the run died mid-write)."""

    @property
    def unfinished(self) -> list[Action]:
        """The intents without a closure, newest first: the order to undo them in."""
        return [a for a in reversed(self.actions) if a.id not in self.closures]

    @property
    def running(self) -> bool:
        """Whether the run that writes this journal is still alive on this machine."""
        return process_alive(self.pid, self.pid_start)


def read_journal(path: Path) -> JournalState:
    """Read one journal; a line that is not JSON (torn by a kill) is skipped and listed in ``torn``.  Raises
    :class:`JournalError` when the file cannot be read or has no header."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise JournalError(f"cannot read the fault journal {path}: {exc}") from None
    state: JournalState | None = None
    for number, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if state is not None:
                state.torn.append(number)
            continue
        if not isinstance(obj, dict):
            continue
        if "journal" in obj and state is None:
            state = JournalState(path, str(obj.get("run", path.stem)), str(obj.get("server", "")),
                                 str(obj.get("profile", "")), int(obj.get("pid", 0)), int(obj.get("pidStart", 0)))
        elif state is None:
            break
        elif "intent" in obj:
            try:
                state.actions.append(Action.from_json(obj))
            except (KeyError, ValueError, TypeError):
                state.torn.append(number)
        elif "closed" in obj:
            state.closures[str(obj["closed"])] = Closure(str(obj["closed"]), _parse(obj["at"]), str(obj.get("how")))
    if state is None:
        raise JournalError(f"{path}: not a Firedrill fault journal (no header line)")
    return state


def journals_for(server: str, root: Path | None = None) -> Iterator[JournalState]:
    """Every journal of runs against the cluster at ``server`` in this user's state directory, oldest first."""
    folder = (root or state_dir()) / "journals" / target_key(server)
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime):
        yield read_journal(path)
