"""The objects an embedded cluster starts with (issue 15's governance setup), created once by the admin.

- Namespaces ``firedrill-tenant`` (tenant-a's) and ``firedrill-neighbour`` (tenant-b's), and ``kube-node-lease``
  (so no node agent has to create a Namespace).
- ResourceQuota ``gpu-quota`` in ``firedrill-tenant``: ``requests.nvidia.com/gpu: "4"``.
- PriorityClasses ``firedrill-critical`` (1000000; the API server limits it with ``--limited-priority-class``, so
  only a namespace whose quota names it may use it: none here) and ``firedrill-low`` (10; anyone).

Creating an object that exists is no error (a restart keeps what an operator changed); a kind the API server
does not serve is skipped with a warning in the caller's log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx

from refplatform.credentials import TENANTS
from refplatform.errors import RefPlatformError

log = logging.getLogger(__name__)

LIMITED_PRIORITY_CLASS = "firedrill-critical"
GPU_QUOTA = "gpu-quota"
GPU_QUOTA_NAMESPACE = TENANTS[0].namespace
GPU_QUOTA_LIMIT = "4"


class BootstrapError(RefPlatformError):
    """A bootstrap object was refused for a reason other than already existing."""


@dataclass(frozen=True)
class BootstrapObject:
    """One object and the collection URL it is created at."""

    path: str
    body: dict[str, Any]

    @property
    def what(self) -> str:
        meta = self.body["metadata"]
        return f"{self.body['kind']} {meta.get('namespace', '') + '/' if meta.get('namespace') else ''}{meta['name']}"


def _namespace(name: str) -> BootstrapObject:
    return BootstrapObject("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _priority_class(name: str, value: int, description: str) -> BootstrapObject:
    return BootstrapObject("/apis/scheduling.k8s.io/v1/priorityclasses", {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
        "value": value, "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority", "description": description})


OBJECTS: tuple[BootstrapObject, ...] = (
    _namespace("kube-node-lease"),
    *(_namespace(t.namespace) for t in TENANTS),
    BootstrapObject(f"/api/v1/namespaces/{GPU_QUOTA_NAMESPACE}/resourcequotas", {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": GPU_QUOTA, "namespace": GPU_QUOTA_NAMESPACE},
        "spec": {"hard": {"requests.nvidia.com/gpu": GPU_QUOTA_LIMIT}}}),
    _priority_class(LIMITED_PRIORITY_CLASS, 1_000_000,
                    "Firedrill: critical work; limited, usable only in a namespace whose ResourceQuota names it"),
    _priority_class("firedrill-low", 10, "Firedrill: low-priority work anyone may run (preempted first)"),
)


def apply(http: httpx.Client) -> list[str]:
    """Create every bootstrap object that is missing; returns what was skipped because the API server does not
    serve its kind (each also logged).  Raises :class:`BootstrapError` for any other refusal."""
    skipped = []
    for obj in OBJECTS:
        answer = http.post(obj.path, json=obj.body)
        if answer.status_code in (200, 201, 409):
            continue
        if answer.status_code == 404:
            log.warning("bootstrap: %s skipped: this API server does not serve %s", obj.what, obj.path)
            skipped.append(obj.what)
            continue
        raise BootstrapError(f"bootstrap: creating {obj.what} answered {answer.status_code}: "
                             f"{answer.text[:300]}")
    return skipped
