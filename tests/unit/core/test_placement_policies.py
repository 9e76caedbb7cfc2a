"""The FGD paper's placement policies as the authors' plugins score them, the hybrids, and TieBreak.ORDER."""

from __future__ import annotations

import numpy as np
import pytest

from refplatform.core import (
    PLACEMENT_POLICIES,
    PLACER_PLUGINS,
    Bind,
    ClusterState,
    PodShape,
    SchedulerConfig,
    Snapshot,
    TieBreak,
    TypicalPods,
    schedule,
)
from refplatform.core.framework import Session
from refplatform.core.jobs import Job, Task
from refplatform.core.node_order import order_keys
from refplatform.core.placer import Placer
from refplatform.core.policies.fgd import CpuHeadroom
from refplatform.core.policies import (
    BestFitPolicy,
    DotProductPolicy,
    FGDPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
)

from .schedcase import Case, check, node, pod

ONE_GPU = TypicalPods((PodShape(1000, 1000, 1),), (1.0,))


def cfg(policy: str, tie: TieBreak = TieBreak.FIRST, **kw) -> SchedulerConfig:
    return SchedulerConfig(tie_break=tie, placement=policy, typical_pods=ONE_GPU, topology_key=None, **kw)


def task_of(p) -> Task:
    job = Job("default/j", "default", "j", "default", 0, 1, 0.0)
    return Task.of(p, job)


CASES = [
    # gpu-packing: a shared GPU first, then idle GPUs of a used node, then an idle node.
    Case("gpu-packing puts a share on an already shared GPU",
         [node("idle"), node("used"), node("shared")], config=cfg("gpu-packing"),
         pods=[pod("u", gpus=1, on="used", gpu_indices=(0,)), pod("s", milli=500, on="shared", gpu_indices=(3,)),
               pod("new", milli=300)],
         binds={"new": "shared"}, gpu_indices={"new": (3,)}),
    Case("gpu-packing puts whole GPUs on a used node before an idle one",
         [node("idle"), node("used")], config=cfg("gpu-packing"),
         pods=[pod("u", milli=500, on="used", gpu_indices=(0,)), pod("new", gpus=2)],
         binds={"new": "used"}, gpu_indices={"new": (1, 2)}),
    # gpu-clustering: nodes holding only the same GPU kind, then mixed ones with it, then GPU-pod-free ones.
    Case("gpu-clustering keeps 1-GPU pods with 1-GPU pods",
         [node("free"), node("shares"), node("mixed"), node("ones")], config=cfg("gpu-clustering"),
         pods=[pod("a", milli=500, on="shares", gpu_indices=(0,)),
               pod("b", gpus=1, on="mixed", gpu_indices=(0,)), pod("c", milli=200, on="mixed", gpu_indices=(1,)),
               pod("d", gpus=1, on="ones", gpu_indices=(0,)), pod("new", gpus=1)],
         binds={"new": "ones"}),
    Case("gpu-clustering prefers a mixed node holding the kind over a GPU-pod-free one",
         [node("free"), node("shares"), node("mixed")], config=cfg("gpu-clustering"),
         pods=[pod("a", milli=500, on="shares", gpu_indices=(0,)),
               pod("b", gpus=1, on="mixed", gpu_indices=(0,)), pod("c", milli=200, on="mixed", gpu_indices=(1,)),
               pod("new", gpus=1)],
         binds={"new": "mixed"}),
    Case("gpu-clustering sends a new kind to a node without GPU pods",
         [node("shares"), node("free")], config=cfg("gpu-clustering"),
         pods=[pod("a", milli=500, on="shares", gpu_indices=(0,)), pod("new", gpus=4)],
         binds={"new": "free"}),
    # dot-product: the smallest dot product of free resources and request.
    Case("dot-product prefers the node with less of what the pod asks for free",
         [node("roomy", cpu=96000), node("tight", cpu=24000)], config=cfg("dot-product"),
         pods=[pod("new", gpus=1, cpu=8000)], binds={"new": "tight"}),
    # fgd vs fgd+bestfit: a whole-GPU pod makes no fragment on either node: an FGD tie.
    Case("pure fgd leaves a tie to the tie-break", [node("empty"), node("half")], config=cfg("fgd"),
         pods=[pod("u", gpus=4, on="half", gpu_indices=(0, 1, 2, 3)), pod("new", gpus=1)],
         binds={"new": "empty"}),
    Case("fgd+bestfit breaks FGD's tie by best-fit", [node("empty"), node("half")], config=cfg("fgd+bestfit"),
         pods=[pod("u", gpus=4, on="half", gpu_indices=(0, 1, 2, 3)), pod("new", gpus=1)],
         binds={"new": "half"}),
    # fgd+pack: the same tie goes to the node in use, even one emptier than best-fit would choose.
    Case("fgd+pack breaks FGD's tie away from an idle node", [node("empty"), node("half")], config=cfg("fgd+pack"),
         pods=[pod("u", gpus=4, on="half", gpu_indices=(0, 1, 2, 3)), pod("new", gpus=1)],
         binds={"new": "half"}),
    Case("fgd+pack counts a node with only CPU in use as in use", [node("empty"), node("cpu")],
         config=cfg("fgd+pack"), pods=[pod("c", cpu=1000, on="cpu"), pod("new", gpus=1)],
         binds={"new": "cpu"}),
    # fgd+headroom: a CPU-heavy pod is an FGD tie between a node with idle GPUs and one whose GPUs are all taken
    # (1 core left per idle GPU suffices for the typical pod either way); it goes where no idle GPU loses its CPU.
    Case("fgd+pack sends a CPU-heavy pod to the first of the tied nodes", [node("gpus", gpus=4, cpu=8000),
         node("full", gpus=4, cpu=8000)], config=cfg("fgd+pack"),
         pods=[pod("g", gpus=1, cpu=0, on="gpus", gpu_indices=(0,)), pod("f", gpus=4, cpu=0, on="full",
               gpu_indices=(0, 1, 2, 3)), pod("new", cpu=6000)],
         binds={"new": "gpus"}),
    Case("fgd+headroom keeps CPU beside idle GPUs", [node("gpus", gpus=4, cpu=8000),
         node("full", gpus=4, cpu=8000)], config=cfg("fgd+headroom"),
         pods=[pod("g", gpus=1, cpu=0, on="gpus", gpu_indices=(0,)), pod("f", gpus=4, cpu=0, on="full",
               gpu_indices=(0, 1, 2, 3)), pod("new", cpu=6000)],
         binds={"new": "full"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_policy_table(case: Case) -> None:
    check(case)


def test_every_policy_places_through_the_placer() -> None:
    for policy in PLACEMENT_POLICIES:
        placer = Placer([node("a", gpus=2), node("b", gpus=4)], SchedulerConfig(
            plugins=PLACER_PLUGINS, placement=policy, typical_pods=ONE_GPU, topology_key=None))
        results = [placer.place(pod(f"p{i}", gpus=1, cpu=1000)) for i in range(6)]
        assert all(isinstance(r, Bind) for r in results), policy
        assert isinstance(placer.place(pod("p6", gpus=1)), Bind) is False, policy


def test_gpu_clustering_follows_pods_placed_in_the_same_session() -> None:
    placer = Placer([node("a"), node("b")], SchedulerConfig(
        plugins=PLACER_PLUGINS, placement="gpu-clustering", tie_break=TieBreak.FIRST, topology_key=None))
    first = placer.place(pod("s0", milli=300))
    assert isinstance(first, Bind) and first.node == "a"
    one = placer.place(pod("w0", gpus=1))  # a holds a share: a whole-GPU pod prefers the pod-free node
    assert isinstance(one, Bind) and one.node == "b"
    share = placer.place(pod("s1", milli=300))
    assert isinstance(share, Bind) and share.node == "a"


def test_integer_scores_as_the_authors_plugins_return() -> None:
    state = ClusterState([node("a", cpu=128000), node("b", gpus=2, cpu=32000)])
    state.allocate(0, 5000, 0, (0,), 300)
    idx = np.arange(2)
    t = task_of(pod("p", milli=500, cpu=3000))
    for policy in (BestFitPolicy(), DotProductPolicy(), GpuPackingPolicy(), FGDPolicy(ONE_GPU)):
        s = policy.score(t, state, idx)
        assert (s == np.floor(s)).all() and (0 <= s).all() and (s <= 100).all(), policy.name
    # best-fit: int(100 (1 - (0.5 (cpu left)/128000 + 0.5 (gpu left)/8000)))
    assert BestFitPolicy().score(t, state, idx).tolist() == [
        int(100 * (1 - (0.5 * 120000 / 128000 + 0.5 * 7200 / 8000))),
        int(100 * (1 - (0.5 * 29000 / 128000 + 0.5 * 1500 / 8000)))]
    # gpu-packing: a's GPU 0 has 700 free: 100 - (70 // 10); b is idle: 33 - 2
    assert GpuPackingPolicy().score(t, state, idx).tolist() == [93, 31]


def test_fgd_score_is_the_integer_part_of_the_sigmoid() -> None:
    state = ClusterState([node("a", gpus=2)])
    state.allocate(0, 0, 0, (0,), 700)  # 300 free on GPU 0: a fragment for the 1-GPU typical pod
    policy = FGDPolicy(ONE_GPU)
    t = task_of(pod("p", milli=200))
    delta = policy.deltas(t, state, np.arange(1))
    assert delta[0] == -200  # the share goes on the fragment, which shrinks by 200
    assert policy.score(t, state, np.arange(1))[0] == int(100 / (1 + np.exp(-0.2)))


def test_fgd_pack_only_breaks_fgd_ties() -> None:
    # a: 300 free on GPU 0 (a fragment for the 1-GPU typical pod); b: in use, no fragment; c: idle.
    state = ClusterState([node("a", gpus=2), node("b", gpus=2), node("c", gpus=2)])
    state.allocate(0, 0, 0, (0,), 700)
    state.allocate(1, 0, 0, (0,), 1000)
    idx = np.arange(3)
    share, whole = task_of(pod("p", milli=200)), task_of(pod("q", gpus=1))
    for t in (share, whole):
        fgd = FGDPolicy(ONE_GPU).score(t, state, idx)
        pack = FGDPolicy(ONE_GPU, keep_idle_nodes=True).score(t, state, idx)
        assert pack.tolist() == [fgd[0], fgd[1], fgd[2] - 0.5], "half a point off the idle node only"
    assert np.argmax(FGDPolicy(ONE_GPU, keep_idle_nodes=True).score(share, state, idx)) == 0, \
        "the share still fills the fragment: FGD's lead is kept"
    pack = FGDPolicy(ONE_GPU, keep_idle_nodes=True).score(whole, state, idx)
    assert pack[1] > pack[2], "a whole GPU, an FGD tie between b and c, goes to b, in use"


def test_fgd_headroom_only_breaks_fgd_ties() -> None:
    # One typical pod: 1 core with each whole GPU.  a: 3 idle GPUs, 4 cores free; b: every GPU taken, 4 cores free.
    state = ClusterState([node("a", gpus=4, cpu=4000), node("b", gpus=4, cpu=4000)])
    state.allocate(0, 0, 0, (0,), 1000)
    state.allocate(1, 0, 0, (0, 1, 2, 3), 1000)
    idx = np.arange(2)
    t = task_of(pod("p", cpu=3000))
    pack = FGDPolicy(ONE_GPU, keep_idle_nodes=True).score(t, state, idx)
    head = FGDPolicy(ONE_GPU, keep_cpu_headroom=True).score(t, state, idx)
    assert pack[0] == pack[1], "an FGD tie: 1 core is left beside a's idle GPUs, enough for the typical pod"
    assert head.tolist() == pytest.approx([pack[0] - 0.2, pack[1]]), "0.1 a point per idle GPU left without its core"
    assert np.argmax(head) == 1
    share = task_of(pod("s", milli=500, cpu=0))
    assert FGDPolicy(ONE_GPU, keep_cpu_headroom=True).headroom_penalty(share, state, idx).tolist() == [0, 0], \
        "taking GPU without CPU strands nothing"
    many = ClusterState([node("m", gpus=8, cpu=8000)])
    assert FGDPolicy(ONE_GPU, keep_cpu_headroom=True).headroom_penalty(
        task_of(pod("r", cpu=8000)), many, np.arange(1))[0] == 0.45, "capped: with the idle-node half point under 1"
    assert FGDPolicy(ONE_GPU, keep_cpu_headroom=True).name == "fgd+headroom"


def test_cpu_headroom_is_the_expected_stranded_gpus_over_the_typical_gpu_pods() -> None:
    typical = TypicalPods((PodShape(12000, 1000, 1), PodShape(3000, 500, 1), PodShape(16000, 1000, 4),
                           PodShape(0, 1000, 1), PodShape(8000, 0, 0)), (0.4, 0.2, 0.1, 0.1, 0.2))
    gpu = [(12000, 0.4), (6000, 0.2), (4000, 0.1), (0, 0.1)]  # CPU milli per whole GPU; the CPU-only shape drops out
    total = sum(w for _, w in gpu)
    headroom = CpuHeadroom(typical)
    rng = np.random.default_rng(3)
    idle = rng.integers(0, 8001, 200)
    cpu = rng.integers(0, 100_000, 200)
    idle[:3], cpu[:3] = (0, 2000, 8000), (5000, 0, 96000)
    literal = [sum(w / total * max(0.0, i / 1000 - c / r) if r else 0.0 for r, w in gpu) for i, c in zip(idle, cpu)]
    assert headroom.stranded(idle, cpu) == pytest.approx(literal)
    assert headroom.stranded(np.array([2000]), np.array([0]))[0] == pytest.approx(2 * 0.7 / 0.8), \
        "no CPU free: both idle GPUs are stranded for every GPU shape that brings CPU"


def test_order_tie_break_is_seeded_and_outlives_snapshots() -> None:
    names = [f"n{i}" for i in range(50)]
    keys = order_keys(names, 7)
    assert (keys == order_keys(list(reversed(names)), 7)[::-1]).all(), "a node's place follows its name"
    assert not (keys == order_keys(names, 8)).all()
    winners = set()
    for nodes in (names, list(reversed(names)), names[:-10] + ["extra"] + names[-10:]):
        ssn = Session(Snapshot(nodes=tuple(node(n) for n in nodes)), SchedulerConfig(
            tie_break=TieBreak.ORDER, seed=7, topology_key=None))
        winners.add(ssn.state.names[ssn.break_tie(np.arange(len(nodes)))])
    first = names[int(np.argmin(keys))]
    assert winners == {first} or winners == {first, "extra"}
    decisions = schedule(Snapshot(nodes=tuple(node(n) for n in names), pods=(pod("p", gpus=8),)),
                         SchedulerConfig(tie_break=TieBreak.ORDER, seed=7, topology_key=None, placement="gpu-packing"))
    assert [b.node for b in decisions.binds] == [first]
