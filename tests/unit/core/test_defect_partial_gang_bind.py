"""The ``partial-gang-bind`` defect (docs/DEFECTS.md): a config switch of the pure core, off by default."""

from __future__ import annotations

from dataclasses import replace

from refplatform.core import PodGroupPhase, SchedulerConfig

from .schedcase import FIRST, Case, check, gang, node


def _case(config: SchedulerConfig, binds: dict[str, str]) -> Case:
    # Two free nodes of 8 GPUs, and a gang of 3 workers of 8 GPUs: it does not fit whole.
    return Case("gang of 3 on 2 nodes", [node("n0"), node("n1")], config=config, binds=binds).gangs(gang("a", 3))


def test_the_honest_core_binds_no_pod_of_a_gang_that_does_not_fit_whole() -> None:
    assert FIRST.partial_gang_bind is False and SchedulerConfig().partial_gang_bind is False
    decisions = check(_case(FIRST, {}))
    assert decisions.phases()["default/a"] is not PodGroupPhase.RUNNING
    assert "pod group is not ready" in decisions.failure_messages()["default/a-0"]


def test_with_the_defect_the_gang_is_bound_as_far_as_it_fits_and_holds_gpus_it_cannot_use() -> None:
    decisions = check(_case(replace(FIRST, partial_gang_bind=True), {"a-0": "*", "a-1": "*"}))
    assert {b.node for b in decisions.binds} == {"n0", "n1"}
    assert sum(len(b.gpu_indices) for b in decisions.binds) == 16  # 16 GPUs held by a gang that cannot run
    assert "default/a-2" in decisions.failure_messages()


def test_with_the_defect_a_gang_that_fits_is_still_bound_whole() -> None:
    check(Case("fits", [node("n0"), node("n1")], config=replace(FIRST, partial_gang_bind=True),
               binds={"a-0": "*", "a-1": "*"}).gangs(gang("a", 2)))
