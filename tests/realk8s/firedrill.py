"""``firedrill run --kubeconfig`` as a user types it, for the real-cluster tests: the process and the run's
scenarios as its evidence record holds them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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
