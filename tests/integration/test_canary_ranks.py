"""Two training canary ranks as plain processes, no platform: what a dead, frozen or stopped rank does to the
other, and where a restart resumes (issue 12, done-when 4).

Each rank is ``python -m drills.canary train ...``; a thread per rank reads its JSON lines from the stdout pipe
and every wait is on a logged condition with a deadline.  Both rendezvous modes appear: the file rendezvous
(``--rendezvous-dir``) and the TCP one (``MASTER_ADDR``/``MASTER_PORT`` on loopback).  Only processes this
module started are ever signalled.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 20.0
FAST = ["--compute-seconds", "0.02", "--stall-after", "0.3", "--rendezvous-timeout", "20", "--peer-timeout", "60"]

Line = dict[str, Any]


class Rank:
    """One canary process and the lines it logged so far."""

    def __init__(self, rank: int, argv: list[str], env: dict[str, str], stderr: IO[str]) -> None:
        self.rank = rank
        self.proc = subprocess.Popen([sys.executable, "-m", "drills.canary", "train", *argv], env=env,
                                     stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=REPO)
        self.lines: list[Line] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            try:
                line = json.loads(text)
            except ValueError:
                continue  # readers skip what is not JSON
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, event: str, where: Callable[[Line], bool] = lambda line: True,
                 timeout: float = DEADLINE) -> Line:
        """The first line of ``event`` matching ``where``, waiting for it up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if line["event"] == event and where(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (not self._reader.is_alive() and self.proc.poll() is not None):
                    raise AssertionError(f"rank {self.rank} logged no {event!r} in {timeout} s; "
                                         f"last lines: {self.lines[-5:]}")
                self._cond.wait(min(left, 0.5))

    def events(self, event: str) -> list[Line]:
        with self._cond:
            return [line for line in self.lines if line["event"] == event]

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def finish(self, timeout: float = DEADLINE) -> int:
        """The exit code, once the process ended and its log is read to the end."""
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code


class Job:
    """Starts ranks of one job sharing a checkpoint directory; kills whatever is left at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.checkpoints = tmp / "checkpoints"
        self.ranks: list[Rank] = []
        self._stderr = open(tmp / "stderr.txt", "a")

    def start(self, rank: int, world: int, *argv: str, generation: str = "0", master_port: int | None = None,
              extra_env: dict[str, str] | None = None) -> Rank:
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "POD_IP", "VC_TASK_INDEX",
                            "JOB_COMPLETION_INDEX", "FIREDRILL_DEVICE_SOCKET") and not k.startswith("FIREDRILL_")}
        env.update(WORLD_SIZE=str(world), PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                   FIREDRILL_GENERATION=generation, FIREDRILL_CHECKPOINT_DIR=str(self.checkpoints))
        env["RANK" if rank % 2 == 0 else "VC_TASK_INDEX"] = str(rank)  # the Volcano fallback works too
        if master_port is not None:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port))
        else:
            env["FIREDRILL_RENDEZVOUS_DIR"] = str(self.tmp / "rendezvous")
        env.update(extra_env or {})
        started = Rank(rank, [*FAST, *argv], env, self._stderr)
        self.ranks.append(started)
        return started

    def close(self) -> None:
        for rank in self.ranks:
            if rank.proc.poll() is None:
                rank.proc.kill()
            rank.proc.wait(DEADLINE)
            rank._reader.join(DEADLINE)
            if rank.proc.stdout is not None:
                rank.proc.stdout.close()
        self._stderr.close()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    j = Job(tmp_path)
    try:
        yield j
    finally:
        j.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def steps_after(rank: Rank, line: Line) -> list[int]:
    return [s["step"] for s in rank.events("step") if s["seq"] > line["seq"]]


def assert_sigterm_exit(rank: Rank) -> None:
    rank.signal(signal.SIGTERM)
    assert rank.finish() == 143
    last = rank.lines[-1]
    assert (last["event"], last["code"], last["reason"]) == ("exit", 143, "sigterm")


@pytest.mark.parametrize("victim", [1, 0])
def test_a_killed_rank_stalls_the_survivor_which_logs_it(job: Job, victim: int) -> None:
    ranks = [job.start(r, 2) for r in (0, 1)]  # file rendezvous
    for rank in ranks:
        rank.wait_for("step", lambda line: line["step"] >= 3)
    ranks[victim].proc.kill()
    assert ranks[victim].finish() == -signal.SIGKILL
    lost_after = max(s["step"] for s in ranks[victim].events("step"))
    survivor = ranks[1 - victim]
    lost = survivor.wait_for("peer_lost")
    assert lost["peer"] == (1 if victim == 1 else "master") and lost["reason"] in ("eof", "reset")
    stalled = survivor.wait_for("stalled", lambda line: line["seq"] > lost["seq"] or line["step"] > lost_after)
    assert stalled["on"] == ("peers" if victim == 1 else "master") and stalled["waited_s"] >= 0.3
    assert survivor.proc.poll() is None, "a survivor stays, stalled, until SIGTERM or the peer timeout"
    last_step = max(s["step"] for s in survivor.events("step"))
    assert stalled["step"] == last_step + 1 and steps_after(survivor, lost) == []
    assert_sigterm_exit(survivor)
    assert survivor.lines[-1]["step"] == last_step


def test_a_restart_resumes_from_the_last_complete_checkpoint(job: Job) -> None:
    port = free_port()
    r0, r1 = (job.start(r, 2, "--checkpoint-every", "4", master_port=port) for r in (0, 1))
    r0.wait_for("checkpoint", lambda line: line["step"] >= 8)
    r1.proc.kill()
    r0.wait_for("peer_lost")  # rank 0 is held in the collective: no checkpoint after this is possible
    r0.proc.kill()
    for rank in (r0, r1):
        rank.finish()
    newest = max(c["step"] for c in r0.events("checkpoint"))
    before = max(s["step"] for rank in (r0, r1) for s in rank.events("step"))
    assert before >= newest  # the steps beyond it are the work a restart loses
    port = free_port()
    n0, n1 = (job.start(r, 2, "--checkpoint-every", "4", "--steps-total", str(newest + 3), generation="1",
                        master_port=port) for r in (0, 1))
    for rank in (n0, n1):
        assert rank.finish() == 0
        resumed = rank.wait_for("resumed")
        assert (resumed["from_step"], resumed["checkpoint"], resumed["generation"]) == (
            newest, f"ckpt-{newest:010d}.json", "1")
        assert steps_after(rank, resumed) == [newest + 1, newest + 2, newest + 3]
        assert rank.lines[-1]["reason"] == "complete" and rank.lines[-1]["step"] == newest + 3


def test_a_torn_checkpoint_is_skipped_and_named(job: Job) -> None:
    first = [job.start(r, 2, "--checkpoint-every", "5", "--steps-total", "15") for r in (0, 1)]
    assert [rank.finish() for rank in first] == [0, 0]
    assert [c["step"] for c in first[0].events("checkpoint")] == [5, 10, 15]
    newest = job.checkpoints / "ckpt-0000000015.json"
    newest.write_bytes(newest.read_bytes()[:40])  # torn: the tail never reached the disk
    (job.checkpoints / "ckpt-0000000020.json").write_bytes(b'{"step": 20, "world_si')  # a partial newer file
    again = [job.start(r, 2, "--checkpoint-every", "5", "--steps-total", "12", generation="1") for r in (0, 1)]
    assert [rank.finish() for rank in again] == [0, 0]
    for rank in again:
        resumed = rank.wait_for("resumed")
        assert (resumed["from_step"], resumed["checkpoint"]) == (10, "ckpt-0000000010.json")
        assert resumed["skipped"] == ["ckpt-0000000020.json", "ckpt-0000000015.json"]
        assert steps_after(rank, resumed) == [11, 12]


def test_a_frozen_rank_stalls_the_other_until_it_thaws(job: Job) -> None:
    port = free_port()
    r0, r1 = (job.start(r, 2, master_port=port) for r in (0, 1))
    for rank in (r0, r1):
        rank.wait_for("step", lambda line: line["step"] >= 3)
    before = max(s["step"] for s in r0.events("step"))
    r1.signal(signal.SIGSTOP)
    try:
        stalled = r0.wait_for("stalled", lambda line: line["step"] > before)  # not a hiccup of a busy machine
        assert stalled["on"] == "peers"
        frozen_at = stalled["step"] - 1
        assert max(s["step"] for s in r0.events("step")) == frozen_at
    finally:
        r1.signal(signal.SIGCONT)
    unstalled = r0.wait_for("unstalled", lambda line: line["step"] == stalled["step"])
    assert unstalled["step"] == stalled["step"] == frozen_at + 1 and unstalled["stalled_s"] > 0
    for rank in (r0, r1):
        rank.wait_for("step", lambda line: line["step"] >= frozen_at + 3)
    assert r0.events("peer_lost") == [] and r1.events("peer_lost") == []
    assert [s["step"] for s in r0.events("step") if stalled["seq"] < s["seq"] < unstalled["seq"]] == []
    steps = [s["step"] for s in r0.events("step")]
    assert steps == list(range(1, len(steps) + 1))  # nothing skipped, nothing repeated across the freeze
    for rank in (r0, r1):
        assert_sigterm_exit(rank)


def test_a_rank_silent_past_the_peer_timeout_is_given_up_on(job: Job) -> None:
    r0, r1 = (job.start(r, 2, "--peer-timeout", "1.5") for r in (0, 1))
    for rank in (r0, r1):
        rank.wait_for("step", lambda line: line["step"] >= 2)
    r1.signal(signal.SIGSTOP)
    try:
        assert r0.finish() == 1
    finally:
        r1.signal(signal.SIGCONT)
    lost = r0.wait_for("peer_lost")
    assert (lost["peer"], lost["reason"]) == (1, "timeout")
    assert (r0.lines[-1]["event"], r0.lines[-1]["reason"], r0.lines[-1]["code"]) == ("exit", "peer-timeout", 1)
    assert r1.finish() == 1 and r1.lines[-1]["reason"] == "peer-timeout"  # thawed: its master is gone
    assert r1.wait_for("peer_lost")["peer"] == "master"


def test_sigterm_is_prompt_in_a_long_sleep_and_in_the_rendezvous(job: Job) -> None:
    sleeper = job.start(0, 1, "--compute-seconds", "60")
    sleeper.wait_for("resumed")
    lonely = job.start(1, 2)  # rank 0 of its world never comes
    lonely.wait_for("start")
    began = time.monotonic()
    for rank in (sleeper, lonely):
        assert_sigterm_exit(rank)
    assert time.monotonic() - began < 5
    assert sleeper.lines[-1]["step"] == 0 and lonely.lines[-1]["step"] is None


def test_the_device_socket_hears_each_state_of_a_step(job: Job, tmp_path: Path) -> None:
    path = tmp_path / "dev.sock"
    device = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    device.bind(str(path))
    device.settimeout(0.2)
    heard: dict[int, list[dict[str, Any]]] = {}
    arrived = threading.Condition()
    done = threading.Event()

    def listen() -> None:  # as the node's device does: read at once (a datagram queue holds few)
        while not done.is_set():
            try:
                message = json.loads(device.recv(4096).decode("ascii"))
            except TimeoutError:
                continue
            with arrived:
                heard.setdefault(message.pop("pid"), []).append(message)
                arrived.notify_all()

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    try:
        ranks = [job.start(r, 2, "--steps-total", "2", "--input-seconds", "0.01", "--payload-bytes", "1000",
                           extra_env={"FIREDRILL_DEVICE_SOCKET": str(path)}) for r in (0, 1)]
        assert [rank.finish() for rank in ranks] == [0, 0]
        with arrived:  # the last datagram was sent before exit; the reader may not have it yet
            arrived.wait_for(lambda: all(len(heard.get(rank.proc.pid, [])) >= 8 for rank in ranks), DEADLINE)
    finally:
        done.set()
        listener.join(DEADLINE)
        device.close()
    assert sorted(heard) == sorted(rank.proc.pid for rank in ranks)
    step = [{"state": "input"}, {"state": "compute"}, {"state": "comm", "bytes": 2000}]
    for states in heard.values():
        assert states == [{"state": "idle"}, *step, *step, {"state": "idle"}]
