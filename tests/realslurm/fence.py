"""A site's fence agent for a cluster of ``tests/realslurm``: a node slurmctld has set DOWN is powered off.

Stock Slurm fences nothing. A node cut off from slurmctld is set DOWN and its jobs are requeued, while the tasks
on that node, out of slurmctld's reach, run on until the node's slurmd is back (docs/SLURM.md, scenario 5.2).
Sites that promise "no old rank beside its replacement" add a fence of their own. The usual one is a watcher on the
controller's side that powers a DOWN node off through its BMC (STONITH). Slurm's own ``strigger --node --down``
runs a program for that, but only on a 15-second cycle, which is later than a requeued job starts again.

:class:`FenceAgent` is such a watcher. It reads the nodes' states from ``sinfo --json`` every ``interval`` seconds.
A node newly DOWN that still has processes is powered off through the cluster's power switch
(:meth:`SlurmCluster.kill_node`: its slurmd, step daemons and tasks SIGKILLed). Each DOWN episode is fenced at most
once: a node being powered on again (its slurmd restarting, the node still DOWN until it registers) is left alone.
Each power-off is kept in :attr:`FenceAgent.fenced`, as a site's fence log would keep it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from drills.slurm.state import SlurmError as DriverError
from tests.realslurm.cluster import SlurmCluster, SlurmError

__all__ = ["FenceAgent", "Fencing"]


@dataclass(frozen=True)
class Fencing:
    """One power-off: the node, the pids killed, and when (monotonic seconds)."""

    node: str
    pids: tuple[int, ...]
    at: float


@dataclass
class FenceAgent:
    """Power off every node slurmctld sets DOWN, once per DOWN episode, while :meth:`start`\\ ed."""

    cluster: SlurmCluster
    interval: float = 0.5
    fenced: list[Fencing] = field(default_factory=list)
    _down: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> FenceAgent:
        self._thread = threading.Thread(target=self._watch, name="fence-agent", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FenceAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def poll(self) -> list[Fencing]:
        """One look at the nodes' states: power off each node newly DOWN that still runs anything; the power-offs."""
        states = self.cluster.node_states()
        done = []
        for node, flags in states.items():
            if "DOWN" not in flags:
                self._down.discard(node)  # back up: a later DOWN is a new episode
                continue
            if node in self._down:
                continue
            self._down.add(node)
            pids = self.cluster.kill_node(node)
            if pids:
                done.append(Fencing(node, tuple(pids), time.monotonic()))
        self.fenced += done
        return done

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except (SlurmError, DriverError):  # slurmctld busy or restarting: the next look tries again
                continue
