"""Health on shared GPUs (issue 49; docs/PARTITIONING.md, "A faulted GPU leaves service whole"): an Xid that takes
a partitioned GPU out takes every MIG instance, replica and vGPU on it out of allocatable and fails every tenant
on it; the ``shared-health-lost`` defect takes out (and fails) only the one slice the Xid was seen on."""

from __future__ import annotations

import pytest

from refplatform.gpu.device import (AllocationError, DeviceSet, contained, saw_xid, slices_out, takes_gpu_out,
                                    withdrawn_resources)
from refplatform.gpu.partition import PartitionConfig, parse_partition_config

MEM = 143771
MIG1 = {"nvidia.com/mig-1g.18gb": 1}
GPU1 = {"nvidia.com/gpu": 1}
MIXED = {"mode": "mig-mixed", "layout": [["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]]}


def config(**data: object) -> PartitionConfig:
    return parse_partition_config(data)


def node(data: dict[str, object], gpus: int = 2, lost: bool = False) -> DeviceSet:
    return DeviceSet(parse_partition_config(data), "H200", gpus, MEM, shared_health_lost=lost)


def filled(data: dict[str, object], gpus: int = 2, lost: bool = False) -> DeviceSet:
    """Every slice of the node held by a tenant, in slice order."""
    devices = node(data, gpus, lost)
    for i, s in enumerate(list(devices.slices)):
        devices.allocate(f"ns/t{i}", {s.resource: 1})
    return devices


@pytest.mark.parametrize(("data", "instance", "xid", "out"), [
    ({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]}, None, 79, True),  # the GPU fell off the bus
    ({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]}, 3, 79, True),  # a reset named on an instance: still the GPU
    ({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]}, 3, 94, False),  # contained to its instance
    ({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7], "enforce_isolation": False}, 3, 94, True),
    ({"mode": "mig-single", "layout": [["1g.18gb"] * 7]}, 2, 48, True),
    ({"mode": "time-slicing", "replicas": 4}, None, 94, True),  # time-slicing contains nothing
    ({"mode": "hami", "vgpus_per_gpu": 4}, None, 95, True),
    ({"mode": "time-slicing", "replicas": 4}, None, 13, False),  # an application's error, not the GPU's
    ({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]}, None, 43, False),
])
def test_which_xids_take_a_partitioned_gpu_out_whole(data: dict[str, object], instance: int | None, xid: int,
                                                      out: bool) -> None:
    c = parse_partition_config(data)
    assert takes_gpu_out(c, instance, xid) is out
    assert contained(c, instance, xid) is (instance is not None and xid == 94 and c.enforce_isolation)


def test_every_slice_of_a_gpu_out_leaves_allocatable_and_no_slice_of_another() -> None:
    devices = node({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]})
    out = slices_out(devices.slices, [1])
    assert sorted(s.annotation for s in out) == [f"1/{i}" for i in range(7)]
    assert devices.withdrawn(out) == {"nvidia.com/mig-1g.18gb": 7}
    assert devices.out_of_service([1], {1: devices.slices[9]}) == out  # honest: where the Xid was seen is no matter


@pytest.mark.parametrize(("data", "withdrawn"), [
    (MIXED, {"nvidia.com/mig-3g.71gb": 1, "nvidia.com/mig-2g.35gb": 1, "nvidia.com/mig-1g.18gb": 2}),
    ({"mode": "mig-single", "layout": [["1g.18gb"] * 7]}, {"nvidia.com/gpu": 7}),
    ({"mode": "time-slicing", "replicas": 4}, {"nvidia.com/gpu": 4}),
    ({"mode": "time-slicing", "replicas": 4, "rename_by_default": True}, {"nvidia.com/gpu.shared": 4}),
    ({"mode": "hami", "vgpus_per_gpu": 4}, {"nvidia.com/gpu": 4, "nvidia.com/gpumem": MEM, "nvidia.com/gpucores": 100}),
])
def test_what_a_gpu_out_takes_off_each_advertised_resource(data: dict[str, object], withdrawn: dict[str, int]) -> None:
    devices = node(data)
    assert devices.withdrawn(devices.out_of_service([0])) == withdrawn


def test_no_gpu_out_withdraws_nothing() -> None:
    devices = node({"mode": "hami", "vgpus_per_gpu": 4})
    assert devices.out_of_service([]) == frozenset() and devices.withdrawn(frozenset()) == {}


def test_a_slice_out_of_service_is_never_handed_out() -> None:
    devices = node({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]})
    out = devices.out_of_service([0])
    got = [devices.allocate(f"ns/p{i}", MIG1, unhealthy=out) for i in range(7)]
    assert {s.gpu for s in got if s} == {1}  # GPU 0's instances come first, but are out
    with pytest.raises(AllocationError, match=r"7 out of service, the others assigned"):
        devices.allocate("ns/extra", MIG1, unhealthy=out)
    assert devices.allocate("ns/extra", MIG1) is not None  # once back, GPU 0 serves again


def test_a_reset_fails_every_tenant_on_the_gpu_and_none_elsewhere() -> None:
    devices = filled({"mode": "time-slicing", "replicas": 4})
    assert devices.apply_xid(0, None, 79) == devices.tenants(0) and len(devices.tenants(0)) == 4
    assert not devices.apply_xid(0, None, 79) & devices.tenants(1)


def test_the_gpus_standing_entries_take_out_and_where_each_was_seen() -> None:
    devices = node({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]})
    entries = [(0, 2, 94), (1, 5, 79), (1, None, 48), (0, None, 13), (7, None, 79)]
    assert devices.failing(entries) == {1: 79}  # contained, application and unknown GPUs take nothing out
    assert {g: s.annotation for g, s in devices.saw(entries).items()} == {1: "1/5"}
    assert saw_xid(devices.slices, 0, None).annotation == "0/0"  # named by no instance: the GPU's first
    assert saw_xid(devices.slices, 9, None) is None


@pytest.mark.parametrize("data", [{"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]},
                                  {"mode": "time-slicing", "replicas": 4}, MIXED])
def test_shared_health_lost_takes_out_and_fails_only_the_slice_the_xid_was_seen_on(data: dict[str, object]) -> None:
    devices = filled(data, lost=True)
    assert node(data).shared_health_lost is False  # honest unless asked
    instance = 1 if devices.config.mig else None
    seen = devices.saw([(0, instance, 79)])
    out = devices.out_of_service([0], seen)
    assert [s.annotation for s in out] == [f"0/{instance if instance is not None else '-'}"]
    assert sum(devices.withdrawn(out).values()) == 1
    assert devices.apply_xid(0, instance, 79) == {devices.holder[next(iter(out))]}
    assert len(devices.tenants(0)) > 1  # the others run on, on a dead GPU


def test_shared_health_lost_changes_nothing_the_contract_contains_or_a_whole_gpu() -> None:
    devices = filled({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]}, lost=True)
    victim = devices.holder[next(s for s in devices.slices if (s.gpu, s.instance) == (1, 3))]
    assert devices.apply_xid(1, 3, 94) == {victim}
    whole = node({"mode": "none"}, lost=True)
    assert len(whole.out_of_service([0])) == 1  # a whole GPU is its own only slice
    assert withdrawn_resources(config(mode="none"), whole.slices, whole.out_of_service([0]), MEM) == {
        "nvidia.com/gpu": 1}
