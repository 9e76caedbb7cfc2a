"""A daemon's plain-text log as the record of refusals (slurmctld's ``SlurmctldLogFile`` on a Slurm cluster), and
the answer of a command-line client, for the governance drill's Slurm side.

Like the API server's audit log (:mod:`drills.kinds.governance.audit`), the file is read from byte offsets: the
drill notes its end before each attempt, and the line that records the attempt's refusal must come after it.
A record's digest is the SHA-256 of the line's bytes (without the newline), so anyone holding the log finds the
very line again and can check it was not changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.kinds.governance.audit import file_end, first_found, read_lines

__all__ = ["CommandAnswer", "LineQuery", "LogLine", "TextLog"]


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass(frozen=True)
class CommandAnswer:
    """What a command-line client answered an attempt: its exit status and what it printed (code -1: it did not
    run to the end, ``stderr`` says why)."""

    command: str
    code: int
    stdout: str = ""
    stderr: str = ""

    @property
    def said(self) -> str:
        return (self.stderr.strip() or self.stdout.strip())

    def describe(self) -> str:
        if self.code < 0:
            return f"{self.command} did not answer: {_short(self.stderr)}"
        return f"{self.command} exited {self.code}" + (f": {_short(self.said)}" if self.said else "")


@dataclass(frozen=True)
class LogLine:
    """One line of the log: the record of a refusal."""

    digest: str
    offset: int
    text: str
    source: str
    """The log as the evidence names it (no path of this machine)."""

    @classmethod
    def of(cls, text: str, offset: int, source: str) -> LogLine:
        """The record of one line (without its newline), its digest over the line's UTF-8 bytes."""
        return cls(hashlib.sha256(text.encode()).hexdigest(), offset, text, source)

    def describe(self) -> str:
        return f"{self.source} line at byte {self.offset}: {_short(self.text)} (sha256 {self.digest[:16]}...)"

    def summary(self) -> dict[str, Any]:
        return {"source": self.source, "offset": self.offset, "sha256": self.digest, "line": self.text}


@dataclass(frozen=True)
class LineQuery:
    """The line a refusal must have left: it holds every one of ``needles`` (e.g. the RPC's name and the tenant's
    uid)."""

    needles: tuple[str, ...]

    def matches(self, text: str) -> bool:
        return all(n in text for n in self.needles)

    def describe(self) -> str:
        return "a line with " + " and ".join(repr(n) for n in self.needles)


@dataclass
class TextLog:
    """An append-only text log, read from byte offsets."""

    path: Path
    source: str
    _lines: list[LogLine] = field(default_factory=list, repr=False)
    _read_to: int = 0

    def end(self) -> int:
        """The file's current size: what an attempt made after this call leaves comes beyond it."""
        return file_end(self.path, self.source)

    def lines(self, since: int = 0) -> list[LogLine]:
        """Every complete line starting at or after byte ``since``."""
        new, self._read_to, restarted = read_lines(self.path, self._read_to, self.source)
        if restarted:
            self._lines = []
        self._lines += [LogLine(hashlib.sha256(raw).hexdigest(), offset, raw.decode("utf-8", errors="replace"),
                                self.source) for offset, raw in new]  # the digest of the bytes as written
        return [line for line in self._lines if line.offset >= since]

    def wait_for(self, query: LineQuery, since: int, timeout: float, mono: Callable[[], float],
                 pause: Callable[[float], Any], poll: float = 0.1, exclude: Collection[int] = ()) -> LogLine | None:
        """The first line after ``since`` that ``query`` matches (none of those starting at ``exclude``: lines that
        already record another attempt), waiting up to ``timeout`` seconds of ``mono``."""
        return first_found(lambda: next((line for line in self.lines(since)
                                         if line.offset not in exclude and query.matches(line.text)), None),
                           timeout, mono, pause, poll)
