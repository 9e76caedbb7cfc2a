"""The ``leaky-mig`` defect (docs/DEFECTS.md) in the simulated GPUs' fault semantics; off on an honest node."""

from __future__ import annotations

import pytest

from refplatform.gpu.device import DeviceSet
from refplatform.gpu.partition import parse_partition_config

MEM = 143771
MIG1 = {"nvidia.com/mig-1g.18gb": 1}


def _node(leaky: bool, mode: str = "mig-mixed") -> tuple[DeviceSet, list[str]]:
    """Two H200s, each cut into 7 x 1g.18gb, every instance held by a tenant."""
    if mode == "mig-mixed":
        config = parse_partition_config({"mode": mode, "layout": [["1g.18gb"] * 7]})
    else:
        config = parse_partition_config({"mode": mode, "replicas": 7})
    devices = DeviceSet(config, "H200", 2, MEM, leaky=leaky)
    pods = [f"ns/t{i}" for i in range(14)]
    for p in pods:
        devices.allocate(p, MIG1 if mode == "mig-mixed" else {"nvidia.com/gpu": 1})
    return devices, pods


def test_an_honest_node_contains_an_xid_94_to_its_mig_instance() -> None:
    devices, _ = _node(leaky=False)
    assert DeviceSet(devices.config, "H200", 2, MEM).leaky is False  # honest unless asked
    victim = devices.holder[next(s for s in devices.slices if (s.gpu, s.instance) == (1, 3))]
    assert devices.apply_xid(1, 3, 94) == {victim}


def test_with_leaky_mig_a_contained_xid_fails_every_instance_of_that_gpu_and_no_other() -> None:
    devices, _ = _node(leaky=True)
    failed = devices.apply_xid(1, 3, 94)
    assert failed == devices.tenants(1) and len(failed) == 7
    assert not failed & devices.tenants(0)  # the other GPU is untouched


@pytest.mark.parametrize("leaky", [False, True])
def test_the_defect_changes_nothing_the_contract_already_fails_whole(leaky: bool) -> None:
    devices, _ = _node(leaky)
    assert devices.apply_xid(0, 2, 79) == devices.tenants(0)  # a reset fails the whole GPU either way
    shared, _ = _node(leaky, mode="time-slicing")
    assert shared.apply_xid(0, None, 94) == shared.tenants(0)
