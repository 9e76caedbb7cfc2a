"""Node agent health checks: ``GET /healthz`` on the agent's loopback port, off the reconcile thread.

The agent serves ``/healthz`` (200 ``ok`` when healthy, 503 otherwise) on the
port it registers as ``status.daemonEndpoints.kubeletEndpoint.Port``, at its
``InternalIP``.  Only loopback addresses are ever probed: an address that is
not loopback counts as unhealthy without a connection being made.  The agent
answers only known callers (refplatform.agent.access): the probe sends the
controllers' own bearer token.

:class:`HealthProber` runs probes in a small thread pool so a hung agent (its
socket accepts, nothing answers) never stalls a controller: ``check()`` returns
the latest answer for the node's current endpoint if it is recent enough, and
starts a new probe when none is running and the last one is older than
``interval``.
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Endpoint = tuple[str, int]


def endpoint_of(node: Obj) -> Endpoint | None:
    """The node agent's (InternalIP, port), or None when it registered none."""
    status = node.get("status") or {}
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    address = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), None)
    if not address or not isinstance(port, int) or port <= 0:
        return None
    return str(address), port


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def probe_healthz(address: str, port: int, timeout: float, token: str | None = None) -> tuple[bool, str]:
    """One ``GET /healthz`` (with ``token`` as the bearer token): (healthy, what was seen).  Refuses
    non-loopback addresses."""
    if not is_loopback(address):
        return False, f"refused to probe non-loopback address {address}"
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request("GET", "/healthz", headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        body = resp.read(256).decode(errors="replace").strip()
        return resp.status == 200, f"HTTP {resp.status} {body}".strip()
    except (OSError, http.client.HTTPException) as exc:
        return False, f"{type(exc).__name__}: {exc}".strip()
    finally:
        conn.close()


@dataclass(frozen=True)
class Answer:
    endpoint: Endpoint
    healthy: bool
    detail: str
    at: float
    """Monotonic time the probe finished."""


class HealthProber:
    """Asynchronous, rate-limited ``/healthz`` probes keyed by node name."""

    def __init__(self, timeout: float = 0.5, *, interval: float = 0.25, max_age: float = 1.5,
                 probe: Callable[[str, int, float], tuple[bool, str]] | None = None,
                 clock: Callable[[], float] = time.monotonic, workers: int = 4, token: str | None = None) -> None:
        """``probe``: one probe (default :func:`probe_healthz` sending ``token``)."""
        self.timeout = timeout
        self.interval = interval
        self.max_age = max(max_age, interval + timeout)
        self._probe = probe or (lambda address, port, wait: probe_healthz(address, port, wait, token))
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="healthz")
        self._answers: dict[str, Answer] = {}
        self._started: dict[str, float] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def check(self, name: str, node: Obj) -> Answer | None:
        """The latest recent answer for ``node``'s current endpoint (None: none yet); starts a probe if due."""
        endpoint = endpoint_of(node)
        now = self._clock()
        if endpoint is None:
            return Answer(("", 0), False, "the node registered no agent endpoint", now)
        with self._lock:
            answer = self._answers.get(name)
            due = name not in self._running and now - self._started.get(name, -1e18) >= self.interval
            if due:
                self._running.add(name)
                self._started[name] = now
        if due:
            self._pool.submit(self._run, name, endpoint)
        if answer is None or answer.endpoint != endpoint or now - answer.at > self.max_age:
            return None
        return answer

    def _run(self, name: str, endpoint: Endpoint) -> None:
        try:
            healthy, detail = self._probe(endpoint[0], endpoint[1], self.timeout)
        except Exception as exc:  # noqa: BLE001 - a probe bug must read as unhealthy, not kill the pool
            healthy, detail = False, f"probe failed: {exc}"
        with self._lock:
            self._answers[name] = Answer(endpoint, healthy, detail, self._clock())
            self._running.discard(name)

    def forget(self, name: str) -> None:
        """Drop what is known of ``name`` (it became healthy, or went away)."""
        with self._lock:
            self._answers.pop(name, None)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
