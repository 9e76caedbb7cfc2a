"""reclaim: a queue below its deserved share takes room back from reclaimable
queues above theirs, whole gangs at a time."""

from __future__ import annotations

from refplatform.core.actions.victims import evict, needs_room, select_victims, wait_for_releasing
from refplatform.core.decisions import EvictReason
from refplatform.core.framework import Session, register_action


class Reclaim:
    name = "reclaim"

    def execute(self, ssn: Session) -> None:
        if not ssn.gang:
            return
        waiting = [j for j in ssn.job_list if needs_room(j)]
        waiting.sort(key=lambda j: (ssn.queue_key(j.queue), ssn.job_key(j)))
        for job in waiting:
            if not needs_room(job) or not ssn.reclaimable(job, []):
                continue
            if wait_for_releasing(ssn, job):
                continue
            pool = [v for v in ssn.job_list if v.queue != job.queue and v.evictable()
                    and ssn.reclaimable(job, [v])]
            if not pool:
                continue
            found = select_victims(ssn, job, pool, lambda victims: ssn.reclaimable(job, victims))
            if found is not None:
                evict(ssn, job, found[0], found[1], EvictReason.RECLAIMED)


register_action(Reclaim())
