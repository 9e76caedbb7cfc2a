"""Giving a held ``--parallel`` worker its CPU priority back (drills/bdd/niceness.py): whether the run may, and
that the worker and the processes it started are set, every thread, while their own children keep theirs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drills.bdd.niceness import can_lower_niceness, children, hold_niceness, renice
from refplatform import autogroup

REPO = Path(__file__).resolve().parents[3]

STATUS = "Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t{eff}\n"


@pytest.mark.parametrize("eff, limit, expect", [
    ("000001fffeffffff", 0, True),     # root with every capability
    ("00000000a80425fb", 0, False),    # a container's default set: no CAP_SYS_NICE
    ("0000000000800000", 0, True),     # CAP_SYS_NICE alone
    ("0000000000000000", 20, True),    # RLIMIT_NICE reaching nice 0
    ("0000000000000000", 19, False),
    ("junk", 0, False),
])
def test_the_run_holds_workers_only_where_it_may_give_their_priority_back(eff: str, limit: int, expect: bool) -> None:
    assert can_lower_niceness(STATUS.format(eff=eff), limit) is expect


def niceness_of(tid: int) -> int:
    fields = Path(f"/proc/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])  # field 19 of stat(5), counted after the command's closing parenthesis


POD = "import time; time.sleep(60)"
PLATFORM = f"""
import subprocess, sys, time
pod = subprocess.Popen([sys.executable, "-c", {POD!r}])
print(pod.pid, flush=True)
time.sleep(60)
"""
WORKER = f"""
import subprocess, sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
platform = subprocess.Popen([sys.executable, "-c", {PLATFORM!r}], stdout=subprocess.PIPE, text=True)
print(platform.pid, platform.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not can_lower_niceness(), reason="this process may not lower a niceness (no CAP_SYS_NICE)")
def test_the_worker_and_what_it_started_are_given_nice_0_but_their_own_children_keep_theirs() -> None:
    worker = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True,
                              preexec_fn=lambda: os.nice(19))
    pids: list[int] = []
    try:
        assert worker.stdout is not None
        platform, pod = pids = [int(p) for p in worker.stdout.readline().split()]
        threads = [int(t.name) for t in Path(f"/proc/{worker.pid}/task").iterdir()]
        assert len(threads) == 2 and all(niceness_of(t) == 19 for t in threads)
        assert children(worker.pid) == [platform] and niceness_of(platform) == niceness_of(pod) == 19
        assert renice(worker.pid, 0) == 3  # the worker's two threads, its platform process's one
        assert all(niceness_of(t) == 0 for t in threads) and niceness_of(platform) == 0
        assert niceness_of(pod) == 19, "a pod keeps the niceness its agent gave it"
    finally:
        for pid in reversed(pids):
            os.kill(pid, 9)
        worker.kill()
        worker.wait()
        assert worker.stdout is not None
        worker.stdout.close()


def test_a_worker_that_is_gone_is_nothing_to_renice() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert renice(gone.pid, 0) == 0


SESSION_PLATFORM = f"""
import subprocess, sys, time
from refplatform import autogroup
platform = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
autogroup.follow(platform.pid)
print(platform.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not autogroup.enabled(), reason="the kernel does not schedule by autogroup here")
def test_under_autogroup_a_held_worker_and_its_platform_sessions_are_held_and_given_back() -> None:
    """Sessions share the CPU first: a held worker's session and each session its platform starts take nice 19,
    and all are given 0 back, without any privilege."""
    worker = subprocess.Popen([sys.executable, "-c", SESSION_PLATFORM], stdout=subprocess.PIPE, text=True,
                              start_new_session=True, preexec_fn=hold_niceness, cwd=REPO / "platform")
    platform = 0
    try:
        assert worker.stdout is not None
        platform = int(worker.stdout.readline())
        assert autogroup.nice_of(worker.pid) == autogroup.nice_of(platform) == 19
        renice(worker.pid, 0)
        assert autogroup.nice_of(worker.pid) == autogroup.nice_of(platform) == 0
    finally:
        if platform:
            os.kill(platform, 9)
        worker.kill()
        worker.wait()
        assert worker.stdout is not None
        worker.stdout.close()
