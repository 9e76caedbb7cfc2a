"""backfill: jobs held back behind a blocked gang may use idle, unreserved nodes."""

from __future__ import annotations

from refplatform.core.framework import Session, register_action


class Backfill:
    name = "backfill"

    def execute(self, ssn: Session) -> None:
        held = [j for j in ssn.job_list if j.deferred and not j.attempted and j.pending()]
        for job in sorted(held, key=ssn.job_key):
            job.deferred, job.hold_reason = False, ""
            ssn.allocate_job(job)


register_action(Backfill())
