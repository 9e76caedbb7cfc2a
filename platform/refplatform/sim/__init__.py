"""Trace replay of the Alibaba GPU trace v2023 (openb) with the FGD paper's method.

:func:`replay` runs one policy with one seed through the scheduling core's
one-pod-at-a-time :class:`~refplatform.core.Placer`; ``python -m refplatform.sim``
prints a table over policies and seeds.  See ``docs/SCHEDULER.md``.
"""

from refplatform.sim.replay import PUBLISHED_UNALLOCATED_130, ReplayResult, default_trace_dir, replay
from refplatform.sim.trace import DEFAULT_NODE_FILE, DEFAULT_POD_FILE, TraceError, TracePod, load_nodes, load_pods
from refplatform.sim.workload import inflate

__all__ = [
    "DEFAULT_NODE_FILE", "DEFAULT_POD_FILE", "PUBLISHED_UNALLOCATED_130", "ReplayResult", "TraceError",
    "TracePod", "default_trace_dir", "inflate", "load_nodes", "load_pods", "replay",
]
