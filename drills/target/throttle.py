"""The reference platform's slow-GPU and slow-input injection: entries in the Node's ``firedrill.dev/inject-throttle``
annotation, which its agent applies for as long as they stand (docs/STRAGGLER.md).  A real cluster would throttle
with the profile's ``fault.throttle`` command (a power limit, a clock lock) instead."""

from __future__ import annotations

from typing import Any

from drills.kube.driver import KubeDriver
from drills.target.gpuhealth import append_entry

__all__ = ["STRAGGLER_TAINT", "THROTTLE_ANNOTATION", "inject_throttle"]

THROTTLE_ANNOTATION = "firedrill.dev/inject-throttle"
STRAGGLER_TAINT = "firedrill.dev/straggler"
"""The taint the reference platform's straggler controller puts on a node it finds slow (its naming of a
straggler): a throttle's consequence, which the drill that throttled removes with it."""


def inject_throttle(driver: KubeDriver, node: str, entry: dict[str, Any]) -> None:
    """Append ``entry`` to the node's throttles: ``{"id", "gpu", "speed"}`` (a slow GPU), ``{"id", "input_delay_s"}``
    (a slow input), ``{"id", "gpu", "hang": true}`` (the GPU's processes stuck in a kernel, docs/HANG.md) or
    ``{"id", "storage_stall_until"}`` (the checkpoint storage not answering until that epoch second)."""
    append_entry(driver, node, THROTTLE_ANNOTATION, entry)
