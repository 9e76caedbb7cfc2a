"""The inference canary needs nothing but the standard library and its own package, and its command line teaches."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "drills" / "inference"


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_every_import_is_the_standard_library_or_the_package_itself() -> None:
    outside = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "__future__" and \
                        not name.startswith("drills.inference"):
                    outside.append(f"{path.name}: {name}")
    assert outside == []


def test_running_it_loads_no_other_project_module() -> None:
    code = ("import sys, drills.inference.__main__; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('drills', 'refplatform')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=60,
                         check=True)
    loaded = ast.literal_eval(out.stdout)
    assert loaded and [m for m in loaded if not m.startswith("drills.inference") and m != "drills"] == []


def test_help_names_the_options_the_environment_and_the_endpoints() -> None:
    out = subprocess.run([sys.executable, "-m", "drills.inference", "serve", "--help"], capture_output=True,
                         text=True, env=env(), timeout=60)
    assert out.returncode == 0
    for word in ("--ttft-seconds", "--tpot-seconds", "--max-batch", "--max-queue", "--warmup-seconds",
                 "--port-file", "--device-socket", "POD_IP", "FIREDRILL_DEVICE_SOCKET", "/v1/completions",
                 "/metrics", "/health", "docs/WORKLOAD.md", "143"):
        assert word in out.stdout, word


def test_a_usage_error_exits_2_naming_the_option() -> None:
    out = subprocess.run([sys.executable, "-m", "drills.inference", "serve", "--max-queue", "lots"],
                         capture_output=True, text=True, env=env(), timeout=60)
    assert out.returncode == 2 and "--max-queue" in out.stderr and out.stdout == ""


def test_an_address_in_use_exits_1_with_an_exit_line(tmp_path: Path) -> None:
    import json
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "drills.inference", "serve", "--port", str(port)],
                             capture_output=True, text=True, env=env(), timeout=60)
    last = json.loads(out.stdout.splitlines()[-1])
    assert out.returncode == 1 and (last["event"], last["code"], last["reason"]) == ("exit", 1, "error")
    assert f"127.0.0.1:{port}" in last["message"] and f"127.0.0.1:{port}" in out.stderr
