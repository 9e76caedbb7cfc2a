"""GPU inventory of a node: simulated by default, real when NVML finds GPUs.

The inventory feeds the Node's ``nvidia.com/gpu`` capacity and the labels that
NVIDIA GPU Feature Discovery writes (``nvidia.com/gpu.product``, ``.count``,
``.memory`` in MiB).  :func:`select_inventory` decides: with ``force_simulated``
(or when NVML reports no GPU) the requested model and count are simulated;
otherwise the GPUs NVML sees are reported.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from refplatform.agent.errors import AgentError

__all__ = [
    "GpuInventory",
    "GpuModel",
    "MODELS",
    "NvmlProbe",
    "lookup_model",
    "probe_nvml",
    "product_label",
    "select_inventory",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuModel:
    """A GPU model the agent can simulate."""

    name: str
    """Short name used on the command line, e.g. ``H100-80GB``."""
    memory_mib: int
    """Framebuffer memory as NVML reports it, in MiB (GFD's ``nvidia.com/gpu.memory``)."""
    product: str
    """GFD's ``nvidia.com/gpu.product`` label value."""
    aliases: tuple[str, ...] = ()


MODELS: tuple[GpuModel, ...] = (
    GpuModel("H100-80GB", 81559, "NVIDIA-H100-80GB-HBM3", ("H100", "H100-SXM5-80GB")),
    GpuModel("H200", 143771, "NVIDIA-H200", ("H200-141GB",)),
    GpuModel("A100-SXM4-80GB", 81920, "NVIDIA-A100-SXM4-80GB", ("A100-80GB",)),
    GpuModel("A100-SXM4-40GB", 40960, "NVIDIA-A100-SXM4-40GB", ("A100-40GB", "A100")),
)
"""The simulated models (memory values are what NVML reports for these boards)."""


def lookup_model(name: str) -> GpuModel:
    """Find a model by short name, alias or product label (case-insensitive)."""
    key = name.strip().lower()
    for model in MODELS:
        if key in {model.name.lower(), model.product.lower(), *(a.lower() for a in model.aliases)}:
            return model
    known = ", ".join(m.name for m in MODELS)
    raise AgentError(f"unknown GPU model {name!r} (known: {known})")


def product_label(nvml_name: str) -> str:
    """GFD's product label for an NVML device name: spaces become dashes.

    >>> product_label("NVIDIA H100 80GB HBM3")
    'NVIDIA-H100-80GB-HBM3'
    """
    return "-".join(nvml_name.split())


@dataclass(frozen=True)
class GpuInventory:
    """What the node reports about its GPUs."""

    count: int
    product: str
    memory_mib: int
    simulated: bool
    note: str = ""
    """Why this inventory was chosen (e.g. why NVML was not used)."""

    def labels(self) -> dict[str, str]:
        """GPU Feature Discovery-style node labels (none when there is no GPU)."""
        if self.count <= 0:
            return {}
        return {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": self.product,
            "nvidia.com/gpu.count": str(self.count),
            "nvidia.com/gpu.memory": str(self.memory_mib),
        }


NvmlProbe = Callable[[], tuple[list[tuple[str, int]], str]]
"""Returns ``([(device name, memory MiB), ...], note)``; an empty list means no GPU."""


def probe_nvml() -> tuple[list[tuple[str, int]], str]:
    """Ask NVML for the GPUs of this machine.

    Every NVML failure (library not found, driver not loaded, ...) means "no
    GPU" with the error as the note; ``nvmlShutdown`` always follows a
    successful ``nvmlInit``.
    """
    try:
        import pynvml
    except ImportError as err:  # nvidia-ml-py is a dependency, but be forgiving
        return [], f"pynvml not importable: {err}"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return [], f"NVML unavailable: {err}"
    try:
        count = pynvml.nvmlDeviceGetCount()
        devices: list[tuple[str, int]] = []
        for i in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):
                name = name.decode()
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append((str(name), int(memory.total) // (1024 * 1024)))
        return devices, f"NVML found {count} GPU(s)"
    except pynvml.NVMLError as err:
        return [], f"NVML query failed: {err}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def select_inventory(
    model: str,
    count: int,
    *,
    force_simulated: bool = False,
    probe: NvmlProbe = probe_nvml,
) -> GpuInventory:
    """Choose the node's GPU inventory.

    Real GPUs found by ``probe`` win unless ``force_simulated``; then the
    product is that of the most common device name and the memory its
    smallest size.  Otherwise ``count`` GPUs of ``model`` are simulated.
    """
    if count < 0:
        raise AgentError(f"GPU count must be >= 0, not {count}")
    simulated_model = lookup_model(model)
    if force_simulated:
        note = "simulation forced"
    else:
        devices, note = probe()
        if devices:
            name, _ = Counter(n for n, _ in devices).most_common(1)[0]
            memory = min(m for n, m in devices if n == name)
            if len({n for n, _ in devices}) > 1:
                note += f"; mixed models, reporting {name}"
            log.info("real GPUs: %d x %s (%d MiB)", len(devices), name, memory)
            return GpuInventory(len(devices), product_label(name), memory, simulated=False, note=note)
    return GpuInventory(count, simulated_model.product, simulated_model.memory_mib, simulated=True, note=note)
