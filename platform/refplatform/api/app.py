"""The HTTP face of the API server: paths, verbs, bodies, watch streams, Tables, audit.

One catch-all ASGI route parses the Kubernetes URL scheme::

    /api/v1[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]
    /apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]

authenticates the caller (:mod:`refplatform.api.auth`), authorizes the request
(:mod:`refplatform.api.gates`), hands the call to
:class:`~refplatform.api.service.ApiService` (which runs the object-level
restrictions, priority and quota admission), and notes who, what and why for the
audit log (:mod:`refplatform.api.audit`), which records every mutating request,
every refusal and, when asked, every read.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
import yaml
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from refplatform import jsoncodec
from refplatform.api import accessreview, discovery, leakreport, openapiv2, protobuf, tokenreview
from refplatform.api import errors as E
from refplatform.api.audit import AuditLog, AuditMiddleware, AuditNote, note_of
from refplatform.api.auth import ANONYMOUS_ADMIN, Identity, TokenAuthenticator
from refplatform.api.dashboard_http import dashboard_routes
from refplatform.api.errors import ApiError
from refplatform.api.gates import Attributes, check
from refplatform.api.openapi import OpenApi
from refplatform.api.service import ApiService, DeleteOptions, Selection, rfc3339
from refplatform.api.tables import TableContext, table
from refplatform.api.usagelog import UsageRecorder
from refplatform.defects import Defect
from refplatform.fieldmanager import manager_from_user_agent
from refplatform.patching import APPLY_PATCH, PatchError, UnsupportedPatchType, apply_patch
from refplatform.resources import NAMESPACES, NODES, PODS, REGISTRY, ResourceType

log = logging.getLogger("refplatform.api")

MAX_BODY_BYTES = 3 * 1024 * 1024
MUTATING = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
WATCH_BATCH = 256
"""Watch events sent in one chunk at most (a chunk is one TLS record and send to the watcher)."""
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/livez", "/version"})


@dataclass(frozen=True)
class ServerSettings:
    """Knobs of one API server."""

    max_body_bytes: int = MAX_BODY_BYTES
    bookmark_interval: float = 10.0
    """Seconds of quiet after which a watch that asked for bookmarks gets one."""
    default_watch_timeout: float = 1800.0
    """Seconds a watch stays open when the client gives no timeoutSeconds."""
    defects: frozenset[Defect] = frozenset()
    """Defects from the zoo this server runs with (``--defect``; docs/DEFECTS.md); none on an honest server."""
    limited_priority_classes: frozenset[str] = frozenset()
    """``--limited-priority-class``: classes a pod may use only where a ResourceQuota selects them."""
    kubelet_client_token: str = ""
    """``--kubelet-client-token-file``: the bearer token sent to node agents when proxying pods/log."""


@dataclass
class Target:
    """A parsed resource URL."""

    rt: ResourceType
    namespace: str
    name: str | None = None
    subresource: str = ""


class WatchHub:
    """Wakes every open watch after each commit, from whichever thread committed."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: set[asyncio.Event] = set()

    def register(self) -> asyncio.Event:
        self._loop = asyncio.get_running_loop()
        ev = asyncio.Event()
        self._events.add(ev)
        return ev

    def unregister(self, ev: asyncio.Event) -> None:
        self._events.discard(ev)

    def _wake_all(self) -> None:
        for ev in list(self._events):
            ev.set()

    def notify(self) -> None:
        loop = self._loop
        if loop is None or not self._events:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake_all()
        else:
            loop.call_soon_threadsafe(self._wake_all)


@dataclass
class ApiServer:
    """Wires the service, auth and watch hub into a Starlette application."""

    service: ApiService
    authenticator: TokenAuthenticator | None = None
    settings: ServerSettings = field(default_factory=ServerSettings)
    hub: WatchHub = field(default_factory=WatchHub)
    usage: UsageRecorder | None = None
    """Serves the leak report and ``/metrics`` (refplatform.api.leakreport) when set."""
    audit: AuditLog | None = None
    """Where audited requests are recorded (refplatform.api.audit); None: nothing is recorded."""

    def __post_init__(self) -> None:
        self._v2: openapiv2.Served | None = None
        self.openapi = OpenApi(self.service.registry,
                              {g: list(vs) for g, vs in discovery.LEAK_REPORT_GROUPS.items()})
        self.service.store.subscribe(self.hub.notify)
        defects = self.settings.defects
        if Defect.LOSE_ACKED_WRITES in defects:
            self.service.lose_every = 10
        self.node_writes_any = Defect.NODE_WRITES_ANY in defects
        self.service.restrictions.node_writes_any = self.node_writes_any
        self.service.quota.limited = tuple(sorted(self.settings.limited_priority_classes))
        self.service.quota.enforce_gpus = Defect.NO_GPU_QUOTA not in defects
        self.service.quota.charge_pending = Defect.QUOTA_IGNORES_PENDING not in defects
        if self.audit is not None and Defect.UNRECORDED_REFUSALS in defects:
            self.audit.record_refusals = False
        app: Any = Starlette(routes=[*dashboard_routes(self), Route("/{path:path}", self.handle,
                                                                    methods=["GET", "POST", "PUT", "PATCH", "DELETE"])])
        self.app = AuditMiddleware(app, self.audit, self.service.clock) if self.audit is not None else app

    # ------------------------------------------------------------ entry point
    async def handle(self, request: Request) -> Response:
        note = note_of(request)
        try:
            path = request.url.path.rstrip("/") or "/"
            if path in ("/healthz", "/readyz", "/livez"):
                note.skip = True
                return PlainTextResponse("ok")
            self._note_target(note, request, path)
            note.who = who = self._authenticate(request, path)
            if path == tokenreview.PATH:
                return json_response(tokenreview.review(request, who, await read_body(
                    request, self.settings.max_body_bytes), self.authenticator, note), 201)
            review = accessreview.REVIEWS.get(path)
            if review is not None:
                if request.method != "POST":
                    raise E.method_not_allowed(request.method, review.group_resource)
                body = parse_body(await read_body(request, self.settings.max_body_bytes),
                                  check_media_type(request, review))
                return json_response(accessreview.review(review, who, body, note, self.service.registry,
                                                         node_writes_any=self.node_writes_any), 201)
            note.reason = "an authenticated user reads discovery and OpenAPI (the leak report and /metrics: " \
                "cluster-admin only)"
            if self.usage is not None and path in leakreport.PATHS:
                # Off the event loop: a long window takes a while to account and must not stall watches.
                return await run_in_threadpool(leakreport.serve, self.usage, request, who, path,
                                               Defect.MISRANKED_LEAKS in self.settings.defects)
            if path == "/openapi/v2":
                if request.method != "GET":
                    raise E.method_not_allowed(request.method, path)
                return self._openapi_v2(request)
            if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
                if request.method != "GET":
                    raise E.method_not_allowed(request.method, path)
                return self._openapi(request, path)
            doc = self._discovery(path)
            if doc is not None:
                if request.method != "GET":
                    raise E.method_not_allowed(request.method, path)
                return json_response(doc)
            target = parse_path(path)
            return await self._dispatch(request, who, target)
        except ApiError as exc:
            note.error = exc
            return json_response(exc.to_status(), exc.code)
        except Exception:  # noqa: BLE001 - the client must get a Status, and the log the traceback
            log.exception("internal error serving %s %s", request.method, request.url.path)
            note.error = ApiError(500, "InternalError", "an internal error occurred; see the API server log")
            return json_response(note.error.to_status(), 500)

    def _authenticate(self, request: Request, path: str) -> Identity:
        if self.authenticator is None or path in PUBLIC_PATHS:
            return ANONYMOUS_ADMIN
        return self.authenticator.authenticate(request.headers.get("authorization"))

    @staticmethod
    def _note_target(note: AuditNote, request: Request, path: str) -> None:
        """The Kubernetes verb and object of the request, for its audit record (before anything can refuse
        it: an unauthenticated request is recorded with what it asked for)."""
        method = request.method
        note.verb = MUTATING.get(method, method.lower())
        if not (path.startswith("/api/") or path.startswith("/apis/")):
            return
        try:
            t = parse_path(path)
        except ApiError:
            return
        note.rt, note.namespace, note.name, note.subresource = t.rt, t.namespace, t.name or "", t.subresource
        if method == "GET":
            note.verb = "get" if t.name else "watch" if request.query_params.get("watch") in ("true", "1") \
                else "list"

    def _authorize(self, request: Request, who: Identity, verb: str, rt: ResourceType, namespace: str,
                   name: str = "", subresource: str = "") -> None:
        """Raise 403 unless the gates (refplatform.api.gates) let ``who`` make the request; note why."""
        decision = check(who, Attributes(verb, rt, namespace, name, subresource), node_writes_any=self.node_writes_any)
        note_of(request).reason = decision.reason

    def _openapi(self, request: Request, path: str) -> Response:
        """``/openapi/v3`` (the index) and ``/openapi/v3/<group-version>`` (refplatform.api.openapi)."""
        if path == "/openapi/v3":
            return json_response(self.openapi.index())
        doc = self.openapi.document(path.removeprefix("/openapi/v3/"))
        if doc is None:
            raise E.resource_not_found(path)
        headers = {"ETag": f'"{doc.hash}"', "Vary": "Accept"}
        # As upstream: a URL carrying the current hash never changes, so clients may keep it.
        headers["Cache-Control"] = "public, immutable" if request.query_params.get("hash") == doc.hash \
            else "no-cache, private"
        return Response(doc.body, media_type="application/json", headers=headers)

    def _openapi_v2(self, request: Request) -> Response:
        """``/openapi/v2`` (refplatform.api.openapiv2): protobuf when asked for, as kubectl does, else JSON."""
        if self._v2 is None:
            self._v2 = openapiv2.build([json.loads(d.body) for d in self.openapi.documents.values()])
        headers = {"ETag": self._v2.etag, "Vary": "Accept"}
        if request.headers.get("if-none-match") == self._v2.etag:
            return Response(status_code=304, headers=headers)
        if openapiv2.ACCEPT_PROTOBUF in request.headers.get("accept", ""):
            return Response(self._v2.protobuf_body, media_type=openapiv2.PROTOBUF, headers=headers)
        return Response(self._v2.json_body, media_type="application/json", headers=headers)

    def _discovery(self, path: str) -> dict[str, Any] | None:
        if path == "/version":
            return discovery.version()
        if path == "/api":
            return discovery.core_versions()
        if path == "/apis":
            return discovery.group_list()
        if path == "/api/v1":
            return discovery.resource_list("", "v1")
        parts = path.split("/")
        if len(parts) == 3 and parts[1] == "apis":
            doc = discovery.group(parts[2])
            if doc is None:
                raise E.resource_not_found(path)
            return doc
        if len(parts) == 4 and parts[1] == "apis":
            doc = discovery.resource_list(parts[2], parts[3])
            if doc is None:
                raise E.resource_not_found(path)
            return doc
        return None

    async def _dispatch(self, request: Request, who: Identity, t: Target) -> Response:
        method, q = request.method, request.query_params
        rt, ns, name, sub = t.rt, t.namespace, t.name, t.subresource
        if method == "GET":
            if name is None:
                verb = "watch" if q.get("watch") in ("true", "1") else "list"
                self._authorize(request, who, verb, rt, ns)
                sel = Selection.parse(rt, ns, q.get("labelSelector"), q.get("fieldSelector"))
                if verb == "watch":
                    return self._watch(request, rt, sel)
                return self._list(request, rt, sel)
            self._authorize(request, who, "get", rt, ns, name, sub)
            if sub == "log":
                return await self._log(request, ns, name)
            if sub == "scale":
                return json_response(self.service.get_scale(rt, ns, name))
            if sub and sub != "status":
                raise E.method_not_allowed("GET", f"{rt.plural}/{sub}")
            obj = self.service.get(rt, ns, name)
            return self._object_response(request, rt, obj)
        verb = MUTATING[method]
        if name is None and method != "POST":
            raise E.method_not_allowed(method, f"{rt.group_resource} (collection)")
        self._authorize(request, who, verb, rt, ns, name or "", sub)
        dry = dry_run(q.getlist("dryRun"), sub)
        media = check_media_type(request, rt)
        raw = await read_body(request, self.settings.max_body_bytes) if method != "DELETE" or \
            request.headers.get("content-length") not in (None, "0") else b""
        manager = field_manager(request, media) if method != "DELETE" else ""
        if method == "POST":
            body = parse_body(raw, media)
            if name is None:
                note = note_of(request)
                note.name = (body.get("metadata") or {}).get("name", "") \
                    if isinstance(body, dict) and isinstance(body.get("metadata"), dict) else ""
                warnings = self._check_fields(request, rt, body)
                obj = self.service.create(rt, ns, body, by=who, dry_run=dry, manager=manager)
                note.name = obj["metadata"]["name"]
                return with_warnings(json_response(obj, 201), warnings)
            if rt is PODS and sub == "binding":
                return json_response(self.service.bind(ns, name, body, by=who), 201)
            if rt is PODS and sub == "eviction":
                return json_response(self.service.evict(ns, name, body), 201)
            raise E.method_not_allowed("POST", f"{rt.plural}/{name}/{sub}" if sub else f"{rt.plural}/{name}")
        if sub == "scale" and method in ("PUT", "PATCH"):
            return json_response(self._write_scale(request, rt, ns, name, raw, media, manager))
        if sub not in ("", "status"):
            raise E.method_not_allowed(method, f"{rt.plural}/{sub}")
        if method == "PUT":
            body = parse_body(raw, media)
            warnings = self._check_fields(request, rt, body)
            return with_warnings(json_response(self.service.update(rt, ns, name, body, sub, by=who, dry_run=dry,
                                                                   manager=manager)), warnings)
        if method == "PATCH" and media == APPLY_PATCH:
            config = parse_apply_body(raw)
            warnings = self._check_fields(request, rt, config)
            obj, created = self.service.apply(rt, ns, name, config, manager=manager, force=q.get("force") == "true",
                                              subresource=sub, by=who, dry_run=dry)
            return with_warnings(json_response(obj, 201 if created else 200), warnings)
        if method == "PATCH":
            warnings = []
            if media in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                try:
                    warnings = self._check_fields(request, rt, json.loads(raw))
                except ValueError:
                    pass  # refplatform.patching names the bad body
            patched = self.service.patch(rt, ns, name, raw, request.headers.get("content-type", ""), sub, by=who,
                                         dry_run=dry, manager=manager)
            return with_warnings(json_response(patched), warnings)
        body = parse_body(raw, media) if raw.strip() else None
        opts = DeleteOptions.from_request(body if isinstance(body, dict) else None, q.get("gracePeriodSeconds"))
        if isinstance(body, dict) and body.get("dryRun"):  # kubectl puts it in the DeleteOptions body
            dry = dry_run([str(v) for v in body["dryRun"]] if isinstance(body["dryRun"], list)
                          else [str(body["dryRun"])], sub) or dry
        return json_response(self.service.delete(rt, ns, name, opts, by=who, dry_run=dry))

    def _write_scale(self, request: Request, rt: ResourceType, ns: str, name: str, raw: bytes,
                     media: str, manager: str) -> dict[str, Any]:
        """PUT or PATCH of ``{deployments,replicasets}/scale``: an autoscaling/v1 Scale (JSON or protobuf)."""
        if request.method == "PUT":
            body = parse_body(raw, media)
            return self.service.write_scale(rt, ns, name, lambda current: body, manager)

        def patched(current: dict[str, Any]) -> Any:
            try:
                return apply_patch(current, raw, request.headers.get("content-type", ""), "Scale")
            except UnsupportedPatchType as exc:
                raise E.unsupported_media_type(str(exc)) from None
            except PatchError as exc:
                reason = {400: "BadRequest", 422: "Invalid"}.get(exc.code, "InternalError")
                raise E.ApiError(exc.code, reason, str(exc), name, rt.group, f"{rt.plural}/scale") from None
        return self.service.write_scale(rt, ns, name, patched, manager)

    def _check_fields(self, request: Request, rt: ResourceType, body: Any) -> list[str]:
        """Server-side field validation (``fieldValidation``): Strict refuses unknown fields, Warn (the
        default, as upstream) answers a Warning per field, Ignore skips the check.  Duplicate JSON keys
        are not detected (the last one wins)."""
        mode = request.query_params.get("fieldValidation") or "Warn"
        if mode not in ("Ignore", "Warn", "Strict"):
            raise E.bad_request(f'fieldValidation must be one of "Ignore", "Warn" or "Strict", got "{mode}"')
        if mode == "Ignore":
            return []
        unknown = self.openapi.unknown_fields(rt, body)
        if unknown and mode == "Strict":
            raise E.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                                "strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in unknown))
        return [f'unknown field "{f}"' for f in unknown]

    # ------------------------------------------------------------------ reads
    def _table_context(self, rt: ResourceType) -> TableContext:
        return TableContext(now=self.service.clock(), gpus_used=self.service.gpus_used() if rt is NODES else {})

    def _object_response(self, request: Request, rt: ResourceType, obj: dict[str, Any]) -> Response:
        if wants_table(request):
            return json_response(table(rt, [obj], self._table_context(rt), obj["metadata"]["resourceVersion"]))
        return json_response(obj)

    def _list(self, request: Request, rt: ResourceType, sel: Selection) -> Response:
        q = request.query_params
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise E.bad_request(f"limit must be an integer, got {q.get('limit')!r}") from None
        items, rv, token = self.service.list(rt, sel, max(0, limit), q.get("continue") or "")
        if wants_table(request):
            return json_response(table(rt, items, self._table_context(rt), str(rv), continue_token=token))
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
        return json_response({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                              "items": items})

    def _watch(self, request: Request, rt: ResourceType, sel: Selection) -> Response:
        q = request.query_params
        rv_param = q.get("resourceVersion") or ""
        try:
            start = int(rv_param) if rv_param not in ("", "0") else None
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else self.settings.default_watch_timeout
        except ValueError:
            raise E.bad_request("resourceVersion and timeoutSeconds must be integers") from None
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        as_table = wants_table(request)
        service, hub, interval = self.service, self.hub, self.settings.bookmark_interval

        def encode(kind: str, obj: dict[str, Any], first: bool) -> bytes:
            if as_table and kind in ("ADDED", "MODIFIED", "DELETED"):
                obj = table(rt, [obj], self._table_context(rt), obj["metadata"]["resourceVersion"],
                            include_columns=first)
            return jsoncodec.dumps({"type": kind, "object": obj}) + b"\n"

        async def stream() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            wake = hub.register()
            first = True
            try:
                if start is None:
                    initial, cur = service.initial_events(rt, sel)
                    for at in range(0, len(initial), WATCH_BATCH):
                        yield b"".join(encode(kind, obj, first and i == 0)
                                       for i, (kind, obj) in enumerate(initial[at:at + WATCH_BATCH]))
                        first = False
                else:
                    cur = start
                deadline = loop.time() + timeout
                quiet_since = loop.time()
                while True:
                    wake.clear()
                    try:
                        events, cur = service.events_since(rt, sel, cur)
                    except ApiError as exc:
                        yield (json.dumps({"type": "ERROR", "object": exc.to_status()}) + "\n").encode()
                        return
                    # Every change since the last wake-up in one chunk (one TLS record and send, not one
                    # per event: the fan-out to each watcher costs a write per wake-up, however busy).
                    for at in range(0, len(events), WATCH_BATCH):
                        yield b"".join(encode(kind, obj, first and i == 0)
                                       for i, (kind, obj) in enumerate(events[at:at + WATCH_BATCH]))
                        first = False
                    if events:
                        quiet_since = loop.time()
                    now = loop.time()
                    if bookmarks and now - quiet_since >= interval:
                        yield encode("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version,
                                                  "metadata": {"resourceVersion": str(cur)}}, False)
                        quiet_since = now
                    remaining = deadline - now
                    if remaining <= 0:
                        return
                    wait = min(remaining, interval - (now - quiet_since)) if bookmarks else remaining
                    try:
                        await asyncio.wait_for(wake.wait(), timeout=max(wait, 0.001))
                    except TimeoutError:
                        pass
            finally:
                hub.unregister(wake)

        return StreamingResponse(stream(), media_type="application/json")

    @functools.cached_property
    def _agent_tls(self) -> ssl.SSLContext:
        """The TLS settings every log proxy's client shares.  Building them loads the CA bundle: tens of ms on
        the event loop, which a client made with its own stalled every request and watch of the server for each
        ``kubectl logs`` and each rank's log follow (four at once when a gang restarts)."""
        return httpx.create_ssl_context()

    async def _log(self, request: Request, namespace: str, name: str) -> Response:
        q = request.query_params
        address, port, container = self.service.log_target(namespace, name, q.get("container"))
        if not ipaddress.ip_address(address).is_loopback:
            raise E.service_unavailable(f"refusing to proxy logs to non-loopback address {address}")
        params = {k: q[k] for k in ("follow", "tailLines", "timestamps", "sinceSeconds", "limitBytes") if k in q}
        url = f"http://{address}:{port}/containerLogs/{namespace}/{name}/{container}"
        if params:
            url += "?" + urlencode(params)
        client = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None), verify=self._agent_tls)
        try:
            headers = {"Authorization": f"Bearer {self.settings.kubelet_client_token}"} \
                if self.settings.kubelet_client_token else {}
            upstream = await client.send(client.build_request("GET", url, headers=headers), stream=True)
        except httpx.HTTPError as exc:
            await client.aclose()
            raise E.service_unavailable(
                f"cannot reach the agent of the node running pod {name} at {address}:{port} ({exc}); "
                "the node may be down") from None
        if upstream.status_code != 200:
            text = (await upstream.aread()).decode(errors="replace").strip()
            await upstream.aclose()
            await client.aclose()
            raise E.ApiError(404 if upstream.status_code == 404 else 500,
                             "NotFound" if upstream.status_code == 404 else "InternalError",
                             f"node agent: {text or upstream.status_code}")

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()
                await client.aclose()
        return StreamingResponse(relay(), media_type="text/plain")


# ---------------------------------------------------------------- helpers
def parse_path(path: str) -> Target:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise E.resource_not_found(path)
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in NAMESPACES.subresources):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise E.resource_not_found(path)
    rt = REGISTRY.find(group, version, rest[0])
    if rt is None:
        raise E.resource_not_found(path)
    if rt.namespaced != bool(namespace) and len(rest) > 1:
        raise E.resource_not_found(path)
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in rt.subresources:
        raise E.resource_not_found(path)
    return Target(rt, namespace, name, sub)


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise E.too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise E.too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def field_manager(request: Request, media: str) -> str:
    """The write's field manager: ``?fieldManager=``, required for apply; else the User-Agent's product, as
    upstream (``kubectl-create``, ``kubectl-edit``...).  ``force`` belongs to apply alone."""
    q = request.query_params
    given = q.get("fieldManager")
    causes: list[E.Cause] = []
    apply = request.method == "PATCH" and media == APPLY_PATCH
    if apply and not given:
        causes.append(E.Cause("fieldManager", "Required value: is required for apply patch", "FieldValueRequired"))
    if not apply and "force" in q:
        causes.append(E.Cause("force", "Forbidden: may not be specified for non-apply patch", "FieldValueForbidden"))
    if given and (len(given) > 128 or not given.isprintable()):
        causes.append(E.Cause("fieldManager", f"Invalid value: {json.dumps(given)}: must be at most 128 printable "
                                              "characters", "FieldValueInvalid"))
    if causes:
        summary = ", ".join(f"{c.field}: {c.message}" for c in causes)
        raise E.ApiError(422, "Invalid", f'PatchOptions.meta.k8s.io "" is invalid: {summary}', "", "meta.k8s.io",
                         "PatchOptions", causes)
    return given or manager_from_user_agent(request.headers.get("user-agent", ""))


def parse_apply_body(raw: bytes) -> Any:
    """An apply configuration: YAML (JSON is YAML), one document."""
    try:
        return yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise E.bad_request(f"error decoding YAML: {exc}") from None


def check_media_type(request: Request, rt: ResourceType) -> str:
    """The body's media type: JSON, or protobuf for built-in kinds (as upstream); anything else gets 415.

    client-go's typed clients send built-in kinds as protobuf and fall back to JSON
    only after a 415 to a CBOR request, so protobuf must be understood
    (refplatform.api.protobuf).  Custom resources refuse it, as upstream does.
    """
    media = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if request.method == "PATCH":
        return media  # the patch type is judged by refplatform.patching
    if media in ("", "application/json", "*/*"):
        return "application/json"
    if media == protobuf.MEDIA_TYPE and not rt.custom:
        return media
    accepted = "application/json" if rt.custom else f"application/json, {protobuf.MEDIA_TYPE}"
    raise E.unsupported_media_type(
        f'the body of the request was in an unknown format ("{media}") - accepted media types '
        f"include: {accepted}")


def dry_run(values: list[str], subresource: str) -> bool:
    """``?dryRun=All``: admit the write as it would be made and store nothing (``kubectl diff``, ``--dry-run=server``
    send it). Any other value is refused, as upstream; so is a dry run of a subresource with side effects
    (binding, eviction, scale), which is not implemented here, rather than performed for real."""
    if not values:
        return False
    bad = [v for v in values if v != "All"]
    if bad:
        raise E.bad_request(f'dryRun: Unsupported value: "{bad[0]}": supported values: "All"')
    if subresource not in ("", "status"):
        raise E.bad_request(f"dryRun is not supported for the {subresource} subresource here; send the request "
                            "without dryRun")
    return True


def parse_body(raw: bytes, media: str) -> Any:
    if media != protobuf.MEDIA_TYPE:
        return parse_json(raw)
    if not raw:
        raise E.bad_request("the request has no body; send an object")
    try:
        return protobuf.decode_object(raw)
    except protobuf.ProtobufError as exc:
        raise E.bad_request(f"the protobuf body could not be decoded: {exc}") from None


def parse_json(raw: bytes) -> Any:
    if not raw.strip():
        raise E.bad_request("the request has no body; send a JSON object")
    try:
        return jsoncodec.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise E.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None


def wants_table(request: Request) -> bool:
    return "as=Table" in request.headers.get("accept", "")


def with_warnings(response: Response, warnings: list[str]) -> Response:
    """Add one ``Warning: 299 - "..."`` header per text, as upstream does (kubectl prints them)."""
    for text in warnings:
        response.headers.append("Warning", "299 - " + json.dumps(text))
    return response


def json_response(obj: Any, code: int = 200) -> Response:
    return Response(jsoncodec.dumps(obj), status_code=code,
                    media_type="application/json")
