"""The canary needs nothing but the standard library and its own package, and its command line teaches.  Its Ray
job (``raytrain.py``, run on a Ray cluster's head) needs ``ray`` too, and nothing else."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "drills" / "canary"


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_every_import_is_the_standard_library_or_the_canary_itself() -> None:
    outside = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "__future__" and not name.startswith("drills.canary") \
                        and not (path.name == "raytrain.py" and top == "ray"):
                    outside.append(f"{path.name}: {name}")
    assert outside == []


def test_running_it_loads_no_other_project_module() -> None:
    code = ("import sys, drills.canary.__main__; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('drills', 'refplatform')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=60,
                         check=True)
    loaded = ast.literal_eval(out.stdout)
    assert [m for m in loaded if not m.startswith("drills.canary") and m != "drills"] == []


def test_help_names_the_options_the_environment_and_the_log_format() -> None:
    out = subprocess.run([sys.executable, "-m", "drills.canary", "train", "--help"], capture_output=True, text=True,
                         env=env(), timeout=60)
    assert out.returncode == 0
    for word in ("--steps-total", "--checkpoint-dir", "--stall-after", "--peer-timeout", "MASTER_ADDR",
                 "VC_TASK_INDEX", "JOB_COMPLETION_INDEX", "POD_IP", "FIREDRILL_DEVICE_SOCKET", "docs/WORKLOAD.md",
                 "143", "--checkpoint-seconds", "storage_stalled_until", "atomic_rename", "checkpoint-begin",
                 "SIGUSR2"):
        assert word in out.stdout, word


def test_a_usage_error_exits_2_naming_the_option() -> None:
    out = subprocess.run([sys.executable, "-m", "drills.canary", "train", "--payload-bytes", "lots"],
                         capture_output=True, text=True, env=env(), timeout=60)
    assert out.returncode == 2 and "--payload-bytes" in out.stderr and out.stdout == ""
