"""Whatever a harness started dies with it, even by SIGKILL (refplatform.warden, docs/SAFETY.md).

A CI job's timeout, an OOM kill or a lost runner kills the harness without a ``finally``: before the warden, an
embedded platform it started lived on as orphans (API server, controllers, agents and their pods; a node frozen
by ``hang`` frozen for ever).  Here the harness is a real child process, killed by SIGKILL; what it started is
watched through psutil (which tells a process from a stranger that reused its pid).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from refplatform.warden import _sweep, start_ticks
from tests.integration.test_run import FIREDRILL

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
GONE_WITHIN = 15.0
"""Seconds everything a killed harness started may take to be gone (the warden acts at once; the rest is the
kernel reaping a few hundred MiB of Python)."""

HARNESS = textwrap.dedent("""\
    import os, signal, sys, time
    from pathlib import Path
    from refplatform.cluster import ManagedProcess
    logs = Path(sys.argv[1])
    a = ManagedProcess.spawn("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"], logs / "a.log")
    b = ManagedProcess.spawn("frozen", [sys.executable, "-c", "import time; time.sleep(600)"], logs / "b.log")
    b.signal_group(signal.SIGSTOP)  # as the hang fault freezes a node
    print(a.pid, b.pid, flush=True)
    time.sleep(600)
""")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform")])}


def _all_gone(procs: list[psutil.Process], within: float) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while True:
        left = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def test_the_groups_a_harness_started_die_with_it_even_a_frozen_one(tmp_path: Path) -> None:
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                               env=_env())
    try:
        assert harness.stdout is not None
        pids = [int(p) for p in harness.stdout.readline().split()]
        started = [psutil.Process(pid) for pid in pids]
        deadline = time.monotonic() + 10
        while not _stopped(started[1]) and time.monotonic() < deadline:  # a signal is delivered, not awaited
            time.sleep(0.05)
        assert _stopped(started[1])
        harness.send_signal(signal.SIGKILL)
        harness.wait(timeout=10)
        left = _all_gone(started, GONE_WITHIN)
        assert not left, f"still running {GONE_WITHIN:g} s after the harness was killed: {left}"
    finally:
        if harness.poll() is None:
            harness.kill()
        harness.communicate()


LOADER = textwrap.dedent("""\
    import sys, time
    from pathlib import Path
    from drills.load.run import LoadRun, LoadSpec, LoadUser
    out = Path(sys.argv[1])
    spec = LoadSpec(host="http://127.0.0.1:9", out_dir=out, users=1, duration_s=600,
                    user_classes=(LoadUser.CONTROL_PLANE,), kubeconfig=Path(sys.argv[2]))
    run = LoadRun(spec, check_host=False)
    print(run.proc.pid, flush=True)
    time.sleep(600)
""")


def test_a_load_generator_dies_with_the_harness_that_started_it(tmp_path: Path) -> None:
    """bench_sigkill found it: a run SIGKILLed mid-load left its locust (in a session of its own, so a CI runner's
    kill of the job's process group misses it) loading the cluster for the rest of its duration, an hour."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    harness = subprocess.Popen([sys.executable, "-c", LOADER, str(tmp_path / "load"), str(kubeconfig)],
                               stdout=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    try:
        assert harness.stdout is not None
        locust = psutil.Process(int(harness.stdout.readline()))
        assert locust.is_running() and os.getpgid(locust.pid) != os.getpgid(harness.pid)
        os.killpg(harness.pid, signal.SIGKILL)  # the job's process group, as a CI runner's timeout kills it
        harness.wait(timeout=10)
        left = _all_gone([locust], GONE_WITHIN)
        assert not left, f"locust still running {GONE_WITHIN:g} s after the harness was killed: {left}"
    finally:
        if harness.poll() is None:
            harness.kill()
        harness.communicate()


def test_the_warden_never_signals_a_process_that_only_reuses_a_watched_pid() -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        start = start_ticks(stranger.pid)
        assert start is not None
        _sweep({stranger.pid: start + 1})  # the pid it was told of, another process's start time
        assert stranger.poll() is None
        _sweep({stranger.pid: start})
        assert stranger.wait(timeout=10) == -signal.SIGKILL
    finally:
        if stranger.poll() is None:
            stranger.kill()
            stranger.wait()


HANG_FEATURE = """\
Feature: A run killed while a node hangs

  Scenario: A node frozen by the drill
    Given a canary training job of 1 worker with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with hang
    Then the platform detects the failure within 60 seconds
"""


def test_a_run_killed_mid_drill_leaves_no_platform_process_behind(tmp_path: Path) -> None:
    """`firedrill run` on the embedded platform, SIGKILLed while the node it hung is frozen: its API server,
    controllers, agents and pods (the frozen node's too) are gone within seconds."""
    features = tmp_path / "features"
    features.mkdir()
    (features / "hang.feature").write_text(HANG_FEATURE)
    run = subprocess.Popen([*FIREDRILL, "run", "--features", str(features), "--reports",
                            str(tmp_path / "reports"), "--no-live"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=_env(), cwd=tmp_path)
    try:
        assert run.stdout is not None
        seen = []
        for line in run.stdout:
            seen.append(line)
            if "Then the platform detects the failure" in line:
                break
        else:
            pytest.fail("the run ended before its fault: " + "".join(seen))
        me = psutil.Process(run.pid)
        deadline = time.monotonic() + 10
        while not any(_stopped(p) for p in me.children(recursive=True)) and time.monotonic() < deadline:
            time.sleep(0.05)
        started = [p for p in me.children(recursive=True) if "refplatform" in " ".join(_cmdline(p))]
        assert any(_stopped(p) for p in started), "no node was frozen when the run was killed"
        assert len(started) >= 6, started  # API server, controllers, agents (at least)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=10)
        left = _all_gone(started, GONE_WITHIN)
        assert not left, f"still running {GONE_WITHIN:g} s after the run was killed: " + "; ".join(
            " ".join(_cmdline(p))[:120] for p in left)
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate()


def _stopped(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []
