"""Resource amounts and the resource names the scheduler understands.

GPU sharing
-----------
A pod asks either for whole GPUs (``nvidia.com/gpu: N``) or for a *share of one
GPU* in milli-GPU (``firedrill.dev/gpu-milli: 1..999``), exactly like the
Alibaba trace's ``gpu_milli`` column.  A node advertises ``nvidia.com/gpu`` and,
implicitly, 1000 milli per GPU for sharing.  The scheduler tracks the used milli
of every GPU index on every node, places a sharing pod on one specific GPU and
records the chosen index(es) in the bind decision; the controller writes them to
the pod annotation :data:`GPU_INDEX_ANNOTATION` so the next snapshot carries them
back (:attr:`refplatform.core.pod.Pod.gpu_indices`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from refplatform.core.errors import SnapshotError

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
"""Whole GPUs, the NVIDIA device plugin's extended resource."""
GPU_MILLI = "firedrill.dev/gpu-milli"
"""A share of ONE GPU in thousandths (1..999); Firedrill's GPU-sharing resource."""
GPU_INDEX_ANNOTATION = "firedrill.dev/gpu-index"
"""Pod annotation holding the GPU indices chosen at bind time, comma-separated ("0" or "2,3")."""
GPU_MODEL_LABEL = "nvidia.com/gpu.product"
"""GPU Feature Discovery's node label naming the GPU model; GPU-model selectors match it."""
TOPOLOGY_LABEL = "firedrill.dev/nvlink-domain"
"""Default node label grouping nodes into one fast-interconnect domain (topology preference)."""
MILLI_PER_GPU = 1000
MIG_PREFIX = "nvidia.com/mig-"
"""MIG instances of one profile (``nvidia.com/mig-1g.18gb``), the mixed strategy's resources."""
GPU_SHARED = "nvidia.com/gpu.shared"
"""Time-slicing replicas when the device plugin renames them (``renameByDefault``)."""
GPU_MEM = "nvidia.com/gpumem"
"""HAMi: GPU memory in MiB (node total / pod share)."""
GPU_CORES = "nvidia.com/gpucores"
"""HAMi: GPU compute in percent of one GPU (node total = GPUs x 100)."""
CORE_RESOURCE_NAMES = frozenset({CPU, MEMORY, GPU, GPU_MILLI})
"""Resources with their own :class:`Resources` field; never extended resources."""

Extended = tuple[tuple[str, int], ...]


def _extended(value: Iterable[tuple[str, int]] | Mapping[str, int]) -> Extended:
    """Canonical form: sorted by name, zero amounts dropped, names unique."""
    items = value.items() if isinstance(value, Mapping) else value
    out: dict[str, int] = {}
    for name, amount in items:
        if name in CORE_RESOURCE_NAMES:
            raise SnapshotError(f"{name} is not an extended resource (it has its own Resources field)")
        if name in out:
            raise SnapshotError(f"extended resource {name} given twice")
        amount = int(amount)
        if amount < 0:
            raise SnapshotError(f"negative amount of {name}: {amount}")
        out[name] = amount
    return tuple(sorted((n, a) for n, a in out.items() if a))


@dataclass(frozen=True, slots=True)
class Resources:
    """Requests of a pod, or allocatable of a node.

    ``gpus`` counts whole GPUs; ``gpu_milli`` is a share of a single GPU (pods only)
    and excludes whole GPUs: a pod has one or the other.

    ``extended`` holds every other counted resource (``nvidia.com/mig-1g.18gb``,
    ``nvidia.com/gpu.shared``, ``nvidia.com/gpumem``, ...) as plain integer
    amounts per node, no GPU indices.  It may be given as a mapping or as pairs;
    it is stored as a tuple of ``(name, amount)`` sorted by name with zero
    amounts dropped, so the object stays hashable and equal for equal amounts.
    Read one amount with :meth:`amount`.
    """

    cpu_milli: int = 0
    memory_bytes: int = 0
    gpus: int = 0
    gpu_milli: int = 0
    extended: Extended = ()

    def __post_init__(self) -> None:
        if self.extended or type(self.extended) is not tuple:
            object.__setattr__(self, "extended", _extended(self.extended))
        if min(self.cpu_milli, self.memory_bytes, self.gpus, self.gpu_milli) < 0:
            raise SnapshotError(f"negative resource amount in {self}")
        if self.gpu_milli >= MILLI_PER_GPU:
            raise SnapshotError(
                f"{GPU_MILLI} must be 1..999 (a share of one GPU), got {self.gpu_milli}; "
                f"ask for whole GPUs with {GPU}")
        if self.gpu_milli and self.gpus:
            raise SnapshotError(f"a pod asks for whole GPUs or for a GPU share, not both: {self}")

    @property
    def total_gpu_milli(self) -> int:
        """GPU demand in milli-GPU (whole GPUs count 1000 each)."""
        return self.gpus * MILLI_PER_GPU + self.gpu_milli

    @property
    def is_gpu_share(self) -> bool:
        return self.gpu_milli > 0

    @property
    def is_empty(self) -> bool:
        return not (self.cpu_milli or self.memory_bytes or self.gpus or self.gpu_milli or self.extended)

    def amount(self, name: str) -> int:
        """The amount of any resource by its API name (``cpu`` in milli, ``memory`` in bytes,
        ``nvidia.com/gpu``, ``firedrill.dev/gpu-milli`` or an extended resource; 0 when absent)."""
        if name == CPU:
            return self.cpu_milli
        if name == MEMORY:
            return self.memory_bytes
        if name == GPU:
            return self.gpus
        if name == GPU_MILLI:
            return self.gpu_milli
        for key, value in self.extended:
            if key == name:
                return value
        return 0

    def extended_dict(self) -> dict[str, int]:
        return dict(self.extended)

    def usage(self) -> Usage:
        return Usage(self.cpu_milli, self.memory_bytes, self.total_gpu_milli)


@dataclass(frozen=True, slots=True)
class Usage:
    """An additive amount in the three dimensions queues account for (GPU in milli)."""

    cpu_milli: int = 0
    memory_bytes: int = 0
    gpu_milli: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes,
                     self.gpu_milli + other.gpu_milli)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu_milli - other.cpu_milli, self.memory_bytes - other.memory_bytes,
                     self.gpu_milli - other.gpu_milli)

    def scaled(self, factor: float) -> Usage:
        return Usage(int(self.cpu_milli * factor), int(self.memory_bytes * factor),
                     int(self.gpu_milli * factor))

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.cpu_milli, self.memory_bytes, self.gpu_milli)

    def describe(self) -> str:
        parts = []
        if self.gpu_milli:
            parts.append(f"{GPU} {self.gpu_milli / MILLI_PER_GPU:g}")
        if self.cpu_milli:
            parts.append(f"{CPU} {self.cpu_milli}m")
        if self.memory_bytes:
            parts.append(f"{MEMORY} {self.memory_bytes}")
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True, slots=True)
class Quota:
    """A per-dimension limit where ``None`` means "not set" (unlimited for a
    capability, zero for a guarantee, computed for a deserved share)."""

    cpu_milli: int | None = None
    memory_bytes: int | None = None
    gpu_milli: int | None = None

    @classmethod
    def of(cls, *, gpus: float | None = None, cpu_milli: int | None = None,
           memory_bytes: int | None = None) -> Quota:
        """Build a quota from whole GPUs (as Volcano's ``nvidia.com/gpu: "16"``)."""
        return cls(cpu_milli, memory_bytes,
                   None if gpus is None else int(round(gpus * MILLI_PER_GPU)))

    def as_tuple(self) -> tuple[int | None, int | None, int | None]:
        return (self.cpu_milli, self.memory_bytes, self.gpu_milli)

    @property
    def is_unset(self) -> bool:
        return self.as_tuple() == (None, None, None)

    def exceeded_by(self, amount: Usage) -> tuple[str, ...]:
        """Names of the resources in which ``amount`` is above this limit."""
        names = (CPU, MEMORY, GPU)
        return tuple(name for name, limit, value in zip(names, self.as_tuple(), amount.as_tuple())
                     if limit is not None and value > limit)

    def or_zero(self) -> Usage:
        return Usage(*(0 if v is None else v for v in self.as_tuple()))
