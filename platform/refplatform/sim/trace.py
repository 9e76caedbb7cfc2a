"""Reading the openb CSVs into core snapshot objects.

Nodes: ``sn, cpu_milli, memory_mib, gpu, model``.  Pods: ``name, cpu_milli,
memory_mib, num_gpu, gpu_milli, gpu_spec, ...`` (``gpu_spec`` "V100M16|V100M32"
becomes a required node affinity on the GPU model label; the multigpu files have
only the first five columns).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from refplatform.core import (
    GPU_MODEL_LABEL,
    MILLI_PER_GPU,
    Node,
    Pod,
    PodShape,
    Resources,
    gpu_model_requirement,
)
from refplatform.errors import RefPlatformError

DEFAULT_NODE_FILE = "openb_node_list_gpu_node.csv"
DEFAULT_POD_FILE = "openb_pod_list_default.csv"
MIB = 1 << 20


class TraceError(RefPlatformError):
    """A trace file is missing or malformed."""


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()

    @property
    def requests(self) -> Resources:
        if self.num_gpu == 0 or self.gpu_milli == 0:
            return Resources(self.cpu_milli, self.memory_mib * MIB)
        if self.gpu_milli >= MILLI_PER_GPU:
            return Resources(self.cpu_milli, self.memory_mib * MIB, gpus=self.num_gpu)
        return Resources(self.cpu_milli, self.memory_mib * MIB, gpu_milli=self.gpu_milli)

    @property
    def gpu_total(self) -> int:
        return self.requests.total_gpu_milli

    @property
    def shape(self) -> PodShape:
        return PodShape.of(self.requests, self.gpu_spec)

    def to_pod(self, name: str | None = None, namespace: str = "openb") -> Pod:
        name = name or self.name
        affinity = (gpu_model_requirement(self.gpu_spec, GPU_MODEL_LABEL),) if self.gpu_spec else ()
        return Pod(namespace, name, uid=name, requests=self.requests, affinity=affinity)


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise TraceError(f"trace file not found: {path}")
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def load_nodes(path: Path) -> list[Node]:
    nodes = []
    for row in _rows(path):
        try:
            labels = {GPU_MODEL_LABEL: row["model"]} if row.get("model") else {}
            nodes.append(Node(row["sn"], Resources(int(row["cpu_milli"]), int(row["memory_mib"]) * MIB,
                                                   int(row["gpu"])), labels=labels))
        except (KeyError, ValueError) as exc:
            raise TraceError(f"{path}: bad node row {row}: {exc}") from exc
    return nodes


def load_pods(path: Path) -> list[TracePod]:
    pods = []
    for row in _rows(path):
        try:
            num_gpu, milli = int(row["num_gpu"]), int(row["gpu_milli"])
            if milli < MILLI_PER_GPU and num_gpu > 1:
                raise ValueError("a GPU share is only allowed with num_gpu == 1")
            spec = tuple(s for s in (row.get("gpu_spec") or "").split("|") if s)
            pods.append(TracePod(row["name"], int(row["cpu_milli"]), int(row["memory_mib"]), num_gpu, milli, spec))
        except (KeyError, ValueError) as exc:
            raise TraceError(f"{path}: bad pod row {row}: {exc}") from exc
    return pods
