"""DCGM-exporter-style GPU metrics of one simulated node, served as ``GET /metrics`` by the log server.

A custom :class:`prometheus_client.registry.Collector` on a private registry
computes every value at scrape time from the agent's live state (the pod
workers of :class:`~refplatform.agent.pods.PodSync`, its device set and the
injected Xids).  For a pod of real processes the activity is what the node's
simulated device observed over its last second (:mod:`refplatform.agent.device`:
engine = compute + comm share, tensor = compute share x ``firedrill.dev/mfu``),
never what the workload says about itself.  For a simulated workload it is
**instantaneous**: the steady-state rate of what the GPU is doing at the scrape
(a training rank that is stepping, or stalled, or nothing).  See docs/WORKLOAD.md
"Metrics".

One series per GPU, or per MIG instance when the node is MIG-partitioned,
with dcgm-exporter's labels: ``gpu``, ``UUID``, ``device``, ``modelName``,
``Hostname``, ``pod``/``namespace``/``container`` (empty when no pod holds
it) and, for MIG instances, ``GPU_I_PROFILE`` and ``GPU_I_ID``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from refplatform.agent.pods import PodSync, PodWorker
from refplatform.agent.runtime import ProcessWorkload
from refplatform.agent.workload import TrainingWorkload
from refplatform.core.resources import GPU_INDEX_ANNOTATION
from refplatform.gpu.identity import gpu_uuid

__all__ = ["CONTENT_TYPE", "DEFAULT_FB_USED_MIB", "DEFAULT_MFU", "MFU_ANNOTATION", "GpuCollector", "GpuMetrics"]

log = logging.getLogger(__name__)

MAX_SM_CLOCK_MHZ = 1980
"""The simulated GPU's SM clock at full speed (an H100 SXM's maximum); a throttled GPU reports its fraction."""
THROTTLE_SW_POWER_CAP = 0x4
"""``DCGM_CLOCKS_THROTTLE_REASON_SW_POWER_CAP``: the reason a throttled simulated GPU reports (a power limit)."""

MFU_ANNOTATION = "firedrill.dev/mfu"
DEFAULT_MFU = 0.4
DEFAULT_FB_USED_MIB = 512
"""Framebuffer a running container uses when its pod sets no ``firedrill.dev/memory-mib``."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Activity:
    """What one GPU (or MIG instance) does at the scrape."""

    gr_engine: float = 0.0
    tensor: float = 0.0
    util: float = 0.0


IDLE = Activity()


def _mfu(annotations: dict[str, str]) -> float:
    raw = annotations.get(MFU_ANNOTATION)
    if raw is None:
        return DEFAULT_MFU
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (0.0 <= value <= 1.0):
        log.debug("annotation %s=%r is not a ratio in [0, 1]; using %g", MFU_ANNOTATION, raw, DEFAULT_MFU)
        return DEFAULT_MFU
    return value


def activity(worker: PodWorker, pods: PodSync | None = None) -> Activity:
    """The activity of the GPU(s) a pod holds.

    Real processes: what the node's simulated device observed over its last window
    (:mod:`refplatform.agent.device`): engine = compute + comm share, tensor = compute
    share x the pod's MFU, utilization = 100 x engine.  Simulated workloads: the
    steady-state rate of the workload's current state.
    """
    wl = worker.workload
    if wl is None or not wl.running or (worker.run is not None and worker.run.exit is not None):
        return IDLE
    if isinstance(wl, ProcessWorkload):
        driver = pods.driver if pods is not None else None
        shares = driver.shares(worker.uid, pods.clock.now()) if driver is not None and pods is not None else None
        if shares is None:
            return IDLE
        engine = min(1.0, shares.engine)
        return Activity(gr_engine=engine, tensor=_mfu(worker.annotations) * min(1.0, shares.compute),
                        util=100.0 * engine)
    if not isinstance(wl, TrainingWorkload) or wl.stalled is not None or wl.resumed_from is None:
        return IDLE  # idle workload, or a rank stalled on peers / still reading its checkpoint
    p = wl.params
    busy = max(0.0, 1.0 - p.input_stall_share)  # compute + communication kernels
    compute = max(0.0, 1.0 - p.input_stall_share - p.comm_stall_share)
    return Activity(gr_engine=busy, tensor=_mfu(worker.annotations) * compute, util=100.0 if busy > 0 else 0.0)


class GpuCollector(Collector):
    """Computes the DCGM gauges from a :class:`PodSync` at every collect."""

    def __init__(self, node: str, pods: PodSync, gpu_count: int, model: str, gpu_model: str | None = None, *,
                 misattribute: bool = False) -> None:
        """``model``: the ``modelName`` label (dashes read as spaces); ``gpu_model``: the name MIG tables know;
        ``misattribute``: the ``misattributed-metrics`` defect (docs/DEFECTS.md): each GPU's series carries the
        next GPU's ``UUID``."""
        self.node = node
        self.misattribute = misattribute
        self.pods = pods
        self.gpu_count = gpu_count
        self.model_name = model.replace("-", " ")
        self.gpu_model = gpu_model or model

    def gpu_uuid(self, gpu: int) -> str:
        """The same identity the device plugin tells the GPU's pods (``NVIDIA_VISIBLE_DEVICES``), as dcgm-exporter's
        ``UUID`` label and the device plugin agree on a real node."""
        return gpu_uuid(self.node, gpu)

    def _workers(self) -> list[PodWorker]:
        for _ in range(5):  # the pod sync thread may change the dict while we copy it
            try:
                return sorted(self.pods.workers.values(), key=lambda w: w.key)
            except RuntimeError:
                continue
        return []

    def _series(self) -> list[tuple[dict[str, str], PodWorker | None, int]]:
        """``(labels, holder, gpu)`` of every GPU or MIG instance."""
        workers = [w for w in self._workers() if w.workload is not None and w.workload.running]
        by_slice: dict[str, PodWorker] = {w.devices: w for w in workers if w.devices is not None}
        devices = self.pods.devices
        out: list[tuple[dict[str, str], PodWorker | None, int]] = []
        if devices is not None and devices.config.mig:
            layouts = devices.config.gpu_layouts(self.gpu_model, devices.gpu_count)
            for s in devices.slices:
                assert s.instance is not None
                holder = by_slice.get(s.annotation)
                labels = self._labels(s.gpu, holder)
                labels["GPU_I_PROFILE"] = layouts[s.gpu][s.instance]
                labels["GPU_I_ID"] = str(s.instance)
                out.append((labels, holder, s.gpu))
            return out
        holders: dict[int, PodWorker] = {}
        if devices is not None:
            for w in workers:  # shared modes: the first tenant (by pod key) names the GPU
                if w.devices is not None:
                    holders.setdefault(int(w.devices.split("/")[0]), w)
        else:
            # Whole GPUs: the indices the scheduler chose (firedrill.dev/gpu-index, written at bind time);
            # a pod bound without them (by hand) gets the lowest free indices, in pod-key order.
            unplaced = []
            for w in workers:
                indices = [int(i) for i in (w.annotations or {}).get(GPU_INDEX_ANNOTATION, "").split(",")
                           if i.strip().isdigit() and int(i) < self.gpu_count]
                for g in indices:
                    holders.setdefault(g, w)
                if not indices:
                    unplaced.append(w)
            free = (g for g in range(self.gpu_count) if g not in holders)
            for w in unplaced:
                for _, g in zip(range(w.gpu_request), free):
                    holders[g] = w
        for g in range(self.gpu_count):
            out.append((self._labels(g, holders.get(g)), holders.get(g), g))
        return out

    def _labels(self, gpu: int, holder: PodWorker | None) -> dict[str, str]:
        return {
            "gpu": str(gpu),
            "UUID": self.gpu_uuid((gpu + 1) % max(self.gpu_count, 1) if self.misattribute else gpu),
            "device": f"nvidia{gpu}",
            "modelName": self.model_name,
            "Hostname": self.node,
            "pod": holder.name if holder else "",
            "namespace": holder.namespace if holder else "",
            "container": holder.container if holder else "",
        }

    def collect(self) -> Iterator[Metric]:
        series = self._series()
        names = ["gpu", "UUID", "device", "modelName", "Hostname", "pod", "namespace", "container"]
        mig_names = [*names, "GPU_I_PROFILE", "GPU_I_ID"]
        gr = GaugeMetricFamily("DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                               "Ratio of time the graphics engine is active (instantaneous, at the scrape).")
        tensor = GaugeMetricFamily("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                                   "Ratio of cycles the tensor (HMMA) pipe is active: the MFU proxy "
                                   "(instantaneous, at the scrape).")
        util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL",
                                 "GPU utilization in % (nvidia-smi: any kernel running; instantaneous). "
                                 "Not reported for MIG instances.")
        fb = GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB; instantaneous).")
        xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered (instantaneous).")
        sm_clock = GaugeMetricFamily("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz; instantaneous).")
        reasons = GaugeMetricFamily("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                                    "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).")
        speeds = dict(self.pods.throttle.gpu_speed)
        last_xid = _copy(self.pods.last_xid)
        for labels, holder, gpu in series:
            keys = mig_names if "GPU_I_ID" in labels else names
            values = [labels[k] for k in keys]
            act = activity(holder, self.pods) if holder is not None else IDLE
            _add(gr, keys, values, act.gr_engine)
            _add(tensor, keys, values, act.tensor)
            if "GPU_I_ID" not in labels:
                _add(util, keys, values, act.util)
                speed = speeds.get(gpu, 1.0)  # a throttled GPU (refplatform.gpu.throttle): its clock, and why
                _add(sm_clock, keys, values, float(round(MAX_SM_CLOCK_MHZ * speed)))
                _add(reasons, keys, values, float(THROTTLE_SW_POWER_CAP if speed < 1.0 else 0))
            used = 0
            if holder is not None and holder.workload is not None and holder.workload.running:
                used = holder.memory_mib or DEFAULT_FB_USED_MIB
            _add(fb, keys, values, float(used))
            instance = int(labels["GPU_I_ID"]) if "GPU_I_ID" in labels else None
            _add(xid, keys, values, float(_last_xid(last_xid, gpu, instance)))
        yield from (gr, tensor)
        if util.samples:  # an all-MIG node has none
            yield util
        yield from (fb, xid)
        if sm_clock.samples:
            yield from (sm_clock, reasons)


def _copy(xids: dict[tuple[int, int | None], int]) -> dict[tuple[int, int | None], int]:
    for _ in range(5):  # the pod sync thread may add an entry while we copy
        try:
            return dict(xids)
        except RuntimeError:
            continue
    return {}


def _last_xid(xids: dict[tuple[int, int | None], int], gpu: int, instance: int | None) -> int:
    """The latest Xid that hit this GPU (any part of it) or this MIG instance (itself or its whole GPU); 0 if none."""
    code = 0
    for (g, i), value in xids.items():  # oldest first
        if g == gpu and (instance is None or i is None or i == instance):
            code = value
    return code


def _add(family: GaugeMetricFamily, keys: list[str], values: list[str], value: float) -> None:
    # MIG and whole-GPU series carry different label sets, so samples are added directly.
    family.samples.append(Sample(family.name, dict(zip(keys, values, strict=True)), value, None, None))


class GpuMetrics:
    """The private registry holding one :class:`GpuCollector`; :meth:`render` is the ``/metrics`` body.

    ``stale``: the ``stale-metrics`` defect (docs/DEFECTS.md): the first body rendered is kept and every later
    scrape answers it again, 200 and well-formed, as an exporter whose collection loop has stopped does."""

    def __init__(self, collector: GpuCollector, *, stale: bool = False) -> None:
        self.collector = collector
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.stale = stale
        self._frozen: bytes | None = None
        self._lock = threading.Lock()

    def render(self) -> bytes:
        if not self.stale:
            return generate_latest(self.registry)
        with self._lock:
            if self._frozen is None:
                self._frozen = generate_latest(self.registry)
            return self._frozen
