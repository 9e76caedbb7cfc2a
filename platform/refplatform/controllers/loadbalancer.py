"""The loopback load balancer: Services of ``type: LoadBalancer`` -> a TCP proxy on 127.0.0.1.

What a cloud's load balancer controller does, on loopback: for each port of
each Service of type LoadBalancer, a listener on ``127.0.0.1`` that forwards
every new TCP connection, round-robin, to the *ready* endpoints of the
Service's EndpointSlices (those with ``conditions.ready`` true; the port is
the slice port of the same name as the Service port).  An endpoint that
leaves the slices (pod deleted, not ready, gone with its node) gets no new
connection from then on; connections already open stay as they are, as
with a real L4 balancer.  When connecting to the chosen endpoint fails, the
next one is tried, so a backend that died before the slices caught up costs
a connection attempt, not a refused client.

Ports: the listener does **not** bind the Service's ``spec.ports[].port``
(several Services, and several clusters of a test run, would fight over
loopback ports such as 80 or 8000); it binds a free port, reused across
restarts of the controller when still free, and records it in two places:

- ``status.loadBalancer.ingress: [{ip: 127.0.0.1, ipMode: Proxy,
  ports: [{port: <Service port>, protocol: TCP}]}]`` (upstream's shape);
- the annotation ``firedrill.dev/load-balancer-ports`` on the Service: a JSON
  object from each Service port (as a string) to the loopback port that
  serves it, e.g. ``{"80": 40123}``.  Clients (the load generator) read it
  there: :func:`listen_port`.

The routing decision is pure (:func:`ready_backends`, :class:`RoundRobin`);
the proxy runs on an asyncio loop in a thread of the controller manager.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from refplatform.client import ApiStatusError, ApiUnreachable, MERGE_PATCH, RestClient, resource_path
from refplatform.controllers.endpoints import SERVICE_NAME
from refplatform.controllers.manager import Cache
from refplatform.errors import RefPlatformError
from refplatform.resources import ENDPOINTSLICES, SERVICES

log = logging.getLogger(__name__)
Obj = dict[str, Any]

PORTS_ANNOTATION = "firedrill.dev/load-balancer-ports"
HOST = "127.0.0.1"
CONNECT_TIMEOUT = 2.0


class LoadBalancerError(RefPlatformError):
    """A Service whose load-balancer port cannot be read."""


@dataclass(frozen=True)
class Backend:
    ip: str
    port: int


def ready_backends(service: Obj, slices: Sequence[Obj]) -> dict[int, tuple[Backend, ...]]:
    """Service port -> the ready endpoints serving it, in a stable order (pure)."""
    ns = service["metadata"].get("namespace", "default")
    name = service["metadata"]["name"]
    mine = [s for s in slices if s["metadata"].get("namespace", "default") == ns
            and (s["metadata"].get("labels") or {}).get(SERVICE_NAME) == name]
    out: dict[int, tuple[Backend, ...]] = {}
    for sp in (service.get("spec") or {}).get("ports") or []:
        if not isinstance(sp.get("port"), int):
            continue
        found: set[Backend] = set()
        for s in mine:
            port = next((p.get("port") for p in s.get("ports") or []
                         if (p.get("name") or "") == (sp.get("name") or "")), None)
            if not isinstance(port, int):
                continue
            for ep in s.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready") is True:
                    found.update(Backend(a, port) for a in ep.get("addresses") or [])
        out[sp["port"]] = tuple(sorted(found, key=lambda b: (b.ip, b.port)))
    return out


def merged_backends(old: tuple[Backend, ...], new: tuple[Backend, ...]) -> tuple[Backend, ...]:
    """The ``stale-backends`` defect's list: every backend ever seen, the old ones first (pure)."""
    return old + tuple(b for b in new if b not in old)


class RoundRobin:
    """Hands out backends in turn; a new backend list keeps the turn where it was (pure)."""

    def __init__(self) -> None:
        self.backends: tuple[Backend, ...] = ()
        self._next = 0

    def update(self, backends: tuple[Backend, ...]) -> None:
        self.backends = backends

    def order(self) -> list[Backend]:
        """Every backend, starting at the one whose turn it is (then the fallbacks); advances the turn."""
        n = len(self.backends)
        if n == 0:
            return []
        start = self._next % n
        self._next = start + 1
        return [self.backends[(start + i) % n] for i in range(n)]


def listen_port(service: Obj, service_port: int) -> int | None:
    """The loopback port that serves ``service_port`` of ``service``, from its annotation; None if not yet."""
    raw = ((service.get("metadata") or {}).get("annotations") or {}).get(PORTS_ANNOTATION)
    if not raw:
        return None
    try:
        ports = json.loads(raw)
        return int(ports[str(service_port)]) if str(service_port) in ports else None
    except (ValueError, TypeError, AttributeError) as exc:
        raise LoadBalancerError(f"annotation {PORTS_ANNOTATION} of service "
                                f"{service['metadata'].get('name')}: {raw!r} is not a JSON object of ports "
                                f"({exc})") from None


class _Listener:
    def __init__(self, server: asyncio.AbstractServer, port: int, rr: RoundRobin) -> None:
        self.server, self.port, self.rr = server, port, rr


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


class LoadBalancerController:
    name = "loadbalancer"
    watches = (SERVICES, ENDPOINTSLICES)
    resync = 2.0

    def __init__(self, client: RestClient, stale_backends: bool = False) -> None:
        self.client = client
        self.stale_backends = stale_backends
        """The ``stale-backends`` defect: a backend, once added, is never dropped."""
        if stale_backends:
            log.warning("defect stale-backends: the load balancer never drops a backend that left the endpoints")
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="loadbalancer-proxy", daemon=True)
        self._thread.start()
        self._listeners: dict[tuple[str, str, int], _Listener] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0

    def close(self) -> None:
        """Stops listening on every port and ends the proxy's event loop and its thread."""
        async def _close_all() -> None:
            for listener in self._listeners.values():
                listener.server.close()
            self._listeners.clear()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(_close_all(), self.loop).result(timeout=10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        self.loop.close()

    # ---------------------------------------------------------------- reconcile
    def reconcile(self, cache: Cache) -> None:
        slices = cache.list(ENDPOINTSLICES)
        wanted: dict[tuple[str, str, int], tuple[Obj, tuple[Backend, ...]]] = {}
        for svc in cache.list(SERVICES):
            if (svc.get("spec") or {}).get("type") != "LoadBalancer":
                continue
            for port, backends in ready_backends(svc, slices).items():
                wanted[(svc["metadata"].get("namespace", "default"), svc["metadata"]["name"], port)] = (svc, backends)
        asyncio.run_coroutine_threadsafe(self._converge(wanted), self.loop).result(timeout=10)
        for svc in cache.list(SERVICES):
            if (svc.get("spec") or {}).get("type") == "LoadBalancer":
                self._publish(svc)

    async def _converge(self, wanted: dict[tuple[str, str, int], tuple[Obj, tuple[Backend, ...]]]) -> None:
        for key in [k for k in self._listeners if k not in wanted]:
            listener = self._listeners.pop(key)
            listener.server.close()
            log.info("load balancer for %s/%s port %d closed (port %d)", *key, listener.port)
        for key, (svc, backends) in wanted.items():
            listener = self._listeners.get(key)
            if listener is None:
                rr = RoundRobin()
                server = await self._listen(svc, key[2], rr)
                listener = _Listener(server, server.sockets[0].getsockname()[1], rr)
                self._listeners[key] = listener
                log.info("load balancer for %s/%s port %d listening on %s:%d", key[0], key[1], key[2], HOST,
                         listener.port)
            if self.stale_backends:
                backends = merged_backends(listener.rr.backends, backends)
            if listener.rr.backends != backends:
                log.info("load balancer for %s/%s port %d: backends %s", key[0], key[1], key[2],
                         ", ".join(f"{b.ip}:{b.port}" for b in backends) or "none")
            listener.rr.update(backends)

    async def _listen(self, svc: Obj, port: int, rr: RoundRobin) -> asyncio.AbstractServer:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:  # the loop holds tasks weakly: keep each connection's alive until it ends
                self._tasks.add(task)
            try:
                await self._proxy(rr, reader, writer)
            finally:
                self._tasks.discard(task)  # type: ignore[arg-type]
        try:
            previous = listen_port(svc, port)
        except LoadBalancerError:
            previous = None
        if previous:
            try:
                return await asyncio.start_server(handle, HOST, previous)
            except OSError:
                log.info("port %d of a previous run is taken; allocating another", previous)
        return await asyncio.start_server(handle, HOST, 0)

    async def _proxy(self, rr: RoundRobin, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        for backend in rr.order():
            try:
                upstream = await asyncio.wait_for(asyncio.open_connection(backend.ip, backend.port), CONNECT_TIMEOUT)
                break
            except (OSError, asyncio.TimeoutError) as exc:
                log.info("backend %s:%d refused a connection (%s); trying the next", backend.ip, backend.port, exc)
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        sock = up_writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client_sock = writer.get_extra_info("socket")
        if client_sock is not None:
            client_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (up_writer, writer):
                w.close()

    # ---------------------------------------------------------------- status
    def _publish(self, svc: Obj) -> None:
        meta = svc["metadata"]
        ns, name = meta.get("namespace", "default"), meta["name"]
        ports = {str(k[2]): lst.port for k, lst in self._listeners.items() if k[0] == ns and k[1] == name}
        if not ports:
            return
        path = resource_path("", "v1", "services", ns, name)
        try:
            if (meta.get("annotations") or {}).get(PORTS_ANNOTATION) != json.dumps(ports, sort_keys=True):
                self.client.patch(path, {"metadata": {"annotations": {PORTS_ANNOTATION: json.dumps(
                    ports, sort_keys=True)}}}, MERGE_PATCH)
            ingress = [{"ip": HOST, "ipMode": "Proxy",
                        "ports": [{"port": int(p), "protocol": "TCP"} for p in sorted(ports, key=int)]}]
            if ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") != ingress:
                self.client.patch(resource_path("", "v1", "services", ns, name, "status"),
                                  {"status": {"loadBalancer": {"ingress": ingress}}}, MERGE_PATCH)
        except (ApiStatusError, ApiUnreachable) as exc:
            log.info("service %s/%s: could not publish the load balancer: %s", ns, name, exc)
