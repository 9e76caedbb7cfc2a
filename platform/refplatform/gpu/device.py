"""The simulated GPUs of a partitioned node: slices, Allocate, memory accounting and fault semantics.

A :class:`Slice` is what one pod gets: a MIG instance (``gpu``/``instance``), a time-slicing
replica or a HAMi vGPU of one GPU (``instance`` None), or a whole GPU (mode ``none``).
``enforce_isolation=False`` makes every mode behave like time-slicing (docs/PARTITIONING.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from refplatform.gpu.mig import profile_memory_mib
from refplatform.gpu.partition import GPU, PartitionConfig

__all__ = ["CONTAINED_XIDS", "AllocationError", "DeviceSet", "RESET_XIDS", "Slice", "xid_message"]

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


def _request(requests: Mapping[str, object], name: str) -> int:
    try:
        return int(str(requests.get(name, 0)))
    except ValueError:
        return 0


class DeviceSet:
    """The slices of a node's GPUs and which pod holds each.  Not thread-safe: one owner (the pod syncer)."""

    def __init__(self, config: PartitionConfig, model: str, gpu_count: int, gpu_memory_mib: int,
                 leaky: bool = False) -> None:
        self.config = config
        # leaky: the leaky-mig defect (docs/DEFECTS.md), off on an honest node: a contained Xid on one MIG
        # instance fails every instance of its GPU.
        self.leaky = leaky
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

    def allocate(self, pod: str, requests: Mapping[str, object], prefer: str | None = None) -> Slice | None:
        """The slice for ``pod`` (key ``ns/name``) asking ``requests`` (its containers' limits/requests), like a device
        plugin's Allocate.  None when it asks for no GPU resource; :class:`AllocationError` when none is free.
        ``prefer``: a previous ``<gpu>/<instance>`` (an agent restart keeps the pod on its slice)."""
        if pod in self.by_pod:
            return self.by_pod[pod]
        wanted = [r for r in sorted(self.resources()) if _request(requests, r) > 0]
        if not wanted:
            return None
        resource = wanted[0]
        free = [s for s in self.slices if s.resource == resource and s not in self.holder]
        if not free:
            raise AllocationError(f"no free {resource} on this node ({sum(s.resource == resource for s in self.slices)} "
                                  f"in all, all assigned)")
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
        if xid not in RESET_XIDS and instance is not None and self.config.mig and self.config.enforce_isolation \
                and not self.leaky:
            return {p for s, p in self.holder.items() if s.gpu == gpu and s.instance == instance}
        return self.tenants(gpu)

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
