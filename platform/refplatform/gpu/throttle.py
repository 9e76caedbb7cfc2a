"""A slow GPU, and a slow input pipeline, on the simulated node (pure).

A real GPU runs slow when its clocks are held down (thermal or power capping, a clock lock): every kernel takes
longer, nothing fails.  Here a Node's ``firedrill.dev/inject-throttle`` annotation holds a JSON list of entries,
each standing for as long as it is there (the drill's rollback removes it):

- ``{"id": ..., "gpu": <index>, "speed": <0 < s <= 1>}``: that whole GPU runs at ``speed`` of its clock;
- ``{"id": ..., "input_delay_s": <seconds >= 0>}``: every pod of the node waits that much longer for its input
  each step (slow storage or data loading: the job is input-bound, its GPUs are fine);
- ``{"id": ..., "gpu": <index>, "hang": true}``: that GPU gets stuck in a kernel.  Not a clock: the agent sends
  SIGUSR2 once per entry id to every process of each container holding that GPU when it first sees the entry
  (the canary's compute then never ends; docs/PROGRESS.md); nothing is written to the clocks file and the GPU is
  not reported throttled.  Removing the entry undoes nothing: the processes stay hung until they are stopped;
- ``{"id": ..., "storage_stall_until": <epoch seconds>}``: the node's storage stops answering until then.  While
  such an entry stands and has not expired, the clocks file carries ``"storage_stalled_until"``, the latest of
  them; an expired entry is ignored, so a stall whose harness died ends by itself.

The node's agent (the GPU's driver) writes what stands to its clocks file (:func:`clocks_document`), which every
container finds through ``FIREDRILL_DEVICE_CLOCKS``; the canary stretches its compute by ``1 / speed`` of its
slowest GPU and its input by the delay, and holds its checkpoint writes while the storage stalls
(docs/WORKLOAD.md).  Several entries for one GPU: the slowest wins; several input delays add up.  The file also
says whether the storage keeps the rename promise (``"atomic_rename": false`` under the ``resume-torn`` defect;
absent: it does).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ATOMIC_RENAME_KEY", "CLOCKS_ENV", "CLOCKS_FILE", "STORAGE_STALLED_KEY", "THROTTLED_ANNOTATION",
           "THROTTLE_ANNOTATION", "Throttle", "clocks_document", "parse_throttle"]

THROTTLE_ANNOTATION = "firedrill.dev/inject-throttle"
THROTTLED_ANNOTATION = "firedrill.dev/throttled-gpus"
"""On a Node, by its agent: the indexes of the GPUs whose clocks its driver holds below full speed (comma-separated;
absent when none), as DCGM's clock throttle reasons report them.  The platform's straggler controller reads it to
give a named node back once its clocks are whole again; the injection above is the harness's, never read by it."""
CLOCKS_ENV = "FIREDRILL_DEVICE_CLOCKS"
"""The container variable naming the node's clocks file."""
CLOCKS_FILE = "clocks.json"
"""Its name, beside the node's device socket."""
STORAGE_STALLED_KEY = "storage_stalled_until"
"""In the clocks file: epoch seconds until which the node's storage answers nothing (absent: it answers)."""
ATOMIC_RENAME_KEY = "atomic_rename"
"""In the clocks file: ``false`` when a rename on the node's storage is not atomic (absent: it is)."""


@dataclass(frozen=True)
class Throttle:
    """What stands on one node."""

    gpu_speed: dict[int, float] = field(default_factory=dict)
    """GPU index -> the fraction of its speed it runs at (absent: full speed)."""
    input_delay_s: float = 0.0
    hangs: Mapping[str, int] = field(default_factory=dict)
    """Entry id -> the GPU index a ``hang`` entry names (signalled once per id by the agent; not a clock)."""
    storage_stalls: tuple[float, ...] = ()
    """The ``storage_stall_until`` of every storage-stall entry (epoch seconds, ascending; expired ones included:
    :func:`clocks_document` leaves them out at its ``now``)."""

    @property
    def empty(self) -> bool:
        return not self.gpu_speed and self.input_delay_s == 0.0 and not self.hangs and not self.storage_stalls


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def parse_throttle(raw: str | None, gpu_count: int) -> tuple[Throttle, list[str]]:
    """The annotation's throttle, and a problem per entry skipped (GPUs the node does not have included)."""
    if not raw:
        return Throttle(), []
    try:
        items = json.loads(raw)
    except ValueError:
        return Throttle(), [f"{THROTTLE_ANNOTATION}: not JSON"]
    if not isinstance(items, list):
        return Throttle(), [f"{THROTTLE_ANNOTATION}: not a JSON list"]
    speeds: dict[int, float] = {}
    hangs: dict[str, int] = {}
    stalls: list[float] = []
    delay, problems = 0.0, []
    for item in items:
        if not isinstance(item, dict) or "id" not in item:
            problems.append(f"{THROTTLE_ANNOTATION}: entry {item!r} has no id")
            continue
        if "input_delay_s" in item:
            d = _number(item["input_delay_s"])
            if d is None or d < 0:
                problems.append(f"{THROTTLE_ANNOTATION}: entry {item['id']}: input_delay_s must be seconds >= 0")
                continue
            delay += d
            continue
        if "storage_stall_until" in item:
            until = _number(item["storage_stall_until"])
            if until is None or until < 0:
                problems.append(f"{THROTTLE_ANNOTATION}: entry {item['id']}: storage_stall_until must be epoch "
                                f"seconds")
                continue
            stalls.append(until)
            continue
        gpu = item.get("gpu")
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < gpu_count:
            problems.append(f"{THROTTLE_ANNOTATION}: entry {item['id']}: gpu must be an index below {gpu_count}")
            continue
        if "hang" in item:
            if item["hang"] is not True:
                problems.append(f"{THROTTLE_ANNOTATION}: entry {item['id']}: hang must be true")
                continue
            hangs[str(item["id"])] = gpu
            continue
        speed = _number(item.get("speed"))
        if speed is None or not 0 < speed <= 1:
            problems.append(f"{THROTTLE_ANNOTATION}: entry {item['id']}: speed must be in (0, 1]")
            continue
        speeds[gpu] = min(speed, speeds.get(gpu, 1.0))
    return Throttle(speeds, delay, hangs, tuple(sorted(stalls))), problems


def clocks_document(throttle: Throttle, uuid_of: Callable[[int], str], *, now: float | None = None,
                    atomic_rename: bool = True) -> dict[str, Any]:
    """The clocks file's content: ``{"gpus": {<uuid>: speed}, "input_delay_s": seconds}`` (GPUs at full speed
    are left out), plus ``"storage_stalled_until"`` (epoch seconds) while a storage stall stands past ``now``
    (None: every stall stands) and ``"atomic_rename": false`` when the storage does not keep the rename promise."""
    doc: dict[str, Any] = {"gpus": {uuid_of(g): s for g, s in sorted(throttle.gpu_speed.items())},
                           "input_delay_s": throttle.input_delay_s}
    standing = [u for u in throttle.storage_stalls if now is None or u > now]
    if standing:
        doc[STORAGE_STALLED_KEY] = max(standing)
    if not atomic_rename:
        doc[ATOMIC_RENAME_KEY] = False
    return doc
