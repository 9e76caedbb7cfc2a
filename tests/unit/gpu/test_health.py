"""Whole-GPU health as the NVIDIA device plugin judges it (refplatform.gpu.health): application Xids leave the GPU
in service, every other Xid takes it out for as long as its injection stands."""

from __future__ import annotations

import pytest

from refplatform.gpu.health import APPLICATION_XIDS, GpuHealth, format_unhealthy, marks_unhealthy, parse_unhealthy


@pytest.mark.parametrize("xid", sorted(APPLICATION_XIDS))
def test_an_application_xid_leaves_the_gpu_in_service(xid: int) -> None:
    assert not marks_unhealthy(xid)
    assert GpuHealth.of([(2, None, xid)], 8).unhealthy == {}


@pytest.mark.parametrize("xid", [48, 63, 64, 74, 79, 92, 94, 95])
def test_a_gpu_xid_takes_the_gpu_out_of_service(xid: int) -> None:
    health = GpuHealth.of([(2, None, xid)], 8)
    assert health.unhealthy == {2: xid} and health.allocatable(8) == 7


def test_the_first_xid_of_a_gpu_is_kept_and_only_whole_gpus_of_the_node_count() -> None:
    health = GpuHealth.of([(3, None, 79), (3, None, 48), (1, 0, 94), (9, None, 79), (-1, None, 79), (5, None, 13)], 8)
    assert health.unhealthy == {3: 79}  # a MIG slice's Xid is the partition drill's; 9 and -1 are not GPUs here
    assert health.allocatable(8) == 7


def test_the_annotation_round_trips_and_skips_what_is_not_an_index() -> None:
    assert format_unhealthy([5, 0, 5]) == "0,5"
    assert parse_unhealthy("0,5") == (0, 5)
    assert parse_unhealthy(" 3 , x, -1,,7") == (3, 7)
    assert parse_unhealthy(None) == () and parse_unhealthy("") == ()
