"""SIGTERM cuts a canary sleep or socket wait short, at once, as Terminated; SIGUSR1 (the device lost its GPU) as
DeviceLost; SIGUSR2 (the GPU hangs in a kernel) makes a compute never end, until SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from drills.canary.errors import DeviceLost, Terminated
from drills.canary.interrupts import Interrupts


@pytest.fixture
def interrupts() -> Iterator[Interrupts]:
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}
    it = Interrupts()
    it.install()
    yield it
    it.close()
    for s, handler in previous.items():
        signal.signal(s, handler)


def test_a_sleep_ends_when_its_time_is_up(interrupts: Interrupts) -> None:
    began = time.monotonic()
    interrupts.sleep(0.05)
    assert 0.05 <= time.monotonic() - began < 2


def test_sigterm_ends_a_long_sleep_at_once(interrupts: Interrupts) -> None:
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    began = time.monotonic()
    with pytest.raises(Terminated):
        interrupts.sleep(30)
    timer.join()
    assert time.monotonic() - began < 5
    with pytest.raises(Terminated):  # and every later wait
        interrupts.wait([], [], 0)


def test_a_wait_reports_the_readable_socket(interrupts: Interrupts) -> None:
    a, b = socket.socketpair()
    try:
        assert interrupts.wait([a], [], 0) == ([], [])
        b.send(b"x")
        assert interrupts.wait([a], [b], 1) == ([a], [b])
    finally:
        a.close()
        b.close()


def test_sigusr1_fails_the_next_wait_as_a_lost_device(interrupts: Interrupts) -> None:
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    began = time.monotonic()
    with pytest.raises(DeviceLost, match="the GPU under this rank reported an error and is lost"):
        interrupts.sleep(30)
    timer.join()
    assert time.monotonic() - began < 5


def test_a_compute_ends_when_its_time_is_up(interrupts: Interrupts) -> None:
    began = time.monotonic()
    interrupts.compute(0.05)
    assert 0.05 <= time.monotonic() - began < 2 and not interrupts.hung


def test_sigusr2_makes_the_compute_in_progress_never_end_until_sigterm(interrupts: Interrupts) -> None:
    hang = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR2))
    stop = threading.Timer(0.4, os.kill, (os.getpid(), signal.SIGTERM))
    hang.start()
    stop.start()
    began = time.monotonic()
    with pytest.raises(Terminated):
        interrupts.compute(0.1)  # would have ended at 0.1 s
    hang.join()
    stop.join()
    assert interrupts.hung and 0.4 <= time.monotonic() - began < 5


def test_after_sigusr2_every_next_compute_hangs_but_other_waits_do_not(interrupts: Interrupts) -> None:
    os.kill(os.getpid(), signal.SIGUSR2)
    interrupts.sleep(0.01)  # an input wait, a collective: not the GPU's kernels
    assert interrupts.hung
    stop = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    stop.start()
    began = time.monotonic()
    with pytest.raises(Terminated):
        interrupts.compute(0)
    stop.join()
    assert 0.2 <= time.monotonic() - began < 5


def test_a_hung_gpu_that_is_then_lost_fails_the_compute(interrupts: Interrupts) -> None:
    os.kill(os.getpid(), signal.SIGUSR2)
    lost = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1))
    lost.start()
    with pytest.raises(DeviceLost):
        interrupts.compute(0.01)
    lost.join()


def test_a_pause_is_not_cut_short_by_sigterm(interrupts: Interrupts) -> None:
    timer = threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    began = time.monotonic()
    interrupts.pause(0.15)
    timer.join()
    assert time.monotonic() - began >= 0.15 and interrupts.terminated
