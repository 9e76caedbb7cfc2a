"""Cycle actions, run in ``SchedulerConfig.actions`` order; importing registers them.

- ``enqueue``: admit Pending pod groups whose minResources fit their queue and the cluster.
- ``allocate``: serve queues by share; within a queue, jobs in order, each gang
  all-or-nothing.  The first gang of a queue that does not fit blocks the rest of
  that queue for this action (head of line).
- ``preempt``: for gangs still unplaced (and not ``preemptionPolicy: Never``), evict
  whole gangs of strictly lower priority, of any queue but a non-reclaimable one,
  fewest GPUs disturbed first; the preemptor's pods are nominated to their nodes.
- ``reclaim``: for gangs of a queue below its deserved share, evict whole gangs of
  reclaimable queues above theirs.
- ``backfill``: try the jobs held back by head-of-line blocking, on nodes not
  reserved for a starving or preempting gang.
"""

from refplatform.core.actions import allocate, backfill, enqueue, preempt, reclaim

__all__ = ["allocate", "backfill", "enqueue", "preempt", "reclaim"]
