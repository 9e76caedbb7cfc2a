"""FGD fragmentation: the vectorised model against a plain reference, and typical pods."""

from __future__ import annotations

import numpy as np
import pytest

from refplatform.core import (
    ClusterState,
    ConfigError,
    FragmentationModel,
    FragmentationTracker,
    PodShape,
    TypicalPods,
)

from .schedcase import node

TYPICAL = TypicalPods(
    (PodShape(3000, 810, 1), PodShape(11000, 1000, 1), PodShape(12000, 0, 0), PodShape(8000, 470, 1),
     PodShape(32000, 1000, 4), PodShape(4000, 320, 1, ("V100M32",)), PodShape(60000, 1000, 8)),
    (0.25, 0.25, 0.1, 0.15, 0.1, 0.1, 0.05))


def reference(cpu: int, free: list[int], model: str, typical: TypicalPods) -> float:
    """Fragmentation straight from the definition (FGD, ATC'23)."""
    idle = sum(free)
    total = 0.0
    for shape, p in zip(typical.shapes, typical.weights):
        fits = (shape.gpu_milli > 0 and (not shape.gpu_models or model in shape.gpu_models)
                and cpu >= shape.cpu_milli and sum(f >= shape.gpu_milli for f in free) >= shape.gpus)
        total += p * (sum(f for f in free if f < shape.gpu_milli) if fits else idle)
    return total


def random_state(seed: int) -> ClusterState:
    rng = np.random.default_rng(seed)
    nodes = [node(f"n{i}", gpus=int(rng.choice([1, 2, 4, 8])), cpu=int(rng.choice([16000, 64000, 96000])),
                  model=str(rng.choice(["V100M32", "T4", "G2"]))) for i in range(40)]
    state = ClusterState(nodes)
    for i in range(state.size):
        for g in range(state.gpu_count[i]):
            used = int(rng.choice([0, 0, 1000, 500, 190, 530, 810]))
            if used:
                state.allocate(i, 0, 0, (g,), used)
        state.allocate(i, int(rng.integers(0, state.cpu_alloc[i])), 0, (), 0)
    return state


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_vectorised_fragmentation_matches_the_definition(seed: int) -> None:
    state = random_state(seed)
    tracker = FragmentationTracker(FragmentationModel(TYPICAL, state.model_names), state)
    tracker.refresh()
    for i in range(state.size):
        free = [int(x) for x in state.gpu_free[i, : state.gpu_count[i]]]
        expected = reference(int(state.cpu_free[i]), free, state.model_names[state.model_id[i]], TYPICAL)
        assert tracker.frag[i] == pytest.approx(expected)


@pytest.mark.parametrize("pod", [(3000, 1, 810), (11000, 1, 1000), (12000, 0, 0), (30000, 4, 1000), (500, 1, 50)])
def test_deltas_match_brute_force_and_pick_the_best_gpu(pod: tuple[int, int, int]) -> None:
    cpu, count, milli = pod
    state = random_state(4)
    tracker = FragmentationTracker(FragmentationModel(TYPICAL, state.model_names), state)
    delta, choice = tracker.deltas(np.arange(state.size), cpu, count, milli)
    for i in range(state.size):
        free = [int(x) for x in state.gpu_free[i, : state.gpu_count[i]]]
        model = state.model_names[state.model_id[i]]
        left = int(state.cpu_free[i])
        before = reference(left, free, model, TYPICAL)
        options = []
        if left >= cpu:
            if count == 0:
                options.append((reference(left - cpu, free, model, TYPICAL) - before, -1))
            elif milli == 1000:
                idle = [g for g, f in enumerate(free) if f == 1000]
                if len(idle) >= count:
                    after = [0 if g in idle[:count] else f for g, f in enumerate(free)]
                    options.append((reference(left - cpu, after, model, TYPICAL) - before, -1))
            else:
                for g, f in enumerate(free):
                    if f >= milli:
                        after = list(free)
                        after[g] -= milli
                        options.append((reference(left - cpu, after, model, TYPICAL) - before, g))
        if not options:
            assert np.isinf(delta[i])
            continue
        best = min(v for v, _ in options)
        assert delta[i] == pytest.approx(best)
        if count == 1 and milli < 1000:
            assert dict((g, v) for v, g in options)[int(choice[i])] == pytest.approx(best)


def test_typical_pods_cover_95_percent_by_count_and_renormalise() -> None:
    shapes = [PodShape(1, 1000, 1)] * 60 + [PodShape(2, 500, 1)] * 30 + [PodShape(3, 0, 0)] * 6 + \
        [PodShape(4, 1000, 8)] * 4
    typical = TypicalPods.from_shapes(shapes)
    assert typical.shapes == (PodShape(1, 1000, 1), PodShape(2, 500, 1), PodShape(3, 0, 0))
    assert typical.weights == pytest.approx((60 / 96, 30 / 96, 6 / 96))


def test_typical_pods_validation() -> None:
    with pytest.raises(ConfigError):
        TypicalPods((PodShape(1, 1000, 1),), (0.5,))
    with pytest.raises(ConfigError):
        TypicalPods.from_shapes([])


def test_an_empty_node_is_not_fragmented_by_gpu_shapes_only() -> None:
    state = ClusterState([node("n0", gpus=8, cpu=96000)])
    gpu_only = TypicalPods((PodShape(1000, 1000, 1), PodShape(1000, 500, 1)), (0.5, 0.5))
    tracker = FragmentationTracker(FragmentationModel(gpu_only, state.model_names), state)
    assert tracker.totals() == (0.0, 8000)
    state.allocate(0, 0, 0, (0,), 700)      # leaves 300 milli: useless to both shapes
    assert tracker.totals() == (pytest.approx(300.0), 7300)
