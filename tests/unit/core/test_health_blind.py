"""The ``gpu-health-blind`` defect (docs/DEFECTS.md): a config switch of the pure core, off by default."""

from __future__ import annotations

from dataclasses import replace

from refplatform.core import Resources, SchedulerConfig

from .schedcase import FIRST, Case, check, node, pod


def _case(config: SchedulerConfig, indices: tuple[int, ...]) -> Case:
    # One node of 8 GPUs whose GPU 0 failed: 7 allocatable, capacity 8, GPU 0 withdrawn; a pod of 4 GPUs arrives.
    sick = replace(node("n0"), allocatable=replace(node("n0").allocatable, gpus=7), capacity=Resources(gpus=8),
                   withdrawn_gpus=(0,))
    return Case("a pod on a node with a failed GPU", [sick], [pod("p", gpus=4)], config=config,
                binds={"p": "n0"}, gpu_indices={"p": indices})


def test_the_honest_core_never_binds_a_withdrawn_gpu() -> None:
    assert SchedulerConfig().gpu_health_blind is False
    check(_case(FIRST, (1, 2, 3, 4)))


def test_with_the_defect_the_failed_gpu_is_bound_again() -> None:
    check(_case(replace(FIRST, gpu_health_blind=True), (0, 1, 2, 3)))
