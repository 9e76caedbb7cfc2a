"""``firedrill run --kubeconfig`` as a user types it, for the real-cluster tests: the process and the run's
scenarios as its evidence record holds them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLI = ([found] if (found := shutil.which("firedrill", path=str(Path(sys.executable).parent)))
       else [sys.executable, "-c", "from drills.cli import main; main()"])


def firedrill_run(kubeconfig: Path, profile: Path, features: Path, reports: Path, *, timeout: float,
                  extra: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run the features against the cluster; fails the test when the run left no evidence record."""
    proc = subprocess.run([*CLI, "run", "--kubeconfig", str(kubeconfig), "--profile", str(profile),
                           "--features", str(features), "--reports", str(reports), *extra],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    records = sorted(reports.glob("*/record.json"))
    assert records, f"firedrill run left no evidence (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    scenarios: list[dict[str, Any]] = json.loads(records[-1].read_text())["scenarios"]
    return proc, scenarios


def killed_once_journaled(kubeconfig: Path, profile: Path, features: Path, work: Path, needle: str, *,
                          timeout: float, extra: tuple[str, ...] = ()) -> tuple[dict[str, str], Path]:
    """``firedrill run`` SIGKILLed, as a CI timeout kills a job, once its fault journal (under ``work/state``)
    holds an intent whose line contains ``needle``: no finalizer, no rollback.  The environment the next commands
    must share (its state directory) and the journal."""
    env = {**os.environ, "FIREDRILL_STATE_DIR": str(work / "state")}
    journals = work / "state" / "journals"
    output = work / "killed-run.log"
    with open(output, "wb") as out:
        run = subprocess.Popen([*CLI, "run", "--kubeconfig", str(kubeconfig), "--profile", str(profile),
                                "--features", str(features), "--reports", str(work / "reports"), "--no-live", *extra],
                               env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while not any(needle in line and '"intent"' in line for p in journals.glob("*/*.jsonl")
                      for line in p.read_text().splitlines()):
            assert run.poll() is None, (f"the run ended (exit {run.returncode}) before its fault was journaled:\n"
                                        + output.read_text(errors="replace"))
            assert time.monotonic() < deadline, f"the run journaled no fault with {needle!r} in {timeout:g} s"
            time.sleep(0.2)
        time.sleep(1.0)  # test pacing only: the fault's command acts right after its intent is written
    finally:
        run.kill()
        run.wait(timeout=30)
    [journal] = list(journals.glob("*/*.jsonl"))
    return env, journal


def drill_objects_left(kubeconfig: Path) -> list[str]:
    """Pods and Jobs carrying the drills' run label that are not being deleted, in every namespace."""
    listed = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", "get", "pods,jobs.batch", "--all-namespaces",
                             "-l", "firedrill.dev/drill-run", "-o", "json"], capture_output=True, text=True,
                            timeout=60, check=True)
    return [f"{o['kind']} {o['metadata']['namespace']}/{o['metadata']['name']}"
            for o in json.loads(listed.stdout)["items"] if not o["metadata"].get("deletionTimestamp")]


def wait_nothing_left(kubeconfig: Path, within: float) -> None:
    deadline = time.monotonic() + within
    while left := drill_objects_left(kubeconfig):
        assert time.monotonic() < deadline, f"a dead run's objects are still on the cluster: {left}"
        time.sleep(0.5)
