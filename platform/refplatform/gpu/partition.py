"""The partition config of a node (``--partition-config FILE``) and what the node advertises per mode.

See docs/PARTITIONING.md, "Partition config" and "What the node advertises".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from refplatform.gpu.mig import PartitionError, profile_memory_mib, table_model, validate_layout

__all__ = ["MODES", "MODE_LABEL", "ISOLATION_LABEL", "PartitionConfig", "advertise", "load_partition_config",
           "parse_partition_config"]

MODES = ("none", "mig-single", "mig-mixed", "time-slicing", "hami")
MODE_LABEL = "firedrill.dev/partition-mode"
ISOLATION_LABEL = "firedrill.dev/isolation-enforced"
GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"
_KEYS = {"mode", "layout", "replicas", "rename_by_default", "vgpus_per_gpu", "enforce_isolation"}


@dataclass(frozen=True)
class PartitionConfig:
    mode: str = "none"
    layout: tuple[tuple[str, ...], ...] = field(default_factory=tuple)
    replicas: int = 1
    rename_by_default: bool = False
    vgpus_per_gpu: int = 10
    enforce_isolation: bool = True

    @property
    def mig(self) -> bool:
        return self.mode.startswith("mig-")

    def gpu_layouts(self, model: str, gpu_count: int) -> list[list[str]]:
        """The validated MIG layout of every GPU (``model`` as the agent names it); [] outside MIG modes."""
        if not self.mig:
            return []
        return validate_layout(table_model(model), self.layout, gpu_count, single=self.mode == "mig-single")


def _int(data: dict[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PartitionError(f"partition config: {key} must be an integer >= 1, not {value!r}")
    return value


def _bool(data: dict[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise PartitionError(f"partition config: {key} must be true or false, not {value!r}")
    return value


def parse_partition_config(data: Any) -> PartitionConfig:
    """A typed config from the parsed YAML, or :class:`PartitionError` saying what is wrong."""
    if not isinstance(data, dict):
        raise PartitionError("partition config must be a mapping with at least `mode`")
    unknown = sorted(set(map(str, data)) - _KEYS)
    if unknown:
        raise PartitionError(f"partition config: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    mode = data.get("mode")
    if mode not in MODES:
        raise PartitionError(f"partition config: mode must be one of {', '.join(MODES)}, not {mode!r}")
    raw_layout = data.get("layout") or []
    if not isinstance(raw_layout, list) or not all(isinstance(g, list) and all(isinstance(p, str) for p in g)
                                                  for g in raw_layout):
        raise PartitionError("partition config: layout must be a list (one per GPU) of lists of profile names")
    layout = tuple(tuple(g) for g in raw_layout)
    if mode.startswith("mig-") and not layout:
        raise PartitionError(f"partition config: mode {mode} needs a layout")
    return PartitionConfig(
        mode=mode,
        layout=layout,
        replicas=_int(data, "replicas", 1),
        rename_by_default=_bool(data, "rename_by_default", False),
        vgpus_per_gpu=_int(data, "vgpus_per_gpu", 10),
        enforce_isolation=_bool(data, "enforce_isolation", True),
    )


def load_partition_config(path: Path | str) -> PartitionConfig:
    """Read and parse a partition config file; every problem is a :class:`PartitionError` naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise PartitionError(f"cannot read partition config {path}: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise PartitionError(f"partition config {path} is not valid YAML: {err}") from None
    try:
        return parse_partition_config(data)
    except PartitionError as err:
        raise PartitionError(f"{path}: {err}") from None


def advertise(config: PartitionConfig, model: str, product: str, gpu_count: int,
              memory_mib: int) -> tuple[dict[str, str], dict[str, str]]:
    """``(GPU resources for capacity/allocatable, node labels)`` per the contract's table.

    The labels replace/extend the GPU Feature Discovery labels of an unpartitioned node
    (``nvidia.com/gpu.product``, ``.count``, ``.memory``).  Raises :class:`PartitionError` on a bad layout.
    """
    resources: dict[str, str] = {}
    labels: dict[str, str] = {MODE_LABEL: config.mode}
    if not config.enforce_isolation:
        labels[ISOLATION_LABEL] = "false"
    if gpu_count <= 0:
        return resources, labels
    if config.mode == "none":
        resources[GPU] = str(gpu_count)
    elif config.mode == "mig-single":
        layouts = config.gpu_layouts(model, gpu_count)
        profile = layouts[0][0]
        resources[GPU] = str(sum(len(g) for g in layouts))
        labels.update({"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": f"{product}-MIG-{profile}",
                       "nvidia.com/mig.config": f"all-{profile}"})
    elif config.mode == "mig-mixed":
        layouts = config.gpu_layouts(model, gpu_count)
        counts: dict[str, int] = {}
        for gpu in layouts:
            for p in gpu:
                counts[p] = counts.get(p, 0) + 1
        labels["nvidia.com/mig.strategy"] = "mixed"
        for p, n in counts.items():
            resources[f"nvidia.com/mig-{p}"] = str(n)
            labels[f"nvidia.com/mig-{p}.count"] = str(n)
            labels[f"nvidia.com/mig-{p}.memory"] = str(profile_memory_mib(p))
    elif config.mode == "time-slicing":
        name = f"{GPU}.shared" if config.rename_by_default else GPU
        resources[name] = str(gpu_count * config.replicas)
        labels.update({"nvidia.com/gpu.replicas": str(config.replicas),
                       "nvidia.com/gpu.sharing-strategy": "time-slicing",
                       "nvidia.com/gpu.product": f"{product}-SHARED"})
    else:  # hami
        resources.update({GPU: str(gpu_count * config.vgpus_per_gpu), GPUMEM: str(gpu_count * memory_mib),
                          GPUCORES: str(gpu_count * 100)})
        labels["nvidia.com/gpu.sharing-strategy"] = "hami"
    return resources, labels
