"""allocate: place gangs all-or-nothing, queues served by share, head-of-line per queue."""

from __future__ import annotations

from collections import deque

from refplatform.core.framework import Session, register_action
from refplatform.core.jobs import Job


def candidates(ssn: Session) -> list[Job]:
    return [j for j in ssn.job_list
            if j.enqueued and not j.hold_reason and not j.attempted and j.pending()]


class Allocate:
    name = "allocate"

    def execute(self, ssn: Session) -> None:
        if not ssn.gang:
            tasks = [t for j in candidates(ssn) for t in j.pending()]
            tasks.sort(key=lambda t: (ssn.queue_key(t.job.queue), ssn.task_key(t)))
            for task in tasks:
                ssn.allocate_task(task)
            return
        per_queue: dict[str, deque[Job]] = {}
        for job in sorted(candidates(ssn), key=ssn.job_key):
            per_queue.setdefault(job.queue, deque()).append(job)
        blocked: dict[str, str] = {}
        while per_queue:
            queue = min(per_queue, key=ssn.queue_key)
            job = per_queue[queue].popleft()
            if not per_queue[queue]:
                del per_queue[queue]
            if queue in blocked:
                job.deferred = True
                job.hold_reason = f"waiting behind pod group {blocked[queue]} in queue {queue}"
                continue
            if not ssn.allocate_job(job):
                blocked[queue] = job.name


register_action(Allocate())
