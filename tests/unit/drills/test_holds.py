"""Partial-hold GPU-seconds on made-up timelines."""

from __future__ import annotations

import pytest

from drills.kinds.gang.holds import Gang, PodChange, partial_hold

A, B = Gang("a", 3, 8), Gang("b", 3, 8)


def ch(t: float, gang: str, pod: str, holding: bool = True) -> PodChange:
    return PodChange(t, gang, pod, holding)


@pytest.mark.parametrize("changes, end, expect", [
    # A gang bound within 50 ms: below the tolerance, nothing counts.
    ([ch(0.00, "a", "a0"), ch(0.02, "a", "a1"), ch(0.05, "a", "a2")], 10.0, {"a": 0.0, "b": 0.0}),
    # Deadlock: each gang holds 2 of 3 pods (16 GPUs) from t=1 to the end at t=11.
    ([ch(1, "a", "a0"), ch(1, "b", "b0"), ch(1, "a", "a1"), ch(1, "b", "b1")], 11.0,
     {"a": 160.0, "b": 160.0}),
    # One pod held for 4 s before the rest arrive: 8 GPUs x 4 s, then 16 x 1 s.
    ([ch(0, "a", "a0"), ch(4, "a", "a1"), ch(5, "a", "a2")], 9.0, {"a": 48.0, "b": 0.0}),
    # A whole gang finishing pod by pod is the job ending, not a partial hold.
    ([ch(0, "a", "a0"), ch(0, "a", "a1"), ch(0, "a", "a2"), ch(5, "a", "a0", False), ch(9, "a", "a1", False)],
     20.0, {"a": 0.0, "b": 0.0}),
])
def test_partial_hold(changes, end, expect) -> None:
    result = partial_hold(changes, [A, B], end, tolerance=1.0)
    assert {k: round(v.gpu_seconds, 6) for k, v in result.items()} == expect


def test_episodes_name_the_worst_holding() -> None:
    result = partial_hold([ch(1, "a", "a0"), ch(2, "a", "a1")], [A], 12.0)
    assert result["a"].episodes == [(1, 12.0, 2, 16)]
    assert not result["a"].was_whole
