"""What every namespace has on upstream Kubernetes without anyone asking: a ``default`` ServiceAccount (the
serviceaccount controller) and the ``kube-root-ca.crt`` ConfigMap holding the cluster's CA certificate (the
root-ca-cert-publisher), so a pod's service account and its trust bundle exist as a workload expects.

Both are level-triggered: each active namespace that lacks its object gets it; a deleted one comes back. A
namespace being deleted (``deletionTimestamp`` set, phase Terminating) gets nothing new.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.controllers.manager import Cache
from refplatform.resources import CONFIGMAPS, NAMESPACES, SERVICEACCOUNTS, ResourceType

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DEFAULT_SERVICE_ACCOUNT = "default"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
ROOT_CA_ANNOTATION = "kubernetes.io/description"
ROOT_CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
                       "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
                       "guaranteed across distributions of Kubernetes clusters.")


def _active(namespace: Obj) -> bool:
    meta = namespace.get("metadata") or {}
    return not meta.get("deletionTimestamp") and (namespace.get("status") or {}).get("phase") != "Terminating"


class _PerNamespace:
    """Ensure one object of ``rt`` named ``object_name`` in every active namespace."""

    name = ""
    rt: ResourceType
    watches: tuple[ResourceType, ...]
    object_name = ""
    resync = 10.0

    def __init__(self, client: RestClient) -> None:
        self.client = client

    def wanted(self, namespace: str) -> Obj:
        raise NotImplementedError

    def reconcile(self, cache: Cache) -> None:
        for ns in cache.list(NAMESPACES):
            namespace = ns["metadata"]["name"]
            if not _active(ns) or cache.get(self.rt, namespace, self.object_name) is not None:
                continue
            try:
                self.client.create(resource_path(self.rt.group, self.rt.version, self.rt.plural, namespace),
                                   self.wanted(namespace))
            except ApiStatusError as exc:
                if exc.code != 409:  # AlreadyExists: the cache was behind; a terminating namespace: next time
                    log.info("%s %s/%s: %s", self.rt.kind, namespace, self.object_name, exc)
            except ApiUnreachable as exc:
                log.info("%s %s/%s: %s", self.rt.kind, namespace, self.object_name, exc)


class ServiceAccountController(_PerNamespace):
    name = "serviceaccount"
    rt = SERVICEACCOUNTS
    watches = (NAMESPACES, SERVICEACCOUNTS)
    object_name = DEFAULT_SERVICE_ACCOUNT

    def wanted(self, namespace: str) -> Obj:
        return {"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": namespace}}


class RootCAPublisher(_PerNamespace):
    name = "root-ca-cert-publisher"
    rt = CONFIGMAPS
    watches = (NAMESPACES, CONFIGMAPS)
    object_name = ROOT_CA_CONFIGMAP

    def __init__(self, client: RestClient, ca_file: Path | None) -> None:
        super().__init__(client)
        self.ca = ca_file.read_text() if ca_file is not None else ""

    def wanted(self, namespace: str) -> Obj:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": namespace,
                             "annotations": {ROOT_CA_ANNOTATION: ROOT_CA_DESCRIPTION}},
                "data": {"ca.crt": self.ca}}
