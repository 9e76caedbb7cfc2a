"""Per-GPU telemetry as the harness reads it: DCGM's names, from whichever source the target has (docs/METRICS.md).

- :mod:`drills.target.gpumetrics.model`: one reading of every node's GPUs (utilization, memory, the last Xid),
  built from Prometheus text or from a Prometheus query answer (pure).
- :mod:`drills.target.gpumetrics.source`: where it is read: each reference node agent's own ``/metrics`` (the
  embedded platform), or the profile's Prometheus scraping dcgm-exporter (a real cluster).
"""

from drills.target.gpumetrics.model import (ENGINE, FB_FREE, FB_USED, UTIL, XID, GpuMetricsError, GpuSample,
                                            MetricsUnavailable, NodeAnswer, Reading)
from drills.target.gpumetrics.source import NO_SOURCE, GpuMetricsSource, source_for

__all__ = ["ENGINE", "FB_FREE", "FB_USED", "NO_SOURCE", "UTIL", "XID", "GpuMetricsError", "GpuMetricsSource",
           "GpuSample", "MetricsUnavailable", "NodeAnswer", "Reading", "source_for"]
