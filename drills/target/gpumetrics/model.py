"""One reading of the GPUs' telemetry, in DCGM's names and labels (pure: parsing and grouping, no I/O).

dcgm-exporter writes one series per GPU (or MIG instance) and field, labelled ``gpu`` (the minor number),
``UUID``, ``device``, ``modelName``, the node as ``Hostname`` (``hostname`` on its main branch), and, with its
Kubernetes mapping on, ``pod``/``namespace``/``container`` (docs/METRICS.md).  The reference platform's node agents
write the same (refplatform.agent.metrics).  A :class:`Reading` holds, per node, the GPUs its answer named with
the fields the drills read: utilization, framebuffer memory and the last Xid.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client.parser import text_string_to_metric_families

from drills.errors import FiredrillError
from drills.target.xid import XID_METRIC

__all__ = ["ENGINE", "FB_FREE", "FB_USED", "FIELDS", "HOST_LABELS", "UTIL", "XID", "GpuMetricsError", "GpuSample",
           "MetricsUnavailable", "NodeAnswer", "Reading", "Row", "group", "host_of", "rows_of_exposition"]

UTIL = "DCGM_FI_DEV_GPU_UTIL"
"""GPU utilization in % (a kernel ran in the sample period); dcgm-exporter's default counters; not for MIG."""
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
"""Ratio of time the graphics engine is active (0..1); a profiling field, also on MIG instances."""
FB_USED = "DCGM_FI_DEV_FB_USED"
"""Framebuffer memory used, MiB."""
FB_FREE = "DCGM_FI_DEV_FB_FREE"
"""Framebuffer memory free, MiB (dcgm-exporter's default counters; the reference agents do not write it)."""
XID = XID_METRIC
"""The value of the last Xid the GPU encountered (0: none since the exporter started)."""
FIELDS = (UTIL, ENGINE, FB_USED, FB_FREE, XID)
"""The fields a reading keeps; every other series of the answer is ignored."""
HOST_LABELS = ("Hostname", "hostname", "node", "kubernetes_node")
"""Labels that name a series' node, in the order they are believed: dcgm-exporter's own (released, then main),
then what a Prometheus scrape configuration commonly adds."""


class GpuMetricsError(FiredrillError):
    """Root of the GPU telemetry reader's errors."""


class MetricsUnavailable(GpuMetricsError):
    """No reading could be had at all (no source, Prometheus unreachable or not answering a query): no claim either
    way about the platform; the message says how to make one."""


Row = tuple[str, Mapping[str, str], float]
"""One sample: (metric name, its labels, its value)."""


@dataclass(frozen=True)
class GpuSample:
    """One GPU (or MIG instance) of one node, with the fields its node's answer held for it."""

    node: str
    gpu: str
    """The ``gpu`` label: the minor number ("" when the series carry none)."""
    uuid: str
    instance: str = ""
    """The MIG GPU instance (``GPU_I_ID``); "" for a whole GPU."""
    pod: str | None = None
    """The ``pod`` label (dcgm-exporter's Kubernetes mapping): "" when no pod holds it, None when not mapped."""
    values: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def name(self) -> str:
        """How a finding names it: ``GPU 3 (GPU-...)``, ``GPU 0 instance 2 (GPU-...)``."""
        label = f"GPU {self.gpu}" if self.gpu else "GPU"
        label += f" instance {self.instance}" if self.instance else ""
        return f"{label} ({self.uuid})" if self.uuid else label

    @property
    def utilization(self) -> float | None:
        """Utilization in %: ``DCGM_FI_DEV_GPU_UTIL``, else 100 x ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (MIG); None
        when the answer held neither for this GPU."""
        if UTIL in self.values:
            return self.values[UTIL]
        return 100.0 * self.values[ENGINE] if ENGINE in self.values else None

    @property
    def memory_mib(self) -> float | None:
        """Framebuffer used, MiB (``DCGM_FI_DEV_FB_USED``); None when the answer held none for this GPU."""
        return self.values.get(FB_USED)

    @property
    def xid(self) -> int | None:
        """The last Xid (``DCGM_FI_DEV_XID_ERRORS``); None when the answer held none for this GPU."""
        value = self.values.get(XID)
        return None if value is None else int(value)


@dataclass(frozen=True)
class NodeAnswer:
    """What one node's telemetry said: its GPUs, or why nothing could be read from it."""

    node: str
    gpus: tuple[GpuSample, ...] = ()
    problem: str = ""
    """Why the node's answer could not be had ("": it answered), e.g. its exporter refused or is unreachable."""

    @property
    def empty(self) -> bool:
        """It answered, with no GPU sample at all: the exporter is up but says nothing (a frozen or broken one)."""
        return not self.problem and not self.gpus

    def find(self, uuid: str) -> GpuSample | None:
        """The whole GPU with this UUID (its first series when MIG instances share it)."""
        return next((g for g in self.gpus if g.uuid == uuid and not g.instance),
                    next((g for g in self.gpus if g.uuid == uuid), None))


@dataclass(frozen=True)
class Reading:
    """Every asked node's answer at one instant of the harness's clocks."""

    mono: float
    wall: float
    answers: Mapping[str, NodeAnswer]
    source: str
    """Where it was read, in words (for findings)."""

    def gpu(self, node: str, uuid: str) -> GpuSample | None:
        answer = self.answers.get(node)
        return None if answer is None else answer.find(uuid)


def host_of(labels: Mapping[str, str], known: Collection[str]) -> str | None:
    """The node among ``known`` that a series names in one of :data:`HOST_LABELS` (dcgm-exporter's ``Hostname``
    is the pod's own name where the exporter runs without ``NODE_NAME``: the next label may still name it)."""
    return next((labels[k] for k in HOST_LABELS if labels.get(k) in known), None)


def rows_of_exposition(text: str) -> list[Row]:
    """The samples of a Prometheus text exposition that are :data:`FIELDS`; ValueError when it is not one."""
    out: list[Row] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in FIELDS:
                out.append((s.name, dict(s.labels), float(s.value)))
    return out


def group(rows: Iterable[Row], node_of: Callable[[Mapping[str, str]], str | None]) -> dict[str, tuple[GpuSample, ...]]:
    """Rows by node, then by GPU (its ``gpu``, ``UUID`` and ``GPU_I_ID`` labels), each GPU with the fields it has;
    a row whose node ``node_of`` cannot tell, or whose value is not a number, is dropped."""
    by_node: dict[str, dict[tuple[str, str, str], tuple[str | None, dict[str, float]]]] = {}
    for name, labels, value in rows:
        node = node_of(labels)
        if node is None or not math.isfinite(value):
            continue
        key = (labels.get("gpu", ""), labels.get("UUID", ""), labels.get("GPU_I_ID", ""))
        gpus = by_node.setdefault(node, {})
        pod, values = gpus.setdefault(key, (labels.get("pod"), {}))
        values[name] = value
        if pod is None and labels.get("pod") is not None:
            gpus[key] = (labels.get("pod"), values)
    return {node: tuple(GpuSample(node, gpu, uuid, instance, pod, MappingProxyType(values))
                        for (gpu, uuid, instance), (pod, values) in sorted(gpus.items(), key=_order))
            for node, gpus in by_node.items()}


def _order(item: tuple[tuple[str, str, str], object]) -> tuple[int, str, str, str]:
    gpu, uuid, instance = item[0]
    return (int(gpu) if gpu.isdigit() else 1 << 30, gpu, instance, uuid)
