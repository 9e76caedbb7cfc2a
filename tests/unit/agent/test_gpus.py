"""GPU inventory: the real no-GPU path of this machine, and the selection logic."""

from __future__ import annotations

import pynvml
import pytest

from refplatform.agent.errors import AgentError
from refplatform.agent.gpus import MODELS, lookup_model, probe_nvml, product_label, select_inventory


def test_probe_on_a_machine_without_gpus_says_no_gpu_and_why() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a machine with a driver
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    devices, note = probe_nvml()
    assert devices == []
    assert "NVML" in note


def test_without_gpus_the_requested_model_is_simulated() -> None:
    inv = select_inventory("H100-80GB", 8)
    assert inv.simulated and inv.count == 8
    assert inv.labels() == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",
    }


def test_probe_failures_count_as_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def init_fails() -> None:
        calls.append("init")
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", init_fails)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: calls.append("shutdown"))
    devices, note = probe_nvml()
    assert devices == [] and "Driver Not Loaded" in note
    assert calls == ["init"]  # nothing to shut down after a failed init


def test_probe_with_zero_devices_is_no_gpu_and_shuts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append("init"))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 0)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: calls.append("shutdown"))
    assert probe_nvml()[0] == []
    assert calls == ["init", "shutdown"]


def test_probe_reads_names_and_memory_and_always_shuts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    class Mem:
        total = 81559 * 1024 * 1024

    calls: list[str] = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append("init"))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 2)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: b"NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: Mem())
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: calls.append("shutdown"))
    assert probe_nvml()[0] == [("NVIDIA H100 80GB HBM3", 81559)] * 2
    assert calls == ["init", "shutdown"]

    def broken(h: int) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    calls.clear()
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", broken)
    assert probe_nvml()[0] == []
    assert calls == ["init", "shutdown"]


def test_real_gpus_win_over_the_requested_simulation() -> None:
    probe = lambda: ([("NVIDIA H200", 143771)] * 4, "NVML found 4 GPU(s)")  # noqa: E731
    inv = select_inventory("A100-40GB", 8, probe=probe)
    assert not inv.simulated
    assert (inv.count, inv.product, inv.memory_mib) == (4, "NVIDIA-H200", 143771)


def test_mixed_real_gpus_report_the_most_common_model() -> None:
    probe = lambda: ([("NVIDIA A100-SXM4-40GB", 40960), ("NVIDIA H100 80GB HBM3", 81559), ("NVIDIA H100 80GB HBM3", 81000)], "")  # noqa: E731
    inv = select_inventory("H100-80GB", 8, probe=probe)
    assert (inv.count, inv.product, inv.memory_mib) == (3, "NVIDIA-H100-80GB-HBM3", 81000)
    assert "mixed" in inv.note


def test_forced_simulation_never_probes() -> None:
    def probe() -> tuple[list[tuple[str, int]], str]:
        raise AssertionError("probed")

    inv = select_inventory("H200", 2, force_simulated=True, probe=probe)
    assert inv.simulated and (inv.count, inv.product, inv.memory_mib) == (2, "NVIDIA-H200", 143771)


@pytest.mark.parametrize(
    "name, product",
    [
        ("H100-80GB", "NVIDIA-H100-80GB-HBM3"),
        ("h100", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("A100-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("H200", "NVIDIA-H200"),
    ],
)
def test_lookup_model(name: str, product: str) -> None:
    assert lookup_model(name).product == product


def test_unknown_model_and_negative_count_are_errors() -> None:
    with pytest.raises(AgentError, match="unknown GPU model 'B200'.*H100-80GB"):
        select_inventory("B200", 8, force_simulated=True)
    with pytest.raises(AgentError, match=">= 0"):
        select_inventory("H100-80GB", -1, force_simulated=True)


def test_zero_gpus_means_no_gpu_labels() -> None:
    assert select_inventory("H100-80GB", 0, force_simulated=True).labels() == {}


def test_product_labels_as_gfd_writes_them() -> None:
    assert product_label("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert product_label("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert {m.product for m in MODELS} >= {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H200"}
