"""What a container is told about its GPUs, as NVIDIA's device plugin tells it.

The device plugin's Allocate answers with ``NVIDIA_VISIBLE_DEVICES`` set to the device IDs it chose: a whole
GPU's UUID (``GPU-<uuid>``) or a MIG instance's (``MIG-<uuid>``); a time-slicing or HAMi replica is told the
UUID of the GPU it shares.  The simulated GPUs have stable UUIDs derived from the node's name and the GPU's
index (and the instance's), so the same GPU has the same identity for every pod and across agent restarts.
Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

__all__ = ["VISIBLE_DEVICES_ENV", "gpu_uuid", "mig_uuid", "visible_devices"]

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
_NAMESPACE = uuid.UUID("5b0e6f49-2f0c-4a8e-9d1e-6a1f3e7d2c10")
"""The UUID namespace of the simulated GPUs (any fixed value: it only has to be the same everywhere)."""


def gpu_uuid(node: str, gpu: int) -> str:
    """The UUID of GPU ``gpu`` of ``node``: ``GPU-`` and a UUID, as ``nvidia-smi -L`` prints it."""
    return f"GPU-{uuid.uuid5(_NAMESPACE, f'{node}/{gpu}')}"


def mig_uuid(node: str, gpu: int, instance: int) -> str:
    """The UUID of MIG instance ``instance`` of GPU ``gpu`` of ``node``: ``MIG-`` and a UUID."""
    return f"MIG-{uuid.uuid5(_NAMESPACE, f'{node}/{gpu}/{instance}')}"


def visible_devices(identities: Iterable[str]) -> str:
    """The value of ``NVIDIA_VISIBLE_DEVICES``: the identities, comma-separated."""
    return ",".join(identities)
