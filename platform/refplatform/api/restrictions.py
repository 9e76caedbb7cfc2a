"""What an identity may write, decided from the object itself (after :mod:`refplatform.api.gates` let the
request through), as upstream's NodeRestriction admission and a tenant policy decide it.

A node identity (``system:node:<node>``):

- creates only its own Node and its own Lease, and of Namespaces only ``kube-node-lease``;
- writes the status of, and deletes, only pods bound to it (``spec.nodeName`` is the node);
- changes a pod bound to it (outside ``status``) only in its ``firedrill.dev/*`` annotations (a documented
  deviation from upstream: the agent records devices and training progress there);
- changes a Volcano Job only in its ``firedrill.dev/*`` annotations (the fenced checkpoint record), and only a
  Job with a pod bound to the node (label ``volcano.sh/job-name``).

A tenant:

- adds, changes or removes no ``firedrill.dev/*`` annotation on create, update or patch of any object (they
  are the platform's own records: devices, progress, checkpoints, the leak report and chargeback read them);
- names no node on a pod it creates (``spec.nodeName``): placing pods is the scheduler's (and quota and
  gang scheduling would be bypassed).  The annotations of pod *templates* inside Deployments or Volcano
  Jobs are not looked at.

Refusals are 403 Forbidden, ``<resource> "<name>" is forbidden: <message>``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from refplatform.api import errors as E
from refplatform.api.auth import Identity, Role
from refplatform.api.gates import LEASE_NAMESPACE
from refplatform.resources import LEASES, NAMESPACES, NODES, PODS, VCJOBS, ResourceType

Obj = dict[str, Any]

PROTECTED_PREFIX = "firedrill.dev/"
JOB_LABEL = "volcano.sh/job-name"


@dataclass(frozen=True)
class Write:
    """One write as the object-level checks see it."""

    verb: str
    """create, update, patch or delete."""
    rt: ResourceType
    subresource: str
    old: Obj | None
    """The stored object (None on create)."""
    new: Obj | None
    """The object as it would be stored (None on delete)."""

    @property
    def name(self) -> str:
        obj = self.new if self.new is not None else self.old
        return str(((obj or {}).get("metadata") or {}).get("name") or "")

    @property
    def namespace(self) -> str:
        obj = self.new if self.new is not None else self.old
        return str(((obj or {}).get("metadata") or {}).get("namespace") or "")


def _annotations(obj: Obj | None) -> dict[str, Any]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def protected_changes(old: Obj | None, new: Obj | None) -> list[str]:
    """The ``firedrill.dev/*`` annotation keys added, changed or removed from ``old`` to ``new``."""
    before, after = _annotations(old), _annotations(new)
    keys = {k for k in (*before, *after) if k.startswith(PROTECTED_PREFIX)}
    return sorted(k for k in keys if before.get(k) != after.get(k))


def _templates(obj: Obj | None) -> dict[str, Obj]:
    """The pod templates inside a workload object, by where they are: a Deployment's, ReplicaSet's or Job's
    ``spec.template``, a CronJob's ``spec.jobTemplate.spec.template``, a Volcano Job's ``spec.tasks[i].template``."""
    spec = (obj or {}).get("spec") or {}
    found: dict[str, Obj] = {}
    if isinstance(spec.get("template"), dict):
        found["spec.template"] = spec["template"]
    job = ((spec.get("jobTemplate") or {}).get("spec") or {}) if isinstance(spec.get("jobTemplate"), dict) else {}
    if isinstance(job.get("template"), dict):
        found["spec.jobTemplate.spec.template"] = job["template"]
    for i, task in enumerate(spec.get("tasks") or []):
        if isinstance(task, dict) and isinstance(task.get("template"), dict):
            found[f"spec.tasks[{i}].template"] = task["template"]
    return found


def protected_template_changes(old: Obj | None, new: Obj | None) -> list[str]:
    """``firedrill.dev/*`` annotation keys added, changed or removed in the pod templates of a workload object
    (each as ``<template path>: <key>``): the pods a controller makes from them would carry them."""
    before, after = _templates(old), _templates(new)
    return [f"{where}: {key}" for where in sorted({*before, *after})
            for key in protected_changes(before.get(where), after.get(where))]


def _without_protected(obj: Obj | None) -> Obj:
    out = dict(obj or {})  # shallow: only metadata and status change below, and nothing is written back
    meta = out["metadata"] = dict(out.get("metadata") or {})
    for volatile in ("resourceVersion", "generation", "managedFields"):
        meta.pop(volatile, None)
    kept = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(PROTECTED_PREFIX)}
    if kept:
        meta["annotations"] = kept
    else:
        meta.pop("annotations", None)
    if not out.get("status"):  # an object stored without status gains an empty one on update: no change
        out.pop("status", None)
    return out


def only_protected_changed(old: Obj | None, new: Obj | None) -> bool:
    """True when ``new`` differs from ``old`` in ``firedrill.dev/*`` annotations at most."""
    return _without_protected(old) == _without_protected(new)


class Restrictions:
    """The object-level checks; ``pods_in(namespace)`` lists the stored pods of a namespace."""

    def __init__(self, pods_in: Callable[[str], list[Obj]], *, node_writes_any: bool = False) -> None:
        self.pods_in = pods_in
        self.node_writes_any = node_writes_any
        """The ``node-writes-any`` defect (docs/DEFECTS.md): a node writes any Node, Lease and pod status."""

    def check(self, who: Identity | None, w: Write) -> None:
        """Raise 403 when ``who`` may not make the write ``w``; None (an in-process caller) may."""
        if who is None:
            return
        if who.role is Role.NODE:
            self._node(who, w)
        elif who.role is Role.TENANT:
            self._tenant(who, w)

    # ------------------------------------------------------------------ tenant
    def _tenant(self, who: Identity, w: Write) -> None:
        if w.verb in ("create", "update", "patch"):
            changed = protected_changes(w.old, w.new) + protected_template_changes(w.old, w.new)
            if changed:
                keys = ", ".join(f'"{k}"' for k in changed)
                records = "they are the platform's own records (devices, progress, checkpoints, chargeback)"
                raise E.admission_forbidden(
                    w.rt, w.name, f'User "{who.user}" may not set, change or remove annotation(s) {keys}: '
                                  f"{PROTECTED_PREFIX}* annotations are written by the platform only; {records}",
                    f"a tenant may not set, change or remove {PROTECTED_PREFIX}* annotations ({keys}); {records}")
        if w.rt is PODS and w.verb == "create" and ((w.new or {}).get("spec") or {}).get("nodeName"):
            why = "a tenant may not choose a pod's node (spec.nodeName); the scheduler places pods"
            raise E.admission_forbidden(PODS, w.name, f'User "{who.user}" may not set spec.nodeName: the scheduler '
                                        "places pods (bind through the scheduler, within quota)", why)

    # -------------------------------------------------------------------- node
    def _node(self, who: Identity, w: Write) -> None:
        node, name = who.node, w.name
        if w.rt is NODES and name != node and not self.node_writes_any:
            self._refuse(w, f'node "{node}" is not allowed to modify node "{name}"')
        if w.rt is LEASES and name != node and not self.node_writes_any:
            self._refuse(w, f'node "{node}" can only access node lease with the same name as the requesting node')
        if w.rt is NAMESPACES and name != LEASE_NAMESPACE:
            self._refuse(w, f'node "{node}" may create only the "{LEASE_NAMESPACE}" Namespace')
        if w.rt is PODS:
            bound = ((w.old or {}).get("spec") or {}).get("nodeName")
            if w.subresource == "status":
                if bound != node and not self.node_writes_any:
                    self._refuse(w, f'node "{node}" can only update pod status for pods with spec.nodeName set '
                                    "to itself")
                return
            if bound != node:
                verb = "delete" if w.verb == "delete" else "update"
                self._refuse(w, f'node "{node}" can only {verb} pods with spec.nodeName set to itself')
            if w.verb != "delete" and not only_protected_changed(w.old, w.new):
                self._refuse(w, f'node "{node}" may change only the {PROTECTED_PREFIX}* annotations of a pod '
                                "(write its status through pods/status)")
        if w.rt is VCJOBS:
            if not only_protected_changed(w.old, w.new):
                self._refuse(w, f'node "{node}" may change only the {PROTECTED_PREFIX}* annotations of a job '
                                "(its checkpoint record)")
            if not any(((p.get("spec") or {}).get("nodeName") == node
                        and ((p.get("metadata") or {}).get("labels") or {}).get(JOB_LABEL) == name)
                       for p in self.pods_in(w.namespace)):
                self._refuse(w, f'node "{node}" may record checkpoints only of a job with a pod bound to it')

    @staticmethod
    def _refuse(w: Write, message: str) -> None:
        raise E.admission_forbidden(w.rt, w.name, message, message)
