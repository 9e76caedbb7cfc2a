"""What the harness itself costs while a scenario runs: CPU seconds, peak memory, open watches and log streams.

On a cluster of thousands of nodes the harness must stay light: it lists every Node and Pod, watches what its
drill created and follows the logs of the workload's ranks. :class:`HarnessMeter` samples the ``firedrill run``
process while one scenario runs and gives the figures for the scenario's evidence (``details.harness_cost``):

- ``cpu_s``: the process's CPU time (user + system, every thread) over the scenario;
- ``peak_rss_mib``: the largest resident set sampled during the scenario (``/proc/self/statm``);
- ``peak_watches`` and ``peak_log_streams``: the most watch streams and pod log streams open at once. Both are
  threads the harness names for what they carry (``watch-<resource>`` in :meth:`drills.kube.driver.KubeDriver.watch`,
  ``logs-<pod>`` in :class:`drills.kube.logs.LogFollower`), one stream each, so counting the live ones counts the
  streams.

Sampling every :data:`PERIOD_S` misses nothing that lasts longer than that; a stream opened and closed within one
period is not counted, which errs towards the harness's favour only for streams that cost almost nothing.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PERIOD_S = 0.1
_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _rss_mib() -> float:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE_MIB
    except (OSError, IndexError, ValueError):
        return 0.0


def _streams() -> tuple[int, int]:
    names = [t.name for t in threading.enumerate() if t.is_alive()]
    return sum(n.startswith("watch-") for n in names), sum(n.startswith("logs-") for n in names)


@dataclass(frozen=True)
class HarnessCost:
    cpu_s: float
    peak_rss_mib: float
    peak_watches: int
    peak_log_streams: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"cpu_s": round(self.cpu_s, 3), "peak_rss_mib": round(self.peak_rss_mib, 1),
                "peak_watches": self.peak_watches, "peak_log_streams": self.peak_log_streams,
                "seconds": round(self.seconds, 3)}


class HarnessMeter:
    """Samples this process from :meth:`start` to :meth:`stop` (a daemon thread, ``PERIOD_S`` apart)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="harness-meter", daemon=True)
        self._cpu0 = 0.0
        self._t0 = 0.0
        self._rss = 0.0
        self._watches = 0
        self._logs = 0

    def start(self) -> "HarnessMeter":
        self._cpu0, self._t0 = time.process_time(), time.monotonic()
        self._sample()
        self._thread.start()
        return self

    def _sample(self) -> None:
        watches, logs = _streams()
        self._rss = max(self._rss, _rss_mib())
        self._watches, self._logs = max(self._watches, watches), max(self._logs, logs)

    def _run(self) -> None:
        while not self._stop.wait(PERIOD_S):
            self._sample()

    def stop(self) -> HarnessCost:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=2)
        self._sample()
        return HarnessCost(time.process_time() - self._cpu0, self._rss, self._watches, self._logs,
                           time.monotonic() - self._t0)
