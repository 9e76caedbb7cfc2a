"""Extended resources (issue 7): MIG profiles, ``nvidia.com/gpu.shared`` and HAMi's
``nvidia.com/gpumem`` / ``nvidia.com/gpucores`` are plain integer amounts per node.

The partitioning contract is ``docs/PARTITIONING.md``; the scheduler's side is the
"Extended resources" section of ``docs/SCHEDULER.md``.
"""

from __future__ import annotations

import pytest

from refplatform.controllers.convert import node_of, pod_requests, resources_of
from refplatform.core import (
    GPU,
    EvictReason,
    Placer,
    PodGroupPhase,
    Resources,
    SchedulerConfig,
    SnapshotError,
    TieBreak,
)
from refplatform.core.decisions import Bind, FailedScheduling
from refplatform.core.state import ClusterState

from .schedcase import FIRST, Case, check, gang, node, pod

RUNNING, INQUEUE = PodGroupPhase.RUNNING, PodGroupPhase.INQUEUE
MIG_1G = "nvidia.com/mig-1g.18gb"
MIG_3G = "nvidia.com/mig-3g.71gb"
SHARED = "nvidia.com/gpu.shared"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"
H200_MIB = 143_771


def mixed(name: str, ones: int = 3, threes: int = 1) -> object:
    """A mig-mixed H200 node: no nvidia.com/gpu, one resource per profile."""
    return node(name, gpus=0, ext={MIG_1G: ones, MIG_3G: threes},
                labels={"nvidia.com/mig.strategy": "mixed", "firedrill.dev/partition-mode": "mig-mixed"})


def one_g(name: str, **kw) -> object:
    return pod(name, ext={MIG_1G: 1}, **kw)


def three_g(name: str, **kw) -> object:
    return pod(name, ext={MIG_3G: 1}, **kw)


# ------------------------------------------------------------------ Resources
def test_extended_is_canonical_hashable_and_readable() -> None:
    a = Resources(1000, extended={MIG_3G: 1, MIG_1G: 2, SHARED: 0})
    b = Resources(1000, extended=((MIG_1G, 2), (MIG_3G, 1)))
    assert a.extended == ((MIG_1G, 2), (MIG_3G, 1))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a.amount(MIG_1G) == 2 and a.amount(SHARED) == 0
    assert a.amount("cpu") == 1000 and a.amount(GPU) == 0
    assert a.extended_dict() == {MIG_1G: 2, MIG_3G: 1}
    assert Resources(extended={}) == Resources() and hash(Resources(extended={})) == hash(Resources())
    assert Resources(extended={GPUMEM: 0}).is_empty
    assert not Resources(extended={GPUMEM: 1}).is_empty
    with pytest.raises(AttributeError):
        a.extended = ()  # type: ignore[misc]


@pytest.mark.parametrize("extended, text", [
    (((MIG_1G, -1),), "negative"),
    (((MIG_1G, 1), (MIG_1G, 2)), "twice"),
    (((GPU, 1),), "own Resources field"),
    ((("cpu", 1),), "own Resources field"),
])
def test_extended_rejects_bad_amounts(extended, text) -> None:
    with pytest.raises(SnapshotError, match=text):
        Resources(extended=extended)


# ------------------------------------------------------------------ table
CASES = [
    Case("MIG: pods land only where their profile is free; a 4th 1g pod is refused with the reason",
         [mixed("mig")],
         pods=[one_g("a"), one_g("b"), one_g("c"), three_g("big"), one_g("d", created=1)],
         binds={"a": "mig", "b": "mig", "c": "mig", "big": "mig"},
         reasons={"d": "0/1 nodes are available: 1 Insufficient nvidia.com/mig-1g.18gb."},
         gpu_indices={"a": (), "big": ()}),
    Case("MIG: a 1g pod skips the node whose 1g slices are taken, and the plain GPU node",
         [mixed("mig-a"), mixed("mig-b"), node("plain")],
         pods=[one_g(f"held-{i}", on="mig-a") for i in range(3)] + [one_g("x"), three_g("y")],
         binds={"x": "mig-b", "y": "*"}),
    Case("MIG: 3g pod goes to the only node with a free 3g instance", [mixed("mig-a"), mixed("mig-b")],
         pods=[three_g("held", on="mig-a"), three_g("x")], binds={"x": "mig-b"}),
    Case("MIG: the 8th pod asking for a profile with 7 slices is refused",
         [mixed("mig7", ones=7, threes=0), node("plain")],
         pods=[one_g(f"p{i}", created=i) for i in range(8)],
         binds={f"p{i}": "mig7" for i in range(7)},
         reasons={"p7": "0/2 nodes are available: 2 Insufficient nvidia.com/mig-1g.18gb."}),
    Case("MIG: a profile no node advertises fits nowhere",
         [mixed("mig"), node("plain")], pods=[pod("x", ext={"nvidia.com/mig-7g.141gb": 1})], binds={},
         reasons={"x": "0/2 nodes are available: 2 Insufficient nvidia.com/mig-7g.141gb."}),
    Case("MIG gang all-or-nothing: 4 x 1g on 3 free 1g slices binds nothing",
         [mixed("mig")], binds={}, phases={"a": INQUEUE},
         reasons={"a-3": "0/1 nodes are available: 1 Insufficient nvidia.com/mig-1g.18gb.",
                  "a-0": "pod group is not ready, 4 Pending, 4 minAvailable"},
         ).gangs(gang("a", 4, gpus=0, ext={MIG_1G: 1})),
    Case("MIG gang fits across two nodes", [mixed("mig-a"), mixed("mig-b")],
         binds={f"a-{i}": "*" for i in range(5)}, phases={"a": RUNNING},
         ).gangs(gang("a", 5, gpus=0, ext={MIG_1G: 1})),
    Case("MIG gangs: two gangs each needing 2 of 3 slices, exactly one runs and the other holds nothing",
         [mixed("mig")], binds={"a-0": "mig", "a-1": "mig"}, phases={"a": RUNNING, "b": INQUEUE},
         reasons={"b-0": "pod group is not ready, 2 Pending, 2 minAvailable"},
         ).gangs(gang("a", 2, gpus=0, ext={MIG_1G: 1}, created=0),
                 gang("b", 2, gpus=0, ext={MIG_1G: 1}, created=1)),
    Case("MIG: a terminating pod still holds its slice", [mixed("mig", ones=1, threes=0)],
         pods=[one_g("old", on="mig", terminating=True), one_g("new")], binds={},
         reasons={"new": "Insufficient nvidia.com/mig-1g.18gb"}),
    Case("MIG: a higher-priority pod preempts the lower-priority holder of the only 3g slice",
         [mixed("mig")], pods=[three_g("low", on="mig", priority=0), three_g("high", priority=10, created=1)],
         binds={}, evicted={"low": EvictReason.PREEMPTED}),
    Case("MIG and CPU: both reasons are listed", [mixed("mig", ones=1), node("plain")],
         pods=[one_g("x", cpu=100_000)], binds={},
         reasons={"x": "0/2 nodes are available: 1 Insufficient nvidia.com/mig-1g.18gb, 2 Insufficient cpu."}),
    Case("mig-single / time-slicing: nvidia.com/gpu = 28 is 28 GPUs with indices 0..27",
         [node("ts", gpus=28)], pods=[pod(f"p{i:02d}", gpus=1, created=i) for i in range(29)],
         binds={f"p{i:02d}": "ts" for i in range(28)},
         gpu_indices={"p00": (0,), "p27": (27,)},
         reasons={"p28": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}),
    Case("time-slicing renamed: nvidia.com/gpu.shared counts replicas",
         [node("ts", gpus=0, ext={SHARED: 4})], pods=[pod(f"p{i}", ext={SHARED: 1}, created=i) for i in range(5)],
         binds={f"p{i}": "ts" for i in range(4)}, reasons={"p4": "1 Insufficient nvidia.com/gpu.shared"}),
    Case("HAMi: vGPUs are GPU indices; gpumem and gpucores are per-node totals",
         [node("hami", gpus=8, ext={GPUMEM: 2 * H200_MIB, GPUCORES: 200})],
         pods=[pod(f"p{i}", gpus=1, ext={GPUMEM: 100_000, GPUCORES: 30}, created=i) for i in range(3)]
         + [pod("small", gpus=1, ext={GPUMEM: 80_000, GPUCORES: 30}, created=5)],
         binds={"p0": "hami", "p1": "hami", "small": "hami"},
         reasons={"p2": "0/1 nodes are available: 1 Insufficient nvidia.com/gpumem."}),
    Case("HAMi: gpucores run out before vGPUs", [node("hami", gpus=8, ext={GPUMEM: 2 * H200_MIB, GPUCORES: 200})],
         pods=[pod(f"p{i}", gpus=1, ext={GPUCORES: 60}, created=i) for i in range(4)],
         binds={f"p{i}": "hami" for i in range(3)}, reasons={"p3": "Insufficient nvidia.com/gpucores"}),
]


for _policy in ("random", "fgd"):
    CASES.append(Case(f"MIG under placement {_policy}: the 3g pod still finds the only free 3g instance",
                      [mixed("mig-a"), mixed("mig-b"), node("plain")],
                      config=SchedulerConfig(tie_break=TieBreak.FIRST, placement=_policy),
                      pods=[three_g("held", on="mig-a"), three_g("x"), one_g("y"), pod("z", gpus=1)],
                      binds={"x": "mig-b", "y": "*", "z": "plain"}))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_extended_table(case: Case) -> None:
    check(case)


def test_preempted_mig_slice_goes_to_the_preemptor_once_the_victim_is_gone() -> None:
    case = Case("after eviction", [mixed("mig")], pods=[three_g("high", priority=10, created=1)],
                binds={"high": "mig"})
    check(case)


# ------------------------------------------------------------------ state and placer
def test_state_tracks_extended_and_rolls_back() -> None:
    state = ClusterState([mixed("a"), mixed("b", ones=7, threes=0), node("plain")])
    assert state.ext_names == [MIG_1G, MIG_3G]
    assert list(state.ext_free[MIG_1G]) == [3, 7, 0]
    assert list(state.ext_fits(MIG_3G, 1)) == [True, False, False]
    assert not state.ext_fits(SHARED, 1).any()
    copy = state.copy()
    state.allocate(0, 1000, 0, (), 0, ((MIG_3G, 1), (SHARED, 1)))
    assert list(state.ext_free[MIG_3G]) == [0, 0, 0]
    assert list(copy.ext_free[MIG_3G]) == [1, 0, 0]
    assert list(state.emptied().ext_free[MIG_3G]) == [1, 0, 0]
    state.release(0, 1000, 0, (), 0, ((MIG_3G, 1), (SHARED, 1)))
    assert list(state.ext_free[MIG_3G]) == [1, 0, 0]


def test_placer_places_mig_pods_until_the_profile_runs_out() -> None:
    placer = Placer([mixed("mig"), node("plain")], SchedulerConfig(tie_break=TieBreak.FIRST))
    results = [placer.place(one_g(f"p{i}")) for i in range(4)]
    assert [type(r) for r in results] == [Bind, Bind, Bind, FailedScheduling]
    assert {r.node for r in results[:3]} == {"mig"}
    assert "2 Insufficient nvidia.com/mig-1g.18gb" in results[3].message
    assert int(placer.state.ext_free[MIG_1G][0]) == 0


def test_starving_mig_gang_reserves_the_node_that_will_hold_it() -> None:
    case = Case("reservation", [mixed("mig-a"), mixed("mig-b", ones=0)], now=1000.0,
                pods=[one_g(f"held-{i}", on="mig-a") for i in range(2)], binds={},
                reserved={"a": {"mig-a"}}, config=FIRST)
    check(case.gangs(gang("a", 2, gpus=0, ext={MIG_1G: 1})))


# ------------------------------------------------------------------ convert
def test_convert_parses_extended_resources_from_nodes_and_pods() -> None:
    res = resources_of({"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi",
                        MIG_1G: "3", MIG_3G: 1, "nvidia.com/mig-2g.35gb": "0", "amd.com/gpu": "1",
                        "hugepages-2Mi": "0", "firedrill.dev/widget": "2"})
    assert (res.cpu_milli, res.memory_bytes, res.gpus, res.gpu_milli) == (4000, 8 << 30, 0, 0)
    assert res.extended == (("firedrill.dev/widget", 2), (MIG_1G, 3), (MIG_3G, 1))
    node_obj = {"metadata": {"name": "n", "labels": {}},
                "status": {"allocatable": {"cpu": "8", "memory": "64Gi", GPU: "28", GPUMEM: str(2 * H200_MIB),
                                           GPUCORES: "200"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}
    nd = node_of(node_obj)
    assert nd.allocatable.gpus == 28 and nd.allocatable.amount(GPUMEM) == 2 * H200_MIB
    assert nd.allocatable.amount(GPUCORES) == 200
    spec = {"containers": [{"resources": {"limits": {MIG_1G: "1"}}},
                           {"resources": {"requests": {"cpu": "500m", SHARED: "1", GPUMEM: "4000"},
                                          "limits": {SHARED: "1", GPUMEM: "4000"}}}]}
    req = pod_requests(spec)
    assert req.cpu_milli == 500 and req.gpus == 0
    assert req.extended_dict() == {MIG_1G: 1, SHARED: 1, GPUMEM: 4000}
    assert pod_requests({"containers": [{"resources": {"limits": {GPU: 1}}}]}).extended == ()
