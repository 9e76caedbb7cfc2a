"""Noticing that this process was frozen (``SIGSTOP`` ... ``SIGCONT``: the hang fault).

A frozen process cannot observe its freeze while it lasts; afterwards it sees
that a short wait took far too long.  :class:`FreezeDetector` runs a thread
that waits ``period`` seconds at a time on the monotonic clock and reports any
wait that overran by more than ``threshold`` seconds to its listeners (the pod
sync then thaws its workloads, so no work is credited to the frozen interval,
and relists its pods, so pods deleted meanwhile are stopped).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["FreezeDetector"]

log = logging.getLogger(__name__)


class FreezeDetector:
    """Calls each listener with the frozen seconds after the process resumes.  ``start()``, then ``stop()``."""

    def __init__(self, threshold: float = 2.0, period: float = 0.1) -> None:
        self.threshold = threshold
        self.period = period
        self.freezes = 0
        self._listeners: list[Callable[[float], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_freeze(self, listener: Callable[[float], None]) -> None:
        self._listeners.append(listener)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="freeze-detector", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.period):
            now = time.monotonic()
            self.observe(now - last - self.period)
            last = now

    def observe(self, overrun: float) -> bool:
        """Report an overrun (seconds a wait took beyond its timeout); True if it counts as a freeze."""
        if overrun <= self.threshold:
            return False
        self.freezes += 1
        log.warning("agent was frozen for %.1fs (SIGSTOP?); resyncing", overrun)
        for listener in list(self._listeners):
            try:
                listener(overrun)
            except Exception:
                log.exception("freeze listener failed")
        return True
