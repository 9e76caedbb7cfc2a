"""Priority: higher-priority gangs and pods go first and may preempt lower ones."""

from __future__ import annotations

from refplatform.core.framework import ExtensionPoint, Plugin, Session, register_plugin
from refplatform.core.jobs import Job


@register_plugin
class PriorityPlugin(Plugin):
    name = "priority"

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_fn(ExtensionPoint.JOB_ORDER, self.name, lambda job: -job.priority)
        ssn.add_fn(ExtensionPoint.TASK_ORDER, self.name, lambda task: -task.pod.priority)
        ssn.add_fn(ExtensionPoint.PREEMPTABLE, self.name, self.preemptable)

    @staticmethod
    def preemptable(preemptor: Job, victim: Job) -> bool:
        return victim.priority < preemptor.priority
