"""preempt: a gang that does not fit evicts whole lower-priority gangs of its queue."""

from __future__ import annotations

from refplatform.core.actions.victims import evict, needs_room, select_victims, wait_for_releasing
from refplatform.core.decisions import EvictReason
from refplatform.core.framework import Session, register_action


class Preempt:
    name = "preempt"

    def execute(self, ssn: Session) -> None:
        if not ssn.gang:
            return
        for job in sorted([j for j in ssn.job_list if needs_room(j)], key=ssn.job_key):
            if wait_for_releasing(ssn, job):
                continue
            pool = [v for v in ssn.job_list if v is not job and v.queue == job.queue
                    and v.evictable() and ssn.preemptable(job, v)]
            if not pool:
                continue
            found = select_victims(ssn, job, pool)
            if found is not None:
                evict(ssn, job, found[0], found[1], EvictReason.PREEMPTED)


register_action(Preempt())
