"""What a test leaves running: threads and child processes it started that outlive it.

A test that leaves a thread or a process behind makes the tests after it pass or fail by what they inherit (a
server still answering on a port, a thread still writing to a shared client, objects dying under a later test's
feet: issue 44).  ``tests/conftest.py`` takes a :class:`Census` around every test and fails the test that
leaves something running.

Only what the test itself started counts: whatever ran before the test's own set-up (the session's and the
module's fixtures, a library's pool made by an earlier test) is in the first census.  A thread or process that
is stopping when the test ends gets a short deadline to finish; a child that exited but is not reaped yet (a
zombie) has stopped and is not counted.
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
from dataclasses import dataclass, field

import psutil

STOP_DEADLINE = 5.0
"""Seconds a thread or process that the test stopped may take to end after the test's teardown."""

LIBRARY_THREADS = (
    # asyncio's default executor of a loop some library keeps for the process (playwright's driver loop).
    "asyncio_",
    # pytest-timeout's own timer thread, when a test sets a timeout by the thread method.
    "pytest_timeout",
)
"""Name prefixes of threads that a library starts once for the whole process and keeps by design: not a leak
of the test that happened to be the first to use the library."""


def _children() -> dict[int, psutil.Process]:
    me = psutil.Process()
    found: dict[int, psutil.Process] = {}
    for child in me.children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:  # exited, waiting for its parent to read its status
                found[child.pid] = child
        except psutil.NoSuchProcess:
            continue
    return found


@dataclass
class Leftovers:
    """The threads and processes a test started and left running."""

    threads: list[threading.Thread] = field(default_factory=list)
    processes: list[psutil.Process] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.threads or self.processes)

    def describe(self) -> str:
        lines = []
        for t in self.threads:
            target = getattr(t, "_target", None)
            where = f" running {target.__module__}.{target.__qualname__}" if target is not None else ""
            args = getattr(t, "_args", ())
            if args:
                where += f" with {', '.join(repr(a) for a in args)[:300]}"
            lines.append(f"thread {t.name!r} (daemon={t.daemon}){where}")
        for p in self.processes:
            try:
                cmd = " ".join(p.cmdline())[:200]
            except psutil.Error:
                cmd = "?"
            lines.append(f"process {p.pid}: {cmd}")
        return "; ".join(lines)


@dataclass
class Census:
    """The threads and live child processes at one instant; :meth:`leftovers` compares a later one with it."""

    threads: set[int] = field(default_factory=lambda: {t.ident or 0 for t in threading.enumerate()})
    processes: set[int] = field(default_factory=lambda: set(_children()))

    def leftovers(self, deadline: float = STOP_DEADLINE) -> Leftovers:
        """What started since this census and still runs once ``deadline`` seconds have passed for it to end."""
        until = time.monotonic() + deadline
        while True:
            found = self._new()
            if not found or time.monotonic() >= until:
                return found
            # Join a thread; a process is only watched (reaping it here would take its exit status from the
            # test's own Popen).
            step = max(0.0, min(0.05, until - time.monotonic()))
            if found.threads:
                found.threads[0].join(step)
            else:
                time.sleep(step)

    def _new(self) -> Leftovers:
        threads = [t for t in threading.enumerate()
                   if t.ident not in self.threads and t.is_alive() and not t.name.startswith(LIBRARY_THREADS)]
        processes = [p for pid, p in _children().items() if pid not in self.processes]
        return Leftovers(threads, processes)


def collect_garbage() -> list[str]:
    """Collect the interpreter's cyclic garbage now and return what it found left open (the ``ResourceWarning``
    of each socket or file the collector had to close), instead of letting each surface as an error in whichever
    test the collector happens to run next.

    ``tests/conftest.py`` calls it where a module's last test and its module fixtures have ended: what the
    collector finds then is most likely that module's (an object in a reference cycle outlives its test until
    a collection).  An open socket that is freed by its last reference going away still warns in its own test,
    under the suite's ``filterwarnings = error``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
