"""The real-cluster isolation probe, run here exactly as a probe pod runs it (this machine has no GPU)."""

from __future__ import annotations

import subprocess
import sys

from kubernetes import client

from drills.probe import parse_probe_output, probe_pod, program_source


def run_probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", program_source(), *args], capture_output=True, text=True,
                          timeout=60)


def test_without_a_gpu_the_probe_reports_why_and_exits_3() -> None:
    out = run_probe("64")
    assert out.returncode == 3, out.stderr
    result = parse_probe_output(out.stdout)
    assert result is not None and not result.ok and result.devices == ()
    assert result.error is not None and "NVML" in result.error


def test_a_log_without_a_report_means_the_probe_never_ran() -> None:
    assert parse_probe_output("starting\nkilled\n") is None


def test_the_probe_pod_holds_one_slice_and_runs_the_program() -> None:
    manifest = probe_pod("probe-0", "team-a", "nvcr.io/nvidia/pytorch:25.01-py3", "nvidia.com/mig-1g.18gb", 512)
    pod = client.ApiClient()._ApiClient__deserialize(manifest, "V1Pod")  # type: ignore[attr-defined]
    container = pod.spec.containers[0]
    assert container.resources.limits == {"nvidia.com/mig-1g.18gb": "1"}
    assert container.command[:2] == ["python3", "-c"] and container.command[3] == "512"
    assert "nvmlInit" in container.command[2]
