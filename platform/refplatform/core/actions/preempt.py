"""preempt: a gang that does not fit evicts whole gangs of strictly lower priority.

kube-scheduler's DefaultPreemption over gangs: the preemptor's pods must not say
``preemptionPolicy: Never``; victims are whole gangs of strictly lower priority
(a gang is never left partly running), from any queue except one marked
``reclaimable: false`` (Volcano's promise that no other queue takes its room;
queue shares are otherwise reclaim's business); the fewest GPUs disturbed,
then the lowest priority, then the newest (:func:`select_victims`).  The
preemptor's pods are nominated to the nodes they will take, and those nodes are
kept for it while the victims terminate.
"""

from __future__ import annotations

from refplatform.core.actions.victims import evict, needs_room, select_victims, wait_for_releasing
from refplatform.core.decisions import EvictReason
from refplatform.core.framework import Session, register_action
from refplatform.core.jobs import Job


def may_take_from(ssn: Session, preemptor: Job, victim: Job) -> bool:
    """Same queue, or a queue that has not refused reclaim."""
    if victim.queue == preemptor.queue:
        return True
    queue = ssn.queues.get(victim.queue)
    return queue is None or queue.reclaimable


class Preempt:
    name = "preempt"

    def execute(self, ssn: Session) -> None:
        if not ssn.gang or ssn.config.no_preemption:
            return
        for job in sorted([j for j in ssn.job_list if needs_room(j) and j.may_preempt()], key=ssn.job_key):
            if wait_for_releasing(ssn, job):
                continue
            pool = [v for v in ssn.job_list if v is not job and v.evictable()
                    and may_take_from(ssn, job, v) and ssn.preemptable(job, v)]
            if not pool:
                continue
            found = select_victims(ssn, job, pool)
            if found is not None:
                evict(ssn, job, found[0], found[1], EvictReason.PREEMPTED)


register_action(Preempt())
