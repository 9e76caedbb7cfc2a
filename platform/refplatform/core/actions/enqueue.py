"""enqueue: Pending pod groups become Inqueue when their minResources fit.

The no-gang profile has no gate: like a scheduler without gang support, it
lets every pod of every group compete for nodes one by one."""

from __future__ import annotations

from refplatform.core.framework import Session, register_action


class Enqueue:
    name = "enqueue"

    def execute(self, ssn: Session) -> None:
        waiting = [j for j in ssn.job_list if not j.enqueued and not j.hold_reason]
        for job in sorted(waiting, key=ssn.job_key):
            if not ssn.gang:
                job.enqueued = True
                continue
            status = ssn.enqueueable(job)
            if status.ok:
                job.enqueued = True
            else:
                job.hold_reason = status.message


register_action(Enqueue())
