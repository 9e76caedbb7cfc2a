"""A session's CPU share under Linux's autogroup scheduling (sched(7), "The autogroup feature").

Where ``kernel.sched_autogroup_enabled`` is 1 (the default of most distributions), CPU time is shared fairly
between sessions first and by niceness only inside one: ``nice -n 19`` of a process that starts new sessions (as
every platform process is started: :class:`refplatform.cluster.ManagedProcess`) lowers nothing of what they run.
A session's own weight is its autogroup's nice value, ``/proc/<pid>/autogroup``; any value from 0 up may be set
without privilege.  :func:`follow` gives a session a process started takes the starter's value, as a plain
``nice`` would have.
"""

from __future__ import annotations

import re
from pathlib import Path

ENABLED = Path("/proc/sys/kernel/sched_autogroup_enabled")


def enabled() -> bool:
    """Whether the kernel schedules by autogroup (False where it cannot be read)."""
    try:
        return ENABLED.read_text(encoding="ascii").strip() == "1"
    except OSError:
        return False


def nice_of(pid: int | str = "self") -> int | None:
    """The nice value of the autogroup of ``pid`` (None where it cannot be read: no autogroup support)."""
    try:
        found = re.search(r"nice (-?\d+)", Path(f"/proc/{pid}/autogroup").read_text(encoding="ascii"))
    except OSError:
        return None
    return int(found.group(1)) if found else None


def set_nice(pid: int | str, nice: int) -> bool:
    """Set the nice value of the autogroup of ``pid`` (the session it leads); whether it was set."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice), encoding="ascii")
    except OSError:
        return False
    return True


def follow(pid: int) -> None:
    """``pid``, just started in a session of its own, takes this process's autogroup nice value (nothing when it
    is 0 or unknown)."""
    nice = nice_of()
    if nice:
        set_nice(pid, nice)
