"""The resource types the reference platform serves, as data.

One :class:`ResourceType` per (group, version, plural).  The API server's
routing, discovery documents, validation and ``kubectl`` tables all read this
registry, so adding a resource is one entry here plus its validator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Scope(Enum):
    """Where an object of a resource type lives."""

    CLUSTER = "Cluster"
    """One object per name in the whole cluster (Node, Namespace, Queue)."""
    NAMESPACED = "Namespaced"
    """One object per name within a namespace (Pod, Lease, PodGroup)."""


ALL_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """A served resource: its REST coordinates and what it supports."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    scope: Scope
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    field_selectors: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    categories: tuple[str, ...] = ()
    custom: bool = False
    """True for custom resources (Volcano): strategic merge patch is refused, as upstream."""

    @property
    def namespaced(self) -> bool:
        return self.scope is Scope.NAMESPACED

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> str:
        """Stable storage key of the type, e.g. ``core/pods`` or ``scheduling.volcano.sh/podgroups``."""
        return f"{self.group or 'core'}/{self.plural}"

    @property
    def group_resource(self) -> str:
        """How upstream names the type in Status details, e.g. ``pods`` or ``podgroups.scheduling.volcano.sh``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


CORE = ""
COORDINATION = "coordination.k8s.io"
VOLCANO_SCHEDULING = "scheduling.volcano.sh"
VOLCANO_BATCH = "batch.volcano.sh"
APPS = "apps"
DISCOVERY = "discovery.k8s.io"
AUTOSCALING = "autoscaling"
SCHEDULING = "scheduling.k8s.io"
BATCH = "batch"

NAMESPACES = ResourceType(CORE, "v1", "namespaces", "namespace", "Namespace", Scope.CLUSTER,
                          ("ns",), ("status",), ("metadata.name", "status.phase"))
NODES = ResourceType(CORE, "v1", "nodes", "node", "Node", Scope.CLUSTER, ("no",), ("status",),
                     ("metadata.name", "spec.unschedulable"))
PODS = ResourceType(CORE, "v1", "pods", "pod", "Pod", Scope.NAMESPACED, ("po",),
                    ("status", "log", "eviction", "binding"),
                    ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase",
                     "spec.schedulerName"), ("all",))
EVENTS = ResourceType(CORE, "v1", "events", "event", "Event", Scope.NAMESPACED, ("ev",), (),
                      ("metadata.name", "metadata.namespace", "involvedObject.kind",
                       "involvedObject.name", "involvedObject.namespace", "involvedObject.uid",
                       "reason", "type"))
LEASES = ResourceType(COORDINATION, "v1", "leases", "lease", "Lease", Scope.NAMESPACED)
PODGROUPS = ResourceType(VOLCANO_SCHEDULING, "v1beta1", "podgroups", "podgroup", "PodGroup",
                         Scope.NAMESPACED, ("pg", "podgroup-v1beta1"), ("status",), custom=True)
QUEUES = ResourceType(VOLCANO_SCHEDULING, "v1beta1", "queues", "queue", "Queue", Scope.CLUSTER,
                      ("q", "queue-v1beta1"), ("status",), ("metadata.name",), custom=True)
VCJOBS = ResourceType(VOLCANO_BATCH, "v1alpha1", "jobs", "job", "Job", Scope.NAMESPACED,
                      ("vcjob", "vj"), ("status",), custom=True)
SERVICES = ResourceType(CORE, "v1", "services", "service", "Service", Scope.NAMESPACED, ("svc",), ("status",),
                        categories=("all",))
DEPLOYMENTS = ResourceType(APPS, "v1", "deployments", "deployment", "Deployment", Scope.NAMESPACED, ("deploy",),
                           ("status", "scale"), categories=("all",))
REPLICASETS = ResourceType(APPS, "v1", "replicasets", "replicaset", "ReplicaSet", Scope.NAMESPACED, ("rs",),
                           ("status", "scale"), categories=("all",))
ENDPOINTSLICES = ResourceType(DISCOVERY, "v1", "endpointslices", "endpointslice", "EndpointSlice",
                              Scope.NAMESPACED)
HPAS = ResourceType(AUTOSCALING, "v2", "horizontalpodautoscalers", "horizontalpodautoscaler",
                    "HorizontalPodAutoscaler", Scope.NAMESPACED, ("hpa",), ("status",), categories=("all",))
PRIORITYCLASSES = ResourceType(SCHEDULING, "v1", "priorityclasses", "priorityclass", "PriorityClass", Scope.CLUSTER,
                               ("pc",), (), ("metadata.name",))
RESOURCEQUOTAS = ResourceType(CORE, "v1", "resourcequotas", "resourcequota", "ResourceQuota", Scope.NAMESPACED,
                              ("quota",), ("status",))
JOBS = ResourceType(BATCH, "v1", "jobs", "job", "Job", Scope.NAMESPACED, (), ("status",), categories=("all",))
"""Listed before the Volcano groups, so that ``kubectl get jobs`` means these, as on a cluster with Volcano."""
PDBS = ResourceType("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget",
                    Scope.NAMESPACED, ("pdb",), ("status",))
CONFIGMAPS = ResourceType(CORE, "v1", "configmaps", "configmap", "ConfigMap", Scope.NAMESPACED, ("cm",))
SECRETS = ResourceType(CORE, "v1", "secrets", "secret", "Secret", Scope.NAMESPACED,
                       field_selectors=("metadata.name", "metadata.namespace", "type"))
SERVICEACCOUNTS = ResourceType(CORE, "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", Scope.NAMESPACED,
                               ("sa",))

RESOURCE_TYPES: tuple[ResourceType, ...] = (
    NAMESPACES, NODES, PODS, EVENTS, LEASES, JOBS, PODGROUPS, QUEUES, VCJOBS,
    SERVICES, DEPLOYMENTS, REPLICASETS, ENDPOINTSLICES, HPAS, PRIORITYCLASSES, RESOURCEQUOTAS,
    CONFIGMAPS, SECRETS, SERVICEACCOUNTS, PDBS,
)


@dataclass(frozen=True)
class Registry:
    """Lookup of resource types by URL coordinates."""

    types: tuple[ResourceType, ...] = RESOURCE_TYPES
    _by_path: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for rt in self.types:
            self._by_path[(rt.group, rt.version, rt.plural)] = rt

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def groups(self) -> dict[str, list[str]]:
        """Served API groups (excluding core) and their versions, in registration order."""
        out: dict[str, list[str]] = {}
        for rt in self.types:
            if rt.group and rt.version not in out.setdefault(rt.group, []):
                out[rt.group].append(rt.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self.types if rt.group == group and rt.version == version]


REGISTRY = Registry()
