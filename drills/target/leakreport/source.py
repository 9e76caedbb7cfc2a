"""Where the leak report is read: the target's API server (default), or a URL the target profile names.

- :class:`ApiServerSource`: ``GET /apis/firedrill.dev/v1alpha1/leakreport`` through the same Kubernetes
  client as every other request of the run (kubeconfig auth and TLS apply).
- :class:`UrlSource`: profile ``leakReport: {url: ...}``, an absolute URL that serves the contract
  (``start`` and ``end`` are added as query parameters).
- :class:`PrometheusSource`: profile ``prometheus: {url: ...}``, layers and holes computed from DCGM exporter
  and kube-state-metrics series (:mod:`drills.target.leakreport.promql`); communication and fault tolerance are not
  measurable there, so a scenario opening either is INCONCLUSIVE, naming the source.

Every source answers a :class:`~drills.target.leakreport.model.LeakReading` or raises :class:`ReportUnavailable` (no claim
either way: the message says how to configure a source) or :class:`ReportMalformed` (the platform answered
with something that does not follow the contract).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

import urllib3

from drills.kube.driver import KubeDriver, KubeError, TargetUnreachable
from drills.target.leakreport import promql
from drills.target.leakreport.model import PATH, LeakReading, ReportMalformed, ReportUnavailable
from drills.target.profile import TargetProfile

SETTLE = 3.0
"""Seconds after a window's end before its report is read: the reference platform's agents publish progress
at most once a second, so the window's last samples reach the platform within this."""

HOW_TO_CONFIGURE = ("set leakReport.url (a URL that serves the contract of docs/LEAK_REPORT.md) or prometheus.url "
                    "in the target profile (docs/PROFILE.md), or implement the endpoint on the platform")


def _public(url: str) -> str:
    """A URL as the evidence may show it: any user:password@ removed."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def rfc3339(epoch: float) -> str:
    """Epoch seconds as an RFC 3339 UTC instant with milliseconds, as the query sends it."""
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LeakSource(Protocol):
    kind: str
    """``apiserver``, ``url`` or ``prometheus``: recorded in the evidence and said in the verdict."""
    settle: float
    """Seconds to wait after a window's end before asking, so the window's last samples have arrived."""
    lag: float
    """Seconds a change of the cluster can take to reach the source's samples (0: it reads what the platform
    itself accounts); a window opens no earlier than this after the state it measures began."""

    @property
    def description(self) -> str: ...

    def read(self, start: float, end: float) -> LeakReading: ...


class ApiServerSource:
    """The contract's path on the target's API server, through the run's Kubernetes client."""

    kind = "apiserver"
    settle = SETTLE
    lag = 0.0

    def __init__(self, driver: KubeDriver) -> None:
        self.driver = driver

    @property
    def description(self) -> str:
        return f"the target's API server ({self.driver.host}{PATH})"

    def read(self, start: float, end: float) -> LeakReading:
        query = {"start": rfc3339(start), "end": rfc3339(end)}
        try:
            doc = self.driver.request("GET", PATH, query=query)
        except TargetUnreachable as exc:
            raise ReportUnavailable(f"the leak report could not be read from {self.description}: {exc}; "
                                    f"{HOW_TO_CONFIGURE}") from None
        except KubeError as exc:
            if exc.code == 400:
                raise ReportMalformed(f"{self.description} refused the window {query['start']} to {query['end']} "
                                      f"({exc}); the contract answers 400 only when end is not after start") from None
            what = ("does not serve the leak report (404): the platform does not implement the contract"
                    if exc.code == 404 else f"answered {exc.code}: {exc}")
            raise ReportUnavailable(f"{self.description} {what}; {HOW_TO_CONFIGURE}") from None
        return LeakReading.parse(doc, self.description)


class UrlSource:
    """An absolute URL serving the contract (``leakReport.url`` in the target profile)."""

    kind = "url"
    settle = SETTLE
    lag = 0.0

    def __init__(self, url: str, timeout: float = 15.0) -> None:
        self.url = url
        self.timeout = timeout
        self._http = urllib3.PoolManager(retries=urllib3.Retry(total=2, backoff_factor=0.2,
                                                                status_forcelist=(502, 503, 504)))

    @property
    def description(self) -> str:
        return f"the configured leak report URL {_public(self.url)}"

    def read(self, start: float, end: float) -> LeakReading:
        query = {"start": rfc3339(start), "end": rfc3339(end)}
        try:
            resp = self._http.request("GET", self.url, fields=query, timeout=self.timeout,
                                      headers={"Accept": "application/json"})
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ReportUnavailable(f"{self.description} cannot be reached: {exc}; check leakReport.url in the "
                                    f"target profile, or {HOW_TO_CONFIGURE}") from None
        if resp.status == 400:
            raise ReportMalformed(f"{self.description} refused the window {query['start']} to {query['end']} "
                                  f"(400); the contract answers 400 only when end is not after start")
        if resp.status >= 300:
            raise ReportUnavailable(f"{self.description} answered {resp.status}: "
                                    f"{resp.data[:200].decode(errors='replace')}; {HOW_TO_CONFIGURE}")
        try:
            doc: Any = json.loads(resp.data)
        except ValueError:
            raise ReportMalformed(f"{self.description} answered 200 but not JSON: "
                                  f"{resp.data[:120].decode(errors='replace')!r}") from None
        return LeakReading.parse(doc, self.description)


Fetch = Callable[[str, Mapping[str, str]], tuple[int, bytes]]
"""GET ``url`` with query ``fields``: (HTTP status, body).  Raises urllib3's errors or OSError when unreachable."""


class PrometheusSource:
    """Layers and holes computed from a Prometheus scraping dcgm-exporter and kube-state-metrics
    (``prometheus.url`` in the target profile; the queries and arithmetic: :mod:`drills.target.leakreport.promql`).

    communication and fault tolerance are not measurable from those metrics: the reading carries them in
    ``unmeasured`` and a scenario opening either is INCONCLUSIVE.  Any ``user:password@`` in the URL is sent
    as HTTP basic auth and never shown."""

    kind = "prometheus"
    QUERY_PATH = "/api/v1/query_range"

    def __init__(self, url: str, step: float = 1.0, timeout: float = 15.0, fetch: Fetch | None = None,
                 scrape_interval: float = 1.0) -> None:
        """``step``: seconds between evaluation instants (more for long windows); ``scrape_interval``: how often
        Prometheus scrapes, so the drill waits two of them after a window before it asks."""
        self.url = url
        self.step = step
        self.settle = max(SETTLE, 2 * scrape_interval)
        self.lag = scrape_interval  # a state begun just after a scrape is first sampled one interval later
        self.timeout = timeout
        self._fetch = fetch or self._urllib3_fetch
        parts = urlsplit(url)
        self._base = _public(url).rstrip("/")
        self._headers = {"Accept": "application/json"}
        if "@" in parts.netloc:
            self._headers.update(urllib3.util.make_headers(basic_auth=unquote(parts.netloc.rsplit("@", 1)[0])))
        self._http = urllib3.PoolManager(retries=urllib3.Retry(total=2, backoff_factor=0.2,
                                                                status_forcelist=(502, 503, 504)))

    @property
    def description(self) -> str:
        return f"the configured Prometheus {_public(self.url)}"

    def _urllib3_fetch(self, url: str, fields: Mapping[str, str]) -> tuple[int, bytes]:
        resp = self._http.request("GET", url, fields=dict(fields), timeout=self.timeout, headers=self._headers)
        return resp.status, resp.data

    def _range(self, series: promql.Series, g: promql.Grid) -> list[float]:
        url = self._base + self.QUERY_PATH
        fields = {"query": series.query, "start": f"{g.first:.3f}", "end": f"{g.last:.3f}", "step": f"{g.step:.6f}"}
        try:
            status, body = self._fetch(url, fields)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ReportUnavailable(f"{self.description} cannot be reached ({url}): {exc}; check prometheus.url "
                                    f"in the target profile, or {HOW_TO_CONFIGURE}") from None
        try:
            doc: Any = json.loads(body)
        except ValueError:
            doc = None
        if status != 200:
            detail = doc.get("error") if isinstance(doc, Mapping) and doc.get("error") else \
                body[:200].decode(errors="replace")
            raise ReportUnavailable(f"{self.description} answered {status} to GET {url} (query {series.query!r}): "
                                    f"{detail}; check that prometheus.url is the Prometheus base URL (without "
                                    "/api/v1) and that it can be read")
        if doc is None:
            raise ReportUnavailable(f"{self.description} answered 200 to GET {url} but not JSON: "
                                    f"{body[:120].decode(errors='replace')!r}; check that prometheus.url is the "
                                    "Prometheus base URL (without /api/v1)")
        return promql.parse_matrix(doc, series, self.description, g)

    def read(self, start: float, end: float) -> LeakReading:
        if not end > start:
            raise ReportUnavailable(f"the window {rfc3339(start)} to {rfc3339(end)} is empty: nothing to ask "
                                    f"{self.description}; a window must end after it starts")
        g = promql.grid(start, end, self.step)
        values = {s: self._range(s, g) for s in promql.Series}
        return promql.compute(start, end, g, values, self.description,
                              {"start": rfc3339(start), "end": rfc3339(end)})


def run_window_report(source: LeakSource, start: float, end: float) -> dict[str, Any]:
    """The leak report of a whole run, for the evidence: ``window``, ``source`` and ``report`` (the JSON as
    served) or ``error`` (why it could not be read).  Never raises: a run's verdict does not depend on it."""
    out: dict[str, Any] = {"window": {"start": rfc3339(start), "end": rfc3339(end)},
                           "source": {"kind": source.kind, "where": source.description}}
    try:
        out["report"] = dict(source.read(start, end).raw)
    except (ReportUnavailable, ReportMalformed) as exc:
        out["error"] = str(exc)
    return out


def source_for(profile: TargetProfile, driver: KubeDriver) -> LeakSource:
    """The source the target profile configures: leakReport.url, else prometheus.url, else the API server."""
    settings = profile.leak_report
    if settings.url:
        return UrlSource(settings.url)
    if settings.prometheus_url:
        return PrometheusSource(settings.prometheus_url, scrape_interval=settings.scrape_interval or 1.0)
    return ApiServerSource(driver)


__all__ = ["ApiServerSource", "LeakSource", "PrometheusSource", "UrlSource", "rfc3339", "run_window_report",
           "source_for"]
