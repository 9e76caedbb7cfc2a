"""The one-pod-at-a-time fast path shares the filter and score plugins with schedule()."""

from __future__ import annotations

from dataclasses import replace

from refplatform.core import (
    PLACER_PLUGINS,
    Bind,
    FailedScheduling,
    Placer,
    SchedulerConfig,
    Snapshot,
    TieBreak,
    schedule,
)
from refplatform.core.plugins.predicates import NodeResourcesFit

from .schedcase import node, pod

NODES = [node("a", gpus=2, cpu=8000), node("b", gpus=4), node("c", gpus=8, model="V100M32")]
CONFIG = SchedulerConfig(plugins=PLACER_PLUGINS, tie_break=TieBreak.FIRST)


def test_placer_and_schedule_agree_pod_by_pod() -> None:
    pods = [pod("p0", gpus=1), pod("p1", milli=300), pod("p2", milli=800), pod("p3", gpus=4, models=["V100M32"]),
            pod("p4", cpu=20000), pod("p5", gpus=8)]
    placer = Placer(NODES, CONFIG)
    bound = []
    for p in pods:
        fast = placer.place(p)
        # the full cycle over the same nodes with the pods placed so far must decide the same
        cycle = schedule(Snapshot(tuple(NODES), tuple(bound) + (p,)), SchedulerConfig(tie_break=TieBreak.FIRST))
        if isinstance(fast, Bind):
            assert cycle.binds and cycle.binds[0].node == fast.node and cycle.binds[0].gpu_indices == fast.gpu_indices
            bound.append(replace(p, node_name=fast.node, gpu_indices=fast.gpu_indices))
        else:
            assert isinstance(fast, FailedScheduling)
            assert cycle.failures[0].message == fast.message
    # p2 (800 milli) does not fit the 700 milli left on a's shared GPU; p5 (8 GPUs) fits nowhere
    assert [b.node_name for b in bound] == ["a", "a", "b", "c", "b"]


def test_placer_uses_the_registered_filters() -> None:
    placer = Placer(NODES, CONFIG)
    assert any(isinstance(f, NodeResourcesFit) for f in placer.session._filters)
    failure = placer.place(pod("huge", gpus=16))
    assert isinstance(failure, FailedScheduling)
    assert failure.message == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    assert placer.state.gpu_used_milli() == 0
