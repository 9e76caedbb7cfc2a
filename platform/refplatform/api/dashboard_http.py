"""HTTP routes of the dashboard: the static page (no auth, no data) and its JSON view (auth as the API).

- ``GET /dashboard``: the page; ``GET /dashboard/static/<file>``: its script and style sheet.
  Public: they hold no data.  The page asks for the bearer token (a form) or reads it from the URL
  fragment (``#token=...``, which a browser never sends to a server, then dropped from the address bar),
  keeps it in memory only and sends it on its own fetches.
  Served with a strict Content-Security-Policy (scripts and styles only from this origin, no
  inline script, fetches only to this origin), so even a name that slipped into markup could not run.
- ``GET /apis/firedrill.dev/v1alpha1/dashboard``: :meth:`refplatform.api.dashboard.DashboardView.to_dict`
  of the store now.  Needs a token allowed to list pods in every namespace and nodes (a
  cluster-admin): the grid names every tenant's pods.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from refplatform.api import errors as E
from refplatform.api.audit import note_of
from refplatform.api.auth import ANONYMOUS_ADMIN, Identity, TokenAuthenticator
from refplatform.api.dashboard import build_view
from refplatform.api.errors import ApiError
from refplatform.api.gates import Attributes, check
from refplatform.api.service import ApiService
from refplatform.resources import EVENTS, LEASES, NODES, PODS, VCJOBS

PAGE_PATH = "/dashboard"
STATIC_PREFIX = "/dashboard/static/"
VIEW_PATH = "/apis/firedrill.dev/v1alpha1/dashboard"
STATIC_FILES = {"dashboard.html": "text/html; charset=utf-8", "dashboard.js": "text/javascript; charset=utf-8",
                "dashboard.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                           "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store"}


class DashboardHost(Protocol):
    """What the routes need from :class:`refplatform.api.app.ApiServer`."""

    service: ApiService
    authenticator: TokenAuthenticator | None


def static_file(name: str) -> bytes:
    """The packaged file ``refplatform/api/static/<name>`` (package data, so a wheel carries it)."""
    return resources.files("refplatform.api").joinpath("static", name).read_bytes()


def _status(exc: ApiError) -> Response:
    return Response(json.dumps(exc.to_status(), separators=(",", ":")).encode(), status_code=exc.code,
                    media_type="application/json", headers={"Cache-Control": "no-store"})


def dashboard_routes(host: DashboardHost) -> list[Route]:
    """The dashboard's routes; mount them before the API's catch-all route."""
    cache: dict[str, bytes] = {}

    def serve(name: str) -> Response:
        if name not in STATIC_FILES:
            return _status(E.resource_not_found(STATIC_PREFIX + name))
        if name not in cache:
            cache[name] = static_file(name)
        return Response(cache[name], media_type=STATIC_FILES[name], headers=SECURITY_HEADERS)

    async def page(request: Request) -> Response:
        note_of(request).skip = True  # public, no data: not audited
        return serve("dashboard.html")

    async def asset(request: Request) -> Response:
        note_of(request).skip = True
        return serve(str(request.path_params["name"]))

    async def view(request: Request) -> Response:
        note = note_of(request)
        note.verb = "get"
        try:
            who: Identity = ANONYMOUS_ADMIN if host.authenticator is None else \
                host.authenticator.authenticate(request.headers.get("authorization"))
            note.who = who
            check(who, Attributes("list", PODS))
            note.reason = check(who, Attributes("list", NODES)).reason
            store = host.service.store

            def items(key: str, namespace: str | None = None) -> list[dict[str, Any]]:
                return store.list(key, namespace)[0]
            doc = build_view(host.service.clock(), nodes=items(NODES.key), pods=items(PODS.key),
                             events=items(EVENTS.key), jobs=items(VCJOBS.key),
                             leases=items(LEASES.key, "kube-node-lease")).to_dict()
        except ApiError as exc:
            note.error = exc
            return _status(exc)
        return Response(json.dumps(doc, separators=(",", ":")).encode(), media_type="application/json",
                        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})

    return [Route(PAGE_PATH, page, methods=["GET"]), Route(PAGE_PATH + "/", page, methods=["GET"]),
            Route(STATIC_PREFIX + "{name}", asset, methods=["GET"]), Route(VIEW_PATH, view, methods=["GET"])]
