"""Checkpoints on storage every rank reaches: written atomically with a digest, resumed from the newest valid one.

A checkpoint is ``DIR/ckpt-<step:010d>.json``, a JSON object ``{"step",
"world_size", "generation", "state", "written_at", "digest"}`` where
``digest`` is ``"sha256:"`` + the hex SHA-256 of the canonical JSON (sorted
keys, no spaces) of the object without ``digest``.  It is written to a
temporary file, fsynced, renamed into place, and the directory fsynced: once
:func:`write_checkpoint` returns, the file is durable and whole.

A start resumes from the newest file that parses and whose digest matches;
newer files that do not (torn by a crash of a filesystem that does not keep
the rename promise, truncated, edited) are skipped and named.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.canary.errors import CheckpointError

__all__ = ["Resume", "Written", "checkpoint_name", "digest_of", "find_resume", "prune", "read_checkpoint",
           "write_atomically", "write_checkpoint"]

NAME = re.compile(r"ckpt-(\d{10})\.json")
FIELDS = ("step", "world_size", "generation", "state", "written_at")


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


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` so a reader sees the old content or all of ``data``: temp file, fsync, rename, dir fsync."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class Written:
    """A checkpoint that is durable."""

    step: int
    file: str
    digest: str


def write_checkpoint(directory: Path, step: int, world_size: int, generation: str, state: dict[str, Any],
                     written_at: str) -> Written:
    """Write checkpoint ``step`` durably; raises :class:`CheckpointError` naming the file when it cannot."""
    content: dict[str, Any] = {"step": step, "world_size": world_size, "generation": generation,
                               "state": state, "written_at": written_at}
    content["digest"] = digest_of(content)
    name = checkpoint_name(step)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(directory / name, json.dumps(content, sort_keys=True).encode() + b"\n")
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
