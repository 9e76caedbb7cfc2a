"""A small JSON REST client for the reference platform's Kubernetes-shaped API.

Used by the node agents (and later by controllers and the CLI).  It speaks plain
Kubernetes REST: paths built by :func:`resource_path`, JSON bodies, ``Status``
objects for errors, newline-delimited watch streams.  It is deliberately not the
official ``kubernetes`` client: the agents need a few verbs, a stoppable watch
with a read timeout, and exceptions rooted in :class:`RefPlatformError`.

Errors:

- :class:`ApiStatusError` for any HTTP answer >= 400 (code, reason, message,
  taken from the ``Status`` body when there is one);
- :class:`ApiUnreachable` when no HTTP answer came back (refused, reset,
  timed out), naming the URL.

The client never retries on its own; callers decide (the agent uses tenacity).
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple
from urllib.parse import quote, urlencode

import urllib3
from urllib3.exceptions import HTTPError as _Urllib3Error

from refplatform import jsoncodec
from refplatform.errors import RefPlatformError

__all__ = [
    "ApiStatusError",
    "ApiUnreachable",
    "JSON_PATCH",
    "MERGE_PATCH",
    "RestClient",
    "STRATEGIC_MERGE_PATCH",
    "WatchEvent",
    "WatchStream",
    "resource_path",
]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_PATCH_TYPES = frozenset({MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH})

Obj = dict[str, Any]
Body = dict[str, Any] | list[Any]
"""A JSON request body: an object, or a list (a JSON patch)."""
Params = Mapping[str, str | int | float | bool | None]


class ApiStatusError(RefPlatformError):
    """The API server answered with an error (HTTP status >= 400).

    ``code`` is the HTTP status code, ``reason`` the Kubernetes ``StatusReason``
    (``NotFound``, ``AlreadyExists``, ``Conflict``, ``Expired``, ...) and
    ``message`` the human-readable text; ``status`` is the full ``Status`` body
    when the server sent one (else ``None``).
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        method: str = "",
        url: str = "",
        status: Obj | None = None,
    ) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.method = method
        self.url = url
        self.status = status
        where = f" ({method} {url})" if method else ""
        super().__init__(f"{code} {reason}: {message}{where}")

    @classmethod
    def from_status(cls, status: Obj, *, method: str = "", url: str = "", http_code: int = 0) -> ApiStatusError:
        """Build from a ``Status`` object (a watch ERROR event or an error body)."""
        code = status.get("code")
        return cls(
            int(code) if isinstance(code, int) else http_code,
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
            method=method,
            url=url,
            status=status,
        )

    @property
    def not_found(self) -> bool:
        return self.code == 404

    @property
    def conflict(self) -> bool:
        """409: an optimistic-concurrency conflict or an AlreadyExists."""
        return self.code == 409

    @property
    def gone(self) -> bool:
        """410: the resourceVersion is too old; relist."""
        return self.code == 410


class ApiUnreachable(RefPlatformError):
    """No HTTP answer from the API server: refused, reset, or timed out."""

    def __init__(self, url: str, cause: BaseException | str) -> None:
        self.url = url
        self.cause = cause
        super().__init__(f"API server unreachable at {url}: {cause}")


def resource_path(
    group: str,
    version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a collection, an object or a subresource.

    ``group=""`` is the core group (``/api/v1``); any other group lives under
    ``/apis/<group>/<version>``.

    >>> resource_path("", "v1", "pods", "default", "p", "status")
    '/api/v1/namespaces/default/pods/p/status'
    >>> resource_path("coordination.k8s.io", "v1", "leases", "kube-node-lease", "n1")
    '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1'
    """
    if subresource and not name:
        raise ValueError("a subresource needs an object name")
    parts = ["/api", version] if not group else ["/apis", group, version]
    if namespace:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


class WatchEvent(NamedTuple):
    """One watch event; unpacks as ``(type, object)``."""

    type: str
    object: Obj


class WatchStream:
    """An iterator of :class:`WatchEvent` over one watch request.

    The iteration ends when the server closes the stream (``timeoutSeconds``
    elapsed), when no byte arrives within the read timeout, or after
    :meth:`stop` (callable from any thread).  A broken connection raises
    :class:`ApiUnreachable` (unless stopped).  ``ERROR`` events are yielded as
    they come (their object is a ``Status``; code 410 means relist).
    ``resource_version`` is the last resourceVersion seen, bookmarks included,
    to resume from.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse, url: str, resource_version: str | None) -> None:
        self._response = response
        self._url = url
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self.resource_version = resource_version

    def stop(self) -> None:
        """End the iteration from any thread (unblocks a pending read)."""
        self._stopped.set()
        with self._lock:
            if self._closed:
                return
            try:
                self._response.shutdown()
            except (ValueError, RuntimeError, OSError):
                pass

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            # Never return a half-read stream to the pool.
            self._response.close()
            self._response.release_conn()
        except (OSError, _Urllib3Error):
            pass

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._close()

    def __iter__(self) -> Iterator[WatchEvent]:
        buf = b""
        try:
            while not self._stopped.is_set():
                try:
                    chunk = self._response.read1(65536)
                except _Urllib3Error as err:
                    if self._stopped.is_set() or _is_read_timeout(err):
                        return
                    raise ApiUnreachable(self._url, err) from err
                except OSError as err:
                    if self._stopped.is_set():
                        return
                    raise ApiUnreachable(self._url, err) from err
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    event = self._parse(line)
                    if event is not None:
                        yield event
                        if self._stopped.is_set():
                            return
        finally:
            self._close()

    def _parse(self, line: bytes) -> WatchEvent | None:
        line = line.strip()
        if not line:
            return None
        try:
            data = jsoncodec.loads(line)
        except ValueError as err:
            raise ApiUnreachable(self._url, f"malformed watch line {line[:120]!r}") from err
        etype = str(data.get("type", ""))
        obj = data.get("object") or {}
        if etype != "ERROR":
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = str(rv)
        return WatchEvent(etype, obj)


def _is_read_timeout(err: BaseException) -> bool:
    """Whether a read failed only because the stream stayed silent past the read timeout."""
    cur: BaseException | None = err
    for _ in range(5):
        if cur is None:
            return False
        if isinstance(cur, (urllib3.exceptions.ReadTimeoutError, TimeoutError)):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


class RestClient:
    """JSON REST client for one API server.  Thread-safe.

    ``base_url`` like ``https://127.0.0.1:6443`` or ``http://...``; ``token`` is
    sent as ``Authorization: Bearer <token>``; ``ca_file`` is the CA bundle that
    verifies an https server (default: the system's trust store; the server
    certificate is always verified); ``timeout`` bounds connect and read of
    ordinary requests in seconds.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        ca_file: str | os.PathLike[str] | None = None,
        timeout: float = 10.0,
        maxsize: int = 8,
        user_agent: str = "refplatform-client",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Accept": "application/json", "User-Agent": user_agent}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        tls: dict[str, Any] = {}
        if self.base_url.startswith("https://"):
            tls["cert_reqs"] = "CERT_REQUIRED"
            if ca_file is not None:
                tls["ca_certs"] = os.fspath(ca_file)
        self._pool = urllib3.PoolManager(maxsize=maxsize, block=False, retries=False, **tls)
        self._host_pool: urllib3.HTTPConnectionPool | None = None
        self._timeouts: dict[float, urllib3.Timeout] = {}

    def _connections(self) -> urllib3.HTTPConnectionPool:
        """The server's connection pool, looked up once (not per request: the pool manager parses the URL and
        normalises its key every time it is asked), and again after :meth:`close`."""
        pool = self._host_pool
        if pool is None or pool.pool is None:
            pool = self._host_pool = self._pool.connection_from_url(self.base_url)
        return pool

    def _timeout(self, read: float) -> urllib3.Timeout:
        timeout = self._timeouts.get(read)
        if timeout is None:
            timeout = self._timeouts[read] = urllib3.Timeout(connect=min(read, self.timeout), read=read)
        return timeout

    def close(self) -> None:
        """Hangs up every connection now.  (urllib3's ``PoolManager.clear`` only forgets its pools, whose sockets
        then stay open until the collector finds them: a server would keep a thread per connection meanwhile.)"""
        pools = self._pool.pools
        for key in pools.keys():
            try:
                pools[key].close()
            except KeyError:  # another thread cleared it meanwhile
                continue
        self._pool.clear()

    def with_token(self, token: str | None) -> RestClient:
        """A client of the same server that sends ``token`` (None: none) instead of this one's, sharing this
        client's connection pool: many identities over a few connections (the hollow nodes, one identity
        each).  Closing either closes the pool of both."""
        other = copy.copy(self)
        other._headers = {k: v for k, v in self._headers.items() if k != "Authorization"}
        if token:
            other._headers["Authorization"] = f"Bearer {token}"
        return other

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- verbs -------------------------------------------------------------

    def get(self, path: str, params: Params | None = None) -> Obj:
        return self._json("GET", path, params)

    def list(self, path: str, params: Params | None = None) -> Obj:
        """GET a collection; the answer is a ``*List`` with ``items``."""
        return self._json("GET", path, params)

    def create(self, path: str, body: Obj, params: Params | None = None) -> Obj:
        """POST ``body`` to a collection (or to a subresource such as ``binding``)."""
        return self._json("POST", path, params, body)

    def update(self, path: str, body: Obj, params: Params | None = None) -> Obj:
        """PUT; include ``metadata.resourceVersion`` for optimistic concurrency (409 on conflict)."""
        return self._json("PUT", path, params, body)

    def patch(
        self,
        path: str,
        body: Body,
        content_type: str = MERGE_PATCH,
        params: Params | None = None,
    ) -> Obj:
        if content_type not in _PATCH_TYPES:
            raise ValueError(f"unsupported patch content type {content_type!r}")
        return self._json("PATCH", path, params, body, content_type=content_type)

    def delete(self, path: str, body: Obj | None = None, params: Params | None = None) -> Obj:
        """DELETE, with optional ``DeleteOptions`` body (``gracePeriodSeconds``, ``preconditions``)."""
        return self._json("DELETE", path, params, body)

    def get_raw(self, path: str, params: Params | None = None, *, timeout: float | None = None) -> bytes:
        """GET and return the body bytes unparsed (e.g. ``pods/<name>/log``)."""
        resp = self._request("GET", path, params, None, timeout=timeout, accept="*/*")
        return resp.data

    def watch(
        self,
        path: str,
        params: Params | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        read_timeout: float | None = None,
        bookmarks: bool = True,
    ) -> WatchStream:
        """Open a watch on a collection path.

        Sends ``watch=true``, ``resourceVersion`` and ``timeoutSeconds`` when
        given, ``allowWatchBookmarks``.  ``read_timeout`` (default:
        ``timeout_seconds + 5`` or the client timeout) ends the iteration when
        the stream goes silent.  Errors answered before the stream opens raise
        :class:`ApiStatusError` (410 when the version is gone).
        """
        query: dict[str, str | int | float | bool | None] = dict(params or {})
        query["watch"] = "true"
        if resource_version:
            query["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            query["timeoutSeconds"] = int(timeout_seconds)
        if bookmarks:
            query["allowWatchBookmarks"] = "true"
        if read_timeout is None:
            read_timeout = (timeout_seconds + 5.0) if timeout_seconds is not None else self.timeout
        resp = self._request("GET", path, query, None, timeout=read_timeout, stream=True)
        return WatchStream(resp, self._url(path, query), resource_version)

    # -- plumbing ----------------------------------------------------------

    def _url(self, path: str, params: Params | None) -> str:
        return self.base_url + self._target(path, params)

    @staticmethod
    def _target(path: str, params: Params | None) -> str:
        """The request target: the path and its query."""
        url = path if path.startswith("/") else "/" + path
        if params:
            pairs = [(k, _param(v)) for k, v in params.items() if v is not None]
            if pairs:
                url += "?" + urlencode(pairs)
        return url

    def reachable(self, timeout: float) -> tuple[bool, str]:
        """Does the API server answer ``GET /readyz`` now, within ``timeout`` seconds? ``(answered, why not)``."""
        try:
            self._request("GET", "/readyz", None, None, timeout=timeout)
        except (ApiStatusError, ApiUnreachable) as err:
            return False, str(err)
        return True, ""

    def _json(
        self,
        method: str,
        path: str,
        params: Params | None,
        body: Body | None = None,
        *,
        content_type: str = "application/json",
    ) -> Obj:
        resp = self._request(method, path, params, body, content_type=content_type)
        if not resp.data:
            return {}
        try:
            data = jsoncodec.loads(resp.data)
        except ValueError as err:
            raise ApiStatusError(
                resp.status, "InvalidResponse", f"not JSON: {resp.data[:120]!r}", method=method, url=self._url(path, params)
            ) from err
        if not isinstance(data, dict):
            raise ApiStatusError(resp.status, "InvalidResponse", "JSON answer is not an object", method=method, url=self._url(path, params))
        return data

    def _request(
        self,
        method: str,
        path: str,
        params: Params | None,
        body: Body | None,
        *,
        content_type: str = "application/json",
        timeout: float | None = None,
        stream: bool = False,
        accept: str | None = None,
    ) -> urllib3.BaseHTTPResponse:
        target = self._target(path, params)
        url = self.base_url + target
        headers = dict(self._headers)
        if accept:
            headers["Accept"] = accept
        payload = None
        if body is not None:
            payload = jsoncodec.dumps(body)
            headers["Content-Type"] = content_type
        t = self.timeout if timeout is None else timeout
        try:
            resp = self._connections().urlopen(
                method,
                target,
                body=payload,
                headers=headers,
                timeout=self._timeout(t),
                preload_content=not stream,
                redirect=False,
            )
        except _Urllib3Error as err:
            raise ApiUnreachable(url, err) from err
        except OSError as err:
            raise ApiUnreachable(url, err) from err
        if resp.status >= 400:
            try:
                data = resp.data if not stream else resp.read()
            except (_Urllib3Error, OSError):
                data = b""
            finally:
                if stream:
                    resp.release_conn()
            raise _status_error(resp.status, resp.reason or "", data, method, url)
        return resp


def _param(v: str | int | float | bool) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _status_error(http_code: int, http_reason: str, data: bytes, method: str, url: str) -> ApiStatusError:
    try:
        body = jsoncodec.loads(data) if data else None
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return ApiStatusError.from_status(body, method=method, url=url, http_code=http_code)
    text = data.decode("utf-8", "replace").strip()[:200] if data else ""
    return ApiStatusError(http_code, http_reason.replace(" ", ""), text or http_reason, method=method, url=url)
