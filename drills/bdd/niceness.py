"""Holding a ``--parallel`` run's wave-2 workers at the lowest CPU priority while wave 1 runs, and giving it back
(:func:`drills.bdd.parallel.run_plan`).

The pools of wave 2 may start their platforms while wave 1 runs alone, at nice 19, so that they take only the CPU
wave 1 leaves idle; when wave 1 is over each is given back nice 0.  Where the kernel schedules by autogroup
(sched(7); most distributions), CPU is shared between sessions first, and a worker and each of its platform's
processes run in sessions of their own: there the sessions' autogroups are set (19, then 0: no privilege is needed
for values from 0 up; the platform's processes take their starter's, :func:`refplatform.autogroup.follow`).
Elsewhere niceness is per thread, and setting it back to 0 takes ``CAP_SYS_NICE`` or an ``RLIMIT_NICE`` that
reaches it: without either, the workers are not held.  The pods the agents start later take nice 19 of their own.
"""

from __future__ import annotations

import contextlib
import os
import resource
from pathlib import Path

from refplatform import autogroup

CAP_SYS_NICE = 23
"""The capability's bit in ``CapEff`` (linux/capability.h)."""
HELD_NICENESS = 19


def can_lower_niceness(status: str | None = None, nice_limit: int | None = None) -> bool:
    """Whether this process may set a child's niceness back to 0 once it raised it: ``CAP_SYS_NICE`` in its
    effective set (``/proc/self/status``, or ``status``), or ``RLIMIT_NICE`` at least 20 (``nice_limit``)."""
    if status is None:
        try:
            status = Path("/proc/self/status").read_text(encoding="ascii")
        except OSError:
            status = ""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            with contextlib.suppress(ValueError, IndexError):
                if int(line.split()[1], 16) >> CAP_SYS_NICE & 1:
                    return True
    if nice_limit is None:
        soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
        nice_limit = 10**6 if soft == resource.RLIM_INFINITY else soft
    return nice_limit >= 20


def can_hold() -> bool:
    """Whether workers may be held at nice 19 and given 0 back: by autogroup, or where this process may lower a
    thread's niceness."""
    return autogroup.enabled() or can_lower_niceness()


def hold_niceness() -> None:
    """In a held worker, after its ``setsid`` and before exec: the lowest CPU priority, for its session where the
    kernel schedules by autogroup, else for itself."""
    if not (autogroup.enabled() and autogroup.set_nice("self", HELD_NICENESS)):
        os.nice(HELD_NICENESS)


def children(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The processes ``pid`` started (their parent is ``pid``), from /proc."""
    out = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(stat.parent.name))
    return out


def renice(pid: int, niceness: int = 0) -> int:
    """``pid`` and the processes it started (not theirs: an agent's pods keep their own) set to ``niceness``: the
    autogroup of each that leads a session, and every thread's own niceness where it is above ``niceness``; how
    many threads were set.  Twice over, so a thread or process started meanwhile is not missed.  Raises
    PermissionError where a thread's may not be lowered (:func:`can_lower_niceness`)."""
    done: set[int] = set()
    for _ in range(2):
        for process in [pid, *children(pid)]:
            if autogroup.nice_of(process) not in (None, niceness):
                autogroup.set_nice(process, niceness)
            try:
                tids = [int(t.name) for t in Path(f"/proc/{process}/task").iterdir()]
            except OSError:
                continue  # it ended
            for tid in tids:
                with contextlib.suppress(ProcessLookupError):
                    if os.getpriority(os.PRIO_PROCESS, tid) > niceness:
                        os.setpriority(os.PRIO_PROCESS, tid, niceness)
                        done.add(tid)
    return len(done)
