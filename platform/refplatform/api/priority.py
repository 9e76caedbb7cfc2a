"""``scheduling.k8s.io/v1`` PriorityClass and the Priority admission plugin, as upstream has them.

- Validation of a class (:func:`validate_priority_class`): a user class has a value of at most one
  billion and a name that does not start with ``system-``; a ``system-`` name must be one of the two
  built-in classes with its exact value; ``preemptionPolicy`` is ``PreemptLowerPriority`` (the
  default) or ``Never``.  Value and preemptionPolicy are immutable.
- The built-in classes ``system-cluster-critical`` (2000000000) and ``system-node-critical``
  (2000001000) exist from the start and cannot be deleted.
- :class:`PriorityAdmission`: at most one class has ``globalDefault: true``; a pod created with
  ``priorityClassName`` gets that class's value as ``spec.priority`` and its ``spec.preemptionPolicy``;
  an unknown name is refused (``pods "x" is forbidden: no PriorityClass with name foo was found``);
  a pod without a class gets the global default class (the lowest-valued one if several), else
  priority 0 and ``PreemptLowerPriority``.  A pod may not state a priority or policy that differs from
  its class's.  Pods made by controllers (ReplicaSet, Volcano job) pass here too: they are created
  through the API.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from refplatform.api import errors as E
from refplatform.api.errors import ApiError, Cause
from refplatform.resources import PODS, PRIORITYCLASSES, ResourceType
from refplatform.store import Store

Obj = dict[str, Any]

HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_CRITICAL_PRIORITY = 2 * HIGHEST_USER_DEFINABLE_PRIORITY
SYSTEM_PREFIX = "system-"
INT32_MAX = 2**31 - 1


class PreemptionPolicy(enum.Enum):
    """``preemptionPolicy`` of a PriorityClass and of a pod."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    """The pod may evict pods of strictly lower priority when it does not fit (the default)."""
    NEVER = "Never"
    """The pod waits for room and never evicts another."""


@dataclass(frozen=True)
class SystemClass:
    """A built-in class, created with the API server and never deleted."""

    name: str
    value: int
    description: str

    def as_object(self) -> Obj:
        return {"apiVersion": PRIORITYCLASSES.api_version, "kind": PRIORITYCLASSES.kind,
                "metadata": {"name": self.name}, "value": self.value, "globalDefault": False,
                "preemptionPolicy": PreemptionPolicy.PREEMPT_LOWER_PRIORITY.value, "description": self.description}


SYSTEM_CLASSES = (
    SystemClass("system-node-critical", SYSTEM_CRITICAL_PRIORITY + 1000,
                "Used for system critical pods that must not be moved from their current node."),
    SystemClass("system-cluster-critical", SYSTEM_CRITICAL_PRIORITY,
                "Used for system critical pods that must run in the cluster, but can be moved to another node "
                "if necessary."),
)
_POLICIES = tuple(p.value for p in PreemptionPolicy)


def _policy_causes(value: Any, path: str) -> list[Cause]:
    if value in _POLICIES:
        return []
    return [Cause(path, f'Unsupported value: "{value}": supported values: "Never", "PreemptLowerPriority"',
                  "FieldValueNotSupported")]


def validate_priority_class(obj: Obj) -> list[Cause]:
    """Default ``preemptionPolicy`` (in place) and return the problems of a PriorityClass."""
    causes: list[Cause] = []
    name = (obj.get("metadata") or {}).get("name") or ""
    value = obj.get("value")
    if value is None:
        causes.append(Cause("value", "Required value", "FieldValueRequired"))
    elif isinstance(value, bool) or not isinstance(value, int) or not -INT32_MAX - 1 <= value <= INT32_MAX:
        causes.append(Cause("value", f"Invalid value: {value!r}: must be a 32-bit integer"))
    global_default = obj.setdefault("globalDefault", False)
    if not isinstance(global_default, bool):
        causes.append(Cause("globalDefault", f"Invalid value: {global_default!r}: must be a boolean"))
    description = obj.get("description")
    if description is not None and not isinstance(description, str):
        causes.append(Cause("description", f"Invalid value: {description!r}: must be a string"))
    obj.setdefault("preemptionPolicy", PreemptionPolicy.PREEMPT_LOWER_PRIORITY.value)
    causes += _policy_causes(obj["preemptionPolicy"], "preemptionPolicy")
    if causes:
        return causes
    if name.startswith(SYSTEM_PREFIX):
        known = next((c for c in SYSTEM_CLASSES if c.name == name), None)
        if known is None:
            why = f"{name} is not a known system priority class"
        elif value != known.value:
            why = f"value of {name} PriorityClass must be {known.value}"
        elif global_default:
            why = f"globalDefault of {name} PriorityClass must be false"
        else:
            return []
        causes.append(Cause("metadata.name", f"Forbidden: priority class names with '{SYSTEM_PREFIX}' prefix are "
                                             f"reserved for system use only. error: {why}", "FieldValueForbidden"))
    elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
        causes.append(Cause("value", "Forbidden: maximum allowed value of a user defined priority is "
                                     f"{HIGHEST_USER_DEFINABLE_PRIORITY}", "FieldValueForbidden"))
    return causes


def forbidden(rt: ResourceType, name: str, why: str) -> ApiError:
    """Upstream's admission refusal: ``<resource> "<name>" is forbidden: <why>``."""
    return ApiError(403, "Forbidden", f'{rt.group_resource} "{name}" is forbidden: {why}', name, rt.group, rt.plural)


class PriorityAdmission:
    """The Priority admission plugin over the server's store (classes are read at each admission)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def install_system_classes(self, now: str) -> None:
        """Create the built-in classes the store lacks (as the API server's post-start hook does)."""
        for system in SYSTEM_CLASSES:
            if self.store.find(PRIORITYCLASSES.key, "", system.name) is None:
                self.store.create(PRIORITYCLASSES.key, system.as_object(), now=now)

    def _classes(self) -> list[Obj]:
        items, _ = self.store.list(PRIORITYCLASSES.key)
        return items

    def default_class(self) -> Obj | None:
        """The global default class; the lowest-valued one if a race let two exist (as upstream)."""
        defaults = [c for c in self._classes() if c.get("globalDefault") is True]
        return min(defaults, key=lambda c: (c.get("value", 0), c["metadata"]["name"])) if defaults else None

    def admit_create(self, rt: ResourceType, obj: Obj) -> None:
        if rt is PODS:
            self._admit_pod(obj)
        elif rt is PRIORITYCLASSES:
            self._admit_class(obj, None)

    def admit_update(self, rt: ResourceType, current: Obj, new: Obj) -> None:
        """A pod keeps the priority admission gave it; a class keeps its value and policy."""
        if rt is PODS:
            spec, old = new.setdefault("spec", {}), current.get("spec") or {}
            for key in ("priority", "preemptionPolicy", "priorityClassName"):
                if spec.get(key) is None and old.get(key) is not None:
                    spec[key] = old[key]
        elif rt is PRIORITYCLASSES:
            new.setdefault("preemptionPolicy", PreemptionPolicy.PREEMPT_LOWER_PRIORITY.value)  # defaulted first
            self._admit_class(new, current)

    def admit_delete(self, rt: ResourceType, name: str) -> None:
        if rt is PRIORITYCLASSES and any(c.name == name for c in SYSTEM_CLASSES):
            raise forbidden(rt, name, "this is a system priority class and cannot be deleted")

    def _admit_class(self, obj: Obj, current: Obj | None) -> None:
        name = obj["metadata"]["name"]
        if current is not None:
            causes = [Cause(key, "Forbidden: may not be changed in an update.", "FieldValueForbidden")
                      for key in ("value", "preemptionPolicy") if obj.get(key) != current.get(key)]
            if causes:
                raise E.invalid(PRIORITYCLASSES, name, causes)
        if obj.get("globalDefault") is True:
            existing = self.default_class()
            if existing is not None and existing["metadata"]["name"] != name:
                raise forbidden(PRIORITYCLASSES, name, f"PriorityClass {existing['metadata']['name']} is already "
                                                       "marked as default. Only one default can exist")

    def _admit_pod(self, pod: Obj) -> None:
        name = pod["metadata"].get("name") or pod["metadata"].get("generateName") or ""
        spec = pod.setdefault("spec", {})
        class_name = spec.get("priorityClassName") or ""
        if class_name:
            pc = self.store.find(PRIORITYCLASSES.key, "", class_name)
            if pc is None:
                raise forbidden(PODS, name, f"no PriorityClass with name {class_name} was found")
        else:
            pc = self.default_class()
        value = int(pc.get("value", 0)) if pc else 0
        policy = (pc.get("preemptionPolicy") if pc else None) or PreemptionPolicy.PREEMPT_LOWER_PRIORITY.value
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
        stated = spec.get("priority")
        if stated is not None and stated != value:
            raise forbidden(PODS, name, f"the integer value of priority ({stated}) must not be provided in pod spec; "
                                        f"priority admission controller computed {value} from the given "
                                        "PriorityClass name")
        spec["priority"] = value
        stated_policy = spec.get("preemptionPolicy")
        if stated_policy is not None and stated_policy != policy:
            raise forbidden(PODS, name, f"the string value of PreemptionPolicy ({stated_policy}) must not be provided "
                                        f"in pod spec; priority admission controller computed {policy} from the given "
                                        "PriorityClass name")
        spec["preemptionPolicy"] = policy


__all__ = ["HIGHEST_USER_DEFINABLE_PRIORITY", "SYSTEM_CLASSES", "PreemptionPolicy", "PriorityAdmission",
           "SystemClass", "validate_priority_class"]
