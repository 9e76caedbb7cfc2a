"""Why pending GPU demand is not placed, as a table: given nodes, pods, queues, expect each
pending pod's pending reason and its message (see ``refplatform.core.pending``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from refplatform.core import (
    FailedScheduling,
    PodGroupPhase,
    PodRef,
    Profile,
    Queue,
    QueueState,
    Quota,
    SchedulerConfig,
    TieBreak,
    Usage,
)
from refplatform.core.accounting import PendingReason
from refplatform.core.pending import _packs

from .schedcase import NS, Case, check, gang, node, pod

FRAG, CAPACITY, QUOTA, OTHER = ("Fragmentation", "InsufficientCapacity", "Quota", "Other")
NO_GANG = SchedulerConfig(tie_break=TieBreak.FIRST, profile=Profile.NO_GANG)
NO_BACKFILL = SchedulerConfig(tie_break=TieBreak.FIRST, actions=("enqueue", "allocate", "preempt", "reclaim"))


def busy(name: str, used: int, gpus: int = 8, **kw) -> tuple[list, list]:
    """A node with ``used`` of its GPUs held by one running pod."""
    holder = [pod(f"{name}-load", gpus=used, on=name, gpu_indices=tuple(range(used)))] if used else []
    return [node(name, gpus=gpus, **kw)], holder


def cluster(*used: int, **kw) -> tuple[list, list]:
    """Nodes n0.. with 8 GPUs each, ``used[i]`` of them held on node i."""
    nodes, pods = [], []
    for i, u in enumerate(used):
        n, p = busy(f"n{i}", u, **kw)
        nodes += n
        pods += p
    return nodes, pods


@dataclass
class Row:
    case: Case
    expect: dict[str, str]
    """Pending pod -> pending reason."""
    words: dict[str, str] = field(default_factory=dict)
    """Pending pod -> substring of its pending message."""


def row(name: str, used: tuple[int, ...], pods: list, expect: dict[str, str], words: dict[str, str] | None = None,
        groups: tuple = (), **kw) -> Row:
    nodes, holders = cluster(*used)
    case = Case(name, kw.pop("nodes", nodes), pods=holders + pods, **kw)
    case.gangs(*groups)
    return Row(case, expect, words or {})


ROWS = [
    row("4 nodes x 8 GPUs with 6 used each: a 4-GPU pod finds 8 free GPUs but no node with room",
        (6, 6, 6, 6), [pod("p", gpus=4)], {"p": FRAG},
        {"p": "needs 4 GPUs: 8 free in the cluster, at most 2 on one node"}, binds={}),
    row("a 40-GPU gang on the same cluster: not enough free GPUs in the whole cluster",
        (6, 6, 6, 6), [], {f"big-{i}": CAPACITY for i in range(5)},
        {"big-0": "pod group big needs 40 GPUs for 5 pods of 8: only 8 free in the cluster"},
        groups=(gang("big", 5),), binds={}),
    row("a 40-GPU gang on an idle 4 x 8 cluster: more than it has at all",
        (0, 0, 0, 0), [], {f"big-{i}": CAPACITY for i in range(5)}, {"big-4": "only 32 free"},
        groups=(gang("big", 5),), binds={}),
    row("a gang of 2 x 4 GPUs with 4, 3 and 3 free: the first pod fits, the second has no node, nothing binds",
        (4, 5, 5), [], {"g-0": FRAG, "g-1": FRAG},
        {"g-1": "pod group g needs 8 GPUs for 2 pods of 4: 10 free in the cluster, at most 4 on one node"},
        groups=(gang("g", 2, gpus=4),), binds={}),
    row("over its queue's capability: Quota, even though the GPUs are free and a node has room",
        (0, 0), [], {"q-0": QUOTA, "q-1": QUOTA}, {"q-0": "held by its queue: queue team capability exceeded"},
        queues=[Queue("team", capability=Quota.of(gpus=8))],
        groups=(gang("run", 1, queue="team", on=["n0"]), gang("q", 2, gpus=4, queue="team")), binds={}),
    row("not admitted because minResources exceed the queue's capability: Quota",
        (0, 0, 0, 0), [], {"a-0": QUOTA, "a-1": QUOTA}, {"a-0": "queue team resource quota insufficient"},
        queues=[Queue("team", capability=Quota.of(gpus=8))],
        groups=(gang("a", 2, queue="team", phase=PodGroupPhase.PENDING, min_resources=Usage(gpu_milli=16000)),),
        binds={}),
    row("a pod with no GPU request that does not fit: Other",
        (0, 0), [pod("cpu-hog", cpu=100_000)], {"cpu-hog": OTHER}, {"cpu-hog": "requests no whole GPUs"}, binds={}),
    row("a node selector decides: 10 GPUs free in the cluster, only 2 on the node it may use: Other",
        (6, 0), [pod("picky", gpus=4, selector={"kubernetes.io/hostname": "n0"})], {"picky": OTHER},
        {"picky": "needs 4 GPUs: 10 free in the cluster, only 2 on nodes it may use"},
        nodes=[node("n0", labels={"kubernetes.io/hostname": "n0"}), node("n1", labels={"kubernetes.io/hostname": "n1"})],
        binds={}),
    row("GPUs have room but CPU does not: Other, never fragmentation",
        (0,), [pod("cpu-hog", gpus=4, cpu=100_000)], {"cpu-hog": OTHER},
        {"cpu-hog": "room for them on nodes it may use; not placed for another reason"}, binds={}),
    row("free GPUs on a cordoned (or NotReady) node do not count: InsufficientCapacity",
        (6,), [pod("p", gpus=4)], {"p": CAPACITY}, {"p": "needs 4 GPUs: only 2 free in the cluster"},
        nodes=[node("n0"), node("n1", unschedulable=True)], binds={}),
    row("held behind another gang of its queue (no backfill): still Fragmentation when no node has room",
        (6, 6, 6, 6), [pod("p1", gpus=4, created=1), pod("p2", gpus=4, created=2)], {"p1": FRAG, "p2": FRAG},
        config=NO_BACKFILL, binds={}),
    row("a pod whose pod group does not exist: Other", (0,), [pod("x-0", gpus=1, group="missing")],
        {"x-0": OTHER}, {"x-0": "cannot be placed as specified: pod group missing not found"}, binds={}),
    row("a closed queue: Other", (0,), [], {"a-0": OTHER}, {"a-0": "queue team is Closed"},
        queues=[Queue("team", state=QueueState.CLOSED)],
        groups=(gang("a", 1, gpus=1, queue="team", phase=PodGroupPhase.PENDING),), binds={}),
    row("no-gang profile: the pod that did not fit after its siblings took the room",
        (0, 0, 0), [], {"a-3": CAPACITY}, {"a-3": "pod group a needs 8 GPUs: only 0 free in the cluster"},
        groups=(gang("a", 4),), config=NO_GANG, binds={"a-0": "n0", "a-1": "n1", "a-2": "n2"}),
    row("what this cycle binds is no longer free: the second 4-GPU pod meets fragmentation",
        (6, 6, 2), [pod("p1", gpus=4, created=1), pod("p2", gpus=4, created=2)], {"p2": FRAG},
        {"p2": "needs 4 GPUs: 6 free in the cluster, at most 2 on one node"}, binds={"p1": "n2"}),
]


@pytest.mark.parametrize("r", ROWS, ids=[r.case.name for r in ROWS])
def test_pending_reason(r: Row) -> None:
    decisions = check(r.case)
    reasons = {k.split("/", 1)[1]: v for k, v in decisions.pending_reasons().items()}
    for name, reason in r.expect.items():
        assert reasons.get(name) == reason, f"{name}: {reasons.get(name)} != {reason}"
    messages = {f.pod.name: f.pending_message for f in decisions.failures}
    for name, text in r.words.items():
        assert text in messages[name], f"{name}: {messages[name]!r} lacks {text!r}"


def test_the_reasons_are_the_accounting_s_pending_reasons() -> None:
    assert {r.value for r in PendingReason} == {FRAG, CAPACITY, QUOTA, OTHER}
    assert FailedScheduling(PodRef(NS, "p"), "x").pending_reason == PendingReason.OTHER.value


def test_every_pending_pod_gets_a_reason_and_the_kube_reason_stays_unschedulable() -> None:
    r = ROWS[0]
    decisions = check(r.case)
    assert [(f.pod.name, f.reason, f.pending_reason) for f in decisions.failures] == [("p", "Unschedulable", FRAG)]


@pytest.mark.parametrize("sizes, free, fits", [
    ([4], [2, 2, 2, 2], False),
    ([4, 4], [4, 3, 3], False),
    ([4, 4], [8], True),
    ([4, 2, 2], [4, 4], True),
    ([3, 3, 2], [4, 4], False),
    ([], [], True),
])
def test_best_fit_decreasing_packing(sizes: list[int], free: list[int], fits: bool) -> None:
    assert _packs(sizes, free) is fits
