"""Readiness probes, the kubelet's way: ``readinessProbe.httpGet`` against the pod's own address.

A container with a readiness probe is ready only once the probe has passed
``successThreshold`` times in a row, and stops being ready after
``failureThreshold`` failures in a row; before the first success (during
``initialDelaySeconds`` and the model load it stands for) it is not ready.  A
container without one is ready while it runs, as before.

Two parts:

- :func:`readiness_probe` reads a container's ``readinessProbe`` into a typed
  :class:`HttpGetProbe` (or says what is wrong and where);
  :class:`ReadinessTracker` is the pure decision: when the next probe is due
  and what a result does to readiness, on an injected clock (seconds, any
  monotonic origin).
- :class:`Prober` runs the HTTP GETs on a small thread pool so the agent's
  sync loop never waits on a slow pod; the agent collects finished results on
  its next pass.

Served: ``httpGet`` with ``path``, ``port`` (number or a container port's
name), ``host`` (default the pod IP), scheme ``HTTP``, ``httpHeaders``; the
timings ``initialDelaySeconds`` (default 0), ``periodSeconds`` (10),
``timeoutSeconds`` (1), ``successThreshold`` (1), ``failureThreshold`` (3).
Not served: ``exec``, ``tcpSocket``, ``grpc`` and scheme ``HTTPS`` (a pod whose
readiness probe uses them fails to start, reason ``StartError``, naming the
field); liveness and startup probes are ignored.
"""

from __future__ import annotations

import http.client
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from refplatform.agent.errors import ContainerSpecError

__all__ = ["HttpGetProbe", "Prober", "ReadinessTracker", "probe_http", "readiness_probe"]

Obj = dict[str, Any]

_UNSERVED_HANDLERS = ("exec", "tcpSocket", "grpc")


@dataclass(frozen=True)
class HttpGetProbe:
    """One container's readiness probe (``readinessProbe.httpGet``), defaults applied."""

    container: str
    path: str
    port: int
    host: str | None = None
    """``httpGet.host``; ``None``: the pod's IP."""
    headers: tuple[tuple[str, str], ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


def _int_field(probe: Mapping[str, Any], key: str, default: int, minimum: int, where: str) -> int:
    value = probe.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ContainerSpecError(f"{where}.{key}: Invalid value: {value!r}: must be an integer >= {minimum}")
    return value


def readiness_probe(container: Mapping[str, Any], where: str) -> HttpGetProbe | None:
    """The readiness probe of ``container`` (``where``: its path, e.g. ``spec.containers[0]``); ``None``
    when it has none.  :class:`ContainerSpecError` naming the field when the probe cannot be served."""
    name = str(container.get("name") or "main")
    probe = container.get("readinessProbe")
    if not probe:
        return None
    where = f"{where}.readinessProbe"
    if not isinstance(probe, Mapping):
        raise ContainerSpecError(f"{where}: Invalid value: must be an object")
    for handler in _UNSERVED_HANDLERS:
        if probe.get(handler) is not None:
            raise ContainerSpecError(f"{where}.{handler}: not served by this node agent (httpGet only)")
    get = probe.get("httpGet")
    if not isinstance(get, Mapping):
        raise ContainerSpecError(f"{where}.httpGet: Required value: the only probe handler served here")
    scheme = str(get.get("scheme") or "HTTP")
    if scheme != "HTTP":
        raise ContainerSpecError(f'{where}.httpGet.scheme: Unsupported value: "{scheme}": supported values: "HTTP"')
    port = get.get("port")
    if isinstance(port, str) and not port.isdigit():
        named = [p.get("containerPort") for p in container.get("ports") or []
                 if isinstance(p, Mapping) and p.get("name") == port]
        if not named:
            raise ContainerSpecError(f"{where}.httpGet.port: Invalid value: {port!r}: no container port of that name")
        port = named[0]
    elif isinstance(port, str):
        port = int(port)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ContainerSpecError(f"{where}.httpGet.port: Invalid value: {port!r}: must be 1..65535 or a port name")
    path = str(get.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    headers = tuple((str(h.get("name")), str(h.get("value", ""))) for h in get.get("httpHeaders") or []
                    if isinstance(h, Mapping) and h.get("name"))
    host = get.get("host") or None
    success = _int_field(probe, "successThreshold", 1, 1, where)
    return HttpGetProbe(
        container=name, path=path, port=port, host=str(host) if host else None, headers=headers,
        initial_delay=float(_int_field(probe, "initialDelaySeconds", 0, 0, where)),
        period=float(_int_field(probe, "periodSeconds", 10, 1, where)),
        timeout=float(_int_field(probe, "timeoutSeconds", 1, 1, where)),
        success_threshold=success,
        failure_threshold=_int_field(probe, "failureThreshold", 3, 1, where),
    )


@dataclass
class ReadinessTracker:
    """Readiness of one probed container, from the probe results (pure; ``now`` in seconds on any clock).

    Not ready at start; ready after ``success_threshold`` successes in a row; not ready again after
    ``failure_threshold`` failures in a row.  The first probe is due ``initial_delay`` after
    ``started``, each next one ``period`` after the previous one started.
    """

    probe: HttpGetProbe
    started: float
    ready: bool = False
    successes: int = 0
    failures: int = 0
    next_at: float = field(init=False)
    in_flight: bool = False

    def __post_init__(self) -> None:
        self.next_at = self.started + self.probe.initial_delay

    def due(self, now: float) -> bool:
        """Whether a probe should start now (none is in flight and its time has come)."""
        return not self.in_flight and now >= self.next_at

    def begin(self, now: float) -> None:
        """A probe starts at ``now``; the next one is due a period later."""
        self.in_flight = True
        self.next_at = now + self.probe.period

    def record(self, ok: bool) -> bool:
        """The probe that began last ended (``ok``: it passed); True when readiness changed."""
        self.in_flight = False
        before = self.ready
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= self.probe.success_threshold:
                self.ready = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= self.probe.failure_threshold:
                self.ready = False
        return self.ready != before


def probe_http(host: str, probe: HttpGetProbe) -> bool:
    """One HTTP GET as the kubelet sends it: a status in 200..399 within ``timeout`` passes."""
    conn = http.client.HTTPConnection(probe.host or host, probe.port, timeout=probe.timeout)
    try:
        conn.request("GET", probe.path, headers={"User-Agent": "kube-probe/refplatform", "Accept": "*/*",
                                                 **dict(probe.headers)})
        resp = conn.getresponse()
        resp.read()
        return 200 <= resp.status < 400
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class Prober:
    """Runs probes off the sync loop, a few at a time; ``close()`` when the agent stops."""

    def __init__(self, workers: int = 4) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="probe")

    def submit(self, host: str, probe: HttpGetProbe) -> Future[bool]:
        return self._pool.submit(probe_http, host, probe)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
