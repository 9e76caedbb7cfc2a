"""The scheduler's behaviour as a table: given nodes, pods, pod groups, queues and
a clock, expect binds, evictions, phases, reasons (see ``schedcase.py``)."""

from __future__ import annotations

import pytest

from refplatform.core import (
    EvictReason,
    PodGroupPhase,
    PodPhase,
    PodShape,
    Profile,
    Queue,
    QueueState,
    Quota,
    SchedulerConfig,
    Taint,
    TaintEffect,
    TieBreak,
    Toleration,
    TolerationOperator,
    TypicalPods,
    Usage,
)

from .schedcase import FIRST, Case, check, gang, node, pod

RUNNING, INQUEUE, PENDING, UNKNOWN = (PodGroupPhase.RUNNING, PodGroupPhase.INQUEUE, PodGroupPhase.PENDING,
                                      PodGroupPhase.UNKNOWN)
NO_GANG = SchedulerConfig(tie_break=TieBreak.FIRST, profile=Profile.NO_GANG)
NO_BACKFILL = SchedulerConfig(tie_break=TieBreak.FIRST, actions=("enqueue", "allocate", "preempt", "reclaim"))
NO_TOPOLOGY = SchedulerConfig(tie_break=TieBreak.FIRST, topology_key=None)
four = [node(f"n{i}") for i in range(4)]
two = [node("n0"), node("n1")]

# A CPU-only pod: best-fit packs it onto the busiest node (n-small), FGD keeps that
# node's idle GPUs usable for the typical pod (4 CPUs + 1 GPU) and picks n-big.
TYPICAL_1GPU = TypicalPods((PodShape(4000, 1000, 1),), (1.0,))
FGD = SchedulerConfig(tie_break=TieBreak.FIRST, placement="fgd", typical_pods=TYPICAL_1GPU)
BEST_FIT = SchedulerConfig(tie_break=TieBreak.FIRST, placement="best-fit")
frag_nodes = [node("n-small", gpus=2, cpu=5000), node("n-big", gpus=4, cpu=64000)]

CASES = [
    # ---------------------------------------------------------------- gang
    Case("gang all-or-nothing: 4 x 8 GPUs on 3 nodes binds nothing", four[:3],
         binds={}, phases={"a": INQUEUE},
         reasons={"a-3": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                  "a-0": "pod group is not ready, 4 Pending, 4 minAvailable"}).gangs(gang("a", 4)),
    Case("gang fits: all members bound, one per node", four,
         binds={"a-0": "n0", "a-1": "n1", "a-2": "n2", "a-3": "n3"}, phases={"a": RUNNING}).gangs(gang("a", 4)),
    Case("two gangs each needing more than half: exactly one runs, the other holds nothing", four,
         binds={"a-0": "n0", "a-1": "n1", "a-2": "n2"}, phases={"a": RUNNING, "b": INQUEUE},
         reasons={"b-1": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                  "b-0": "pod group is not ready, 3 Pending, 3 minAvailable"}
         ).gangs(gang("a", 3, created=0), gang("b", 3, created=1)),
    Case("minMember below replicas: the gang runs with what fits", four[:2],
         binds={"a-0": "n0", "a-1": "n1"}, phases={"a": RUNNING},
         reasons={"a-2": "Insufficient nvidia.com/gpu"}).gangs(gang("a", 3, min_member=2)),
    Case("partly running gang completes when the rest fits", four[:2],
         binds={"a-1": "n1"}, phases={"a": RUNNING}).gangs(gang("a", 2, on=["n0", None])),
    Case("pod group without a PodGroup object waits", four,
         pods=[pod("x-0", gpus=1, group="missing")], binds={}, reasons={"x-0": "pod group missing not found"}),
    Case("no-gang profile binds pods one by one: a partial gang holds 3 nodes", four[:3], config=NO_GANG,
         binds={"a-0": "n0", "a-1": "n1", "a-2": "n2"}, phases={"a": UNKNOWN},
         reasons={"a-3": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}).gangs(gang("a", 4)),
    Case("no-gang profile ignores the enqueue gate: a Pending group with minResources over free room binds 3",
         four[:3], config=NO_GANG, binds={"a-0": "n0", "a-1": "n1", "a-2": "n2"}, phases={"a": UNKNOWN},
         ).gangs(gang("a", 4, phase=PodGroupPhase.PENDING, min_resources=Usage(gpu_milli=32_000))),
    Case("no-gang profile: interleaved gangs deadlock at half each", four, config=NO_GANG,
         pods=[pod(f"{g}-{i}", gpus=8, group=g, created=2 * i + (g == "b")) for g in "ab" for i in range(3)],
         binds={"a-0": "n0", "b-0": "n1", "a-1": "n2", "b-1": "n3"}, phases={"a": UNKNOWN, "b": UNKNOWN}
         ).gangs((gang("a", 0, min_member=3)[0], []), (gang("b", 0, min_member=3)[0], [])),
    Case("gang profile: the same interleaved gangs, one runs", four,
         pods=[pod(f"{g}-{i}", gpus=8, group=g, created=2 * i + (g == "b")) for g in "ab" for i in range(3)],
         binds={"a-0": "n0", "a-1": "n1", "a-2": "n2"}, phases={"a": RUNNING, "b": INQUEUE}
         ).gangs((gang("a", 0, min_member=3)[0], []), (gang("b", 0, min_member=3, created=1)[0], [])),
    # ------------------------------------------------------------- queues
    Case("queue capability caps a gang; a smaller gang of the queue still fits", four,
         queues=[Queue("team", capability=Quota.of(gpus=16))],
         binds={"small-0": "n0", "small-1": "n1"}, phases={"big": INQUEUE, "small": RUNNING},
         reasons={"big-2": "queue team capability exceeded: nvidia.com/gpu"}
         ).gangs(gang("big", 3, queue="team", created=0), gang("small", 2, queue="team", created=1)),
    Case("enqueue keeps a pod group Pending while minResources exceed the queue's capability", four,
         queues=[Queue("team", capability=Quota.of(gpus=8))], binds={}, phases={"a": PENDING},
         reasons={"a-0": "queue team resource quota insufficient"}
         ).gangs(gang("a", 2, queue="team", phase=PodGroupPhase.PENDING, min_resources=Usage(gpu_milli=16000))),
    Case("enqueue admits a pod group that fits its queue", four,
         queues=[Queue("team", capability=Quota.of(gpus=16))], binds={"a-0": "n0", "a-1": "n1"}, phases={"a": RUNNING}
         ).gangs(gang("a", 2, queue="team", phase=PodGroupPhase.PENDING, min_resources=Usage(gpu_milli=16000))),
    Case("closed queue: nothing is admitted", four,
         queues=[Queue("team", state=QueueState.CLOSED)], binds={},
         reasons={"a-0": "queue team is Closed"}
         ).gangs(gang("a", 1, queue="team", phase=PodGroupPhase.PENDING)),
    Case("reclaim: queue b below its share takes two whole gangs (newest first) back from queue a", four,
         queues=[Queue("a"), Queue("b")], binds={},
         evicted={"a2-0": EvictReason.RECLAIMED, "a3-0": EvictReason.RECLAIMED},
         phases={"b1": INQUEUE}, reserved={"b1": {"n2", "n3"}},
         reasons={"b1-0": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}
         ).gangs(*(gang(f"a{i}", 1, queue="a", on=[f"n{i}"], created=i) for i in range(4)),
                 gang("b1", 2, queue="b", created=10)),
    Case("reclaim: nothing is taken from a queue that is not reclaimable", four,
         queues=[Queue("a", reclaimable=False), Queue("b")], binds={}, evicted={},
         ).gangs(*(gang(f"a{i}", 1, queue="a", on=[f"n{i}"]) for i in range(4)), gang("b1", 2, queue="b")),
    Case("reclaim: a queue at its deserved share takes nothing", four,
         queues=[Queue("a"), Queue("b")], binds={}, evicted={},
         ).gangs(gang("a0", 1, queue="a", on=["n0"]), gang("a1", 1, queue="a", on=["n1"]),
                 gang("b0", 1, queue="b", on=["n2"]), gang("b1", 1, queue="b", on=["n3"]),
                 gang("b2", 1, queue="b", created=5)),
    Case("reclaim waits for evicted pods instead of evicting more", four,
         queues=[Queue("a"), Queue("b")], binds={}, evicted={}, reserved={"b1": {"n0", "n1"}},
         pods=[pod("a0-0", gpus=8, group="a0", on="n0", terminating=True),
               pod("a1-0", gpus=8, group="a1", on="n1", terminating=True)],
         ).gangs((gang("a0", 1, queue="a")[0], []), (gang("a1", 1, queue="a")[0], []),
                 gang("a2", 1, queue="a", on=["n2"]), gang("a3", 1, queue="a", on=["n3"]),
                 gang("b1", 2, queue="b", created=10)),
    # ---------------------------------------------------------- preemption
    Case("priority preemption evicts the smallest whole gang (newest first on ties)", two,
         binds={}, evicted={"l3-0": EvictReason.PREEMPTED}, phases={"h": INQUEUE}, reserved={"h": {"n1"}},
         ).gangs(gang("l1", 2, gpus=4, on=["n0", "n1"], created=1), gang("l2", 1, gpus=4, on=["n0"], created=2),
                 gang("l3", 1, gpus=4, on=["n1"], created=3), gang("h", 1, gpus=4, priority=10, created=9)),
    Case("priority preemption takes a whole gang, including its pod on the other node", two,
         binds={}, evicted={"l1-0": EvictReason.PREEMPTED, "l1-1": EvictReason.PREEMPTED,
                            "l3-0": EvictReason.PREEMPTED}, reserved={"h": {"n1"}},
         ).gangs(gang("l1", 2, gpus=4, on=["n0", "n1"], created=1), gang("l2", 1, gpus=4, on=["n0"], created=2),
                 gang("l3", 1, gpus=4, on=["n1"], created=3), gang("h", 1, gpus=8, priority=10, created=9)),
    Case("no preemption of equal priority", two, binds={}, evicted={},
         ).gangs(gang("l1", 2, gpus=8, on=["n0", "n1"]), gang("h", 1, gpus=8, created=9)),
    Case("no preemption across queues (that is reclaim's job)", two, queues=[Queue("a", reclaimable=False), Queue("b")],
         binds={}, evicted={},
         ).gangs(gang("l1", 2, gpus=8, on=["n0", "n1"], queue="a"), gang("h", 1, gpus=8, priority=10, queue="b")),
    Case("preemptor runs once the victims are gone", two, binds={"h-0": "n1"}, phases={"h": RUNNING},
         ).gangs(gang("l1", 1, gpus=8, on=["n0"]), gang("h", 1, gpus=8, priority=10)),
    # ----------------------------------------------------------- placement
    Case("best-fit packs a CPU-only pod onto the busiest node", frag_nodes, config=BEST_FIT,
         pods=[pod("cpu-only", cpu=2000)], binds={"cpu-only": "n-small"}),
    Case("fgd keeps the small node's GPUs usable and picks the big node", frag_nodes, config=FGD,
         pods=[pod("cpu-only", cpu=2000)], binds={"cpu-only": "n-big"}),
    Case("GPU sharing packs milli-GPU pods onto one GPU", [node("n0", gpus=2)],
         pods=[pod(f"s{i}", milli=300, created=i) for i in range(3)] + [pod("s3", milli=200, created=3)],
         binds={"s0": "n0", "s1": "n0", "s2": "n0", "s3": "n0"},
         gpu_indices={"s0": (0,), "s1": (0,), "s2": (0,), "s3": (1,)}),
    Case("GPU sharing honours indices of bound pods", [node("n0", gpus=2)],
         pods=[pod("old", milli=600, on="n0", gpu_indices=(1,)), pod("new", milli=500)],
         binds={"new": "n0"}, gpu_indices={"new": (0,)}),
    Case("GPU sharing: a share never spans GPUs", [node("n0", gpus=2)],
         pods=[pod("a", milli=600, on="n0", gpu_indices=(0,)), pod("b", milli=600, on="n0", gpu_indices=(1,)),
               pod("c", milli=500)],
         binds={}, reasons={"c": "0/1 nodes are available: 1 Insufficient firedrill.dev/gpu-milli."}),
    Case("whole GPUs avoid shared GPUs", [node("n0", gpus=4)],
         pods=[pod("a", milli=100, on="n0", gpu_indices=(0,)), pod("w", gpus=2)],
         binds={"w": "n0"}, gpu_indices={"w": (1, 2)}),
    Case("GPU model selector (trace gpu_spec V100M16|V100M32)",
         [node("t4", model="T4"), node("v16", model="V100M16"), node("v32", model="V100M32")],
         pods=[pod("p", gpus=1, models=["V100M32", "P100"]), pod("q", gpus=1, models=["A100"])],
         binds={"p": "v32"},
         reasons={"q": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}),
    Case("node selector", [node("a", labels={"zone": "x"}), node("b", labels={"zone": "y"})],
         pods=[pod("p", gpus=1, selector={"zone": "y"})], binds={"p": "b"}),
    Case("taints and tolerations, cordoned nodes",
         [node("t", taints=[Taint("gpu", "bad", TaintEffect.NO_SCHEDULE)]), node("c", unschedulable=True),
          node("ok", gpus=1)],
         pods=[pod("p", gpus=2), pod("q", gpus=2, created=1,
                                     tolerations=[Toleration("gpu", TolerationOperator.EXISTS)])],
         binds={"q": "t"},
         reasons={"p": "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated "
                       "taint {gpu: bad}, 1 node(s) were unschedulable."}),
    Case("topology: a gang is kept inside one NVLink domain when one fits",
         [node("n0", domain="d1"), node("n1", domain="d1"), node("n2", domain="d2"), node("n3", domain="d2")],
         pods=[pod("busy", gpus=4, on="n0")], binds={"a-0": "n2", "a-1": "n3"}).gangs(gang("a", 2)),
    Case("topology off: the same gang spans domains (first fit)",
         [node("n0", domain="d1"), node("n1", domain="d1"), node("n2", domain="d2"), node("n3", domain="d2")],
         config=NO_TOPOLOGY, pods=[pod("busy", gpus=4, on="n0")], binds={"a-0": "n1", "a-1": "n2"}
         ).gangs(gang("a", 2)),
    Case("topology is a preference: a gang larger than any domain still runs",
         [node("n0", domain="d1"), node("n1", domain="d1"), node("n2", domain="d2"), node("n3", domain="d2")],
         binds={"a-0": "*", "a-1": "*", "a-2": "*"}, phases={"a": RUNNING}).gangs(gang("a", 3)),
    # ------------------------------------------------- backfill / starvation
    Case("backfill: a small pod takes idle GPUs while a big gang waits", two, now=10.0,
         pods=[pod("r", gpus=4, on="n0"), pod("small", gpus=2, created=5)],
         binds={"small": "n0"}, phases={"g": INQUEUE}, reasons={"g-1": "Insufficient nvidia.com/gpu"}
         ).gangs(gang("g", 2, created=0)),
    Case("no backfill action: the small pod waits behind the blocked gang", two, now=10.0, config=NO_BACKFILL,
         pods=[pod("r", gpus=4, on="n0"), pod("small", gpus=2, created=5)],
         binds={}, reasons={"small": "waiting behind pod group g in queue default"}).gangs(gang("g", 2, created=0)),
    Case("starvation: past the bound, the gang's nodes are reserved and the small pod waits", two, now=1000.0,
         pods=[pod("r", gpus=4, on="n0"), pod("small", gpus=2, created=5)],
         binds={}, reserved={"g": {"n0", "n1"}},
         reasons={"small": "node(s) reserved for another pod group"}).gangs(gang("g", 2, created=0)),
    Case("starvation: the reserved gang runs as soon as the running pod has finished", two, now=1300.0,
         pods=[pod("r", gpus=4, on="n0", phase=PodPhase.SUCCEEDED), pod("small", gpus=2, created=5)],
         binds={"g-0": "n0", "g-1": "n1"}, phases={"g": RUNNING},
         reasons={"small": "Insufficient nvidia.com/gpu"}).gangs(gang("g", 2, created=0)),
    Case("starvation: a starving gang is served before a higher-priority one (and is not preempted "
         "in the cycle that bound it)", two, now=1000.0,
         binds={"old-0": "n0"}, phases={"old": RUNNING, "vip": INQUEUE}, evicted={},
         ).gangs(gang("old", 1, created=0), gang("vip", 2, priority=5, created=990)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_schedule(case: Case) -> None:
    check(case)


def test_cases_have_unique_names() -> None:
    assert len({c.name for c in CASES}) == len(CASES)


def test_first_tie_break_is_the_default_of_the_table() -> None:
    assert FIRST.tie_break is TieBreak.FIRST
