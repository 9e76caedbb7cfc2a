"""The embedded platform simulates GPUs unless asked for real ones: `--simulate-gpus` reaches every agent's argv
unless `firedrill up/run --real-gpus` is given (read from the running agents' /proc/<pid>/cmdline)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from drills.target.connect import EmbeddedPlatform
from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.integration.test_cli import FIREDRILL, down, start_up

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def agent_argv(data_dir: Path, node: str) -> list[str]:
    """The argv of the running agent of ``node``, as the kernel has it."""
    pid = json.loads((data_dir / "agents" / f"{node}.json").read_text())["pid"]
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def wait_for_agents(data_dir: Path, nodes: list[str]) -> None:
    wait_until(lambda: all((data_dir / "agents" / f"{n}.json").exists() for n in nodes), 60, "the agents' state files")


@pytest.mark.parametrize(("real_gpus", "simulated"), [(False, True), (True, False)])
def test_every_agent_of_a_cluster_gets_simulate_gpus_unless_real_gpus(tmp_path: Path, real_gpus: bool,
                                                                      simulated: bool) -> None:
    spec = ClusterSpec(tmp_path / "c", nodes=1, spares=1, profile="tuned", controllers=(), real_gpus=real_gpus)
    with Cluster(spec) as cluster:
        extra = cluster.start_agent("extra-node", gpus=2)  # an agent started later (a partitioned node) too
        names = [*spec.all_node_names(), "extra-node"]
        wait_for_agents(spec.data_dir, names)
        for name in names:
            assert ("--simulate-gpus" in agent_argv(spec.data_dir, name)) is simulated, name
        assert ("--simulate-gpus" in extra.popen.args) is simulated  # type: ignore[operator]


def test_the_embedded_platform_passes_real_gpus_to_its_cluster(tmp_path: Path) -> None:
    platform = EmbeddedPlatform(nodes=1, spares=0, real_gpus=True, data_dir=tmp_path / "e").start()
    try:
        assert platform.cluster.spec.real_gpus is True
        assert all("--simulate-gpus" not in p.popen.args for p in platform.cluster.agents.values())
    finally:
        platform.stop()
    assert EmbeddedPlatform().real_gpus is False


def test_firedrill_up_real_gpus_reaches_the_agents(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    proc, lines = start_up(data, "--nodes", "1", "--spares", "0", "--real-gpus")
    try:
        wait_until(lambda: any("Stop with Ctrl-C" in line for line in lines) or proc.poll() is not None,
                   60, "`firedrill up --real-gpus` to report the cluster up")
        text = "".join(lines)
        assert "real, as NVML reports them" in text, text
        assert "--simulate-gpus" not in agent_argv(data.resolve(), "gpu-node-0")
    finally:
        down(data, proc)


def test_firedrill_up_simulates_by_default(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    proc, lines = start_up(data, "--nodes", "1", "--spares", "0")
    try:
        wait_until(lambda: any("Stop with Ctrl-C" in line for line in lines) or proc.poll() is not None,
                   60, "`firedrill up` to report the cluster up")
        assert "simulated H100-80GB" in "".join(lines)
        assert "--simulate-gpus" in agent_argv(data.resolve(), "gpu-node-0")
    finally:
        down(data, proc)


def test_firedrill_run_real_gpus_is_planned_and_refused_for_a_real_cluster(tmp_path: Path) -> None:
    plan = subprocess.run([*FIREDRILL, "run", "--dry-run", "--real-gpus", "--features", str(REPO / "features")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "this machine's real GPUs" in plan.stdout
    default = subprocess.run([*FIREDRILL, "run", "--dry-run", "--features", str(REPO / "features")],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "simulated GPUs" in default.stdout and "real GPUs" not in default.stdout
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    real = subprocess.run([*FIREDRILL, "run", "--real-gpus", "--kubeconfig", str(kubeconfig), "--profile",
                           str(REPO / "examples" / "profile-volcano.yaml"), "--features", str(REPO / "features")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert real.returncode == 2, real.stdout + real.stderr
    assert "--real-gpus" in real.stderr and "real cluster" in real.stderr


def test_the_help_documents_real_gpus() -> None:
    for command in ("up", "run"):
        out = subprocess.run([*FIREDRILL, command, "--help"], capture_output=True, text=True, timeout=60)
        said = " ".join(out.stdout.replace("│", " ").split())
        assert "--real-gpus" in said and "simulat" in said, said
