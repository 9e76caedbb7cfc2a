"""How a gang of GPU pods is written for Volcano, Kueue or KAI-Scheduler.

A drill submits "a gang of N workers with G GPUs each" to whichever gang
scheduler the target runs.  Each system spells that differently, so this
module turns one typed :class:`GangSpec` into the plain-dict manifests a user
of that system would write by hand (the driver sends them as they are):

=========  =====================================================================
flavor     what is created
=========  =====================================================================
volcano    a ``batch.volcano.sh/v1alpha1`` Job (Volcano makes the PodGroup and
           pods), or, in the plain form, a ``scheduling.volcano.sh/v1beta1``
           PodGroup plus N pods annotated ``scheduling.k8s.io/group-name``
kueue      N plain pods labelled ``kueue.x-k8s.io/queue-name`` and
           ``kueue.x-k8s.io/pod-group-name``, annotated
           ``kueue.x-k8s.io/pod-group-total-count`` (Kueue makes the Workload)
kai        a ``scheduling.run.ai/v2alpha2`` PodGroup plus N pods with
           ``schedulerName: kai-scheduler``, label ``kai.scheduler/queue`` and
           annotation ``pod-group-name``
native     Kubernetes' own gang scheduling (KEP-4671; ``GenericWorkload``, beta
           and off by default in 1.37): a ``scheduling.k8s.io/v1beta1``
           Workload with one pod-group template ``worker`` (gang,
           ``minCount``), the PodGroup made from it (``workloadRef``), and N
           pods with ``spec.schedulingGroup.podGroupName``, scheduled by the
           default kube-scheduler; no queue objects
=========  =====================================================================

Every object carries the label ``firedrill.dev/drill-run: <run id>`` so that a
drill can find, and clean up, everything it made; every pod also carries
``firedrill.dev/gang: <name>``.  Pods are named ``<name>-worker-<i>`` in every
flavor (Volcano's own naming for task ``worker``), request the GPUs in
``limits`` and have ``restartPolicy: Never``.

:func:`queue_manifests` gives the queue objects a test cluster needs, and
:func:`locate` says how to find a gang's pods and its group object.  The
generated custom resources validate against the upstream CRD schemas in
``../shared/crds/`` (see ``tests/unit/drills/test_flavors.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from drills.errors import FiredrillError

__all__ = [
    "thaw",
    "GANG_LABEL",
    "GROUP_OBJECTS",
    "REQUIRED_TOPOLOGY_ANNOTATION",
    "RUN_LABEL",
    "JOB_COMPLETION_INDEX_ANNOTATION",
    "TRAINING_JOB_FLAVORS",
    "WORKER_INDEX_LABEL",
    "WORKLOAD_ANNOTATION",
    "FlavorError",
    "GangFlavor",
    "GangLocator",
    "GangSpec",
    "GroupRef",
    "VolcanoForm",
    "eviction_tolerations",
    "flavor_apis",
    "gang_manifests",
    "indexed_job",
    "kai_gang",
    "kai_pod_group",
    "kai_queues",
    "kueue_pods",
    "native_gang",
    "native_pod_group",
    "native_workload",
    "kueue_queues",
    "locate",
    "pod_names",
    "queue_manifests",
    "run_selector",
    "valid_dns_label",
    "valid_label_key",
    "valid_label_value",
    "volcano_job",
    "volcano_job_pod_group_name",
    "volcano_plain",
    "volcano_pod_group",
    "volcano_queue",
]

Manifest = dict[str, Any]

RUN_LABEL = "firedrill.dev/drill-run"
"""On every object a drill creates: the run id, for finding and cleaning up."""
GANG_LABEL = "firedrill.dev/gang"
"""On every pod of a gang: the gang's name."""
WORKER_INDEX_LABEL = "firedrill.dev/worker-index"
"""On every bare pod of a gang (not on a Volcano Job's pods, which get ``volcano.sh/task-index``): 0 .. workers-1."""
WORKLOAD_ANNOTATION = "firedrill.dev/workload"
"""The workload the reference platform's agent runs (``idle`` or ``training``)."""

TASK = "worker"
GPU = "nvidia.com/gpu"

VOLCANO_SCHEDULER = "volcano"
KAI_SCHEDULER = "kai-scheduler"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
KAI_GROUP_ANNOTATION = "pod-group-name"
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
"""Kueue's topology-aware scheduling: the node label whose one domain must hold the pod set (on the pod template)."""
NATIVE_API_VERSION = "scheduling.k8s.io/v1beta1"
"""Workload and PodGroup in Kubernetes 1.37 (v1alpha2 in 1.36, with other gates; see docs/REAL_CLUSTERS.md)."""
NATIVE_TEMPLATE = TASK
"""The Workload's one pod-group template (its PodGroup's ``workloadRef.templateName``)."""


class FlavorError(FiredrillError):
    """A gang that cannot be written as asked (a bad name, count or label)."""


class GangFlavor(Enum):
    """Which gang scheduler the target runs, and so how a gang is written."""

    VOLCANO = "volcano"
    """Volcano: a vcjob (``batch.volcano.sh``) or a PodGroup (``scheduling.volcano.sh``) plus pods.
    The reference platform speaks this flavor."""
    KUEUE = "kueue"
    """Kueue: a plain-pod group admitted all-or-nothing through a LocalQueue (``kueue.x-k8s.io``, pod integration)."""
    KAI = "kai"
    """NVIDIA KAI-Scheduler: a PodGroup (``scheduling.run.ai``) plus pods scheduled by ``kai-scheduler``."""
    NATIVE = "native"
    """Kubernetes' native gang scheduling: a Workload and PodGroup (``scheduling.k8s.io/v1beta1``, Kubernetes 1.37
    with the ``GenericWorkload`` gate on) plus pods naming the PodGroup in ``spec.schedulingGroup``, scheduled by
    the default kube-scheduler (its GangScheduling plugin)."""


class VolcanoForm(Enum):
    """How a Volcano gang is expressed."""

    JOB = "job"
    """A ``batch.volcano.sh/v1alpha1`` Job: Volcano's controller creates the PodGroup and restarts the job
    on PodEvicted/PodFailed (the shape most Volcano users write)."""
    PODGROUP = "podgroup"
    """A ``scheduling.volcano.sh/v1beta1`` PodGroup plus bare pods: gang scheduling with no job controller,
    so nothing restarts a lost worker."""


# --- names -------------------------------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def valid_dns_label(name: str) -> bool:
    """A DNS-1123 label (namespaces, pod-name parts): ``[a-z0-9-]``, at most 63 characters."""
    return len(name) <= 63 and bool(_DNS_LABEL.match(name))


def valid_label_key(key: str) -> bool:
    """A label or annotation key: ``[prefix/]name``, prefix a DNS subdomain, name at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def valid_label_value(value: str) -> bool:
    """A label value: empty, or at most 63 of ``[A-Za-z0-9-_.]`` starting and ending alphanumeric."""
    return value == "" or (len(value) <= 63 and bool(_LABEL_NAME.match(value)))


# --- the spec ----------------------------------------------------------------------------------------------


def _frozen_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True, kw_only=True)
class GangSpec:
    """One gang: ``workers`` pods of ``gpus_per_worker`` GPUs each, scheduled all-or-nothing."""

    name: str
    """The gang's name: the Job/PodGroup name and the pod-name prefix (a DNS-1123 label)."""
    run_id: str
    """The drill run that owns it, written to the ``firedrill.dev/drill-run`` label on every object."""
    workers: int
    gpus_per_worker: int
    image: str
    namespace: str = "default"
    queue: str = "default"
    """Volcano queue, Kueue LocalQueue or KAI leaf queue."""
    priority_class: str | None = None
    """A PriorityClass name (it must exist on the cluster)."""
    min_member: int | None = None
    """Pods that must be placed together (None: all ``workers``)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra labels on every pod (and on the Job or PodGroup)."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Workload parameters on every pod, e.g. ``firedrill.dev/workload: training``."""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[Mapping[str, Any], ...] = ()
    """Container env entries as the API writes them (``value`` or ``valueFrom``)."""
    volumes: tuple[Mapping[str, Any], ...] = ()
    """Pod volumes as the API writes them (``{"name": ..., "nfs": {...}}``)."""
    volume_mounts: tuple[Mapping[str, Any], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """Pod tolerations as the API writes them (see :func:`eviction_tolerations`)."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None
    """Override the flavor's scheduler name (``volcano``, default-scheduler for Kueue, ``kai-scheduler``)."""
    max_retry: int = 3
    """Volcano Job only: restarts allowed before the job fails."""
    gpu_resource: str = GPU
    """The extended resource requested in ``limits`` (e.g. a MIG resource ``nvidia.com/mig-1g.10gb``)."""
    required_topology: str | None = None
    """A node label one of whose domains (the nodes sharing a value: a rack, an NVLink domain) must hold the whole
    gang: Kueue's pod-set annotation ``kueue.x-k8s.io/podset-required-topology`` on every pod (the reference
    platform reads it in every flavor) and, in the native flavor, the PodGroup's and its template's
    ``schedulingConstraints.topology`` (Kubernetes' ``TopologyAwareWorkloadScheduling``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_map(self.labels))
        object.__setattr__(self, "annotations", _frozen_map(self.annotations))
        object.__setattr__(self, "node_selector", _frozen_map(self.node_selector))
        object.__setattr__(self, "tolerations", tuple(MappingProxyType(dict(t)) for t in self.tolerations))
        for name in ("env", "volumes", "volume_mounts"):
            object.__setattr__(self, name, tuple(MappingProxyType(dict(v)) for v in getattr(self, name)))
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "args", tuple(self.args))
        if self.min_member is None:
            object.__setattr__(self, "min_member", self.workers)
        problems = _spec_problems(self)
        if problems:
            raise FlavorError(f"gang {self.name!r} in namespace {self.namespace!r} cannot be written: "
                              + "; ".join(problems))

    @property
    def min_available(self) -> int:
        """``min_member`` resolved (never None after construction)."""
        return self.workers if self.min_member is None else self.min_member


def _spec_problems(spec: GangSpec) -> list[str]:
    problems: list[str] = []
    suffix = f"-{TASK}-{max(spec.workers - 1, 0)}"
    if not valid_dns_label(spec.name):
        problems.append(f"name {spec.name!r} must be a DNS-1123 label (lower-case letters, digits, '-')")
    elif len(spec.name + suffix) > 63:
        problems.append(f"name {spec.name!r} is too long: pod name {spec.name + suffix!r} exceeds 63 characters; "
                        f"use at most {63 - len(suffix)} characters")
    if not valid_dns_label(spec.namespace):
        problems.append(f"namespace {spec.namespace!r} must be a DNS-1123 label")
    if not valid_label_value(spec.run_id) or not spec.run_id:
        problems.append(f"run_id {spec.run_id!r} must be a label value (1-63 of A-Z a-z 0-9 - _ .)")
    if spec.workers < 1:
        problems.append(f"workers is {spec.workers}; a gang needs at least 1")
    if spec.gpus_per_worker < 0:
        problems.append(f"gpus_per_worker is {spec.gpus_per_worker}; use 0 or more")
    if not 1 <= spec.min_available <= max(spec.workers, 1):
        problems.append(f"min_member is {spec.min_member}; it must be between 1 and workers ({spec.workers})")
    if spec.max_retry < 0:
        problems.append(f"max_retry is {spec.max_retry}; use 0 or more")
    if not spec.image:
        problems.append("image is empty; give the container image the workers run")
    if not spec.queue:
        problems.append("queue is empty; give the Volcano queue, Kueue LocalQueue or KAI leaf queue")
    if not valid_label_key(spec.gpu_resource):
        problems.append(f"gpu_resource {spec.gpu_resource!r} is not a resource name such as nvidia.com/gpu")
    for what, mapping, check_values in (("label", spec.labels, True), ("annotation", spec.annotations, False),
                                        ("node_selector", spec.node_selector, True)):
        for key, value in mapping.items():
            if not isinstance(key, str) or not valid_label_key(key):
                problems.append(f"{what} key {key!r} is not a valid key ([prefix/]name)")
            elif not isinstance(value, str):
                problems.append(f"{what} {key} has value {value!r}; values must be strings (quote numbers)")
            elif check_values and not valid_label_value(value):
                problems.append(f"{what} {key}={value!r} is not a valid label value")
    if spec.required_topology is not None and not valid_label_key(spec.required_topology):
        problems.append(f"required_topology {spec.required_topology!r} is not a node label key such as "
                        "cloud.provider.com/topology-rack")
    reserved = {RUN_LABEL, GANG_LABEL, WORKER_INDEX_LABEL} & set(spec.labels)
    if reserved:
        problems.append(f"labels {sorted(reserved)} are set by Firedrill; remove them from labels")
    return problems


def eviction_tolerations(seconds: int) -> tuple[dict[str, Any], ...]:
    """Tolerate ``not-ready``/``unreachable`` for ``seconds`` (instead of the 300 s admission default).

    A node-pull drill wants the taint manager to evict quickly and measurably.
    """
    return tuple({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
                 for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"))


def pod_names(spec: GangSpec) -> list[str]:
    """The gang's pod names, the same in every flavor: ``<name>-worker-<i>``."""
    return [f"{spec.name}-{TASK}-{i}" for i in range(spec.workers)]


def run_selector(run_id: str) -> str:
    """The label selector of everything one drill run created."""
    return f"{RUN_LABEL}={run_id}"


# --- building blocks ---------------------------------------------------------------------------------------


def _object_meta(spec: GangSpec, name: str, *, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = spec.namespace
    meta["labels"] = {**spec.labels, RUN_LABEL: spec.run_id, GANG_LABEL: spec.name}
    return meta


def _pod_labels(spec: GangSpec, index: int | None, extra: Mapping[str, str] = MappingProxyType({})) -> dict[str, str]:
    labels = {**spec.labels, **extra, RUN_LABEL: spec.run_id, GANG_LABEL: spec.name}
    if index is not None:
        labels[WORKER_INDEX_LABEL] = str(index)
    return labels


def _pod_spec(spec: GangSpec, scheduler: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": TASK, "image": spec.image}
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    if spec.env:
        container["env"] = [thaw(e) for e in spec.env]
    if spec.volume_mounts:
        container["volumeMounts"] = [thaw(m) for m in spec.volume_mounts]
    if spec.gpus_per_worker > 0:
        container["resources"] = {"limits": {spec.gpu_resource: str(spec.gpus_per_worker)}}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    scheduler = spec.scheduler_name or scheduler
    if scheduler:
        pod["schedulerName"] = scheduler
    if spec.priority_class:
        pod["priorityClassName"] = spec.priority_class
    if spec.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.tolerations]
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.volumes:
        pod["volumes"] = [thaw(v) for v in spec.volumes]
    return pod


def thaw(value: Any) -> Any:
    """Mapping proxies (the frozen spec) as plain dicts and lists, as a manifest holds them."""
    if isinstance(value, Mapping):
        return {str(k): thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def _pod_annotations(spec: GangSpec) -> dict[str, str]:
    """Every pod's (and pod template's) annotations: the spec's, and its required topology as Kueue writes it."""
    if spec.required_topology is None:
        return dict(spec.annotations)
    return {**spec.annotations, REQUIRED_TOPOLOGY_ANNOTATION: spec.required_topology}


def _pods(spec: GangSpec, scheduler: str | None, labels: Mapping[str, str],
          annotations: Mapping[str, str]) -> list[Manifest]:
    return [{
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": spec.namespace,
            "labels": _pod_labels(spec, i, labels),
            "annotations": {**_pod_annotations(spec), **annotations},
        },
        "spec": _pod_spec(spec, scheduler),
    } for i, name in enumerate(pod_names(spec))]


def _gpu_total(spec: GangSpec) -> str:
    return str(spec.min_available * spec.gpus_per_worker)


# --- volcano -----------------------------------------------------------------------------------------------


def volcano_job(spec: GangSpec) -> Manifest:
    """A Volcano Job: one task ``worker``, restarted whole on PodEvicted or PodFailed."""
    job_spec: dict[str, Any] = {
        "schedulerName": spec.scheduler_name or VOLCANO_SCHEDULER,
        "queue": spec.queue,
        "minAvailable": spec.min_available,
        "maxRetry": spec.max_retry,
        "policies": [{"event": "PodEvicted", "action": "RestartJob"},
                     {"event": "PodFailed", "action": "RestartJob"}],
        "tasks": [{
            "name": TASK,
            "replicas": spec.workers,
            "template": {
                "metadata": {"labels": _pod_labels(spec, None), "annotations": _pod_annotations(spec)},
                "spec": _pod_spec(spec, None),
            },
        }],
    }
    if spec.priority_class:
        job_spec["priorityClassName"] = spec.priority_class
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": _object_meta(spec, spec.name), "spec": job_spec}


def volcano_job_pod_group_name(job_name: str, job_uid: str) -> str:
    """The PodGroup Volcano's job controller creates for a Job: ``<job name>-<job uid>``."""
    return f"{job_name}-{job_uid}"


def volcano_pod_group(spec: GangSpec) -> Manifest:
    pg_spec: dict[str, Any] = {
        "minMember": spec.min_available,
        "queue": spec.queue,
    }
    if spec.gpus_per_worker > 0:
        pg_spec["minResources"] = {spec.gpu_resource: _gpu_total(spec)}
    if spec.priority_class:
        pg_spec["priorityClassName"] = spec.priority_class
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": _object_meta(spec, spec.name), "spec": pg_spec}


def volcano_plain(spec: GangSpec) -> list[Manifest]:
    """A Volcano PodGroup followed by its pods (create in this order)."""
    return [volcano_pod_group(spec),
            *_pods(spec, VOLCANO_SCHEDULER, {}, {VOLCANO_GROUP_ANNOTATION: spec.name})]


def volcano_queue(name: str, *, gpus: int, run_id: str | None = None, gpu_resource: str = GPU) -> Manifest:
    """A cluster-scoped Volcano Queue capped at ``gpus`` (Volcano ships a ``default`` queue already)."""
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": _cluster_meta(name, run_id),
            "spec": {"weight": 1, "reclaimable": True, "capability": {gpu_resource: str(gpus)}}}


# --- kueue -------------------------------------------------------------------------------------------------


def kueue_pods(spec: GangSpec) -> list[Manifest]:
    """A Kueue plain-pod group: admitted when all ``workers`` pods exist and fit the LocalQueue's quota."""
    if spec.min_available != spec.workers:
        raise FlavorError(f"gang {spec.name!r}: a Kueue pod group is admitted as exactly "
                          f"{KUEUE_TOTAL_ANNOTATION} pods, so min_member ({spec.min_member}) must equal workers "
                          f"({spec.workers}); drop min_member or use the volcano or kai flavor")
    return _pods(spec, None, {KUEUE_QUEUE_LABEL: spec.queue, KUEUE_GROUP_LABEL: spec.name},
                 {KUEUE_TOTAL_ANNOTATION: str(spec.workers)})


def kueue_queues(*, namespace: str, local_queue: str, gpus: int, cluster_queue: str = "firedrill-cq",
                 flavor: str = "firedrill-gpu", cohort: str = "firedrill", run_id: str | None = None,
                 gpu_resource: str = GPU, node_labels: Mapping[str, str] | None = None) -> list[Manifest]:
    """The ResourceFlavor, ClusterQueue (in cohort ``cohort``) and LocalQueue a Kueue test cluster needs.

    ``gpus`` is the ClusterQueue's nominal GPU quota; CPU and memory are covered generously so that
    only GPUs gate admission.
    """
    flavor_spec: dict[str, Any] = {}
    if node_labels:
        flavor_spec["nodeLabels"] = dict(node_labels)
    resources = [{"name": "cpu", "nominalQuota": "10k"}, {"name": "memory", "nominalQuota": "100Ti"},
                 {"name": gpu_resource, "nominalQuota": gpus}]
    local_meta = _cluster_meta(local_queue, run_id)
    local_meta["namespace"] = namespace
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": _cluster_meta(flavor, run_id), "spec": flavor_spec},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": _cluster_meta(cluster_queue, run_id),
         "spec": {"namespaceSelector": {}, "cohortName": cohort,
                  "resourceGroups": [{"coveredResources": ["cpu", "memory", gpu_resource],
                                      "flavors": [{"name": flavor, "resources": resources}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": local_meta, "spec": {"clusterQueue": cluster_queue}},
    ]


# --- kai ---------------------------------------------------------------------------------------------------


def kai_pod_group(spec: GangSpec) -> Manifest:
    pg_spec: dict[str, Any] = {"minMember": spec.min_available, "queue": spec.queue}
    if spec.priority_class:
        pg_spec["priorityClassName"] = spec.priority_class
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": _object_meta(spec, spec.name), "spec": pg_spec}


def kai_gang(spec: GangSpec) -> list[Manifest]:
    """A KAI PodGroup followed by its pods (create in this order)."""
    return [kai_pod_group(spec),
            *_pods(spec, KAI_SCHEDULER, {KAI_QUEUE_LABEL: spec.queue}, {KAI_GROUP_ANNOTATION: spec.name})]


def kai_queues(*, queue: str, gpus: int, parent: str = "firedrill-parent",
               run_id: str | None = None) -> list[Manifest]:
    """A KAI parent queue and the leaf ``queue`` under it (only leaf queues schedule); ``-1`` = unlimited."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    gpu = {"quota": gpus, "limit": gpus, "overQuotaWeight": 1}
    resources = {"gpu": gpu, "cpu": unlimited, "memory": unlimited}
    return [
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": _cluster_meta(parent, run_id),
         "spec": {"resources": resources}},
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": _cluster_meta(queue, run_id),
         "spec": {"parentQueue": parent, "resources": resources}},
    ]


# --- native (scheduling.k8s.io) --------------------------------------------------------------------------------


def _native_policy(spec: GangSpec) -> dict[str, Any]:
    return {"gang": {"minCount": spec.min_available}}


def _native_constraints(spec: GangSpec, group: dict[str, Any]) -> dict[str, Any]:
    """A pod group (or its template) with the spec's required topology as ``schedulingConstraints.topology``
    (one constraint, its node label ``key``); kube-apiserver drops the field while its
    ``TopologyAwareWorkloadScheduling`` gate is off."""
    if spec.required_topology is not None:
        group["schedulingConstraints"] = {"topology": [{"key": spec.required_topology}]}
    return group


def native_workload(spec: GangSpec) -> Manifest:
    """The Workload: one pod-group template ``worker``, gang-scheduled with ``minCount`` = min_member."""
    template: dict[str, Any] = _native_constraints(
        spec, {"name": NATIVE_TEMPLATE, "schedulingPolicy": _native_policy(spec)})
    if spec.priority_class:
        template["priorityClassName"] = spec.priority_class
    return {"apiVersion": NATIVE_API_VERSION, "kind": "Workload", "metadata": _object_meta(spec, spec.name),
            "spec": {"podGroupTemplates": [template]}}


def native_pod_group(spec: GangSpec) -> Manifest:
    """The PodGroup of the Workload's template, as a workload controller would make it from the template."""
    pg_spec: dict[str, Any] = _native_constraints(spec, {
        "workloadRef": {"workloadName": spec.name, "templateName": NATIVE_TEMPLATE},
        "schedulingPolicy": _native_policy(spec)})
    if spec.priority_class:
        pg_spec["priorityClassName"] = spec.priority_class
    return {"apiVersion": NATIVE_API_VERSION, "kind": "PodGroup", "metadata": _object_meta(spec, spec.name),
            "spec": pg_spec}


def native_gang(spec: GangSpec) -> list[Manifest]:
    """A Workload, its PodGroup, then the pods that name the PodGroup (create in this order).

    The pods' ``spec.schedulingGroup`` is dropped by a kube-apiserver whose ``GenericWorkload`` gate is off;
    such a server does not serve Workload and PodGroup either, so the first create fails naming them."""
    pods = _pods(spec, None, {}, {})
    for pod in pods:
        pod["spec"]["schedulingGroup"] = {"podGroupName": spec.name}
    return [native_workload(spec), native_pod_group(spec), *pods]


# --- batch/v1 Job ------------------------------------------------------------------------------------------

JOB_COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
"""The index Kubernetes' Job controller gives each pod of an Indexed Job (also its ``JOB_COMPLETION_INDEX``)."""
TRAINING_JOB_FLAVORS = (GangFlavor.NATIVE, GangFlavor.KUEUE)
"""Flavors whose training job is a batch/v1 Indexed Job (Volcano's is its own Job; KAI's is not written yet)."""


def indexed_job(spec: GangSpec, flavor: GangFlavor) -> Manifest:
    """A ``batch/v1`` Indexed Job of ``workers`` pods (completions = parallelism = workers): the training job
    of a cluster without a job controller of its own.

    Kubernetes' Job controller creates a new pod for an index whose pod failed or is being deleted (an
    eviction), after that index's pod-failure back-off (10 s, doubling with each failure of the index);
    ``spec.max_retry`` failures per index are allowed.  Nothing restarts the other ranks: a rank that must
    rejoin a new world exits on its own (the canary's ``--peer-timeout``).  The Kueue flavor labels the Job
    with its LocalQueue (Kueue's batch/v1 Job integration); the native flavor schedules it with the default
    scheduler, as a Job is when the ``WorkloadWithJob`` gate (alpha in 1.36) is off."""
    if flavor not in TRAINING_JOB_FLAVORS:
        raise FlavorError(f"gang {spec.name!r}: no batch/v1 training job is written for flavor {flavor.value}")
    meta = _object_meta(spec, spec.name)
    if flavor is GangFlavor.KUEUE:
        meta["labels"][KUEUE_QUEUE_LABEL] = spec.queue
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        "backoffLimitPerIndex": spec.max_retry,
        "podReplacementPolicy": "TerminatingOrFailed",
        "template": {
            "metadata": {"labels": _pod_labels(spec, None), "annotations": _pod_annotations(spec)},
            "spec": _pod_spec(spec, None),
        },
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}


# --- per flavor --------------------------------------------------------------------------------------------


def _cluster_meta(name: str, run_id: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if run_id:
        meta["labels"] = {RUN_LABEL: run_id}
    return meta


def gang_manifests(spec: GangSpec, flavor: GangFlavor,
                   volcano_form: VolcanoForm = VolcanoForm.JOB) -> list[Manifest]:
    """Everything to create for one gang, in creation order (group object first, then pods)."""
    if flavor is GangFlavor.VOLCANO:
        return [volcano_job(spec)] if volcano_form is VolcanoForm.JOB else volcano_plain(spec)
    if flavor is GangFlavor.KUEUE:
        return kueue_pods(spec)
    if flavor is GangFlavor.NATIVE:
        return native_gang(spec)
    return kai_gang(spec)


def queue_manifests(flavor: GangFlavor, *, queue: str, namespace: str, gpus: int,
                    run_id: str | None = None, gpu_resource: str = GPU) -> list[Manifest]:
    """The queue objects a test cluster needs so that gangs in ``queue`` can be admitted, in creation order."""
    if flavor is GangFlavor.VOLCANO:
        return [volcano_queue(queue, gpus=gpus, run_id=run_id, gpu_resource=gpu_resource)]
    if flavor is GangFlavor.KUEUE:
        return kueue_queues(namespace=namespace, local_queue=queue, gpus=gpus, run_id=run_id,
                            gpu_resource=gpu_resource)
    if flavor is GangFlavor.NATIVE:
        return []  # native gang scheduling has no queues; the profile's queue is not used
    return kai_queues(queue=queue, gpus=gpus, run_id=run_id)


GROUP_OBJECTS: dict[GangFlavor, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    GangFlavor.VOLCANO: (("scheduling.volcano.sh", "podgroups", ("create", "delete")),),
    GangFlavor.KAI: (("scheduling.run.ai", "podgroups", ("create", "delete")),),
    GangFlavor.NATIVE: (("scheduling.k8s.io", "workloads", ("create", "delete")),
                        ("scheduling.k8s.io", "podgroups", ("create", "delete"))),
    GangFlavor.KUEUE: (("kueue.x-k8s.io", "workloads", ("delete",)),),  # Kueue makes it; rollback deletes it
}
"""(group, resource, verbs) of the objects beside the pods each flavor's gang (plain form) writes or removes: the
permissions a drill that submits gangs asks for."""

_APIS: dict[GangFlavor, dict[str, tuple[str, ...]]] = {
    GangFlavor.VOLCANO: {"batch.volcano.sh": ("v1alpha1",), "scheduling.volcano.sh": ("v1beta1",)},
    GangFlavor.KUEUE: {"kueue.x-k8s.io": ("v1beta2",)},
    GangFlavor.KAI: {"scheduling.run.ai": ("v2", "v2alpha2")},  # Queue v2, PodGroup v2alpha2
    GangFlavor.NATIVE: {"scheduling.k8s.io": ("v1beta1",)},  # Workload and PodGroup (PriorityClass is v1)
}


def flavor_apis(flavor: GangFlavor) -> dict[str, tuple[str, ...]]:
    """The API groups, and the versions of each that this module writes, a flavor needs the cluster to serve."""
    return dict(_APIS[flavor])


@dataclass(frozen=True, slots=True)
class GroupRef:
    """A custom object, as ``CustomObjectsApi`` addresses it."""

    group: str
    version: str
    plural: str
    kind: str
    namespace: str
    name: str

    @property
    def path(self) -> str:
        """The object's REST path."""
        return f"/apis/{self.group}/{self.version}/namespaces/{self.namespace}/{self.plural}/{self.name}"


@dataclass(frozen=True, slots=True)
class GangLocator:
    """How to find a gang once submitted: its pods by label selector, and the object holding its status."""

    flavor: GangFlavor
    namespace: str
    pod_selector: str
    """Matches every pod of this gang (also the pods Volcano's job controller recreates)."""
    group: GroupRef
    """Volcano Job: the Job (its PodGroup is ``<name>-<uid>``, see :func:`volcano_job_pod_group_name`);
    Volcano plain, KAI and native: the PodGroup; Kueue: the Workload Kueue creates, named after the pod group
    (delete it to release the pods' ``kueue.x-k8s.io/managed`` finalizer)."""


def locate(spec: GangSpec, flavor: GangFlavor, volcano_form: VolcanoForm = VolcanoForm.JOB) -> GangLocator:
    """Where a gang's pods and group object are."""
    selector = f"{RUN_LABEL}={spec.run_id},{GANG_LABEL}={spec.name}"
    if flavor is GangFlavor.VOLCANO and volcano_form is VolcanoForm.JOB:
        ref = GroupRef("batch.volcano.sh", "v1alpha1", "jobs", "Job", spec.namespace, spec.name)
    elif flavor is GangFlavor.VOLCANO:
        ref = GroupRef("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", spec.namespace, spec.name)
    elif flavor is GangFlavor.KUEUE:
        ref = GroupRef("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", spec.namespace, spec.name)
    elif flavor is GangFlavor.NATIVE:
        ref = GroupRef("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", spec.namespace, spec.name)
    else:
        ref = GroupRef("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", spec.namespace, spec.name)
    return GangLocator(flavor, spec.namespace, selector, ref)
