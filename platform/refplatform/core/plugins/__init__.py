"""Built-in plugins; importing this package registers them by name.

=============  =====================================================================
name           extension points
=============  =====================================================================
reservation    JOB_STARVING, JOB_ORDER (starving first), FILTER (reserved nodes),
               JOB_UNSCHEDULABLE (reserve nodes for a starving gang)
priority       JOB_ORDER, TASK_ORDER, PREEMPTABLE (lower priority only)
gang           PERMIT (ready iff >= minMember placed), JOB_ORDER (unready first),
               PREEMPTABLE (whole gangs)
proportion     QUEUE_ORDER (share), JOB_ENQUEUEABLE, ALLOCATABLE (capability),
               RESERVE/UNRESERVE (queue accounting), RECLAIMABLE
predicates     FILTER: NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit
placement      SCORE and GPU_PICK by policy: random, best-fit, fgd
topology       NODE_GROUPS (keep a gang in one domain when it fits), SCORE (co-locate)
=============  =====================================================================
"""

from refplatform.core.plugins import gang, placement, predicates, priority, proportion, reservation, topology

__all__ = ["gang", "placement", "predicates", "priority", "proportion", "reservation", "topology"]
