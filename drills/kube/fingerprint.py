"""What the target cluster is, in a form the evidence can carry and compare.

A drill's verdict only means something for the cluster it ran on: "node pull
heals in 9 s" on 4 x H100 with driver 550 and Volcano v1beta1 says nothing
about another cluster.  :func:`fingerprint` turns what the driver fetched
(``/version``, the Node list, the served versions of the gang-scheduler API
groups) into a typed :class:`Fingerprint`; :meth:`Fingerprint.to_dict` is its
canonical JSON form and :meth:`Fingerprint.digest` a stable SHA-256 over it,
so two runs can be shown to have hit the same kind of target.

It is built from allow-lists only, because it goes into signed archives that
outlive any credential: the server fields in :data:`SERVER_FIELDS`, the node
labels in :data:`NODE_LABELS` (plus ``nvidia.com/`` labels naming a version,
see :func:`allowed_label`), the ``nodeInfo`` fields in :data:`NODE_INFO_FIELDS`
and GPU quantities.  Annotations, node names, addresses, machine and boot IDs
are never read, and nothing here ever sees a token or a kubeconfig.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drills.kube.flavors import GangFlavor, flavor_apis

__all__ = [
    "NODE_INFO_FIELDS",
    "NODE_LABELS",
    "SCHEMA",
    "SERVER_FIELDS",
    "Fingerprint",
    "GpuModel",
    "allowed_label",
    "fingerprint",
]

SCHEMA = "https://firedrill.dev/target-fingerprint/v1"
"""Names the shape of :meth:`Fingerprint.to_dict`; changes when the shape does."""

SERVER_FIELDS = ("major", "minor", "gitVersion", "gitCommit", "gitTreeState", "buildDate", "goVersion",
                 "compiler", "platform")
"""The ``/version`` fields kept (all public build information)."""

NODE_INFO_FIELDS = ("kubeletVersion", "containerRuntimeVersion", "kernelVersion", "osImage", "architecture",
                    "operatingSystem")
"""The ``status.nodeInfo`` fields kept (not machineID, systemUUID or bootID, which identify machines)."""

PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"

NODE_LABELS = frozenset({
    # NVIDIA GPU Feature Discovery: driver and CUDA versions, GPU traits, sharing mode
    "nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev",
    "nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor",
    "nvidia.com/gfd.timestamp",
    "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor", "nvidia.com/gpu.family",
    "nvidia.com/gpu.machine", "nvidia.com/gpu.memory", "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.sharing-strategy", "nvidia.com/mig.capable", "nvidia.com/mig.strategy",
    "nvidia.com/mps.capable",
    # Kubernetes well-known labels
    "kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/instance-type",
})
"""Node labels kept verbatim, beside any ``nvidia.com/`` label naming a version (see :func:`allowed_label`).
The product and count labels are summarised in :attr:`Fingerprint.gpu_models` instead."""

_VERSION_LABEL = re.compile(r"^nvidia\.com/[A-Za-z0-9_.-]*version[A-Za-z0-9_.-]*$")


def allowed_label(key: str) -> bool:
    """Whether a node label enters the fingerprint: :data:`NODE_LABELS`, or an ``nvidia.com/`` label whose
    name contains ``version`` (``*.version``, GFD's ``cuda.driver-version.full`` and the like)."""
    return key in NODE_LABELS or bool(_VERSION_LABEL.match(key))


Histogram = tuple[tuple[str, int], ...]
"""(value, number of nodes) pairs, sorted by value."""


@dataclass(frozen=True, slots=True)
class GpuModel:
    """The nodes of one GPU product and their GPUs."""

    product: str
    """GFD's ``nvidia.com/gpu.product`` (``unknown`` for GPU nodes without it)."""
    nodes: int
    labelled: int
    """Sum of the ``nvidia.com/gpu.count`` labels."""
    capacity: int
    """Sum of ``status.capacity`` of the GPU resource."""
    allocatable: int
    """Sum of ``status.allocatable`` of the GPU resource (below capacity when GPUs are unhealthy)."""

    def to_dict(self) -> dict[str, Any]:
        return {"allocatable": self.allocatable, "capacity": self.capacity, "labelled": self.labelled,
                "nodes": self.nodes, "product": self.product}


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """The target, as far as a drill's result depends on it.  Every collection is sorted."""

    server: tuple[tuple[str, str], ...]
    """Allow-listed ``/version`` fields."""
    node_count: int
    gpu_resource: str
    gpu_models: tuple[GpuModel, ...]
    node_software: tuple[tuple[str, Histogram], ...]
    """``nodeInfo`` field -> histogram of values."""
    labels: tuple[tuple[str, Histogram], ...]
    """Allow-listed label -> histogram of values."""
    driver_versions: Histogram
    """NVIDIA driver versions (``550.54.15``) from GFD's driver labels."""
    cuda_runtime_versions: Histogram
    """CUDA runtime versions (``12.4``) from GFD's runtime labels."""
    crds: tuple[tuple[str, tuple[str, ...]], ...]
    """API group -> served versions, for the gang-scheduler groups the driver looked up."""

    @property
    def server_version(self) -> str:
        """The API server's ``gitVersion`` (empty when it did not say)."""
        return dict(self.server).get("gitVersion", "")

    @property
    def gpu_capacity(self) -> int:
        return sum(model.capacity for model in self.gpu_models)

    @property
    def gpu_allocatable(self) -> int:
        return sum(model.allocatable for model in self.gpu_models)

    def flavors_served(self) -> tuple[GangFlavor, ...]:
        """The gang flavors whose API groups and versions the cluster serves."""
        served = {group: set(versions) for group, versions in self.crds}
        return tuple(flavor for flavor in GangFlavor
                     if all(set(versions) <= served.get(group, set())
                            for group, versions in flavor_apis(flavor).items()))

    def to_dict(self) -> dict[str, Any]:
        """Canonical, JSON-ready form (keys sorted at every level)."""
        def hist(pairs: Histogram) -> dict[str, int]:
            return dict(pairs)

        return {
            "crds": {group: list(versions) for group, versions in self.crds},
            "cuda_runtime_versions": hist(self.cuda_runtime_versions),
            "driver_versions": hist(self.driver_versions),
            "gpus": {"allocatable": self.gpu_allocatable, "capacity": self.gpu_capacity,
                     "models": [model.to_dict() for model in self.gpu_models], "resource": self.gpu_resource},
            "labels": {key: hist(values) for key, values in self.labels},
            "nodes": {"count": self.node_count,
                      "software": {key: hist(values) for key, values in self.node_software}},
            "schema": SCHEMA,
            "server": dict(self.server),
        }

    def canonical_json(self) -> bytes:
        """The bytes :meth:`digest` hashes: sorted keys, no whitespace, UTF-8."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def digest(self) -> str:
        """SHA-256 (hex) of :meth:`canonical_json`: equal for equal targets, whatever the input order."""
        return hashlib.sha256(self.canonical_json()).hexdigest()


# --- building ----------------------------------------------------------------------------------------------


def _strings(mapping: Any) -> Mapping[str, str]:
    if not isinstance(mapping, Mapping):
        return {}
    return {str(k): v for k, v in mapping.items() if isinstance(v, str)}


def _quantity(node: Mapping[str, Any], section: str, resource: str) -> int:
    value = ((node.get("status") or {}).get(section) or {}).get(resource)
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0


def _count_label(labels: Mapping[str, str]) -> int:
    try:
        return int(labels.get(COUNT_LABEL, "0"))
    except ValueError:
        return 0


def _histograms(counters: Mapping[str, Counter[str]]) -> tuple[tuple[str, Histogram], ...]:
    return tuple((key, tuple(sorted(counter.items()))) for key, counter in sorted(counters.items()))


def _driver_version(labels: Mapping[str, str]) -> str | None:
    if "nvidia.com/cuda.driver-version.full" in labels:
        return labels["nvidia.com/cuda.driver-version.full"]
    parts = [labels.get(f"nvidia.com/cuda.driver.{p}") for p in ("major", "minor", "rev")]
    if not parts[0]:
        return None
    return ".".join(p for p in parts if p)


def _runtime_version(labels: Mapping[str, str]) -> str | None:
    if "nvidia.com/cuda.runtime-version.full" in labels:
        return labels["nvidia.com/cuda.runtime-version.full"]
    major, minor = labels.get("nvidia.com/cuda.runtime.major"), labels.get("nvidia.com/cuda.runtime.minor")
    if not major:
        return None
    return f"{major}.{minor}" if minor else major


def _gpu_models(nodes: list[Mapping[str, Any]], resource: str) -> tuple[GpuModel, ...]:
    totals: dict[str, list[int]] = {}
    for node in nodes:
        labels = _strings((node.get("metadata") or {}).get("labels"))
        capacity = _quantity(node, "capacity", resource) or _quantity(node, "allocatable", resource)
        labelled = _count_label(labels)
        if PRODUCT_LABEL not in labels and not capacity and not labelled:
            continue  # not a GPU node
        row = totals.setdefault(labels.get(PRODUCT_LABEL, "unknown"), [0, 0, 0, 0])
        row[0] += 1
        row[1] += labelled
        row[2] += capacity
        row[3] += _quantity(node, "allocatable", resource)
    return tuple(GpuModel(product, *row) for product, row in sorted(totals.items()))


def fingerprint(version_info: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]],
                crds: Mapping[str, Iterable[str]], *, gpu_resource: str = "nvidia.com/gpu") -> Fingerprint:
    """Fingerprint a target from the driver's fetches: ``/version``, the Node list (as the API returns it)
    and ``{api group: [served versions]}`` for the gang-scheduler groups.  Pure: no I/O, no clock."""
    node_list = list(nodes)
    label_counts: dict[str, Counter[str]] = {}
    info_counts: dict[str, Counter[str]] = {}
    drivers: Counter[str] = Counter()
    runtimes: Counter[str] = Counter()
    for node in node_list:
        labels = _strings((node.get("metadata") or {}).get("labels"))
        for key, value in labels.items():
            if allowed_label(key):
                label_counts.setdefault(key, Counter())[value] += 1
        info = _strings((node.get("status") or {}).get("nodeInfo"))
        for key in NODE_INFO_FIELDS:
            if key in info:
                info_counts.setdefault(key, Counter())[info[key]] += 1
        if (driver := _driver_version(labels)) is not None:
            drivers[driver] += 1
        if (runtime := _runtime_version(labels)) is not None:
            runtimes[runtime] += 1
    server = {key: str(version_info[key]) for key in SERVER_FIELDS
              if key in version_info and isinstance(version_info[key], (str, int))}
    return Fingerprint(
        server=tuple(sorted(server.items())),
        node_count=len(node_list),
        gpu_resource=gpu_resource,
        gpu_models=_gpu_models(node_list, gpu_resource),
        node_software=_histograms(info_counts),
        labels=_histograms(label_counts),
        driver_versions=tuple(sorted(drivers.items())),
        cuda_runtime_versions=tuple(sorted(runtimes.items())),
        crds=tuple((str(group), tuple(sorted({versions} if isinstance(versions, str) else set(map(str, versions)))))
                   for group, versions in sorted(crds.items())),
    )
