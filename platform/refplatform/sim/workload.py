"""Workload inflation (the FGD artifact's ``tune`` step) and shuffling."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from refplatform.sim.trace import TracePod


def inflate(pods: Sequence[TracePod], capacity_milli: int, ratio: float,
            rng: np.random.Generator) -> list[tuple[str, TracePod]]:
    """Every trace pod, plus copies drawn at random with replacement until the next
    copy would take the requested GPU (milli) past ``ratio`` x capacity; shuffled.

    Returns ``(name, pod)`` pairs; copies are named ``<name>-tuned-<i>``.
    """
    out = [(p.name, p) for p in pods]
    requested = sum(p.gpu_total for p in pods)
    target = ratio * capacity_milli
    if requested > target:  # tune down: drop random pods
        while requested > target and out:
            _, pod = out.pop(int(rng.integers(len(out))))
            requested -= pod.gpu_total
    elif any(p.gpu_total for p in pods):  # tune up
        i = 0
        while True:
            pick = pods[int(rng.integers(len(pods)))]
            if requested + pick.gpu_total > target:
                break
            requested += pick.gpu_total
            out.append((f"{pick.name}-tuned-{i}", pick))
            i += 1
    order = rng.permutation(len(out))
    return [out[j] for j in order]
