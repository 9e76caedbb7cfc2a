"""Self-fencing: a node cut off from the API stops its own pods before the cluster replaces them.

A partitioned node's pods keep running: nothing in Kubernetes can reach them.
Once the control plane declares the node lost, their job is restarted
elsewhere, and a rank left running on the cut-off node would train beside its
replacement (split brain: two incarnations writing the same checkpoints).  The
remedy real platforms use is self-fencing (medik8s Self Node Remediation, a
watchdog reboot): a node that cannot renew its Lease for a *safe time* that
ends before the grace period asks its peers whether *they* reach the API; if
any does, the fault is its own, and it kills its workloads.  If no peer
reaches the API either, the API is down for everyone and nothing is fenced.

:func:`decide` is the pure rule; :class:`SelfFence` runs it every heartbeat
interval with the agent's Lease age, asks the peers' ``/healthz`` (the other
agents of the cluster, from the state files they write under the data
directory, with this node's own token: the peers answer only known callers), and calls back once per outage.  The ``split-brain`` defect
switches it off.
"""

from __future__ import annotations

import enum
import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from refplatform.core.disruption import DisruptionPolicy, ZoneCount, judge_disruption

__all__ = ["PEER_PROBE_S", "FenceDecision", "SelfFence", "decide", "monotonic_age", "peer_health_urls"]

log = logging.getLogger(__name__)


class FenceDecision(enum.Enum):
    """What a node that may be cut off does now."""

    CONNECTED = "connected"
    """The Lease was renewed within the safe time: nothing to do."""
    WAIT = "wait"
    """Cut off for less than the safe time, or no peer was asked yet: wait."""
    API_DOWN = "api-down"
    """No peer reaches the API either: the API is down for everyone; fencing would only hurt."""
    DISRUPTION = "disruption"
    """Cut off together with so many peers that the control plane holds its evictions: fencing would only hurt."""
    FENCE = "fence"
    """Cut off past the safe time while a peer reaches the API: kill this node's workloads."""


def decide(lease_age: float | None, safe_time: float, peers_ok: int | None, peers_asked: int | None = None,
           disruption: DisruptionPolicy = DisruptionPolicy()) -> FenceDecision:
    """``lease_age``: seconds since this node last renewed its Lease (None: never yet); ``peers_ok``: how many
    peers said they reach the API (None: none could be asked); ``peers_asked``: how many were asked (None: not
    counted, no disruption judged)."""
    if lease_age is None or lease_age < safe_time:
        return FenceDecision.CONNECTED if lease_age is not None else FenceDecision.WAIT
    if peers_ok is None:
        return FenceDecision.WAIT
    if peers_ok == 0:
        return FenceDecision.API_DOWN
    if peers_asked is not None:
        quiet = peers_asked - peers_ok + 1  # the peers that did not answer yes, and this node
        if judge_disruption([ZoneCount("", peers_ok, quiet)], disruption).rate("") == 0:
            return FenceDecision.DISRUPTION
    return FenceDecision.FENCE


PEER_PROBE_S = 1.5
"""How long a peer asked ``/healthz/api`` waits for the API server's ``/readyz`` before it answers no."""


def peer_health_urls(data_dir: Path, me: str) -> list[str]:
    """The ``/healthz/api`` of every other agent of the cluster, from their state files (loopback only): each peer
    asks the API server now, so a blip of the control plane that every node sees is never taken for this node's
    own partition (a peer's heartbeat can be younger than the asker's without the API answering anyone)."""
    urls = []
    for path in sorted((data_dir / "agents").glob("*.json")):
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        port = state.get("logPort")
        scheme = "https" if state.get("logScheme") == "https" else "http"
        if state.get("node") != me and isinstance(port, int) and port > 0:
            urls.append(f"{scheme}://127.0.0.1:{port}/healthz/api")
    return urls


@dataclass
class SelfFence:
    """Every ``interval`` seconds: decide, and call ``fence(why)`` once per outage."""

    node: str
    safe_time: float
    interval: float
    lease_age: Callable[[], float | None]
    peers: Callable[[], list[str]]
    fence: Callable[[str], None]
    token: str | None = None
    """This node's own bearer token, sent to the peers (their endpoints answer only known callers)."""
    reach_api: Callable[[], tuple[bool, str]] | None = None
    """This node's own ``GET /readyz`` to the API server, tried once more before fencing: the end of a control-plane
    blip is not a partition (the peers reach the API again a moment before this node renews its Lease)."""
    timeout: float = 2.0
    """How long a peer may take to answer (it asks the API server itself, within :data:`PEER_PROBE_S`)."""
    disruption: DisruptionPolicy = field(default_factory=DisruptionPolicy)
    """The control plane's disruption flags (only the zone threshold and the large-cluster size matter here)."""
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _fenced: bool = field(default=False, init=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="self-fence", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.check()

    def check(self) -> FenceDecision:
        age = self.lease_age()
        if age is not None and age < self.safe_time:
            self._fenced = False  # connected again: a later outage fences again
            return FenceDecision.CONNECTED
        asked, peers_ok = self._ask_peers() if age is not None else (None, None)
        decision = decide(age, self.safe_time, peers_ok, asked, self.disruption)
        if decision is FenceDecision.FENCE and not self._fenced and self.reach_api is not None \
                and self.reach_api()[0]:
            log.info("no Lease renewal for %.1fs, but the API answers this node again: not fencing", age or 0.0)
            return FenceDecision.CONNECTED
        if decision is FenceDecision.FENCE and not self._fenced:
            self._fenced = True
            why = (f"node {self.node} fenced itself: no Lease renewal for {age:.1f}s (safe time "
                   f"{self.safe_time:g}s) while {peers_ok} peer(s) reach the API")
            log.warning("%s; killing its pods so no old rank trains beside its replacement", why)
            self.fence(why)
        elif decision is FenceDecision.API_DOWN and not self._fenced:
            log.warning("no Lease renewal for %.1fs, but no peer reaches the API either: not fencing", age or 0.0)
        elif decision is FenceDecision.DISRUPTION and not self._fenced:
            log.warning("no Lease renewal for %.1fs, but only %s of %s peers reach the API: a disruption the control "
                        "plane does not evict in; not fencing", age or 0.0, peers_ok, asked)
        return decision

    def _ask_peers(self) -> tuple[int | None, int | None]:
        """(peers asked, peers that reach the API); (None, None) when there is no peer to ask."""
        urls = self.peers()
        if not urls:
            return None, None
        ok = 0
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        for url in urls:
            try:
                # A peer serving HTTPS (a kubelet's log port) is asked without checking its certificate: only
                # its "ok" is read, from loopback.
                context = _UNVERIFIED if url.startswith("https://") else None
                request = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(request, timeout=self.timeout, context=context) as resp:  # noqa: S310 - loopback only
                    ok += resp.status == 200
            except (urllib.error.URLError, OSError, ValueError):
                continue
        return len(urls), ok


def _unverified_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


_UNVERIFIED = _unverified_context()


def monotonic_age(last_ok: Callable[[], float | None]) -> Callable[[], float | None]:
    """A ``lease_age`` callable from a ``time.monotonic()`` of the last renewal."""
    def age() -> float | None:
        last = last_ok()
        return None if last is None else time.monotonic() - last
    return age
