"""The ONE Kubernetes driver: the same code path against the reference platform and a real cluster.

Built on the official ``kubernetes`` client's connection handling (kubeconfig,
contexts, TLS, tokens) and its REST transport, but speaking plain JSON
objects: drills handle Volcano, Kueue and KAI objects the client has no models
for, and a real cluster's objects may carry fields newer than the models.

- Transient failures (connection reset or refused mid-run, 429, 5xx) are
  retried with ``tenacity`` (exponential backoff, bounded); 4xx never is.
- :meth:`KubeDriver.watch` lists then watches with resume from the last
  resourceVersion seen, relisting on 410 Gone, and records every event in the
  :class:`~drills.kube.timeline.Timeline` with the harness's clocks.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from drills.errors import FiredrillError
from drills.kube.timeline import Timeline

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TRANSIENT_CODES = frozenset({429, 500, 502, 503, 504})
JSON = "application/json"
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
"""A list of each object's metadata alone, or (a server without that form) the full objects, as kubectl asks."""


class KubeError(FiredrillError):
    """The cluster refused a request; ``code`` and ``reason`` are the API's."""

    def __init__(self, message: str, code: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class TargetUnreachable(KubeError):
    """No answer from the cluster at all: wrong address, cluster down, or network."""


@dataclass(frozen=True)
class Resource:
    """REST coordinates of a kind."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name)}"
        if sub:
            base += f"/{sub}"
        return base


RESOURCES: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in (
    Resource("v1", "Pod", "pods", True), Resource("v1", "Node", "nodes", False),
    Resource("v1", "Event", "events", True), Resource("v1", "Namespace", "namespaces", False),
    Resource("v1", "Service", "services", True), Resource("apps/v1", "Deployment", "deployments", True),
    Resource("v1", "ConfigMap", "configmaps", True),
    Resource("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True),
    Resource("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False),
    Resource("discovery.k8s.io/v1", "EndpointSlice", "endpointslices", True),
    Resource("coordination.k8s.io/v1", "Lease", "leases", True),
    Resource("batch/v1", "Job", "jobs", True),
    Resource("batch.volcano.sh/v1alpha1", "Job", "jobs", True),
    Resource("scheduling.volcano.sh/v1beta1", "PodGroup", "podgroups", True),
    Resource("scheduling.volcano.sh/v1beta1", "Queue", "queues", False),
    Resource("kueue.x-k8s.io/v1beta2", "Workload", "workloads", True),
    Resource("kueue.x-k8s.io/v1beta2", "LocalQueue", "localqueues", True),
    Resource("kueue.x-k8s.io/v1beta2", "ClusterQueue", "clusterqueues", False),
    Resource("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "resourceflavors", False),
    Resource("scheduling.run.ai/v2alpha2", "PodGroup", "podgroups", True),
    Resource("scheduling.run.ai/v2", "Queue", "queues", False),
    Resource("scheduling.k8s.io/v1beta1", "Workload", "workloads", True),
    Resource("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups", True),
)}
POD = RESOURCES[("v1", "Pod")]
NODE = RESOURCES[("v1", "Node")]
EVENT = RESOURCES[("v1", "Event")]


def _load_kubeconfig(kubeconfig: Path | None, context: str | None) -> client.Configuration:
    """A kubeconfig (default: $KUBECONFIG or ~/.kube/config) as the client's configuration; TargetUnreachable,
    naming the file, when it cannot be loaded."""
    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                client_configuration=cfg)
    except (ConfigException, FileNotFoundError, OSError, TypeError) as exc:
        where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
        raise TargetUnreachable(f"cannot load kubeconfig {where}"
                                f"{f' (context {context})' if context else ''}: {exc}") from None
    return cfg


def resource_for(obj: Obj) -> Resource:
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if key not in RESOURCES:
        known = ", ".join(f"{k} ({v})" for v, k in sorted(RESOURCES))
        raise KubeError(f"the harness does not know how to handle {key[1] or '?'} in {key[0] or '?'}; known: {known}")
    return RESOURCES[key]


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, KubeError) and not isinstance(exc, TargetUnreachable):
        return exc.code in TRANSIENT_CODES
    return isinstance(exc, TargetUnreachable)


class KubeDriver:
    """JSON-level access to one cluster, with retries and stamped observations."""

    def __init__(self, api: client.ApiClient, timeline: Timeline | None = None, *,
                 attempts: int = 5, max_backoff: float = 2.0, request_timeout: float = 15.0) -> None:
        self.api = api
        self.timeline = timeline if timeline is not None else Timeline()
        self.attempts = attempts
        self.max_backoff = max_backoff
        self.request_timeout = request_timeout
        self._stops: list[threading.Event] = []
        self._threads: list[threading.Thread] = []
        self._streams: dict[int, Any] = {}  # id(stop event) -> the open watch response

    @property
    def host(self) -> str:
        return self.api.configuration.host

    # ------------------------------------------------------------ connection
    @classmethod
    def connect(cls, kubeconfig: Path | None = None, context: str | None = None,
                timeline: Timeline | None = None, **kwargs: Any) -> "KubeDriver":
        """Load a kubeconfig (default: $KUBECONFIG or ~/.kube/config) and check the cluster answers."""
        driver = cls(client.ApiClient(_load_kubeconfig(kubeconfig, context)), timeline, **kwargs)
        driver.version()
        return driver

    @staticmethod
    def server_of(kubeconfig: Path | None = None, context: str | None = None) -> str:
        """The API server URL a kubeconfig (and context) points at, read without contacting it."""
        return str(_load_kubeconfig(kubeconfig, context).host)

    def close(self) -> None:
        self.stop_watches()
        self.api.close()

    # ---------------------------------------------------------------- verbs
    def request(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None,
                content_type: str = "application/json", retry: bool = True, accept: str = JSON) -> Obj:
        """One REST call returning the JSON answer; transient failures retried, 4xx raised at once."""
        def once() -> Obj:
            return self._request_once(method, path, body, query, content_type, accept=accept)
        if not retry:
            return once()
        for attempt in Retrying(stop=stop_after_attempt(self.attempts), reraise=True,
                                wait=wait_exponential(multiplier=0.1, max=self.max_backoff),
                                retry=retry_if_exception(_transient)):
            with attempt:
                return once()
        raise AssertionError("unreachable")  # pragma: no cover - Retrying either returns or raises

    def _request_once(self, method: str, path: str, body: Any, query: dict[str, Any] | None,
                      content_type: str, timeout: float | None = None, stream: bool = False,
                      accept: str = JSON) -> Any:
        params = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items()
                  if v is not None]
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        m, url, hdrs, data, post = self.api.param_serialize(method, path, query_params=params, header_params=headers,
                                                            body=body, auth_settings=["BearerToken"])
        try:
            resp = self.api.rest_client.request(m, url, headers=hdrs, body=data, post_params=post,
                                                _request_timeout=timeout or self.request_timeout)
        except (urllib3.exceptions.HTTPError, OSError, ApiException) as exc:
            raise TargetUnreachable(f"cannot reach the cluster at {self.host}: {exc}") from None
        if stream and resp.status < 400:
            return resp
        raw = resp.read()
        if resp.status >= 400:
            try:
                status = json.loads(raw)
            except ValueError:
                status = {}
            reason = status.get("reason", "") if isinstance(status, dict) else ""
            message = status.get("message", raw[:200].decode(errors="replace")) if isinstance(status, dict) else ""
            raise KubeError(f"{method} {path}: {resp.status} {reason}: {message}", resp.status, reason)
        return json.loads(raw) if raw else {}

    def version(self) -> Obj:
        return self.request("GET", "/version")

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        return self.request("GET", res.path(namespace, name))

    def find(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.get(res, name, namespace)
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise

    def list(self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[Obj]:
        answer = self.request("GET", res.path(namespace), query={"labelSelector": label_selector,
                                                                  "fieldSelector": field_selector})
        return answer.get("items") or []

    def list_metadata(self, res: Resource, namespace: str | None = None) -> list[Obj]:
        """Each object's ``metadata`` alone (kube-apiserver's PartialObjectMetadataList: no spec or status, less
        than half of a pod's JSON to read and decode); a server that does not serve that form answers the full
        objects, which hold the same metadata."""
        return self.request("GET", res.path(namespace), query={}, accept=METADATA_ONLY).get("items") or []

    def create(self, obj: Obj, namespace: str | None = None) -> Obj:
        res = resource_for(obj)
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        created = self.request("POST", res.path(ns), obj)
        self.timeline.action("create", target=f"{res.kind}/{(obj.get('metadata') or {}).get('name', '')}")
        return created

    def patch(self, res: Resource, name: str, body: Any, namespace: str | None = None,
              content_type: str = "application/merge-patch+json", sub: str = "") -> Obj:
        return self.request("PATCH", res.path(namespace, name, sub), body, content_type=content_type)

    def delete(self, res: Resource, name: str, namespace: str | None = None,
               grace_seconds: int | None = None) -> Obj | None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            return self.request("DELETE", res.path(namespace, name), body)
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise

    # ---------------------------------------------------------------- watch
    def watch(self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
              field_selector: str | None = None, on_event: Callable[[str, Obj], None] | None = None,
              record: bool = True) -> None:
        """Watch in the background until :meth:`stop_watches`, recording each event in the timeline (unless
        ``record`` is false: a second watch of what a drill already records).

        Lists first (recording current objects as ADDED), then watches from the list's version,
        resuming after a dropped stream and relisting on 410 Gone.  A first list the server refuses (401,
        403) raises :class:`KubeError` here: a watch that can never see anything must not wait silently."""
        stop = threading.Event()
        synced = threading.Event()
        refused: list[KubeError] = []

        def run() -> None:
            rv = ""
            while not stop.is_set():
                try:
                    if not rv:
                        answer = self.request("GET", res.path(namespace), query={
                            "labelSelector": label_selector, "fieldSelector": field_selector})
                        for obj in answer.get("items") or []:
                            self._observe(res, "ADDED", obj, on_event, record)
                        rv = (answer.get("metadata") or {}).get("resourceVersion", "")
                        synced.set()
                    rv = self._watch_stream(res, namespace, label_selector, field_selector, rv, stop, on_event,
                                            record)
                except KubeError as exc:
                    if exc.code == 410:
                        rv = ""
                        continue
                    if exc.code in (401, 403) and not synced.is_set():
                        refused.append(exc)
                        synced.set()
                        return
                    log.warning("watch %s: %s; retrying", res.plural, exc)
                    stop.wait(0.2)
        t = threading.Thread(target=run, name=f"watch-{res.plural}", daemon=True)
        t.start()
        self._stops.append(stop)
        self._threads.append(t)
        synced.wait(self.request_timeout)
        if refused:
            raise KubeError(f"cannot watch {res.plural}: {refused[0]} (the identity needs list and watch on "
                            f"{res.plural}; `firedrill rbac` prints every permission a run needs)",
                            refused[0].code, refused[0].reason)

    def _watch_stream(self, res: Resource, namespace: str | None, label_selector: str | None,
                      field_selector: str | None, rv: str, stop: threading.Event,
                      on_event: Callable[[str, Obj], None] | None, record: bool = True) -> str:
        resp = self._request_once("GET", res.path(namespace), None, {
            "watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": 30,
            "labelSelector": label_selector, "fieldSelector": field_selector}, "application/json",
            timeout=40, stream=True)
        self._streams[id(stop)] = resp.response
        try:
            for line in _lines(resp.response):
                if stop.is_set():
                    break
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise KubeError(obj.get("message", "watch error"), int(obj.get("code") or 500), obj.get("reason", ""))
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if kind != "BOOKMARK":
                    self._observe(res, kind, obj, on_event, record)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if not stop.is_set():
                log.info("watch %s stream ended: %s; resuming from %s", res.plural, exc, rv)
        finally:
            self._streams.pop(id(stop), None)
            resp.response.release_conn()
        return rv

    def _observe(self, res: Resource, kind: str, obj: Obj, on_event: Callable[[str, Obj], None] | None,
                 record: bool = True) -> None:
        if record:
            self.timeline.add(res.kind, kind, obj)
        if on_event is not None:
            on_event(kind, obj)

    def stop_watches(self) -> None:
        for stop in self._stops:
            stop.set()
            stream = self._streams.get(id(stop))
            if stream is not None:
                try:
                    stream.shutdown()  # unblocks a read waiting on a quiet watch
                except (AttributeError, OSError):
                    pass
        for t in self._threads:
            t.join(timeout=10)
        self._stops.clear()
        self._threads.clear()


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited JSON lines of a streaming urllib3 response."""
    buffer = b""
    while True:
        chunk = response.read1(65536)  # whatever has arrived: a watch event must not wait for a full buffer
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
