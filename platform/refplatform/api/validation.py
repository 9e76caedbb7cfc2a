"""Admission: defaults and validation of incoming objects, one function per kind.

Each validator returns field causes in upstream's wording ("Required value",
"must be greater than or equal to 0", ...), so a refused request names the
field and the problem.  Quantities given as JSON numbers are normalised to
strings, because the official client's models only accept strings back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from refplatform.api.configobjects import validate_configmap, validate_secret, validate_serviceaccount
from refplatform.api.errors import Cause
from refplatform.api.jobadmission import validate_job
from refplatform.api.pdbadmission import validate_pdb
from refplatform.api.priority import validate_priority_class
from refplatform.quantity import parse_quantity
from refplatform.resources import (
    DEPLOYMENTS, ENDPOINTSLICES, EVENTS, LEASES, NAMESPACES, NODES, PODGROUPS, PODS, QUEUES, REPLICASETS, SERVICES,
    VCJOBS, ResourceType,
)
from refplatform.resources import HPAS
from refplatform.resources import PRIORITYCLASSES
from refplatform.resources import RESOURCEQUOTAS
from refplatform.resources import CONFIGMAPS, JOBS, PDBS, SECRETS, SERVICEACCOUNTS

Obj = dict[str, Any]

GPU = "nvidia.com/gpu"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
# Integer-only resources: whole devices cannot be split through the extended-resource API.
INTEGER_RESOURCES = frozenset({GPU, "pods"})


def _name_causes(name: Any, path: str, label: bool) -> list[Cause]:
    if not isinstance(name, str) or not name:
        return [Cause(path, "Required value", "FieldValueRequired")]
    pattern, limit = (DNS1123_LABEL, 63) if label else (DNS1123_SUBDOMAIN, 253)
    if len(name) > limit or not pattern.match(name):
        kind = "RFC 1123 label" if label else "RFC 1123 subdomain"
        return [Cause(path, f'Invalid value: "{name}": a lowercase {kind} must consist of lower case '
                            f"alphanumeric characters, '-' or '.', start and end with an alphanumeric "
                            f"character, and be at most {limit} characters")]
    return []


def _string_map_causes(value: Any, path: str, keys_are_labels: bool) -> list[Cause]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [Cause(path, "Invalid value: must be a map of string keys to string values")]
    causes = []
    for k, v in value.items():
        if not isinstance(v, str):
            causes.append(Cause(f"{path}.{k}", f"Invalid value: {v!r}: must be a string"))
        elif keys_are_labels and (len(v) > 63 or (v and not LABEL_NAME.match(v))):
            causes.append(Cause(f"{path}.{k}", f'Invalid value: "{v}": a valid label value must be 63 '
                                                "characters or less and consist of alphanumerics, '-', '_' or '.'"))
        name = k.rsplit("/", 1)[-1]
        if keys_are_labels and (len(name) > 63 or not LABEL_NAME.match(name)):
            causes.append(Cause(f"{path}", f'Invalid value: "{k}": name part must consist of '
                                           "alphanumeric characters, '-', '_' or '.'"))
    return causes


def parse_resource_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity as a Decimal; raises ValueError with upstream's message."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, InvalidOperation, TypeError):
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'") from None


def _resource_list_causes(resources: Any, path: str) -> list[Cause]:
    """Validate and normalise (numbers to strings) a ResourceList in place."""
    if resources is None:
        return []
    if not isinstance(resources, dict):
        return [Cause(path, "Invalid value: must be a map of resource names to quantities")]
    causes = []
    for name, raw in list(resources.items()):
        field = f"{path}[{name}]"
        try:
            qty = parse_resource_quantity(raw)
        except ValueError as exc:
            causes.append(Cause(field, f"Invalid value: {raw!r}: {exc}"))
            continue
        if qty < 0:
            causes.append(Cause(field, f"Invalid value: {raw!r}: must be greater than or equal to 0"))
        elif name in INTEGER_RESOURCES and qty != qty.to_integral_value():
            causes.append(Cause(field, f"Invalid value: {raw!r}: must be an integer"))
        if not isinstance(raw, str):
            resources[name] = str(raw)
    return causes


def _container_causes(containers: Any, path: str) -> list[Cause]:
    if not isinstance(containers, list) or not containers:
        return [Cause(path, "Required value", "FieldValueRequired")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, c in enumerate(containers):
        cpath = f"{path}[{i}]"
        if not isinstance(c, dict):
            causes.append(Cause(cpath, "Invalid value: must be an object"))
            continue
        causes += _name_causes(c.get("name"), f"{cpath}.name", label=True)
        if c.get("name") in seen:
            causes.append(Cause(f"{cpath}.name", f'Duplicate value: "{c.get("name")}"', "FieldValueDuplicate"))
        seen.add(c.get("name"))
        if not c.get("image"):
            causes.append(Cause(f"{cpath}.image", "Required value", "FieldValueRequired"))
        res = c.get("resources") or {}
        limits, requests = res.get("limits"), res.get("requests")
        causes += _resource_list_causes(limits, f"{cpath}.resources.limits")
        causes += _resource_list_causes(requests, f"{cpath}.resources.requests")
        if isinstance(limits, dict) and isinstance(requests, dict):
            for name in set(limits) & set(requests):
                try:
                    lim, req = parse_resource_quantity(limits[name]), parse_resource_quantity(requests[name])
                except ValueError:
                    continue
                if "/" in name and lim != req:
                    causes.append(Cause(f"{cpath}.resources.requests[{name}]",
                                        f"Invalid value: {requests[name]!r}: must be equal to {name} limit of {limits[name]}"))
                elif req > lim:
                    causes.append(Cause(f"{cpath}.resources.requests[{name}]",
                                        f"Invalid value: {requests[name]!r}: must be less than or equal to {name} limit of {limits[name]}"))
    return causes


def _pod_spec_causes(spec: Any, path: str) -> list[Cause]:
    if not isinstance(spec, dict):
        return [Cause(path, "Required value", "FieldValueRequired")]
    causes = _container_causes(spec.get("containers"), f"{path}.containers")
    if "initContainers" in spec:
        causes += _container_causes(spec["initContainers"] or [{}], f"{path}.initContainers") if spec["initContainers"] else []
    causes += _string_map_causes(spec.get("nodeSelector"), f"{path}.nodeSelector", keys_are_labels=False)
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        causes.append(Cause(f"{path}.terminationGracePeriodSeconds",
                            f"Invalid value: {grace!r}: must be greater than or equal to 0"))
    return causes


def _int_causes(value: Any, path: str, minimum: int | None = None, maximum: int | None = None) -> list[Cause]:
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, int):
        return [Cause(path, f"Invalid value: {value!r}: must be an integer", "FieldValueTypeInvalid")]
    if minimum is not None and value < minimum:
        return [Cause(path, f"Invalid value: {value}: must be greater than or equal to {minimum}")]
    if maximum is not None and value > maximum:
        return [Cause(path, f"Invalid value: {value}: must be less than or equal to {maximum}")]
    return []


# ---------------------------------------------------------------- per kind
def _pod(obj: Obj) -> list[Cause]:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        for c in spec.get("containers") or []:
            if isinstance(c, dict):
                c.setdefault("terminationMessagePolicy", "File")
                c.setdefault("imagePullPolicy", "IfNotPresent")
    status = obj.setdefault("status", {})
    if isinstance(status, dict):
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", "BestEffort")
    return _pod_spec_causes(spec, "spec")


def _node(obj: Obj) -> list[Cause]:
    status = obj.get("status") or {}
    causes = _resource_list_causes(status.get("capacity"), "status.capacity")
    causes += _resource_list_causes(status.get("allocatable"), "status.allocatable")
    spec = obj.get("spec") or {}
    for i, taint in enumerate(spec.get("taints") or []):
        if not isinstance(taint, dict) or not taint.get("key"):
            causes.append(Cause(f"spec.taints[{i}].key", "Required value", "FieldValueRequired"))
        elif taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(Cause(f"spec.taints[{i}].effect",
                                f'Unsupported value: {taint.get("effect")!r}: supported values: '
                                '"NoSchedule", "PreferNoSchedule", "NoExecute"', "FieldValueNotSupported"))
    return causes


def _namespace(obj: Obj) -> list[Cause]:
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj.setdefault("status", {}).setdefault("phase", "Active")
    return []


def _event(obj: Obj) -> list[Cause]:
    if not isinstance(obj.get("involvedObject"), dict):
        return [Cause("involvedObject", "Required value", "FieldValueRequired")]
    return []


def _lease(obj: Obj) -> list[Cause]:
    spec = obj.get("spec") or {}
    return _int_causes(spec.get("leaseDurationSeconds"), "spec.leaseDurationSeconds", 1)


def _podgroup(obj: Obj) -> list[Cause]:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return [Cause("spec", "Invalid value: must be an object")]
    spec.setdefault("queue", "default")
    obj.setdefault("status", {}).setdefault("phase", "Pending")
    causes = _int_causes(spec.get("minMember"), "spec.minMember", 0)
    causes += _resource_list_causes(spec.get("minResources"), "spec.minResources")
    return causes


def _queue(obj: Obj) -> list[Cause]:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return [Cause("spec", "Invalid value: must be an object")]
    spec.setdefault("weight", 1)
    spec.setdefault("reclaimable", True)
    obj.setdefault("status", {}).setdefault("state", "Open")
    causes = _int_causes(spec.get("weight"), "spec.weight", 1, 65535)
    for part in ("capability", "deserved"):
        causes += _resource_list_causes(spec.get(part), f"spec.{part}")
    causes += _resource_list_causes((spec.get("guarantee") or {}).get("resource"), "spec.guarantee.resource")
    return causes


def _vcjob(obj: Obj) -> list[Cause]:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return [Cause("spec", "Invalid value: must be an object")]
    spec.setdefault("queue", "default")
    spec.setdefault("maxRetry", 3)
    spec.setdefault("schedulerName", "volcano")
    causes = _int_causes(spec.get("minAvailable"), "spec.minAvailable", 0)
    causes += _int_causes(spec.get("maxRetry"), "spec.maxRetry", 0)
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        causes.append(Cause("spec.tasks", "Required value: No task specified in job spec", "FieldValueRequired"))
        return causes
    total = 0
    for i, task in enumerate(tasks):
        tpath = f"spec.tasks[{i}]"
        if not isinstance(task, dict):
            causes.append(Cause(tpath, "Invalid value: must be an object"))
            continue
        causes += _name_causes(task.get("name"), f"{tpath}.name", label=True)
        causes += _int_causes(task.get("replicas"), f"{tpath}.replicas", 0)
        total += task.get("replicas") or 0 if isinstance(task.get("replicas"), int) else 0
        causes += _pod_spec_causes((task.get("template") or {}).get("spec"), f"{tpath}.template.spec")
    min_available = spec.get("minAvailable")
    if isinstance(min_available, int) and min_available > total:
        causes.append(Cause("spec.minAvailable", f"Invalid value: {min_available}: 'minAvailable' should "
                                                 f"not be greater than total replicas in tasks ({total})"))
    return causes


def _workload(obj: Obj) -> list[Cause]:
    """Deployment and ReplicaSet: replicas >= 0 (default 1), a matchLabels selector that the template's labels
    satisfy, and a valid pod template."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("spec", "Required value", "FieldValueRequired")]
    spec.setdefault("replicas", 1)
    causes = _int_causes(spec.get("replicas"), "spec.replicas", 0)
    selector = spec.get("selector")
    match = (selector or {}).get("matchLabels") if isinstance(selector, dict) else None
    if not isinstance(match, dict) or not match:
        causes.append(Cause("spec.selector", "Required value: a non-empty selector.matchLabels "
                                             "(matchExpressions are not served here)", "FieldValueRequired"))
    template = spec.get("template")
    if not isinstance(template, dict):
        causes.append(Cause("spec.template", "Required value", "FieldValueRequired"))
        return causes
    labels = (template.get("metadata") or {}).get("labels") or {}
    causes += _string_map_causes(labels, "spec.template.metadata.labels", keys_are_labels=True)
    if isinstance(match, dict) and match and isinstance(labels, dict) and any(
            labels.get(k) != v for k, v in match.items()):
        causes.append(Cause("spec.template.metadata.labels",
                            f"Invalid value: {labels!r}: `selector` does not match template `labels`"))
    causes += _pod_spec_causes(template.get("spec"), "spec.template.spec")
    return causes


def _service(obj: Obj) -> list[Cause]:
    """ClusterIP semantics only: ports with a port number, targetPort an int or a name (default: port)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("spec", "Required value", "FieldValueRequired")]
    spec.setdefault("type", "ClusterIP")
    causes: list[Cause] = []
    if spec["type"] not in ("ClusterIP", "LoadBalancer"):
        causes.append(Cause("spec.type", f'Unsupported value: "{spec["type"]}": supported values: '
                                         '"ClusterIP", "LoadBalancer"', "FieldValueNotSupported"))
    if spec.get("selector") is not None:
        causes += _string_map_causes(spec.get("selector"), "spec.selector", keys_are_labels=True)
    ports = spec.get("ports")
    if not isinstance(ports, list) or not ports:
        return causes + [Cause("spec.ports", "Required value", "FieldValueRequired")]
    for i, port in enumerate(ports):
        path = f"spec.ports[{i}]"
        if not isinstance(port, dict):
            causes.append(Cause(path, "Invalid value: must be an object"))
            continue
        port.setdefault("protocol", "TCP")
        if port.get("port") is None:
            causes.append(Cause(f"{path}.port", "Required value", "FieldValueRequired"))
        causes += _int_causes(port.get("port"), f"{path}.port", 1, 65535)
        port.setdefault("targetPort", port.get("port"))
        target = port.get("targetPort")
        if isinstance(target, int) and not isinstance(target, bool):
            causes += _int_causes(target, f"{path}.targetPort", 1, 65535)
        elif not isinstance(target, str) or not target:
            causes.append(Cause(f"{path}.targetPort", f"Invalid value: {target!r}: must be a port number "
                                                      "or a port name"))
        if len(ports) > 1 and not port.get("name"):
            causes.append(Cause(f"{path}.name", "Required value", "FieldValueRequired"))
    return causes


def _endpointslice(obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    if obj.get("addressType") not in ("IPv4", "IPv6", "FQDN"):
        causes.append(Cause("addressType", f"Unsupported value: {obj.get('addressType')!r}: supported values: "
                                           '"FQDN", "IPv4", "IPv6"', "FieldValueNotSupported"))
    for i, ep in enumerate(obj.get("endpoints") or []):
        if not isinstance(ep, dict) or not ep.get("addresses"):
            causes.append(Cause(f"endpoints[{i}].addresses", "Required value", "FieldValueRequired"))
    for i, port in enumerate(obj.get("ports") or []):
        if isinstance(port, dict):
            causes += _int_causes(port.get("port"), f"ports[{i}].port", 1, 65535)
    return causes


_SCALING_POLICY_TYPES = ("Pods", "Percent")
_SELECT_POLICIES = ("Max", "Min", "Disabled")


def _scaling_rules_causes(rules: Any, path: str) -> list[Cause]:
    if rules is None:
        return []
    if not isinstance(rules, dict):
        return [Cause(path, "Invalid value: must be an object")]
    causes = _int_causes(rules.get("stabilizationWindowSeconds"), f"{path}.stabilizationWindowSeconds", 0, 3600)
    select = rules.get("selectPolicy")
    if select is not None and select not in _SELECT_POLICIES:
        causes.append(Cause(f"{path}.selectPolicy", f'Unsupported value: "{select}": supported values: '
                                                    '"Disabled", "Max", "Min"', "FieldValueNotSupported"))
    for i, policy in enumerate(rules.get("policies") or []):
        ppath = f"{path}.policies[{i}]"
        if not isinstance(policy, dict):
            causes.append(Cause(ppath, "Invalid value: must be an object"))
            continue
        if policy.get("type") not in _SCALING_POLICY_TYPES:
            causes.append(Cause(f"{ppath}.type", f'Unsupported value: "{policy.get("type")}": supported values: '
                                                 '"Percent", "Pods"', "FieldValueNotSupported"))
        for key, top in (("value", None), ("periodSeconds", 1800)):
            if policy.get(key) is None:
                causes.append(Cause(f"{ppath}.{key}", "Required value", "FieldValueRequired"))
            causes += _int_causes(policy.get(key), f"{ppath}.{key}", 1, top)
    return causes


def _hpa(obj: Obj) -> list[Cause]:
    """autoscaling/v2 HorizontalPodAutoscaler: a scaleTargetRef, 1 <= minReplicas (default 1) <= maxReplicas,
    metrics of type Pods only (AverageValue targets), behavior's rules in upstream's ranges."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("spec", "Required value", "FieldValueRequired")]
    causes: list[Cause] = []
    ref = spec.get("scaleTargetRef")
    if not isinstance(ref, dict):
        causes.append(Cause("spec.scaleTargetRef", "Required value", "FieldValueRequired"))
    else:
        for key in ("kind", "name"):
            if not isinstance(ref.get(key), str) or not ref.get(key):
                causes.append(Cause(f"spec.scaleTargetRef.{key}", "Required value", "FieldValueRequired"))
    spec.setdefault("minReplicas", 1)
    causes += _int_causes(spec.get("minReplicas"), "spec.minReplicas", 1)
    if spec.get("maxReplicas") is None:
        causes.append(Cause("spec.maxReplicas", "Required value", "FieldValueRequired"))
    causes += _int_causes(spec.get("maxReplicas"), "spec.maxReplicas", 1)
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    if isinstance(low, int) and isinstance(high, int) and not causes and high < low:
        causes.append(Cause("spec.maxReplicas", f"Invalid value: {high}: must be greater than or equal to "
                                                "`minReplicas`"))
    metrics = spec.get("metrics")
    if not isinstance(metrics, list) or not metrics:
        causes.append(Cause("spec.metrics", "Required value: at least one metric of type Pods (the default CPU "
                                            "utilization target is not served here)", "FieldValueRequired"))
        metrics = []
    for i, metric in enumerate(metrics):
        mpath = f"spec.metrics[{i}]"
        if not isinstance(metric, dict):
            causes.append(Cause(mpath, "Invalid value: must be an object"))
            continue
        if metric.get("type") != "Pods":
            causes.append(Cause(f"{mpath}.type", f'Unsupported value: "{metric.get("type")}": supported values: '
                                                 '"Pods" (Resource, ContainerResource, Object and External '
                                                 'metrics are not served here)', "FieldValueNotSupported"))
            continue
        pods = metric.get("pods") if isinstance(metric.get("pods"), dict) else {}
        name = (pods.get("metric") or {}).get("name") if isinstance(pods.get("metric"), dict) else None
        if not isinstance(name, str) or not name:
            causes.append(Cause(f"{mpath}.pods.metric.name", "Required value", "FieldValueRequired"))
        target = pods.get("target") if isinstance(pods.get("target"), dict) else {}
        if target.get("type") != "AverageValue":
            causes.append(Cause(f"{mpath}.pods.target.type", f'Unsupported value: "{target.get("type")}": '
                                                             'supported values: "AverageValue"',
                                "FieldValueNotSupported"))
        try:
            if parse_resource_quantity(target.get("averageValue")) <= 0:
                causes.append(Cause(f"{mpath}.pods.target.averageValue", "Invalid value: must be positive"))
        except ValueError as exc:
            causes.append(Cause(f"{mpath}.pods.target.averageValue", f"Invalid value: "
                                                                     f"{target.get('averageValue')!r}: {exc}"))
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        causes += _scaling_rules_causes(behavior.get("scaleUp"), "spec.behavior.scaleUp")
        causes += _scaling_rules_causes(behavior.get("scaleDown"), "spec.behavior.scaleDown")
    elif behavior is not None:
        causes.append(Cause("spec.behavior", "Invalid value: must be an object"))
    return causes


QUOTA_SCOPES = ("PriorityClass", "Terminating", "NotTerminating", "BestEffort", "NotBestEffort",
                "CrossNamespacePodAffinity")
QUOTA_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _resource_quota(obj: Obj) -> list[Cause]:
    """A v1 ResourceQuota: ``spec.hard`` quantities, ``spec.scopes`` names, ``spec.scopeSelector`` expressions
    (In and NotIn need values, Exists and DoesNotExist take none; only PriorityClass takes values)."""
    spec = obj.get("spec")
    if spec is None:
        obj["spec"] = spec = {}
    if not isinstance(spec, dict):
        return [Cause("spec", "Invalid value: must be an object")]
    causes = _resource_list_causes(spec.get("hard"), "spec.hard")
    scopes = spec.get("scopes")
    if scopes is not None:
        if not isinstance(scopes, list):
            causes.append(Cause("spec.scopes", "Invalid value: must be a list of scope names"))
        else:
            for i, scope in enumerate(scopes):
                if scope not in QUOTA_SCOPES or scope == "PriorityClass":
                    causes.append(Cause(f"spec.scopes[{i}]", f'Unsupported value: "{scope}": supported values: '
                                        + ", ".join(f'"{s}"' for s in QUOTA_SCOPES if s != "PriorityClass"),
                                        "FieldValueNotSupported"))
    selector = spec.get("scopeSelector")
    if selector is None:
        return causes
    exprs = selector.get("matchExpressions") if isinstance(selector, dict) else None
    if not isinstance(exprs, list):
        return causes + [Cause("spec.scopeSelector.matchExpressions", "Invalid value: must be a list")]
    for i, expr in enumerate(exprs):
        at = f"spec.scopeSelector.matchExpressions[{i}]"
        if not isinstance(expr, dict):
            causes.append(Cause(at, "Invalid value: must be an object"))
            continue
        if expr.get("scopeName") not in QUOTA_SCOPES:
            causes.append(Cause(f"{at}.scopeName", f'Unsupported value: "{expr.get("scopeName")}": supported values: '
                                + ", ".join(f'"{s}"' for s in QUOTA_SCOPES), "FieldValueNotSupported"))
        op, values = expr.get("operator"), expr.get("values")
        if op not in QUOTA_OPERATORS:
            causes.append(Cause(f"{at}.operator", f'Unsupported value: "{op}": supported values: '
                                + ", ".join(f'"{o}"' for o in QUOTA_OPERATORS), "FieldValueNotSupported"))
        elif op in ("In", "NotIn") and (not isinstance(values, list) or not values
                                         or not all(isinstance(v, str) for v in values)):
            causes.append(Cause(f"{at}.values", "Required value: must be at least one value when `operator` is "
                                "'In' or 'NotIn' for scope selector", "FieldValueRequired"))
        elif op in ("Exists", "DoesNotExist") and values:
            causes.append(Cause(f"{at}.values", "Invalid value: may not be specified when `operator` is 'Exists' "
                                "or 'DoesNotExist'"))
    return causes


VALIDATORS: dict[str, Callable[[Obj], list[Cause]]] = {
    PODS.key: _pod, NODES.key: _node, NAMESPACES.key: _namespace, EVENTS.key: _event,
    LEASES.key: _lease, PODGROUPS.key: _podgroup, QUEUES.key: _queue, VCJOBS.key: _vcjob,
    DEPLOYMENTS.key: _workload, REPLICASETS.key: _workload, SERVICES.key: _service,
    ENDPOINTSLICES.key: _endpointslice,
    HPAS.key: _hpa,
    PRIORITYCLASSES.key: validate_priority_class,
    RESOURCEQUOTAS.key: _resource_quota,
    CONFIGMAPS.key: validate_configmap, SECRETS.key: validate_secret, SERVICEACCOUNTS.key: validate_serviceaccount,
    JOBS.key: validate_job, PDBS.key: validate_pdb,
}


def validate(rt: ResourceType, obj: Obj) -> list[Cause]:
    """Apply defaults to ``obj`` (in place) and return every problem found."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [Cause("metadata", "Required value", "FieldValueRequired")]
    causes = _name_causes(meta.get("name"), "metadata.name", label=rt is NAMESPACES)
    causes += _string_map_causes(meta.get("labels"), "metadata.labels", keys_are_labels=True)
    causes += _string_map_causes(meta.get("annotations"), "metadata.annotations", keys_are_labels=False)
    validator = VALIDATORS.get(rt.key)
    if validator is not None:
        causes += validator(obj)
    return causes


def pod_gpu_request(pod: Obj) -> int:
    """Whole GPUs a pod asks for (limits win, as for every extended resource)."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        raw = (res.get("limits") or {}).get(GPU, (res.get("requests") or {}).get(GPU))
        if raw is not None:
            try:
                total += int(parse_resource_quantity(raw))
            except ValueError:
                pass
    return total
