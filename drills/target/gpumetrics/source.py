"""Where GPU telemetry is read: each reference node agent's own endpoint, or the profile's Prometheus.

- :class:`NodeAgents` (the embedded reference platform): every node's agent serves DCGM-style series on its
  kubelet port (``GET /metrics``, the Node's ``InternalIP`` and ``daemonEndpoints.kubeletEndpoint.Port``), as
  dcgm-exporter serves them on a real node; read with the run's own bearer token, on loopback addresses only.
- :class:`PrometheusGpus` (a real cluster): profile ``prometheus.url``, one instant query for the DCGM fields;
  each series' node is its ``Hostname`` label (or ``hostname``, ``node``, ``kubernetes_node``).

A node whose own endpoint cannot be read answers with a ``problem`` (its exporter is the platform's: the
drills judge that); a Prometheus that cannot be read raises :class:`MetricsUnavailable` (the harness cannot see
anything: no claim either way).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Collection, Mapping
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

import urllib3

from drills.kube.driver import NODE, KubeDriver, KubeError
from drills.kube.timeline import Clock
from drills.target.connect import Target
from drills.target.gpumetrics.model import (FIELDS, MetricsUnavailable, NodeAnswer, Reading, group, host_of,
                                            rows_of_exposition)
from drills.target.profile import TargetProfile
from drills.target.xid import Fetch

__all__ = ["NO_SOURCE", "GpuMetricsSource", "NodeAgents", "PrometheusGpus", "source_for", "source_problem"]

NO_SOURCE = ("this target has no GPU metrics source the harness can read: set prometheus.url in the target profile "
             "to a Prometheus that scrapes NVIDIA's dcgm-exporter on every GPU node (docs/PROFILE.md, "
             "docs/METRICS.md)")
SCRAPE_TIMEOUT = 2.0
"""Seconds one node agent's endpoint may take to answer before the node counts as not answering."""


class GpuMetricsSource(Protocol):
    kind: str
    """``node-agents`` or ``prometheus``: recorded in the evidence."""

    @property
    def description(self) -> str:
        """Where the reading comes from, in words, for findings."""
        ...

    def read(self, nodes: Collection[str]) -> Reading:
        """Every node's answer, now; raises :class:`MetricsUnavailable` when nothing can be read at all."""
        ...


def source_problem(profile: TargetProfile, *, reference: bool) -> str | None:
    """Why no GPU telemetry can be read on such a target (:data:`NO_SOURCE`), or None."""
    return None if reference or profile.leak_report.prometheus_url else NO_SOURCE


def source_for(target: Target) -> GpuMetricsSource | None:
    """The profile's Prometheus when it names one (what a customer trusts), else the reference node agents'
    own endpoints on the embedded platform; None on a real cluster without Prometheus."""
    url = target.profile.leak_report.prometheus_url
    if url:
        return PrometheusGpus(url, target.timeline.clock)
    if target.embedded is not None:
        return NodeAgents(target.driver, target.timeline.clock)
    return None


def _bearer(driver: KubeDriver) -> dict[str, str]:
    """The Authorization header the run's Kubernetes client sends (the agents accept the cluster admin's token)."""
    auth = driver.api.configuration.auth_settings().get("BearerToken") or {}
    value = auth.get("value")
    return {"Authorization": str(value)} if value else {}


class NodeAgents:
    """Each reference node agent's own ``/metrics``, found through its Node as Prometheus' node discovery finds a
    kubelet."""

    kind = "node-agents"

    def __init__(self, driver: KubeDriver, clock: Clock, timeout: float = SCRAPE_TIMEOUT) -> None:
        self.driver = driver
        self.clock = clock
        self.timeout = timeout
        self._endpoints: dict[str, str] = {}
        self._http = urllib3.PoolManager(retries=False)

    @property
    def description(self) -> str:
        return "the node agents' own /metrics (DCGM-style, as dcgm-exporter serves them)"

    def _endpoint(self, node: str) -> str:
        """``http://<InternalIP>:<kubelet port>`` of the node, looked up once; ValueError saying why there is none
        (no such node, no port, an address that is not loopback)."""
        known = self._endpoints.get(node)
        if known is not None:
            return known
        try:
            obj = self.driver.get(NODE, node)
        except KubeError as exc:
            raise ValueError(f"its Node cannot be read ({exc})") from None
        status = obj.get("status") or {}
        port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        address = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"),
                       None)
        if not port or not address:
            raise ValueError("its Node names no InternalIP address and kubelet port to read its metrics at")
        try:
            loopback = ipaddress.ip_address(str(address)).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"its address {address} is not a loopback address; the harness reads node agents' "
                             "endpoints on the embedded platform only (set prometheus.url for a real cluster)")
        url = f"http://{address}:{int(port)}"
        self._endpoints[node] = url
        return url

    def _answer(self, node: str) -> NodeAnswer:
        try:
            base = self._endpoint(node)
        except ValueError as exc:
            return NodeAnswer(node, problem=str(exc))
        try:
            resp = self._http.request("GET", f"{base}/metrics", headers=_bearer(self.driver), timeout=self.timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._endpoints.pop(node, None)  # a restarted agent listens on a new port
            return NodeAnswer(node, problem=f"its /metrics at {base} cannot be reached: {exc}")
        if resp.status != 200:
            return NodeAnswer(node, problem=f"its /metrics at {base} answered {resp.status}: "
                                            f"{resp.data[:160].decode(errors='replace').strip()}")
        try:
            rows = rows_of_exposition(resp.data.decode(errors="replace"))
        except ValueError as exc:
            return NodeAnswer(node, problem=f"its /metrics at {base} answered 200 with something that is not "
                                            f"Prometheus text: {exc}")
        return NodeAnswer(node, group(rows, lambda _labels: node).get(node, ()))

    def read(self, nodes: Collection[str]) -> Reading:
        answers = {node: self._answer(node) for node in sorted(nodes)}
        return Reading(self.clock.mono(), self.clock.wall(), answers, self.description)


class PrometheusGpus:
    """The DCGM fields of every node from a Prometheus that scrapes dcgm-exporter (``prometheus.url``); any
    ``user:password@`` in the URL is sent as basic auth and never shown."""

    kind = "prometheus"
    QUERY = "{__name__=~\"" + "|".join(FIELDS) + "\"}"

    def __init__(self, url: str, clock: Clock, timeout: float = 10.0, fetch: Fetch | None = None) -> None:
        parts = urlsplit(url)
        self.base = urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "", "")).rstrip("/")
        self.clock = clock
        self.timeout = timeout
        self._headers = {"Accept": "application/json"}
        if "@" in parts.netloc:
            self._headers.update(urllib3.util.make_headers(basic_auth=unquote(parts.netloc.rsplit("@", 1)[0])))
        self._fetch = fetch or self._get
        self._http = urllib3.PoolManager(retries=urllib3.Retry(total=2, backoff_factor=0.2,
                                                                status_forcelist=(502, 503, 504)))

    @property
    def description(self) -> str:
        return f"the configured Prometheus {self.base}"

    def _get(self, url: str, fields: Mapping[str, str]) -> tuple[int, bytes]:
        resp = self._http.request("GET", url, fields=dict(fields), timeout=self.timeout, headers=self._headers)
        return resp.status, resp.data

    def read(self, nodes: Collection[str]) -> Reading:
        url = f"{self.base}/api/v1/query"
        try:
            status, body = self._fetch(url, {"query": self.QUERY})
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise MetricsUnavailable(f"{self.description} cannot be reached: {exc}; check prometheus.url in the "
                                     "target profile") from None
        try:
            doc: Any = json.loads(body)
        except ValueError:
            doc = None
        result = ((doc.get("data") or {}).get("result") if isinstance(doc, dict) else None)
        if status != 200 or not isinstance(result, list):
            raise MetricsUnavailable(f"{self.description} answered {status} to {self.QUERY!r}, not a query "
                                     "result; check that prometheus.url is the Prometheus base URL (without "
                                     "/api/v1) and that it can be read")
        rows = []
        for item in result:
            labels = item.get("metric") if isinstance(item, dict) else None
            value = item.get("value") if isinstance(item, dict) else None
            if isinstance(labels, dict) and isinstance(value, list) and len(value) == 2:
                try:
                    rows.append((str(labels.get("__name__", "")), labels, float(value[1])))
                except (TypeError, ValueError):
                    continue
        wanted = set(nodes)
        grouped = group(rows, lambda labels: host_of(labels, wanted))
        answers = {node: NodeAnswer(node, grouped.get(node, ())) for node in sorted(wanted)}
        return Reading(self.clock.mono(), self.clock.wall(), answers, self.description)
