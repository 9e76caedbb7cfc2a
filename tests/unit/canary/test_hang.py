"""SIGUSR2, a GPU stuck in a kernel (docs/WORKLOAD.md, "Signals"): real canary processes stop in their compute,
silent, device state ``compute``, not exiting, while their peers stall in the all-reduce; SIGTERM still stops them
at once (exit 143).  Each test takes about a second."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
DEADLINE_S = 20.0
QUIET_S = 0.4


class Rank:
    """A canary process whose stdout lines a thread parses into a queue as they come."""

    def __init__(self, args: list[str], **extra: str) -> None:
        base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        env = {**base, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **extra}
        self.proc = subprocess.Popen([sys.executable, "-m", "drills.canary", "train", "--checkpoint-every", "0",
                                      *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.lines: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.strip():
                self._queue.put(json.loads(raw))
        self._queue.put(None)

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next line within ``timeout`` seconds (None: none came, or the output ended)."""
        try:
            line = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is not None:
            self.lines.append(line)
        return line

    def until(self, event: str, min_step: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            line = self.next(deadline - time.monotonic())
            if line is None:
                break
            if line["event"] == event and line.get("step", 0) >= min_step:
                return line
        raise AssertionError(f"no {event} line (step >= {min_step}) in {self.lines}")

    def quiet(self, seconds: float) -> list[dict[str, Any]]:
        """Every line until ``seconds`` pass without one (bounded by the deadline)."""
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            line = self.next(seconds)
            if line is None:
                return got
            got.append(line)
        raise AssertionError(f"never quiet: {got[-5:]}")

    def stop(self) -> int:
        """SIGTERM, then the exit code (the rest of the output read)."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=DEADLINE_S)
        while self.next(DEADLINE_S) is not None:
            pass
        return code

    def close(self) -> None:
        """Kill the process if it still runs, and close its output once read to the end."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(DEADLINE_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def device() -> Iterator[socket.socket]:
    """The node's device socket (a short path: AF_UNIX addresses are short)."""
    directory = tempfile.mkdtemp(prefix="fd-hang-")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(os.path.join(directory, "dev.sock"))
    sock.setblocking(False)
    yield sock
    sock.close()
    os.unlink(os.path.join(directory, "dev.sock"))
    os.rmdir(directory)


def states(sock: socket.socket) -> list[str]:
    found = []
    while True:
        try:
            found.append(json.loads(sock.recv(4096))["state"])
        except BlockingIOError:
            return found


def test_sigusr2_hangs_the_rank_in_its_compute_silently_until_sigterm(device: socket.socket) -> None:
    rank = Rank(["--compute-seconds", "0.05"], FIREDRILL_DEVICE_SOCKET=device.getsockname())
    try:
        rank.until("step", min_step=2)
        rank.proc.send_signal(signal.SIGUSR2)
        hung_at = time.monotonic()
        after = rank.quiet(QUIET_S)
        # at most the step whose compute had already ended completes; then nothing, and no exit
        assert [line["event"] for line in after] in ([], ["step"]) and rank.proc.poll() is None
        assert states(device)[-1] == "compute"
        began = time.monotonic()
        assert rank.stop() == 143 and time.monotonic() - began < 2
        exit_line = rank.lines[-1]
        assert (exit_line["event"], exit_line["reason"], exit_line["code"]) == ("exit", "sigterm", 143)
        assert time.monotonic() - hung_at < 5
    finally:
        rank.close()


def test_the_peers_of_a_hung_rank_stall_in_the_all_reduce(tmp_path: Path) -> None:
    common = ["--compute-seconds", "0.02", "--stall-after", "0.2", "--rendezvous-dir", str(tmp_path / "rdv")]
    ranks = [Rank(common, RANK=str(r), WORLD_SIZE="2") for r in (0, 1)]
    try:
        for rank in ranks:
            rank.until("step", min_step=2)
        ranks[1].proc.send_signal(signal.SIGUSR2)
        stalled = ranks[0].until("stalled")
        assert stalled["on"] == "peers"
        assert [line["event"] for line in ranks[1].quiet(QUIET_S)] in ([], ["step"])
        assert all(rank.proc.poll() is None for rank in ranks)
        assert [rank.stop() for rank in (ranks[1], ranks[0])] == [143, 143]
        assert [rank.lines[-1]["reason"] for rank in ranks] == ["sigterm", "sigterm"]
    finally:
        for rank in ranks:
            rank.close()
