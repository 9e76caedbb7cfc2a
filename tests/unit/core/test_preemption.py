"""Priority preemption in the pure core (kube-scheduler's DefaultPreemption over gangs), with an injected clock.

A pending pod or gang that does not fit evicts whole gangs of strictly lower priority, across queues
(except a non-reclaimable one), fewest GPUs disturbed first; its pods are nominated to the nodes they will
take; ``preemptionPolicy: Never`` and the ``no-preemption`` defect evict nothing.
"""

from __future__ import annotations

from dataclasses import replace

from refplatform.core import EvictReason, PodGroupPhase, PreemptionPolicy, Queue, schedule

from .schedcase import FIRST, Case, check, gang, node, pod

P = EvictReason.PREEMPTED
TRAIN = Queue("train")
NO_RECLAIM = replace(FIRST, actions=("enqueue", "allocate", "preempt", "backfill"))
"""Without reclaim, which would take the default queue's share back from ``train`` whatever the priorities."""


def inference(name: str = "infer", gpus: int = 8, priority: int = 1000, created: float = 50.0,
              policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY):
    """A Deployment's pod: no pod group, the default queue."""
    return replace(pod(name, gpus=gpus, priority=priority, created=created), preemption_policy=policy)


def training(name: str = "train", on: tuple[str, ...] = ("n0", "n1"), priority: int = 0, gpus: int = 8,
             created: float = 0.0):
    return gang(name, len(on), gpus=gpus, queue="train", priority=priority, on=list(on), created=created)


def test_a_high_priority_pod_evicts_a_whole_low_priority_gang_of_another_queue_and_is_nominated() -> None:
    case = Case("inference preempts training", [node("n0"), node("n1")], queues=[TRAIN],
                pods=[inference()], binds={}, evicted={"train-0": P, "train-1": P}, now=60.0,
                ).gangs(training())
    decisions = check(case)
    # the victim gang goes whole (it cannot run on one node), the preemptor is nominated to one node
    assert decisions.nominated() == {"default/infer": "n0"}
    assert {e.preemptor for e in decisions.evictions} == {decisions.reservations[0].job}
    assert decisions.reservations[0].nodes == ("n0",)
    assert "preempted 1 pod group(s)" in decisions.reservations[0].reason
    assert decisions.phases()["default/train"] is not PodGroupPhase.COMPLETED


def test_preemptor_waits_for_its_terminating_victims_then_binds_on_the_nominated_node() -> None:
    nodes = [node("n0"), node("n1")]
    evicted = [replace(p, terminating=True) for p in training()[1]]
    # t=61: the victims are terminating (their grace period): nothing more is evicted, the room is kept
    waiting = Case("victims terminating", nodes, queues=[TRAIN], pods=[inference(), *evicted], now=61.0,
                   binds={}, evicted={}, reserved={"podgroup-uid-infer": {"n0"}}).gangs((training()[0], []))
    decisions = check(waiting)
    assert decisions.nominations == ()
    # t=90: the victims are gone: the preemptor is bound where it was nominated
    gone = Case("victims gone", nodes, queues=[TRAIN], pods=[inference()], now=90.0,
                binds={"infer": "n0"}, evicted={}).gangs((training()[0], []))
    check(gone)


def test_only_strictly_lower_priority_is_preempted() -> None:
    for victim_priority in (5, 6):
        check(Case("equal or higher priority", [node("n0"), node("n1")], queues=[TRAIN], config=NO_RECLAIM,
                   pods=[inference(priority=5)], binds={}, evicted={},
                   reasons={"infer": "0/2 nodes are available"}).gangs(training(priority=victim_priority)))
    check(Case("one lower", [node("n0"), node("n1")], queues=[TRAIN], config=NO_RECLAIM,
               pods=[inference(priority=5)], binds={}, evicted={"train-0": P, "train-1": P},
               ).gangs(training(priority=4)))


def test_preemption_policy_never_waits_without_evicting() -> None:
    decisions = check(Case("Never", [node("n0"), node("n1")], queues=[TRAIN], config=NO_RECLAIM,
                           pods=[inference(policy=PreemptionPolicy.NEVER)], binds={}, evicted={},
                           reasons={"infer": "0/2 nodes are available"}).gangs(training()))
    assert decisions.nominations == () and decisions.reservations == ()


def test_a_queue_that_refuses_reclaim_is_not_preempted_from_another_queue() -> None:
    check(Case("not reclaimable", [node("n0"), node("n1")], queues=[Queue("train", reclaimable=False)],
               pods=[inference()], binds={}, evicted={}).gangs(training()))


def test_fewest_gpus_then_lowest_priority_are_the_victims() -> None:
    # n0: a 1-GPU gang (priority 0) beside a 7-GPU gang (priority 0); n1: an 8-GPU gang of priority 0 and
    # a 4+4 pair of priority 1 and 2.  A 1-GPU preemptor takes the 1-GPU gang; nothing else moves.
    nodes = [node("n0"), node("n1")]
    small = check(Case("one GPU", nodes, queues=[TRAIN], pods=[inference(gpus=1)], binds={},
                       evicted={"tiny-0": P}).gangs(
        training("tiny", ("n0",), gpus=1), training("big", ("n0",), gpus=7),
        training("p1", ("n1",), gpus=4, priority=1), training("p2", ("n1",), gpus=4, priority=2)))
    assert small.nominated() == {"default/infer": "n0"}
    # A 4-GPU preemptor of priority 10: the 4-GPU victims tie on GPUs; the lower priority (p1) goes.
    check(Case("four GPUs", nodes, queues=[TRAIN], pods=[inference(gpus=4, priority=10)], binds={},
               evicted={"p1-0": P}).gangs(
        training("big", ("n0",), gpus=8), training("p1", ("n1",), gpus=4, priority=1),
        training("p2", ("n1",), gpus=4, priority=2)))


def test_a_gang_takes_its_priority_from_its_pods_and_preempts_as_a_whole() -> None:
    group, pods = gang("hi", 2, gpus=8, queue="default", created=50.0)
    pods = [replace(p, priority=100) for p in pods]  # admission resolved the class onto the pods only
    decisions = check(Case("gang preemptor", [node("n0"), node("n1")], queues=[TRAIN], pods=pods,
                           binds={}, evicted={"train-0": P, "train-1": P}).gangs((group, []), training()))
    assert decisions.nominated() == {"default/hi-0": "n0", "default/hi-1": "n1"}


def test_the_no_preemption_defect_never_evicts_for_a_higher_priority_pod() -> None:
    assert FIRST.no_preemption is False
    defective = replace(NO_RECLAIM, no_preemption=True)
    case = Case("defect", [node("n0"), node("n1")], queues=[TRAIN], pods=[inference()], config=defective,
                binds={}, evicted={}, reasons={"infer": "0/2 nodes are available"}).gangs(training())
    decisions = check(case)
    assert decisions.nominations == () and decisions.reservations == ()
    # the same snapshot on an honest core evicts
    assert schedule(case.snapshot(), NO_RECLAIM).evicted() == {"default/train-0", "default/train-1"}


def test_a_gang_of_a_low_class_is_preempted_by_a_default_priority_pod() -> None:
    """A PodGroup naming a class carries no resolved priority (nothing admits PodGroups): its pods' negative
    priority is the gang's, so a pod of the default priority 0 preempts it."""
    group, pods = training(priority=0)
    group = replace(group, priority_class_name="low")
    pods = [replace(p, priority=-100) for p in pods]  # admission resolved the class onto the pods
    case = Case("default preempts low", [node("n0"), node("n1")], queues=[TRAIN], pods=[inference(priority=0)],
                config=NO_RECLAIM, binds={}, evicted={"train-0": P, "train-1": P}, now=60.0).gangs((group, pods))
    assert check(case).nominated() == {"default/infer": "n0"}
    # without a class on the group, the group's own priority counts as before: 0 is not lower than 0
    plain = Case("no class", [node("n0"), node("n1")], queues=[TRAIN], pods=[inference(priority=0)],
                 config=NO_RECLAIM, binds={}, evicted={}, reasons={"infer": "0/2 nodes are available"}, now=60.0
                 ).gangs((replace(group, priority_class_name=""), pods))
    assert check(plain).nominations == ()
