"""Checkpoints on storage every rank reaches: written atomically with a digest, resumed from the newest valid one.

A checkpoint is ``DIR/ckpt-<step:010d>.json``, a JSON object ``{"step",
"world_size", "generation", "state", "written_at", "digest"}`` where
``digest`` is ``"sha256:"`` + the hex SHA-256 of the canonical JSON (sorted
keys, no spaces) of the object without ``digest``.  It is written to a
temporary file, fsynced, renamed into place, and the directory fsynced: once
:func:`write_checkpoint` returns, the file is durable and whole.

How the storage takes the bytes is a :class:`Storage`: by default one write
and today's atomic rename.  A slow storage (``--checkpoint-seconds``) takes them
in chunks, each followed by a paced wait; a stalled one answers nothing until
its stall ends (the writer asks again before every chunk and before the
commit, at least every :data:`STALL_POLL_S`); one that does not keep the rename
promise gets the chunks straight under the final name, so a writer stopped
mid-write leaves a torn file there.

A start resumes from the newest file that parses and whose digest matches;
newer files that do not (torn by a crash of a filesystem that does not keep
the rename promise, truncated, edited) are skipped and named.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.canary.errors import CheckpointError

__all__ = ["CHUNKS", "STALL_POLL_S", "Resume", "Storage", "Written", "checkpoint_name", "chunk_bounds", "digest_of",
           "find_resume", "prune", "read_checkpoint", "write_atomically", "write_checkpoint", "write_file"]

NAME = re.compile(r"ckpt-(\d{10})\.json")
FIELDS = ("step", "world_size", "generation", "state", "written_at")
CHUNKS = 20
"""A paced write goes to storage in this many chunks (one a byte when there are fewer bytes)."""
STALL_POLL_S = 0.1
"""A stalled storage is asked again at least this often."""


def _answers() -> float:
    return 0.0


@dataclass(frozen=True)
class Storage:
    """How the checkpoint storage takes a write: its pace, its stalls, and whether it keeps the rename promise."""

    seconds: float = 0.0
    """A write takes about this long: the bytes go in :data:`CHUNKS` chunks, each followed by ``seconds / chunks``
    of :attr:`sleep` (0: one write, no wait)."""
    atomic: bool = True
    """Temporary file, fsync, rename, directory fsync: a reader sees no file or a whole one.  False: the chunks go
    straight into the final file (no temporary, no rename), so a writer stopped mid-write leaves it torn."""
    stall_left: Callable[[], float] = _answers
    """Seconds the storage will still answer nothing, asked afresh before each chunk and before the commit
    (0: it answers)."""
    sleep: Callable[[float], None] = time.sleep
    """Every wait of the write (the pace, a stall).  The canary passes one SIGTERM cuts short by raising, so a
    write it interrupts is abandoned there."""


def chunk_bounds(size: int, seconds: float) -> list[tuple[int, int]]:
    """The ``[lo, hi)`` byte ranges a write of ``size`` bytes taking ``seconds`` goes in: one when ``seconds`` is 0,
    else :data:`CHUNKS` (at most one a byte) of nearly equal size."""
    count = 1 if seconds <= 0 else max(1, min(CHUNKS, size))
    edges = [i * size // count for i in range(count + 1)]
    return list(itertools.pairwise(edges))


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:010d}.json"


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def digest_of(content: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``content`` without its ``digest``."""
    body = {k: v for k, v in content.items() if k != "digest"}
    return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _await_storage(storage: Storage) -> None:
    """Return once the storage answers: while it is stalled, wait and ask again (at least every STALL_POLL_S)."""
    while (left := storage.stall_left()) > 0:
        storage.sleep(min(STALL_POLL_S, left))


def _write_paced(path: Path, data: bytes, storage: Storage) -> None:
    """Write ``data`` to ``path`` chunk by chunk as ``storage`` takes it (each chunk flushed, so what a stopped
    writer leaves is on the file), then fsync it."""
    bounds = chunk_bounds(len(data), storage.seconds)
    _await_storage(storage)  # a stalled storage creates no file either
    with open(path, "wb") as f:
        for i, (lo, hi) in enumerate(bounds):
            if i:
                _await_storage(storage)
            f.write(data[lo:hi])
            f.flush()
            if storage.seconds > 0:
                storage.sleep(storage.seconds / len(bounds))
        _await_storage(storage)
        os.fsync(f.fileno())


def write_file(path: Path, data: bytes, storage: Storage | None = None) -> None:
    """Write ``path`` as ``storage`` takes it (default: one write, atomic).  Atomic: a reader sees the old content
    or all of ``data`` (temp file, fsync, rename, dir fsync; an interrupted write removes its temp file).  Not
    atomic: the bytes go straight into ``path``, and an interrupted write leaves the part it wrote there."""
    storage = Storage() if storage is None else storage
    if not storage.atomic:
        _write_paced(path, data, storage)
        _fsync_dir(path.parent)
        return
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        _write_paced(tmp, data, storage)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` so a reader sees the old content or all of ``data``: temp file, fsync, rename, dir fsync."""
    write_file(path, data)


@dataclass(frozen=True)
class Written:
    """A checkpoint that is durable."""

    step: int
    file: str
    digest: str


def write_checkpoint(directory: Path, step: int, world_size: int, generation: str, state: dict[str, Any],
                     written_at: str, storage: Storage | None = None) -> Written:
    """Write checkpoint ``step`` durably, as ``storage`` takes it (default: one atomic write); raises
    :class:`CheckpointError` naming the file when it cannot (and whatever ``storage.sleep`` raises: the write is
    then abandoned, see :func:`write_file`)."""
    content: dict[str, Any] = {"step": step, "world_size": world_size, "generation": generation,
                               "state": state, "written_at": written_at}
    content["digest"] = digest_of(content)
    name = checkpoint_name(step)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_file(directory / name, json.dumps(content, sort_keys=True).encode() + b"\n", storage)
    except OSError as exc:
        raise CheckpointError(f"cannot write checkpoint {directory / name}: {exc}") from exc
    return Written(step, name, content["digest"])


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at ``path`` when it is whole and valid; raises ValueError saying why not."""
    match = NAME.fullmatch(path.name)
    if match is None:
        raise ValueError(f"{path.name} is not named ckpt-<10 digits>.json")
    try:
        content = json.loads(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"unreadable: {exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not JSON (torn?): {exc}") from None
    if not isinstance(content, dict):
        raise ValueError("not a JSON object")
    missing = [k for k in (*FIELDS, "digest") if k not in content]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    if not isinstance(content["step"], int) or content["step"] != int(match.group(1)):
        raise ValueError(f"step {content['step']!r} does not match the file name")
    if not isinstance(content["state"], dict):
        raise ValueError("state is not an object")
    if content["digest"] != digest_of(content):
        raise ValueError("digest mismatch")
    return content


@dataclass(frozen=True)
class Resume:
    """Where a start resumes from."""

    from_step: int
    checkpoint: str | None
    """The file resumed from (None: a fresh job)."""
    skipped: list[str] = field(default_factory=list)
    """Newer files that were not valid, newest first."""
    state: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def fresh(cls) -> Resume:
        return cls(0, None)


def _checkpoints(directory: Path) -> list[tuple[int, Path]]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), directory / n) for n in names if (m := NAME.fullmatch(n))]
    return sorted(found, reverse=True)


def find_resume(directory: Path | None) -> Resume:
    """The newest valid checkpoint in ``directory`` (a fresh start when there is none)."""
    if directory is None:
        return Resume.fresh()
    skipped: list[str] = []
    for step, path in _checkpoints(directory):
        try:
            content = read_checkpoint(path)
        except ValueError:
            skipped.append(path.name)
            continue
        return Resume(step, path.name, skipped, content["state"])
    return Resume(0, None, skipped)


def prune(directory: Path, keep: int) -> list[str]:
    """Delete all but the ``keep`` newest checkpoint files (0: keep all); the names deleted."""
    if keep <= 0:
        return []
    deleted = []
    for _, path in _checkpoints(directory)[keep:]:
        try:
            path.unlink()
            deleted.append(path.name)
        except FileNotFoundError:
            pass
    return deleted
