"""``Decisions.commits``: this cycle's binds grouped by gang, the unit the live scheduler binds whole or undoes.

Each case gives a snapshot and expects, per gang that got binds, (PodGroup name, minMember, pods ready before
the cycle, pods bound this cycle); :func:`schedcase.check` also checks that every bind is in exactly one commit.
"""

from __future__ import annotations

import pytest

from refplatform.core import Bind, GangCommit, PodPhase, PodRef

from .schedcase import Case, check, gang, node, pod

CASES = [
    (Case("two gangs that fit: one commit each", [node(f"n{i}") for i in range(4)]).gangs(gang("a", 2), gang("b", 2)),
     {"default/a": ("a", 2, 0, ["a-0", "a-1"]), "default/b": ("b", 2, 0, ["b-0", "b-1"])}),
    (Case("a replacement pod of a running gang: the others were ready before",
          [node(f"n{i}") for i in range(4)]).gangs(gang("a", 4, on=["n0", "n1", "n2", None])),
     {"default/a": ("a", 4, 3, ["a-3"])}),
    (Case("a succeeded member counts as ready", [node("n0"), node("n1")],
          pods=[pod("a-0", gpus=8, group="a", on="n0", phase=PodPhase.SUCCEEDED)]).gangs(
        (gang("a", 3)[0], gang("a", 3)[1][1:])),
     {"default/a": ("a", 3, 1, ["a-1", "a-2"])}),
    (Case("a terminating member is not ready", [node(f"n{i}") for i in range(3)],
          pods=[pod("a-0", gpus=8, group="a", on="n0", terminating=True)]).gangs(
        (gang("a", 2, min_member=1)[0], gang("a", 2)[1][1:])),
     {"default/a": ("a", 1, 0, ["a-1"])}),
    (Case("a pod without a PodGroup is a gang of its own", [node("n0")], pods=[pod("solo", gpus=2)]),
     {"default/podgroup-uid-solo": ("", 1, 0, ["solo"])}),
    (Case("a gang that does not fit commits nothing", [node("n0"), node("n1")]).gangs(gang("a", 3)), {}),
]


@pytest.mark.parametrize(("case", "expected"), [pytest.param(c, e, id=c.name) for c, e in CASES])
def test_commits_group_the_binds_by_gang(case: Case, expected: dict) -> None:
    decisions = check(case)
    got = {c.gang: (c.group, c.min_member, c.ready_before, [b.pod.name for b in c.binds]) for c in decisions.commits}
    assert got == expected


def test_a_gang_is_whole_when_enough_of_its_binds_succeed() -> None:
    binds = tuple(Bind(PodRef("default", f"a-{i}"), f"n{i}") for i in range(3))
    commit = GangCommit("default/a", "a", min_member=4, ready_before=1, binds=binds)
    assert commit.whole_with(3) and not commit.whole_with(2)
