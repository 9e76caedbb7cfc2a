"""The endpoints controller: ``v1`` Services + pods -> ``discovery.k8s.io/v1`` EndpointSlices.

Pure core :func:`desired_slice`: for a Service with a selector, one
EndpointSlice named after the Service (label ``kubernetes.io/service-name``,
``endpointslice.kubernetes.io/managed-by: endpointslice-controller.firedrill.dev``,
an owner reference to the Service), ``addressType: IPv4``, one endpoint per
pod of the Service's namespace that matches the selector, has a ``podIP`` and
has not finished: ``addresses: [podIP]``, ``conditions.ready`` (Ready
condition True and not being deleted), ``serving``, ``terminating``,
``nodeName`` and a ``targetRef`` to the pod.  Ports: one per Service port,
named as it is, ``port`` = its ``targetPort`` (a number, or a container port
name resolved on the first matching pod that declares it).

Only ClusterIP semantics are served: there is no cluster IP and no kube-proxy;
clients reach a Service through the loopback load balancer
(:mod:`refplatform.controllers.loadbalancer`) or the slices themselves.
Upstream splits large Services over several slices of at most 100 endpoints;
here there is always one.  A Service without a selector gets no slice (its
slices are the user's), and slices this controller manages whose Service is
gone are deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.controllers.deployment import pod_ready
from refplatform.controllers.manager import Cache
from refplatform.resources import ENDPOINTSLICES, PODS, SERVICES

log = logging.getLogger(__name__)
Obj = dict[str, Any]

SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
MANAGER = "endpointslice-controller.firedrill.dev"
_TERMINAL = ("Failed", "Succeeded")


def _selected(pod: Obj, selector: dict[str, str]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _target_port(port: Obj, pods: Sequence[Obj]) -> int | None:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int) and not isinstance(target, bool):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for pod in pods:
        for c in (pod.get("spec") or {}).get("containers") or []:
            for cp in c.get("ports") or []:
                if cp.get("name") == target and isinstance(cp.get("containerPort"), int):
                    return int(cp["containerPort"])
    return None


def desired_slice(service: Obj, pods: Sequence[Obj]) -> Obj | None:
    """The EndpointSlice ``service`` should have, given every pod of the cluster; None without a selector."""
    meta, spec = service["metadata"], service.get("spec") or {}
    selector = spec.get("selector") or {}
    if not selector:
        return None
    ns = meta.get("namespace", "default")
    chosen = sorted((p for p in pods if p["metadata"].get("namespace", "default") == ns and _selected(p, selector)
                     and (p.get("status") or {}).get("podIP")
                     and (p.get("status") or {}).get("phase") not in _TERMINAL),
                    key=lambda p: p["metadata"]["name"])
    endpoints = []
    for p in chosen:
        terminating = bool(p["metadata"].get("deletionTimestamp"))
        ready = pod_ready(p) and not terminating
        ep: Obj = {"addresses": [p["status"]["podIP"]],
                   "conditions": {"ready": ready, "serving": pod_ready(p), "terminating": terminating},
                   "targetRef": {"kind": "Pod", "namespace": ns, "name": p["metadata"]["name"],
                                 "uid": p["metadata"].get("uid", "")}}
        if (p.get("spec") or {}).get("nodeName"):
            ep["nodeName"] = p["spec"]["nodeName"]
        endpoints.append(ep)
    ports = []
    for port in spec.get("ports") or []:
        number = _target_port(port, chosen)
        if number is not None:
            ports.append({"name": port.get("name") or "", "port": number, "protocol": port.get("protocol", "TCP")})
    return {"apiVersion": ENDPOINTSLICES.api_version, "kind": "EndpointSlice",
            "metadata": {"name": meta["name"], "namespace": ns,
                         "labels": {SERVICE_NAME: meta["name"], MANAGED_BY: MANAGER},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": meta["name"],
                                              "uid": meta.get("uid", ""), "controller": True,
                                              "blockOwnerDeletion": True}]},
            "addressType": "IPv4", "endpoints": endpoints, "ports": ports}


def _same(current: Obj, wanted: Obj) -> bool:
    return all(current.get(k) == wanted.get(k) for k in ("addressType", "endpoints", "ports")) and \
        (current["metadata"].get("ownerReferences") or []) == wanted["metadata"]["ownerReferences"]


class EndpointsController:
    name = "endpoints"
    watches = (SERVICES, PODS, ENDPOINTSLICES)
    resync = 2.0

    def __init__(self, client: RestClient) -> None:
        self.client = client

    def reconcile(self, cache: Cache) -> None:
        pods = cache.list(PODS)
        services = {(s["metadata"].get("namespace", "default"), s["metadata"]["name"]): s
                    for s in cache.list(SERVICES)}
        for (ns, name), svc in services.items():
            wanted = desired_slice(svc, pods)
            if wanted is None:
                continue
            current = cache.get(ENDPOINTSLICES, ns, name)
            try:
                if current is None:
                    self.client.create(resource_path(ENDPOINTSLICES.group, ENDPOINTSLICES.version,
                                                     ENDPOINTSLICES.plural, ns), wanted)
                elif not _same(current, wanted):
                    wanted["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
                    self.client.update(resource_path(ENDPOINTSLICES.group, ENDPOINTSLICES.version,
                                                     ENDPOINTSLICES.plural, ns, name), wanted)
            except ApiStatusError as exc:
                if not exc.conflict:
                    log.info("endpointslice %s/%s: %s", ns, name, exc)
            except ApiUnreachable as exc:
                log.info("endpointslice %s/%s: %s", ns, name, exc)
        for es in cache.list(ENDPOINTSLICES):
            meta = es["metadata"]
            if (meta.get("labels") or {}).get(MANAGED_BY) != MANAGER:
                continue
            svc = services.get((meta.get("namespace", "default"), (meta.get("labels") or {}).get(SERVICE_NAME, "")))
            if svc is None or not (svc.get("spec") or {}).get("selector"):
                try:
                    self.client.delete(resource_path(ENDPOINTSLICES.group, ENDPOINTSLICES.version,
                                                     ENDPOINTSLICES.plural, meta.get("namespace", "default"),
                                                     meta["name"]), {"preconditions": {"uid": meta.get("uid")}})
                except (ApiStatusError, ApiUnreachable) as exc:
                    log.debug("endpointslice %s: %s", meta["name"], exc)
