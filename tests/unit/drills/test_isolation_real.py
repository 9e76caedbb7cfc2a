"""The pure parts of the isolation drill's real-cluster path: what a tenant's probe report allows, in whose words
a tenant failed, and the GPU's memory read from the node (the memory probe's victim allocates up to it).

The path itself runs against the reference platform in tests/integration/test_isolation_cluster.py."""

from __future__ import annotations

from typing import Any

import pytest

from drills.kinds.isolation.drill import discover_layout, failure_reason, not_holding
from drills.workloads.probe import parse_probe_line

IMAGE = "registry.example.com/firedrill-canary:0.1.0"


def report(**fields: Any) -> Any:
    import json

    return parse_probe_line("FIREDRILL-PROBE " + json.dumps(fields))


HOLDING = report(event="ready", ok=True, allocator="cuda-driver", allocated_mib=256,
                 devices=[{"minor": 2, "mig_devices": [{"gpu_instance": 9}]}])


@pytest.mark.parametrize(("tenants", "says"), [
    ([("tenant-1", "p1", HOLDING), ("tenant-2", "p2", HOLDING)], None),
    ([("tenant-1", "p1", HOLDING), ("tenant-2", "p2", None)],
     f"tenant-2 (p2) wrote no probe report to its log (does {IMAGE} have python3?)"),
    ([("tenant-1", "p1", report(event="ready", ok=False, allocator=None,
                                error="the CUDA driver library libcuda.so.1 cannot be loaded"))],
     "tenant-1 holds no GPU memory: the CUDA driver library libcuda.so.1 cannot be loaded"),
    ([("tenant-1", "p1", report(event="ready", ok=True, allocator="cuda-driver", allocated_mib=0))],
     "tenant-1 holds no GPU memory: no allocator"),
    ([("tenant-3", "p3", report(event="failed", reason="CudaError",
                                error="cuMemAlloc(256 MiB): CUDA_ERROR_ECC_UNCORRECTABLE (214)"))],
     "tenant-3 failed as it started (CudaError: cuMemAlloc(256 MiB): CUDA_ERROR_ECC_UNCORRECTABLE (214); does "
     "the GPU still carry an earlier fault?)"),
])
def test_a_probe_needs_every_tenant_to_hold_gpu_memory(tenants: list[Any], says: str | None) -> None:
    why = not_holding(tenants, IMAGE)
    if says is None:
        assert why == ""
    else:
        assert says in why and "libcuda.so.1 and libnvidia-ml.so.1" in why and "compute,utility" in why, why


def test_a_holding_tenant_names_its_gpu_and_mig_instance() -> None:
    assert HOLDING.holds_gpu_memory and HOLDING.gpu == 2 and HOLDING.gpu_instance == 9


@pytest.mark.parametrize(("line", "reason"), [
    (dict(event="failed", reason="OutOfMemory", error="cuMemAlloc(256 MiB): CUDA_ERROR_OUT_OF_MEMORY (2)",
          allocated_mib=18176, share_mib=18432),
     "OutOfMemory: cuMemAlloc(256 MiB): CUDA_ERROR_OUT_OF_MEMORY (2) (it held 18176 MiB; its share is 18432 MiB)"),
    (dict(event="failed", reason="CudaError", error="cuCtxSynchronize: CUDA_ERROR_ECC_UNCORRECTABLE (214)",
          allocated_mib=256, share_mib=18432),
     "CudaError: cuCtxSynchronize: CUDA_ERROR_ECC_UNCORRECTABLE (214)"),
    (dict(event="failed"), "failed: no detail"),
])
def test_a_tenant_fails_in_its_own_words(line: dict[str, Any], reason: str) -> None:
    assert failure_reason(report(**line)) == reason


@pytest.mark.parametrize(("labels", "memory"), [
    ({"nvidia.com/gpu.memory": "143771"}, 143771),
    ({}, 0),
    ({"nvidia.com/gpu.memory": "lots"}, 0),
])
def test_the_layout_carries_one_gpus_memory(labels: dict[str, str], memory: int) -> None:
    node = {"metadata": {"name": "n", "labels": {"firedrill.dev/partition-mode": "time-slicing",
                                                "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.count": "1",
                                                **labels}},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}}}
    layout = discover_layout(node)
    assert layout.gpu_memory_mib == memory and layout.to_dict()["gpu_memory_mib"] == memory
