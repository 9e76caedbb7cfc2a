"""The straggler decision on a virtual clock: peers compared within a job, sustained before named, the defect."""

from __future__ import annotations

import pytest

from refplatform.core.straggler import DetectorState, RankTiming, Thresholds, detect

T0 = 1_800_000_000.0
TH = Thresholds(slow_ratio=1.5, sustain_s=2.0)


def rank(i: int, compute: float | None, step: float | None = None, job: str = "ns/job", node: str = "") -> RankTiming:
    return RankTiming(job, f"uid-{job}-{i}", f"ns/{job.split('/')[-1]}-{i}", node or f"node-{i}", compute, step)


def run(ticks: list[tuple[float, list[RankTiming]]], **kw: bool) -> list[list[str]]:
    """The nodes named at each tick (seconds after T0)."""
    state, out = DetectorState(), []
    for t, ranks in ticks:
        named, state = detect(ranks, state, T0 + t, TH, **kw)
        out.append([s.node for s in named])
    return out


@pytest.mark.parametrize("case, ranks, expect", [
    ("all alike: nobody", [rank(0, 0.1), rank(1, 0.1), rank(2, 0.1)], []),
    ("noise below the ratio", [rank(0, 0.14), rank(1, 0.1), rank(2, 0.1)], []),
    ("one rank 4x slower", [rank(0, 0.4), rank(1, 0.1), rank(2, 0.1)], ["node-0"]),
    ("exactly at the ratio", [rank(0, 0.75), rank(1, 0.5)], ["node-0"]),
    ("above the ratio but within jitter of a short step", [rank(0, 0.06), rank(1, 0.02)], []),
    ("two ranks: the slow one only", [rank(0, 0.1), rank(1, 0.3)], ["node-1"]),
    ("a rank without timing is neither judged nor a peer", [rank(0, 0.4), rank(1, None)], []),
    ("one rank has no peers", [rank(0, 0.4)], []),
    ("jobs are compared apart", [rank(0, 0.4, job="ns/a"), rank(1, 0.4, job="ns/a"),
                                 rank(0, 0.1, job="ns/b"), rank(1, 0.1, job="ns/b")], []),
])
def test_peer_rule_once_sustained(case: str, ranks: list[RankTiming], expect: list[str]) -> None:
    assert run([(0, ranks), (2.0, ranks)])[-1] == expect, case


def test_named_only_after_sustain_and_not_after_a_break() -> None:
    slow = [rank(0, 0.4), rank(1, 0.1)]
    fine = [rank(0, 0.1), rank(1, 0.1)]
    assert run([(0, slow), (1.9, slow), (2.0, slow)]) == [[], [], ["node-0"]]
    # a break resets the clock: slow again at 3, named at 5, not before
    assert run([(0, slow), (1.5, fine), (3, slow), (4.9, slow), (5, slow)]) == [[], [], [], [], ["node-0"]]


def test_uniform_slowdown_names_nobody_but_the_defect_names_everyone() -> None:
    before = [rank(0, 0.1, 0.2), rank(1, 0.1, 0.2)]
    input_bound = [rank(0, 0.1, 0.6), rank(1, 0.1, 0.6)]  # input waits add to every rank's step alike
    ticks = [(0, before), (1, input_bound), (3, input_bound), (10, input_bound)]
    assert run(ticks) == [[], [], [], []]
    assert run(ticks, accuse_by_history=True) == [[], [], ["node-0", "node-1"], ["node-0", "node-1"]]


def test_state_forgets_gone_pods_and_a_new_pod_starts_fresh() -> None:
    state = DetectorState()
    _, state = detect([rank(0, 0.4), rank(1, 0.1)], state, T0, TH)
    assert set(state.slow_since) == {"uid-ns/job-0"}
    replaced = [RankTiming("ns/job", "uid-new", "ns/job-0", "node-9", 0.1), rank(1, 0.1)]
    named, state = detect(replaced, state, T0 + 5, TH)
    assert named == [] and state.slow_since == {}


def test_suspect_says_why() -> None:
    state = DetectorState()
    ranks = [rank(0, 0.4), rank(1, 0.1), rank(2, 0.1)]
    _, state = detect(ranks, state, T0, TH)
    named, _ = detect(ranks, state, T0 + 2, TH)
    assert named[0].ratio == pytest.approx(4.0) and named[0].slow_since == T0
    assert "4.00x its peers' median" in named[0].reason(TH)



def test_a_named_node_is_given_back_after_its_clocks_stay_whole_for_the_sustain_time() -> None:
    from refplatform.core.straggler import ReleaseState, release
    state, given = ReleaseState(), []
    # (seconds after T0, named node -> its agent reports every GPU at full clock)
    for t, named in [(0, {"a": False, "b": False, "c": True}), (1, {"a": True, "b": True, "c": True}),
                     (2, {"a": False, "b": True, "c": True}), (3, {"a": True, "b": True, "c": True}), (4, {"a": True, "c": True}),
                     (5, {"a": True, "c": True})]:
        back, state = release(named, state, T0 + t, TH)
        given.append(back)
    # b: held down at 0, whole from 1, back at 3; a: whole at 1, held down again at 2 (the clock starts over), whole
    # from 3, back at 5; c: never showed a clock held down, so nothing says it is fixed: it stays named
    assert given == [[], [], [], ["b"], [], ["a"]]
    assert state == ReleaseState(frozenset(), {})
