"""Proportion: queue shares, capability caps, admission (enqueue) and reclaim rules.

Per queue and per dimension (cpu, memory, GPU milli): ``allocated`` counts bound
pods that are not terminating; ``deserved`` is the queue's explicit value or, when
unset, its weight's water-filled share of the cluster capped by its capability and
its demand (so idle share flows to queues that want it).  Allocation is
work-conserving: a queue may exceed its deserved share up to its capability, and
the excess can be reclaimed when the queue is ``reclaimable``.
"""

from __future__ import annotations

import math

from refplatform.core.framework import ExtensionPoint, Plugin, Session, register_plugin
from refplatform.core.jobs import Hold, Job, Task, TaskStatus
from refplatform.core.queue import Queue
from refplatform.core.resources import GPU, Usage
from refplatform.core.status import Status

DIMS = 3


def _water_fill(total: float, weights: dict[str, float], caps: dict[str, float]) -> dict[str, float]:
    out = {q: 0.0 for q in weights}
    active = {q for q in weights if caps[q] > 0 and weights[q] > 0}
    remaining = float(total)
    while active and remaining > 1e-9:
        weight_sum = sum(weights[q] for q in active)
        grants = {q: remaining * weights[q] / weight_sum for q in active}
        full = {q for q in active if out[q] + grants[q] >= caps[q]}
        if not full:
            for q in active:
                out[q] += grants[q]
            break
        for q in full:
            remaining -= caps[q] - out[q]
            out[q] = caps[q]
        active -= full
    return out


@register_plugin
class ProportionPlugin(Plugin):
    name = "proportion"

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        st = ssn.state
        self.total = (int(st.cpu_alloc.sum()), int(st.mem_alloc.sum()), int(st.gpu_count.sum()) * 1000)
        self.allocated: dict[str, list[int]] = {q: [0, 0, 0] for q in ssn.queues}
        self.inqueue: dict[str, list[int]] = {q: [0, 0, 0] for q in ssn.queues}
        request: dict[str, list[int]] = {q: [0, 0, 0] for q in ssn.queues}
        for job in ssn.job_list:
            if job.queue not in self.allocated:
                continue
            held = Usage()
            for task in job.tasks:
                if task.status is TaskStatus.BOUND:
                    held = held + task.usage()
                if task.status in (TaskStatus.BOUND, TaskStatus.PENDING):
                    _add(request[job.queue], task.usage())
            _add(self.allocated[job.queue], held)
            if job.enqueued and job.min_resources is not None and job.ready_count() < job.min_member:
                rest = job.min_resources - held
                _add(self.inqueue[job.queue], Usage(*(max(0, v) for v in rest.as_tuple())))
        self.deserved: dict[str, list[float]] = {q: [0.0, 0.0, 0.0] for q in ssn.queues}
        for d in range(DIMS):
            fixed = {q: ssn.queues[q].deserved.as_tuple()[d] for q in ssn.queues
                     if ssn.queues[q].deserved is not None and ssn.queues[q].deserved.as_tuple()[d] is not None}
            caps = {q: min(request[q][d], _cap(ssn.queues[q], d)) for q in ssn.queues if q not in fixed}
            weights = {q: float(ssn.queues[q].weight) for q in caps}
            shares = _water_fill(self.total[d] - sum(fixed.values()), weights, caps)
            for q in ssn.queues:
                self.deserved[q][d] = float(fixed[q]) if q in fixed else shares[q]
        ssn.add_fn(ExtensionPoint.QUEUE_ORDER, self.name, self.queue_key)
        ssn.add_fn(ExtensionPoint.JOB_ENQUEUEABLE, self.name, self.enqueueable)
        ssn.add_fn(ExtensionPoint.ALLOCATABLE, self.name, self.allocatable)
        ssn.add_fn(ExtensionPoint.RESERVE, self.name, lambda t: self._move(t, +1))
        ssn.add_fn(ExtensionPoint.UNRESERVE, self.name, lambda t: self._move(t, -1))
        ssn.add_fn(ExtensionPoint.RECLAIMABLE, self.name, self.reclaimable)

    # --------------------------------------------------------------- helpers
    def _move(self, task: Task, sign: int) -> None:
        acc = self.allocated.get(task.job.queue)
        if acc is not None:
            acc[0] += sign * task.cpu
            acc[1] += sign * task.mem
            acc[2] += sign * task.gpu_total

    def share(self, queue: str) -> float:
        alloc, deserved = self.allocated[queue], self.deserved[queue]
        share = 0.0
        for d in range(DIMS):
            if deserved[d] > 0:
                share = max(share, alloc[d] / deserved[d])
            elif alloc[d] > 0:
                share = math.inf
        return share

    def queue_key(self, queue: str) -> tuple:
        q = self.ssn.queues.get(queue)
        return (-(q.priority if q else 0), self.share(queue) if queue in self.allocated else math.inf)

    def _queue_status(self, job: Job) -> Status | None:
        queue = self.ssn.queues.get(job.queue)
        if queue is None:
            return _held(job, Hold.INVALID, Status.unschedulable(f"queue {job.queue} not found", plugin=self.name,
                                                                  resolvable=False))
        if not queue.is_open:
            return _held(job, Hold.INVALID, Status.unschedulable(f"queue {job.queue} is {queue.state.value}",
                                                                  plugin=self.name, resolvable=False))
        return None

    # ---------------------------------------------------------- extension fns
    def enqueueable(self, job: Job) -> Status:
        status = self._queue_status(job)
        if status is not None:
            return status
        need = job.min_resources
        if need is None:
            return Status.success(self.name)
        q = job.queue
        queue = self.ssn.queues[q]
        after = Usage(*(a + i for a, i in zip(self.allocated[q], self.inqueue[q]))) + need
        over = queue.capability.exceeded_by(after)
        if over:
            return _held(job, Hold.QUOTA, Status.unschedulable(
                f"queue {q} resource quota insufficient: {', '.join(over)}", plugin=self.name))
        factor = self.config.overcommit_factor
        used = [sum(v[d] for v in self.allocated.values()) + sum(v[d] for v in self.inqueue.values())
                for d in range(DIMS)]
        for d, name in enumerate(("cpu", "memory", GPU)):
            if need.as_tuple()[d] > 0 and used[d] + need.as_tuple()[d] > self.total[d] * factor:
                return Status.unschedulable(f"cluster resources insufficient to admit the pod group: {name}",
                                            plugin=self.name)
        _add(self.inqueue[q], need)
        return Status.success(self.name)

    def allocatable(self, task: Task) -> Status:
        job = task.job
        status = self._queue_status(job)
        if status is not None:
            return status
        q = job.queue
        queue = self.ssn.queues[q]
        after = Usage(*self.allocated[q]) + task.usage()
        over = list(queue.capability.exceeded_by(after))
        others = [0, 0, 0]
        for name, other in self.ssn.queues.items():
            if name != q:
                _add(others, other.guarantee.or_zero())
        for d, name in enumerate(("cpu", "memory", GPU)):
            if others[d] and after.as_tuple()[d] > self.total[d] - others[d] and name not in over:
                over.append(name)
        if over:
            cap = queue.capability.gpu_milli
            detail = ""
            if cap is not None and GPU in over:
                detail = (f"; {GPU} allocated {self.allocated[q][2] / 1000:g} + requested "
                          f"{task.gpu_total / 1000:g} > capability {cap / 1000:g}")
            return _held(job, Hold.QUOTA, Status.unschedulable(
                f"queue {q} capability exceeded: {', '.join(over)}{detail}", plugin=self.name))
        return Status.success(self.name)

    def under_deserved(self, job: Job) -> bool:
        """Would the job keep its queue within its deserved share (dimensions it asks for)?"""
        need = job.pending_usage().as_tuple()
        alloc, deserved = self.allocated[job.queue], self.deserved[job.queue]
        return any(need) and all(need[d] == 0 or alloc[d] + need[d] <= deserved[d] + 1e-6 for d in range(DIMS))

    def reclaimable(self, reclaimer: Job, victims: list[Job]) -> bool:
        if reclaimer.queue not in self.allocated or not self.under_deserved(reclaimer):
            return False
        remaining = {q: list(v) for q, v in self.allocated.items()}
        for victim in victims:
            q = victim.queue
            queue = self.ssn.queues.get(q)
            if q == reclaimer.queue or queue is None or not queue.reclaimable:
                return False
            alloc, deserved = remaining[q], self.deserved[q]
            if not any(alloc[d] > deserved[d] + 1e-6 for d in range(DIMS)):
                return False
            for task in victim.active():
                alloc[0] -= task.cpu
                alloc[1] -= task.mem
                alloc[2] -= task.gpu_total
        return True


def _held(job: Job, hold: Hold, status: Status) -> Status:
    """Mark the job as held by its queue (the pending reason reads it) and pass the status on."""
    job.held(hold, status.message)
    return status


def _cap(queue: Queue, d: int) -> float:
    value = queue.capability.as_tuple()[d]
    return math.inf if value is None else float(value)


def _add(acc: list[int], usage: Usage) -> None:
    acc[0] += usage.cpu_milli
    acc[1] += usage.memory_bytes
    acc[2] += usage.gpu_milli
