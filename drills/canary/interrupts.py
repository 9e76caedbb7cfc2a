"""Waiting that SIGTERM cuts short: every sleep and socket wait of the canary goes through :class:`Interrupts`.

SIGUSR1 is how the simulated device tells the rank its GPU failed (docs/WORKLOAD.md): the next wait raises
:class:`DeviceLost`, as the next CUDA call fails on a lost GPU.  SIGUSR2 tells it its GPU is stuck in a kernel:
from then on the rank's current or next :meth:`Interrupts.compute` never ends (until SIGTERM), as a hung kernel
blocks its stream for good and the host thread with it.

The SIGTERM handler only sets a flag; ``signal.set_wakeup_fd`` makes a socket
readable at the same instant, and every wait polls that socket beside its own,
so a sleep or a blocked collective returns at once and raises
:class:`Terminated` at a point where the canary's state is consistent (never
half way through a log line; a paced checkpoint write it cuts short is
abandoned, never logged).
"""

from __future__ import annotations

import select
import signal
import socket
import time
from collections.abc import Callable, Sequence

from drills.canary.errors import DeviceLost, Terminated

__all__ = ["Interrupts"]


class Interrupts:
    """The SIGTERM flag and the waits that honour it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.terminated = False
        self.device_lost = False
        self.hung = False
        """SIGUSR2 arrived: the GPU is stuck in a kernel, and every compute from now on waits for SIGTERM."""
        self._installed = False

    def install(self) -> None:
        """Take SIGTERM, SIGUSR1 and SIGUSR2 (main thread only)."""
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGUSR1, self._on_device_lost)
        signal.signal(signal.SIGUSR2, self._on_hang)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        self._installed = True

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self.terminated = True

    def _on_device_lost(self, signum: int, frame: object) -> None:
        self.device_lost = True

    def _on_hang(self, signum: int, frame: object) -> None:
        self.hung = True

    def check(self) -> None:
        """Raise :class:`Terminated` once SIGTERM has arrived, :class:`DeviceLost` once the GPU failed."""
        if self.terminated:
            raise Terminated("SIGTERM")
        if self.device_lost:
            raise DeviceLost("a CUDA call failed: the GPU under this rank reported an error and is lost "
                             "(SIGUSR1 from the device)")

    def wait(self, readable: Sequence[socket.socket], writable: Sequence[socket.socket],
             timeout: float | None) -> tuple[list[socket.socket], list[socket.socket]]:
        """The sockets ready to read and to write, waiting at most ``timeout`` seconds (None: no bound)."""
        self.check()
        masks: dict[int, int] = {self._wake_r.fileno(): select.POLLIN}
        by_fd: dict[int, socket.socket] = {}
        for sock in readable:
            by_fd[sock.fileno()] = sock
            masks[sock.fileno()] = masks.get(sock.fileno(), 0) | select.POLLIN
        for sock in writable:
            by_fd[sock.fileno()] = sock
            masks[sock.fileno()] = masks.get(sock.fileno(), 0) | select.POLLOUT
        poller = select.poll()
        for fd, mask in masks.items():
            poller.register(fd, mask)
        ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        ready = poller.poll(ms)
        read: list[socket.socket] = []
        write: list[socket.socket] = []
        for fd, events in ready:
            if fd == self._wake_r.fileno():
                self._drain()
                continue
            sock = by_fd[fd]
            if events & (select.POLLIN | select.POLLERR | select.POLLHUP) and sock in readable:
                read.append(sock)
            if events & (select.POLLOUT | select.POLLERR | select.POLLHUP) and sock in writable:
                write.append(sock)
        self.check()
        return read, write

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` on the monotonic clock, or until SIGTERM."""
        deadline = self._clock() + seconds
        while True:
            self.check()
            remaining = deadline - self._clock()
            if remaining <= 0:
                return
            self.wait([], [], remaining)

    def compute(self, seconds: float) -> None:
        """A step's kernels: sleep ``seconds`` like :meth:`sleep`, except that once SIGUSR2 said the GPU hangs
        (before or during this call) it never returns: it waits, silent, until SIGTERM (or SIGUSR1) raises."""
        deadline = self._clock() + seconds
        while True:
            self.check()
            if self.hung:
                self.wait([], [], None)
                continue
            remaining = deadline - self._clock()
            if remaining <= 0:
                return
            self.wait([], [], remaining)

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds`` that SIGTERM does not cut short: the work SIGTERM itself asked for (the checkpoint of
        ``--checkpoint-on-sigterm``), which only the grace period's SIGKILL ends."""
        if seconds > 0:
            time.sleep(seconds)  # a signal's handler runs and the sleep goes on (PEP 475)

    def _drain(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Uninstall the wakeup descriptor (if installed) and close the pair."""
        if self._installed:
            signal.set_wakeup_fd(-1)
            self._installed = False
        self._wake_r.close()
        self._wake_w.close()
