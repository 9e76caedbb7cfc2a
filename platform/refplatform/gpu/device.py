"""The simulated GPUs of a partitioned node: slices, Allocate, memory accounting and fault semantics.

A :class:`Slice` is what one pod gets: a MIG instance (``gpu``/``instance``), a time-slicing
replica or a HAMi vGPU of one GPU (``instance`` None), or a whole GPU (mode ``none``).
``enforce_isolation=False`` makes every mode behave like time-slicing (docs/PARTITIONING.md).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from refplatform.gpu.health import marks_unhealthy
from refplatform.gpu.mig import profile_memory_mib
from refplatform.gpu.partition import GPU, GPUCORES, GPUMEM, PartitionConfig

__all__ = ["CONTAINED_XIDS", "AllocationError", "DeviceSet", "RESET_XIDS", "Slice", "contained", "saw_xid",
           "slices_out", "takes_gpu_out", "withdrawn_resources", "xid_message"]

CONTAINED_XIDS = frozenset({94})
"""Contained ECC errors: only the affected instance's tenant, where the mode contains it."""
RESET_XIDS = frozenset({95, 48, 79})
"""Uncontained / reset class: every tenant on the GPU, in every mode."""
_XID_CLASS = {94: "contained ECC error", 95: "uncontained ECC error", 48: "double-bit ECC error",
              79: "GPU has fallen off the bus"}


class AllocationError(RuntimeError):
    """No free slice for a pod's request."""


@dataclass(frozen=True)
class Slice:
    gpu: int
    instance: int | None
    """MIG instance index on its GPU; None outside MIG."""
    resource: str
    """The extended resource it serves (``nvidia.com/mig-1g.18gb``, ``nvidia.com/gpu``...)."""
    memory_mib: int
    """The tenant's memory share."""
    slot: int = 0

    @property
    def annotation(self) -> str:
        """``<gpu>/<instance>`` (instance ``-`` when not MIG)."""
        return f"{self.gpu}/{'-' if self.instance is None else self.instance}"


def xid_message(gpu: int, instance: int | None, xid: int) -> str:
    where = f"GPU {gpu}" + (f" instance {instance}" if instance is not None else "")
    what = _XID_CLASS.get(xid, "GPU error")
    return f"Xid {xid} ({what}) on {where}"


def contained(config: PartitionConfig, instance: int | None, xid: int) -> bool:
    """Does the mode keep this Xid to one MIG instance (its tenant alone fails, its GPU stays in service)?  Any Xid
    but the reset class, named on a MIG instance of a node that enforces isolation."""
    return xid not in RESET_XIDS and instance is not None and config.mig and config.enforce_isolation


def takes_gpu_out(config: PartitionConfig, instance: int | None, xid: int) -> bool:
    """Does this Xid take its physical GPU out of service, every MIG instance, replica or vGPU on it?  A GPU-class
    Xid (not an application's, :func:`refplatform.gpu.health.marks_unhealthy`) that the mode does not contain to
    one MIG instance: one physical GPU, one health (NVIDIA/k8s-device-plugin#1929)."""
    return marks_unhealthy(xid) and not contained(config, instance, xid)


def saw_xid(slices: Sequence[Slice], gpu: int, instance: int | None) -> Slice | None:
    """The one slice an Xid is seen on: the MIG instance it names, else the GPU's first slice (None: the node has no
    such slice).  Only the ``shared-health-lost`` defect acts on it: as upstream's health check, which kept one
    device per physical GPU in its map, it takes that slice out alone."""
    on_gpu = [s for s in slices if s.gpu == gpu]
    named = [s for s in on_gpu if s.instance == instance] if instance is not None else []
    return (named or on_gpu or [None])[0]


def slices_out(slices: Sequence[Slice], out: Iterable[int], saw: Mapping[int, Slice] | None = None) -> frozenset[Slice]:
    """The slices the device plugin reports Unhealthy while the GPUs ``out`` are out of service: every slice of
    each.  ``saw`` (the ``shared-health-lost`` defect): GPU -> the one slice that saw its Xid, which alone leaves
    (a GPU missing from it loses its first slice)."""
    gone = set(out)
    if saw is None:
        return frozenset(s for s in slices if s.gpu in gone)
    kept = (saw.get(g) or saw_xid(slices, g, None) for g in gone)
    return frozenset(s for s in kept if s is not None)


def withdrawn_resources(config: PartitionConfig, slices: Sequence[Slice], out: Collection[Slice],
                        gpu_memory_mib: int) -> dict[str, int]:
    """How much of each advertised resource (docs/PARTITIONING.md, "What the node advertises") the slices ``out``
    take off the node's allocatable: one per slice of its resource; on HAMi also its memory share and cores (a
    GPU whose every vGPU is out: the GPU's whole memory and 100 cores)."""
    off: dict[str, int] = {}
    for s in out:
        off[s.resource] = off.get(s.resource, 0) + 1
    if config.mode == "hami":
        for gpu in sorted({s.gpu for s in out}):
            mine = [s for s in slices if s.gpu == gpu]
            gone = [s for s in mine if s in out]
            whole = len(gone) == len(mine)
            off[GPUMEM] = off.get(GPUMEM, 0) + (gpu_memory_mib if whole else sum(s.memory_mib for s in gone))
            off[GPUCORES] = off.get(GPUCORES, 0) + (100 if whole else len(gone) * 100 // len(mine))
    return off


def _request(requests: Mapping[str, object], name: str) -> int:
    try:
        return int(str(requests.get(name, 0)))
    except ValueError:
        return 0


class DeviceSet:
    """The slices of a node's GPUs and which pod holds each.  Not thread-safe: one owner (the pod syncer)."""

    def __init__(self, config: PartitionConfig, model: str, gpu_count: int, gpu_memory_mib: int,
                 leaky: bool = False, shared_health_lost: bool = False) -> None:
        self.config = config
        # leaky: the leaky-mig defect (docs/DEFECTS.md), off on an honest node: a contained Xid on one MIG
        # instance fails every instance of its GPU.
        self.leaky = leaky
        # shared_health_lost: the shared-health-lost defect, off on an honest node: an Xid that takes a GPU out
        # takes out (and fails the tenant of) only the one slice it was seen on; the GPU's other slices stay
        # allocatable and their tenants run on.
        self.shared_health_lost = shared_health_lost
        self.gpu_count = gpu_count
        self.gpu_memory_mib = gpu_memory_mib
        self.slices: list[Slice] = []
        if config.mig:
            for g, layout in enumerate(config.gpu_layouts(model, gpu_count)):
                for i, profile in enumerate(layout):
                    resource = GPU if config.mode == "mig-single" else f"nvidia.com/mig-{profile}"
                    self.slices.append(Slice(g, i, resource, profile_memory_mib(profile)))
        else:
            per_gpu = {"none": 1, "time-slicing": config.replicas, "hami": config.vgpus_per_gpu}[config.mode]
            resource = f"{GPU}.shared" if config.mode == "time-slicing" and config.rename_by_default else GPU
            for g in range(gpu_count):
                for s in range(per_gpu):
                    self.slices.append(Slice(g, None, resource, gpu_memory_mib // per_gpu, s))
        self.holder: dict[Slice, str] = {}
        self.by_pod: dict[str, Slice] = {}
        self.share: dict[str, int] = {}

    @property
    def isolating(self) -> bool:
        """Whether memory and contained faults stay with one tenant (MIG, HAMi with enforcement on)."""
        return self.config.enforce_isolation and self.config.mode in ("mig-single", "mig-mixed", "hami", "none")

    def resources(self) -> set[str]:
        return {s.resource for s in self.slices}

    def allocate(self, pod: str, requests: Mapping[str, object], prefer: str | None = None,
                 unhealthy: Collection[Slice] = ()) -> Slice | None:
        """The slice for ``pod`` (key ``ns/name``) asking ``requests`` (its containers' limits/requests), like a device
        plugin's Allocate.  None when it asks for no GPU resource; :class:`AllocationError` when none is free.
        ``prefer``: a previous ``<gpu>/<instance>`` (an agent restart keeps the pod on its slice); ``unhealthy``: the
        slices out of service (:func:`slices_out`), never handed out, as the kubelet never hands out an Unhealthy
        device."""
        if pod in self.by_pod:
            return self.by_pod[pod]
        wanted = [r for r in sorted(self.resources()) if _request(requests, r) > 0]
        if not wanted:
            return None
        resource = wanted[0]
        free = [s for s in self.slices if s.resource == resource and s not in self.holder and s not in unhealthy]
        if not free:
            total = sum(s.resource == resource for s in self.slices)
            out = sum(s.resource == resource for s in unhealthy)
            raise AllocationError(f"no free {resource} on this node ({total} in all, "
                                  + (f"{out} out of service, the others assigned)" if out else "all assigned)"))
        chosen = next((s for s in free if s.annotation == prefer), None) or self._pick(free)
        self.holder[chosen] = pod
        self.by_pod[pod] = chosen
        share = chosen.memory_mib
        if self.config.mode == "hami" and _request(requests, "nvidia.com/gpumem") > 0:
            share = _request(requests, "nvidia.com/gpumem")
        self.share[pod] = share
        return chosen

    def _pick(self, free: list[Slice]) -> Slice:
        if self.config.mig or self.config.mode == "none":
            return free[0]
        # Shared modes: the GPU with the fewest tenants first (spread, like HAMi's default).
        tenants = {g: 0 for g in range(self.gpu_count)}
        for s in self.holder:
            tenants[s.gpu] += 1
        return min(free, key=lambda s: (tenants[s.gpu], s.gpu, s.slot))

    def release(self, pod: str) -> None:
        s = self.by_pod.pop(pod, None)
        self.share.pop(pod, None)
        if s is not None:
            self.holder.pop(s, None)

    def tenants(self, gpu: int) -> set[str]:
        return {p for s, p in self.holder.items() if s.gpu == gpu}

    def apply_xid(self, gpu: int, instance: int | None, xid: int) -> set[str]:
        """The pods an Xid on ``gpu`` (``instance``: a MIG instance, or None for the whole GPU) fails."""
        if contained(self.config, instance, xid) and not self.leaky:
            return {p for s, p in self.holder.items() if s.gpu == gpu and s.instance == instance}
        if self.shared_health_lost and takes_gpu_out(self.config, instance, xid):
            seen = saw_xid(self.slices, gpu, instance)
            return {self.holder[seen]} if seen in self.holder else set()
        return self.tenants(gpu)

    def failing(self, entries: Iterable[tuple[int, int | None, int]]) -> dict[int, int]:
        """From standing ``(gpu, instance, xid)`` entries: each GPU of the node an Xid takes out of service
        (:func:`takes_gpu_out`) -> the first such Xid."""
        out: dict[int, int] = {}
        for gpu, instance, xid in entries:
            if 0 <= gpu < self.gpu_count and takes_gpu_out(self.config, instance, xid):
                out.setdefault(gpu, xid)
        return out

    def saw(self, entries: Iterable[tuple[int, int | None, int]]) -> dict[int, Slice]:
        """GPU -> the slice its first GPU-taking entry was seen on (:func:`saw_xid`); what ``shared-health-lost``
        takes out alone."""
        out: dict[int, Slice] = {}
        for gpu, instance, xid in entries:
            seen = saw_xid(self.slices, gpu, instance)
            if gpu not in out and seen is not None and takes_gpu_out(self.config, instance, xid):
                out[gpu] = seen
        return out

    def out_of_service(self, gpus: Iterable[int], saw: Mapping[int, Slice] | None = None) -> frozenset[Slice]:
        """The slices out of service while ``gpus`` are (:func:`slices_out`); under ``shared-health-lost`` only the
        slice each GPU's Xid was seen on (``saw``)."""
        return slices_out(self.slices, gpus, (saw or {}) if self.shared_health_lost else None)

    def withdrawn(self, out: Collection[Slice]) -> dict[str, int]:
        """What the slices ``out`` take off the node's allocatable (:func:`withdrawn_resources`)."""
        return withdrawn_resources(self.config, self.slices, out, self.gpu_memory_mib)

    def check_memory(self, usage: Mapping[str, int]) -> dict[str, str]:
        """Pods that fail with ``OutOfMemory`` given each pod's memory use (MiB), with the message."""
        failed: dict[str, str] = {}
        for gpu in range(self.gpu_count):
            tenants = sorted(self.tenants(gpu))
            over = {p: usage.get(p, 0) for p in tenants if usage.get(p, 0) > self.share.get(p, 0)}
            total = sum(usage.get(p, 0) for p in tenants)
            if self.isolating:
                for p, used in over.items():
                    failed[p] = f"used {used} MiB of its {self.share[p]} MiB share on GPU {self.by_pod[p].annotation}"
            elif over or total > self.gpu_memory_mib:
                culprit = next(iter(over), None)
                why = (f"{culprit} used {over[culprit]} MiB of its {self.share[culprit]} MiB share"
                       if culprit else f"tenants used {total} MiB of {self.gpu_memory_mib} MiB")
                for p in tenants:
                    failed[p] = (f"used {usage.get(p, 0)} MiB of its {self.share[p]} MiB share; GPU {gpu} memory is "
                                 f"shared and {why}")
        return failed
