"""NVIDIA MIG profiles per GPU model and layout validation (docs/PARTITIONING.md, "MIG profiles")."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["MAX_COMPUTE_SLICES", "MAX_INSTANCES", "MAX_MEMORY_SLICES", "PROFILES", "PartitionError",
           "compute_slices", "memory_slices", "profile_memory_mib", "table_model", "validate_layout"]

MAX_INSTANCES = 7
MAX_COMPUTE_SLICES = 7
MAX_MEMORY_SLICES = 8

PROFILES: dict[str, dict[str, int]] = {
    "A100-40GB": {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
    "A100-80GB": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "H100-80GB": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "H200": {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
}
"""Model (the contract's name) -> profile -> max instances per GPU."""

_ALIASES = {
    "a100-40gb": "A100-40GB", "a100-sxm4-40gb": "A100-40GB", "a100": "A100-40GB", "nvidia-a100-sxm4-40gb": "A100-40GB",
    "a100-80gb": "A100-80GB", "a100-sxm4-80gb": "A100-80GB", "nvidia-a100-sxm4-80gb": "A100-80GB",
    "h100-80gb": "H100-80GB", "h100": "H100-80GB", "h100-sxm5-80gb": "H100-80GB", "nvidia-h100-80gb-hbm3": "H100-80GB",
    "h200": "H200", "h200-141gb": "H200", "nvidia-h200": "H200",
}
_PROFILE = re.compile(r"^(\d)g\.(\d+)gb$")


class PartitionError(ValueError):
    """An invalid partition configuration (the agent refuses to start, exit 2)."""


def table_model(name: str) -> str:
    """The contract's model name for an agent model name, alias or product label (``A100-SXM4-80GB`` -> ``A100-80GB``)."""
    key = name.strip().lower()
    if key in _ALIASES:
        return _ALIASES[key]
    raise PartitionError(f"GPU model {name!r} has no MIG profile table (known: {', '.join(PROFILES)})")


def _parse(profile: str) -> tuple[int, int]:
    m = _PROFILE.match(profile)
    if not m:
        raise PartitionError(f"{profile!r} is not a MIG profile name (<N>g.<M>gb)")
    return int(m.group(1)), int(m.group(2))


def compute_slices(profile: str) -> int:
    """The ``Ng`` number."""
    return _parse(profile)[0]


def memory_slices(model: str, profile: str) -> int:
    """Memory slices of 8: the smallest 1g size 1, the doubled 1g size 2, 2g 2, 3g 4, 4g 4, 7g 8."""
    g, gb = _parse(profile)
    if g == 1:
        smallest = min(_parse(p)[1] for p in PROFILES[model] if p.startswith("1g."))
        return 1 if gb == smallest else 2
    return {2: 2, 3: 4, 4: 4, 7: 8}[g]


def profile_memory_mib(profile: str) -> int:
    """The instance's memory in MiB (the profile's GB x 1024; the label ``nvidia.com/mig-<profile>.memory``)."""
    return _parse(profile)[1] * 1024


def validate_layout(model: str, layout: Sequence[Sequence[str]], gpu_count: int, *, single: bool = False) -> list[list[str]]:
    """One list of profiles per GPU (an entry missing for a GPU repeats the previous one), or :class:`PartitionError`
    naming the GPU index, the model and the profile."""
    if not layout:
        raise PartitionError(f"a MIG mode needs a layout (instances per GPU, in {model} profile names)")
    known = PROFILES[model]
    out: list[list[str]] = []
    for index in range(gpu_count):
        entry = [str(p) for p in layout[min(index, len(layout) - 1)]]
        where = f"GPU {index} ({model})"
        if not entry:
            raise PartitionError(f"{where}: empty MIG layout")
        for profile in entry:
            if profile not in known:
                raise PartitionError(f"{where}: profile {profile!r} is not a MIG profile of {model} "
                                     f"(known: {', '.join(known)})")
        if len(entry) > MAX_INSTANCES:
            raise PartitionError(f"{where}: {len(entry)} instances ({entry[0]}...) exceed {MAX_INSTANCES} per GPU")
        for profile in dict.fromkeys(entry):
            n = entry.count(profile)
            if n > known[profile]:
                raise PartitionError(f"{where}: profile {profile} x{n} exceeds its maximum of {known[profile]} per GPU")
        compute = sum(compute_slices(p) for p in entry)
        if compute > MAX_COMPUTE_SLICES:
            raise PartitionError(f"{where}: profiles {', '.join(entry)} take {compute} compute slices (max {MAX_COMPUTE_SLICES})")
        memory = sum(memory_slices(model, p) for p in entry)
        if memory > MAX_MEMORY_SLICES:
            raise PartitionError(f"{where}: profiles {', '.join(entry)} take {memory} memory slices (max {MAX_MEMORY_SLICES})")
        out.append(entry)
    if single:
        seen = sorted({p for gpu in out for p in gpu})
        if len(seen) > 1:
            index = next(i for i, gpu in enumerate(out) if set(gpu) != {out[0][0]})
            other = next(p for p in out[index] if p != out[0][0])
            raise PartitionError(f"GPU {index} ({model}): mig-single needs one profile per node, "
                                 f"got {out[0][0]} and profile {other}")
    return out
