"""Slices, Allocate and the promise table of docs/PARTITIONING.md, cell by cell."""

from __future__ import annotations

import pytest

from refplatform.gpu.device import AllocationError, DeviceSet, xid_message
from refplatform.gpu.partition import parse_partition_config

MEM = 143771
MIG1 = {"nvidia.com/mig-1g.18gb": 1}
GPU1 = {"nvidia.com/gpu": 1}


def mig(enforce: bool = True) -> DeviceSet:
    c = parse_partition_config({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7], "enforce_isolation": enforce})
    return DeviceSet(c, "H200", 2, MEM)


def shared(mode: str, enforce: bool = True) -> DeviceSet:
    c = parse_partition_config({"mode": mode, "replicas": 2, "vgpus_per_gpu": 2, "enforce_isolation": enforce})
    return DeviceSet(c, "H200", 2, MEM)


def fill(d: DeviceSet, n: int, req: dict[str, int]) -> list[str]:
    pods = [f"ns/p{i}" for i in range(n)]
    for p in pods:
        d.allocate(p, req)
    return pods


def test_mig_slices_and_annotation() -> None:
    d = mig()
    got = [d.allocate(f"ns/p{i}", MIG1) for i in range(14)]
    assert [s.annotation for s in got if s] == [f"{g}/{i}" for g in range(2) for i in range(7)]
    with pytest.raises(AllocationError, match="no free nvidia.com/mig-1g.18gb"):
        d.allocate("ns/extra", MIG1)
    assert d.allocate("ns/p0", MIG1) is got[0]  # idempotent
    assert d.allocate("ns/cpu", {"cpu": 1}) is None
    d.release("ns/p3")
    assert d.allocate("ns/new", MIG1).annotation == "0/3"  # type: ignore[union-attr]


def test_prefer_keeps_the_previous_slice() -> None:
    d = mig()
    assert d.allocate("ns/a", MIG1, prefer="1/5").annotation == "1/5"  # type: ignore[union-attr]


def test_shared_modes_spread_and_annotate_without_instance() -> None:
    d = shared("time-slicing")
    assert [d.allocate(p, GPU1).annotation for p in ["a/0", "a/1", "a/2", "a/3"]] == ["0/-", "1/-", "0/-", "1/-"]  # type: ignore[union-attr]
    with pytest.raises(AllocationError):
        d.allocate("a/4", GPU1)


def test_hami_gpumem_request_is_the_share() -> None:
    d = shared("hami")
    d.allocate("a/0", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})
    assert d.share["a/0"] == 1000
    assert d.check_memory({"a/0": 1001}) == {"a/0": "used 1001 MiB of its 1000 MiB share on GPU 0/-"}


# -- the promise table: (memory overuse, Xid 94 on its slice, Xid 79 on its GPU) ----------------------------

def test_mig_memory_only_it_fails() -> None:
    d = mig()
    pods = fill(d, 7, MIG1)
    assert set(d.check_memory({pods[3]: 18 * 1024 + 1, pods[4]: 18 * 1024})) == {pods[3]}


def test_mig_xid94_only_it() -> None:
    d = mig()
    pods = fill(d, 9, MIG1)
    assert d.apply_xid(0, 3, 94) == {pods[3]}
    assert d.apply_xid(0, None, 94) == set(pods[:7])  # not attributable: the whole GPU


@pytest.mark.parametrize("xid", [79, 95, 48])
def test_mig_reset_class_every_tenant_on_that_gpu(xid: int) -> None:
    d = mig()
    pods = fill(d, 9, MIG1)
    assert d.apply_xid(0, 3, xid) == set(pods[:7])
    assert d.apply_xid(1, None, xid) == set(pods[7:])


@pytest.mark.parametrize("mode", ["time-slicing", "hami"])
def test_shared_modes_xid94_and_79_every_tenant_on_the_gpu(mode: str) -> None:
    d = shared(mode)
    pods = fill(d, 4, GPU1)  # 0,2 on GPU 0; 1,3 on GPU 1
    assert d.apply_xid(0, None, 94) == {pods[0], pods[2]}
    assert d.apply_xid(0, 3, 94) == {pods[0], pods[2]}
    assert d.apply_xid(1, None, 79) == {pods[1], pods[3]}


def test_time_slicing_memory_every_tenant_on_the_gpu() -> None:
    d = shared("time-slicing")
    pods = fill(d, 4, GPU1)
    failed = d.check_memory({pods[0]: MEM // 2 + 1})
    assert set(failed) == {pods[0], pods[2]}
    assert "shared" in failed[pods[2]]
    assert d.check_memory({pods[0]: MEM // 2, pods[2]: MEM // 2}) == {}


def test_hami_memory_only_it_fails() -> None:
    d = shared("hami")
    pods = fill(d, 4, GPU1)
    assert set(d.check_memory({pods[0]: MEM // 2 + 1})) == {pods[0]}


@pytest.mark.parametrize("make", [lambda: mig(False), lambda: shared("hami", False), lambda: shared("time-slicing", False)])
def test_without_isolation_every_mode_is_time_slicing(make) -> None:  # type: ignore[no-untyped-def]
    d = make()
    req = MIG1 if d.config.mig else GPU1
    pods = fill(d, 4, req)
    gpu0 = {p for p in pods if d.by_pod[p].gpu == 0}
    victim = sorted(gpu0)[-1]
    assert d.apply_xid(0, d.by_pod[victim].instance, 94) == gpu0
    assert set(d.check_memory({victim: d.share[victim] + 1})) == gpu0
    assert d.apply_xid(0, None, 79) == gpu0


def test_xid_message_names_gpu_instance_and_xid() -> None:
    assert xid_message(0, 3, 94) == "Xid 94 (contained ECC error) on GPU 0 instance 3"
    assert xid_message(1, None, 79) == "Xid 79 (GPU has fallen off the bus) on GPU 1"
