"""The warden: every process group this process started dies with it, even when it dies by SIGKILL.

A harness killed mid-drill (a CI job's timeout, an OOM kill, a lost runner) runs no ``finally`` and no atexit
hook.  Without a warden the embedded platform it started (API server, controllers, one agent per node and their
pods, each in a session of its own) lives on as orphans: holding ports and memory, and, with a node frozen by a
``hang`` fault, frozen for ever (docs/SAFETY.md).

The warden is one small process per Python process that starts platform processes, started on first use.  It
reads, on a pipe whose only writer is that Python process, the pid and start time of each process group the
process starts (:meth:`Warden.watch`, called by :class:`refplatform.cluster.ManagedProcess`).  The pipe closes
when its writer dies, however it dies; the warden then sends SIGKILL to every group it was told of whose leader
is still the very process it was told of (same pid, same start time: never a stranger that reused the pid), and
exits.  SIGKILL also ends a group stopped by a ``hang`` fault.  A group stopped and reaped before that is skipped,
so a normal exit, which stops everything itself, costs nothing.

Run as a script (``python -I -S warden.py``) it needs the standard library alone: it starts in milliseconds and
does not depend on the environment it watches.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

__all__ = ["Warden", "warden"]


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), None if it is gone:
    with the pid, it names one process for its whole life."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _sweep(watched: dict[int, int]) -> None:
    """SIGKILL each watched group whose leader is still the process it was (same start time) and leads it."""
    for pid, start in watched.items():
        if start_ticks(pid) != start:
            continue
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def _main() -> None:
    """Read ``<pid> <start>`` lines from stdin until it closes, then sweep."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is for the harness, which cleans up
    watched: dict[int, int] = {}
    pending = b""
    while True:
        chunk = os.read(0, 4096)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            fields = line.split()
            if len(fields) == 2:
                watched[int(fields[0])] = int(fields[1])
    _sweep(watched)


class Warden:
    """This process's warden (:func:`warden`): tell it of each process group started, and it outlives them."""

    def __init__(self) -> None:
        read, self._write = os.pipe()  # both ends not inheritable: no other child holds the pipe open
        try:  # posix_spawn, not Popen: no object whose finalizer warns that the warden outlives it (it must)
            self.pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                                      os.environ, setsid=True,
                                      file_actions=[(os.POSIX_SPAWN_DUP2, read, 0),
                                                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                                                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
        finally:
            os.close(read)
        self._lock = threading.Lock()

    def watch(self, pid: int) -> None:
        """The process group led by ``pid`` (started by this process, in a session of its own) dies with this
        process, if it is still running then."""
        start = start_ticks(pid)
        if start is None:
            return
        with self._lock:
            os.write(self._write, f"{pid} {start}\n".encode())


_WARDEN: Warden | None = None
_OWNER: int | None = None
_STARTING = threading.Lock()


def warden() -> Warden:
    """The warden of this process, started on first use (a forked child gets its own)."""
    global _WARDEN, _OWNER
    with _STARTING:
        if _WARDEN is None or _OWNER != os.getpid():
            _WARDEN, _OWNER = Warden(), os.getpid()
        return _WARDEN


if __name__ == "__main__":
    _main()
