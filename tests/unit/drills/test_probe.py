"""The isolation probe, run here exactly as a tenant pod runs it (``python3 -c <source>``).

This machine has no GPU.  Without a driver the probe must say so; with a stand-in for the driver's two
user-space libraries (``fakegpu/fakegpu.c``, built here as libnvidia-ml.so.1 and libcuda.so.1, found through
the ordinary loader path) it must allocate, hold, touch and report, fail on a GPU fault, and, several probes
sharing one "GPU", show who fails when one tenant takes more memory than its share.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from drills.workloads.probe import (
    DRIVER_CAPABILITIES, ProbeEvent, ProbeReport, parse_probe_line, parse_probe_lines, parse_probe_output,
    probe_pod, program_source, tenant_args,
)
from refplatform.cluster import wait_until
from tests.unit.drills import fakegpu



@pytest.fixture(scope="module")
def driver_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libnvidia-ml.so.1 and libcuda.so.1 stand-ins, built from fakegpu.c."""
    if fakegpu.compiler() is None:
        pytest.skip("no C compiler (cc/gcc) to build the driver stand-in")
    return fakegpu.build(tmp_path_factory.mktemp("driver"))


def gpu_env(driver_dir: Path, pool: Path, capacity: int = 1024, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env.update(LD_LIBRARY_PATH=str(driver_dir), FAKE_GPU_POOL=str(pool), FAKE_GPU_CAPACITY_MIB=str(capacity),
               **extra)
    return env


def no_driver_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FAKE_") and k != "LD_LIBRARY_PATH"}


def run_probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-c", program_source(), *args], capture_output=True, text=True,
                          timeout=60, env=env if env is not None else no_driver_env())


# ----------------------------------------------------------------------------------------- report mode


def test_without_a_gpu_the_probe_reports_why_and_exits_3() -> None:
    out = run_probe("64")
    assert out.returncode == 3, out.stderr
    result = parse_probe_output(out.stdout)
    assert result is not None and not result.ok and result.devices == () and result.allocator is None
    assert result.error is not None and "NVML unavailable" in result.error and "libcuda.so.1" in result.error


def test_the_program_stands_alone() -> None:
    """Run isolated (-I: no PYTHONPATH, no site): it needs nothing of the project and no package."""
    out = run_probe("report")
    assert parse_probe_output(out.stdout) is not None, out.stderr


def test_with_a_driver_it_reads_the_slice_and_allocates(driver_dir: Path, tmp_path: Path) -> None:
    out = run_probe("report", "64", env=gpu_env(driver_dir, tmp_path / "pool", FAKE_GPU_MINOR="3",
                                                FAKE_GPU_MIG_INSTANCE="5"))
    assert out.returncode == 0, out.stdout + out.stderr
    (report,) = parse_probe_lines(out.stdout)
    assert report.event is ProbeEvent.REPORT and report.ok and report.error is None
    assert report.allocator == "cuda-driver" and report.allocated_mib == 64
    assert report.gpu == 3 and report.gpu_instance == 5
    assert report.devices[0]["name"] == "NVIDIA H200" and report.devices[0]["memory_total_mib"] == 1024
    held = [int(f.read_text()) for f in (tmp_path / "pool").iterdir() if f.name != "lock"]
    assert held == [0], "the allocation was freed"


@pytest.mark.parametrize(("extra", "args", "says"), [
    ({}, ("report", "2048"), "could not allocate 2048 MiB: cuMemAlloc(2048 MiB): CUDA_ERROR_OUT_OF_MEMORY (2)"),
    ({"FAKE_NVML_FAIL": "1"}, ("report",), "NVML unavailable: nvmlInit failed: Driver Not Loaded (9)"),
])
def test_report_mode_names_what_failed(driver_dir: Path, tmp_path: Path, extra: dict[str, str],
                                       args: tuple[str, ...], says: str) -> None:
    out = run_probe(*args, env=gpu_env(driver_dir, tmp_path / "pool", **extra))
    assert out.returncode == 3
    result = parse_probe_output(out.stdout)
    assert result is not None and not result.ok and result.error is not None and says in result.error, result


# ----------------------------------------------------------------------------------------- tenant mode


class Tenant:
    """A probe tenant process this test started, with its output collected."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.popen = subprocess.Popen([sys.executable, "-I", "-c", program_source(), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        import threading

        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line.rstrip("\n"))

    def reports(self) -> list[ProbeReport]:
        return parse_probe_lines("\n".join(self.lines))

    def wait_for(self, event: ProbeEvent, timeout: float = 30) -> ProbeReport:
        wait_until(lambda: any(r.event is event for r in self.reports()), timeout,
                   f"a {event.value} line (output so far: {self.lines})")
        return next(r for r in self.reports() if r.event is event)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
        self.popen.wait(timeout=10)
        if self.popen.stdout is not None:
            self.popen.stdout.close()


@pytest.fixture
def tenants() -> Iterator[list[Tenant]]:
    started: list[Tenant] = []
    yield started
    for t in started:
        t.stop()


def test_without_a_driver_a_tenant_says_so_and_idles(tenants: list[Tenant]) -> None:
    t = Tenant(tenant_args(), no_driver_env())
    tenants.append(t)
    ready = t.wait_for(ProbeEvent.READY)
    assert not ready.holds_gpu_memory and ready.allocator is None
    assert ready.error is not None and "libcuda.so.1 cannot be loaded" in ready.error
    time.sleep(0.5)
    assert t.popen.poll() is None, "it idles (Running) rather than fail"


def test_a_tenant_holds_memory_and_fails_on_a_gpu_fault(driver_dir: Path, tmp_path: Path,
                                                        tenants: list[Tenant]) -> None:
    fault = tmp_path / "xid"
    t = Tenant(tenant_args(hold_mib=128, scratch_mib=16, period=0.05, share_mib=256, linger=0.2),
               gpu_env(driver_dir, tmp_path / "pool", FAKE_GPU_FAULT_FILE=str(fault), FAKE_GPU_MINOR="1"))
    tenants.append(t)
    ready = t.wait_for(ProbeEvent.READY)
    assert ready.holds_gpu_memory and ready.allocated_mib == 128 and ready.share_mib == 256 and ready.gpu == 1
    time.sleep(0.3)
    assert t.popen.poll() is None
    fault.touch()
    failed = t.wait_for(ProbeEvent.FAILED)
    assert failed.reason == "CudaError" and failed.error is not None
    assert "CUDA_ERROR_ECC_UNCORRECTABLE (214)" in failed.error
    assert t.popen.wait(timeout=10) == 1


@dataclass(frozen=True)
class Sharing:
    name: str
    shared_pool: bool
    """All tenants draw on one memory account (one GPU's memory), or each on its own (a MIG instance)."""
    process_cap: int
    """A per-process cap (HAMi's software cap); 0: none."""
    neighbours_fail: bool


SHARING = [
    Sharing("time-slicing: shared memory, every tenant on the GPU fails", True, 0, True),
    Sharing("MIG: each instance its own memory, only the victim fails", False, 0, False),
    Sharing("HAMi: shared memory under a software cap, only the victim fails", True, 256, False),
]


@pytest.mark.parametrize("sharing", SHARING, ids=[s.name.split(":")[0] for s in SHARING])
def test_a_greedy_victim_shows_who_shares_its_memory(driver_dir: Path, tmp_path: Path, tenants: list[Tenant],
                                                     sharing: Sharing) -> None:
    """4 tenants of a 1024 MiB GPU, a 256 MiB share each; one takes all it can get."""
    def env(i: int) -> dict[str, str]:
        pool = tmp_path / ("pool" if sharing.shared_pool else f"pool-{i}")
        capacity = 1024 if sharing.shared_pool else 256
        extra = {"FAKE_GPU_PROCESS_CAP_MIB": str(sharing.process_cap)} if sharing.process_cap else {}
        return gpu_env(driver_dir, pool, capacity, **extra)

    neighbours = [Tenant(tenant_args(hold_mib=64, scratch_mib=16, period=0.05, share_mib=256, linger=1.5), env(i))
                  for i in range(3)]
    tenants.extend(neighbours)
    for t in neighbours:
        assert t.wait_for(ProbeEvent.READY).holds_gpu_memory
    victim = Tenant(tenant_args(hold_mib=64, greedy_mib=1024, share_mib=256, linger=1.5, chunk_mib=16), env(3))
    tenants.append(victim)
    failed = victim.wait_for(ProbeEvent.FAILED)
    assert failed.reason == "OutOfMemory" and failed.share_mib == 256 and failed.wanted_mib == 1024
    if sharing.shared_pool and not sharing.process_cap:  # all that was free, less a chunk and working sets in flight
        assert 1024 - 3 * 64 - 16 - 3 * 16 <= failed.allocated_mib <= 1024 - 3 * 64, failed
    else:
        assert failed.allocated_mib == 256, failed
    assert victim.popen.wait(timeout=10) == 1
    if sharing.neighbours_fail:  # each neighbour's next allocation fails; it exits after its own linger
        outcomes = {i: _exit_code(t, 15.0) for i, t in enumerate(neighbours)}
        assert outcomes == {0: 1, 1: 1, 2: 1}, [t.lines for t in neighbours]
        assert all(t.wait_for(ProbeEvent.FAILED).reason == "OutOfMemory" for t in neighbours)
    else:
        time.sleep(2.0)  # nothing to wait on: they must still run past the victim's linger
        outcomes = {i: t.popen.poll() for i, t in enumerate(neighbours)}
        assert outcomes == {0: None, 1: None, 2: None}, [t.lines for t in neighbours]


def _exit_code(t: Tenant, timeout: float) -> int | None:
    try:
        return t.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


# ------------------------------------------------------------------------------------- the harness's side


@pytest.mark.parametrize(("line", "event"), [
    ('FIREDRILL-PROBE {"event": "ready", "ok": true, "allocator": "cuda-driver", "allocated_mib": 64}',
     ProbeEvent.READY),
    ('FIREDRILL-PROBE {"event": "failed", "reason": "OutOfMemory"}', ProbeEvent.FAILED),
    ('FIREDRILL-PROBE {"ok": false, "devices": []}', ProbeEvent.REPORT),  # an older probe's one report
    ('FIREDRILL-PROBE {"event": "rebooted"}', None),
    ('FIREDRILL-PROBE {"event": "ready", "ok": tr', None),  # torn by a dying container
    ("FIREDRILL-PROBE [1, 2]", None),
    ('{"event": "ready"}', None),
    ("Traceback (most recent call last):", None),
])
def test_probe_lines(line: str, event: ProbeEvent | None) -> None:
    report = parse_probe_line(line)
    assert (report.event if report else None) is event


def test_a_log_without_a_report_means_the_probe_never_ran() -> None:
    assert parse_probe_output("starting\nkilled\n") is None
    assert parse_probe_lines("") == []


def test_a_tenant_without_memory_cannot_be_reached_by_a_fault() -> None:
    report = parse_probe_line('FIREDRILL-PROBE {"event": "ready", "ok": false, "allocator": null, '
                              '"error": "no libcuda"}')
    assert report is not None and not report.holds_gpu_memory and report.gpu is None and report.gpu_instance is None


def test_the_probe_pod_holds_one_slice_and_runs_the_program() -> None:
    manifest = probe_pod("probe-0", "team-a", "registry.example.com/firedrill-canary:0.1.0",
                         "nvidia.com/mig-1g.18gb", args=tenant_args(greedy_mib=143771, share_mib=18432),
                         labels={"firedrill.dev/drill-run": "fd1"}, node="gpu-7",
                         limits={"nvidia.com/gpumem": "4096"})
    pod = client.ApiClient()._ApiClient__deserialize(manifest, "V1Pod")  # type: ignore[attr-defined]
    container = pod.spec.containers[0]
    assert container.resources.limits == {"nvidia.com/mig-1g.18gb": "1", "nvidia.com/gpumem": "4096"}
    assert container.resources.requests == container.resources.limits
    assert container.command[:2] == ["python3", "-c"] and "cuMemAlloc_v2" in container.command[2]
    assert container.command[3:] == ["tenant", "--hold", "256", "--scratch", "64", "--period", "0.5", "--share",
                                     "18432", "--linger", "5", "--greedy", "143771", "--chunk", "256"]
    assert {e.name: e.value for e in container.env}["NVIDIA_DRIVER_CAPABILITIES"] == DRIVER_CAPABILITIES
    assert pod.spec.node_selector == {"kubernetes.io/hostname": "gpu-7"} and pod.spec.restart_policy == "Never"
    once = probe_pod("probe-1", "team-a", "img", "nvidia.com/gpu", 512)
    assert once["spec"]["containers"][0]["command"][3:] == ["report", "512"]
