"""A gang's topology request, and the domains of a node label it is placed inside.

A gang may ask to stay inside one *domain* of a node label: the nodes that share
one value of ``cloud.provider.com/topology-rack`` (a rack), of
``nvidia.com/gpu.clique`` (an NVLink domain), of ``topology.kubernetes.io/zone``.
Kueue's topology-aware scheduling spells it on the gang's pod template, and the
reference platform reads the same words on the pods of any gang:

- ``kueue.x-k8s.io/podset-required-topology: <label>``: the gang is placed inside
  one domain of that label, or not at all (it waits whole, holding nothing);
- ``kueue.x-k8s.io/podset-preferred-topology: <label>``: inside one domain when
  one can hold it, across domains otherwise.

A node without the label belongs to no domain: a required request never places
a pod there (as Kueue's TAS, which only sees nodes carrying every level's label).
Pure: no I/O, no clock (docs/SCHEDULER.md, "Topology"; docs/TOPOLOGY.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from refplatform.core.node import Node

if TYPE_CHECKING:
    import numpy as np

__all__ = ["PREFERRED_TOPOLOGY_ANNOTATION", "REQUIRED_TOPOLOGY_ANNOTATION", "DomainIndex", "TopologyMode",
           "TopologyRequest", "gang_request", "topology_request"]

REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
"""Kueue's pod-set annotation: the value names the node label whose one domain must hold the whole gang."""
PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
"""Kueue's pod-set annotation: the value names the node label whose one domain should hold the gang."""


class TopologyMode(Enum):
    """How hard a gang asks to stay inside one domain."""

    REQUIRED = "required"
    """Inside one domain or not at all: a gang no single domain can hold waits whole."""
    PREFERRED = "preferred"
    """Inside one domain when one can hold it; otherwise placed across domains like any gang."""


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """One gang's request: stay inside one domain of node label ``key``, ``mode`` how hard."""

    key: str
    mode: TopologyMode

    @property
    def required(self) -> bool:
        return self.mode is TopologyMode.REQUIRED


def topology_request(annotations: Mapping[str, str]) -> TopologyRequest | None:
    """The request a pod's annotations make (required wins over preferred), or None."""
    for annotation, mode in ((REQUIRED_TOPOLOGY_ANNOTATION, TopologyMode.REQUIRED),
                             (PREFERRED_TOPOLOGY_ANNOTATION, TopologyMode.PREFERRED)):
        key = str(annotations.get(annotation) or "").strip()
        if key:
            return TopologyRequest(key, mode)
    return None


def gang_request(requests: Sequence[TopologyRequest | None]) -> TopologyRequest | None:
    """The request of a gang whose pods make ``requests``: Kueue writes it once on the pod template, so its pods
    agree; where they do not, a required request wins over a preferred one, then the first label by name."""
    made = sorted({r for r in requests if r is not None}, key=lambda r: (not r.required, r.key))
    return made[0] if made else None


@dataclass(frozen=True, slots=True, eq=False)
class DomainIndex:
    """The domains of one node label over a snapshot's nodes: ``names[d]`` is domain ``d``'s label value and
    ``ids[i]`` the domain of node ``i`` (-1 for a node without the label)."""

    key: str
    names: tuple[str, ...]
    ids: np.ndarray

    @classmethod
    def of(cls, nodes: Sequence[Node], key: str) -> DomainIndex:
        import numpy as np  # here: a node agent reads topology requests and never builds an index

        values = [nd.labels.get(key) for nd in nodes]
        names = tuple(sorted({v for v in values if v is not None}))
        pos = {v: d for d, v in enumerate(names)}
        ids = np.array([pos[v] if v is not None else -1 for v in values], dtype=np.int64)
        return cls(key, names, ids)

    def __len__(self) -> int:
        return len(self.names)

    def mask(self, d: int) -> np.ndarray:
        """The nodes of domain ``d``."""
        return self.ids == d

    def totals(self, per_node: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
        """``per_node`` summed per domain (over the nodes ``among`` only, when given)."""
        import numpy as np

        keep = self.ids >= 0 if among is None else (self.ids >= 0) & among
        return np.bincount(self.ids[keep], weights=per_node[keep], minlength=len(self.names))
