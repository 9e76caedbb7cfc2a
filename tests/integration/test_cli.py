"""`firedrill up` and `firedrill down`, as a user runs them, on a fresh data directory and on a restart."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from refplatform.cluster import wait_until

pytestmark = pytest.mark.integration

FIREDRILL = [sys.executable, "-c", "from drills.cli import main; main()"]


def start_up(data_dir: Path, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([*FIREDRILL, "up", "--data-dir", str(data_dir), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def down(data_dir: Path, proc: subprocess.Popen[str]) -> None:
    out = subprocess.run([*FIREDRILL, "down", "--data-dir", str(data_dir)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert proc.wait(timeout=30) == 0
    assert proc.stdout is not None
    proc.stdout.close()


def kubectl_get(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir",
                          str(kubeconfig.parent / "kcache"), *args], capture_output=True, text=True, timeout=30,
                         input=stdin)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.kubectl
def test_up_prints_a_working_kubeconfig_and_down_stops_it(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    proc, lines = start_up(data, "--nodes", "2", "--gpus-per-node", "4", "--heartbeat", "0.5")
    try:
        wait_until(lambda: any("Stop with Ctrl-C" in line for line in lines) or proc.poll() is not None,
                   60, "`firedrill up` to report the cluster up")
        text = "".join(lines)
        assert "2 nodes Ready, 8 GPUs" in text, text
        kubeconfig = data / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in text
        assert "gpu-node-1" in kubectl_get(kubeconfig, "get", "nodes")
        kubectl_get(kubeconfig, "create", "--validate=false", "-f", "-", stdin="apiVersion: v1\nkind: Namespace\nmetadata: {name: kept}\n")
        # A second `up` on the same directory is refused while the first runs.
        second = subprocess.run([*FIREDRILL, "up", "--data-dir", str(data)], capture_output=True, text=True,
                                timeout=30)
        assert second.returncode == 2 and "already running" in second.stderr
    finally:
        down(data, proc)
    assert "stopped" in "".join(lines)
    assert not (data / "firedrill-up.pid").exists()

    # Restarting on the same directory keeps every object.
    proc, lines = start_up(data, "--nodes", "1", "--heartbeat", "0.5")
    try:
        wait_until(lambda: any("Stop with Ctrl-C" in line for line in lines), 60, "the restart")
        assert "kept" in kubectl_get(data / "kubeconfig", "get", "namespaces")
        config = yaml.safe_load((data / "kubeconfig").read_text())
        assert config["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")
    finally:
        down(data, proc)


def test_down_without_a_running_cluster_says_so(tmp_path: Path) -> None:
    out = subprocess.run([*FIREDRILL, "down", "--data-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 1 and "no running cluster" in out.stderr


def test_help_teaches_the_first_command() -> None:
    out = subprocess.run([*FIREDRILL, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "firedrill up" in out.stdout
    out = subprocess.run([*FIREDRILL, "up", "--help"], capture_output=True, text=True, timeout=30)
    for option in ("--nodes", "--gpus-per-node", "--gpu-model", "--data-dir"):
        assert option in out.stdout
