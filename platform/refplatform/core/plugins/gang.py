"""Gang: a job is ready (permit) only when minMember of its pods are placed."""

from __future__ import annotations

from refplatform.core.framework import ExtensionPoint, Plugin, Session, register_plugin
from refplatform.core.jobs import Job
from refplatform.core.status import Status


@register_plugin
class GangPlugin(Plugin):
    name = "gang"

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_fn(ExtensionPoint.PERMIT, self.name, self.permit)
        ssn.add_fn(ExtensionPoint.JOB_ORDER, self.name,
                   lambda job: 0 if job.ready_count() < job.min_member else 1)
        ssn.add_fn(ExtensionPoint.PREEMPTABLE, self.name, lambda preemptor, victim: victim is not preemptor)

    def permit(self, job: Job) -> Status:
        ready = job.ready_count()
        if ready >= job.min_member:
            return Status.success(self.name)
        return Status.wait(f"{ready}/{job.min_member} pods placed", plugin=self.name)
