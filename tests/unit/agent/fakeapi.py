"""An in-memory stand-in for :class:`refplatform.client.RestClient` (the verbs the agent uses)."""

from __future__ import annotations

import builtins
import copy
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jsonpatch
import jsonpointer

from refplatform.client import JSON_PATCH, MERGE_PATCH, ApiStatusError, ApiUnreachable, WatchEvent

Obj = dict[str, Any]
Call = tuple[str, str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def status_error(code: int, reason: str, message: str = "") -> ApiStatusError:
    return ApiStatusError(code, reason, message or reason)


class FakeStream:
    def __init__(self, events: list[WatchEvent], rv: str | None) -> None:
        self.events = events
        self.resource_version = rv
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __iter__(self) -> Iterator[WatchEvent]:
        for ev in self.events:
            if self.stopped.is_set():
                return
            rv = (ev.object.get("metadata") or {}).get("resourceVersion")
            if ev.type != "ERROR" and rv:
                self.resource_version = rv
            yield ev
        self.stopped.wait(5)  # a quiet stream, until stopped


class FakeApi:
    """Objects by path; uids and resourceVersions assigned like a server; failures injectable."""

    base_url = "http://127.0.0.1:1"  # what a GatedClient puts in front of a path

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self._names = itertools.count(1)
        self.fail: Callable[[str, str], Exception | None] = lambda verb, path: None
        self.watches: list[tuple[str | None, FakeStream]] = []
        self.watch_script: list[list[WatchEvent]] = []
        self.lock = threading.Lock()
        self.namespaces = {"default", "kube-node-lease"}
        self.list_rvs: list[str] = []

    def _check(self, verb: str, path: str, body: Any = None) -> None:
        self.calls.append((verb, path, copy.deepcopy(body)))
        err = self.fail(verb, path)
        if err is not None:
            raise err

    def put_object(self, path: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uid)}")
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def get(self, path: str, params: Any = None) -> Obj:
        self._check("GET", path)
        if path not in self.objects:
            raise status_error(404, "NotFound")
        return copy.deepcopy(self.objects[path])

    def list(self, path: str, params: Any = None) -> Obj:
        self._check("LIST", path, params)
        items = [copy.deepcopy(o) for p, o in self.objects.items() if p.startswith(path + "/") or "/pods/" in p]
        selector = (params or {}).get("labelSelector")
        if selector:  # only k=v,k=v here
            want = dict(term.split("=", 1) for term in selector.split(","))
            items = [o for o in items if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in want.items())]
        rv = str(next(self._rv))
        self.list_rvs.append(rv)
        return {"kind": "List", "metadata": {"resourceVersion": rv}, "items": items}

    def create(self, path: str, body: Obj, params: Any = None) -> Obj:
        self._check("POST", path, body)
        meta = body.get("metadata") or {}
        if not meta.get("name") and meta.get("generateName"):  # as the server does: a random suffix
            body = dict(body, metadata=dict(meta, name=f"{meta['generateName']}{next(self._names):05x}"))
        target = f"{path}/{body['metadata']['name']}"
        if target in self.objects:
            raise status_error(409, "AlreadyExists")
        if "/namespaces/" in path and path.split("/namespaces/")[1].split("/")[0] not in self.namespaces:
            raise status_error(404, "NotFound", "namespace not found")
        if path == "/api/v1/namespaces":
            self.namespaces.add(body["metadata"]["name"])
        return self.put_object(target, body)

    def update(self, path: str, body: Obj, params: Any = None) -> Obj:
        self._check("PUT", path, body)
        if path not in self.objects:
            raise status_error(404, "NotFound")
        have = self.objects[path]["metadata"]["resourceVersion"]
        if body.get("metadata", {}).get("resourceVersion") != have:
            raise status_error(409, "Conflict", "the object has been modified")
        body = copy.deepcopy(body)
        body["metadata"]["uid"] = self.objects[path]["metadata"]["uid"]
        return self.put_object(path, body)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH, params: Any = None) -> Obj:
        self._check("PATCH", path, body)
        base = path[: -len("/status")] if path.endswith("/status") else path
        if base not in self.objects:
            raise status_error(404, "NotFound")
        if content_type == JSON_PATCH:
            try:
                patched = jsonpatch.JsonPatch(body).apply(copy.deepcopy(self.objects[base]))
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as err:
                raise status_error(422, "Invalid", f"JSON patch failed: {err}") from None
            return self.put_object(base, patched)
        return self.put_object(base, merge_patch(self.objects[base], body))

    def delete(self, path: str, body: Obj | None = None, params: Any = None) -> Obj:
        self._check("DELETE", path, {"body": body, "params": params})
        if path not in self.objects:
            raise status_error(404, "NotFound")
        uid = ((body or {}).get("preconditions") or {}).get("uid")
        if uid and self.objects[path]["metadata"]["uid"] != uid:
            raise status_error(409, "Conflict", "Precondition failed: UID")
        return self.objects.pop(path)

    def watch(self, path: str, params: Any = None, *, resource_version: str | None = None, **kw: Any) -> FakeStream:
        self._check("WATCH", path, {"rv": resource_version})
        events = self.watch_script.pop(0) if self.watch_script else []
        stream = FakeStream(events, resource_version)
        self.watches.append((resource_version, stream))
        return stream

    def verbs(self, verb: str, prefix: str = "") -> "builtins.list[Call]":
        return [c for c in self.calls if c[0] == verb and c[1].startswith(prefix)]


def unreachable(verb: str, path: str) -> Exception:
    return ApiUnreachable("http://127.0.0.1:1" + path, "connection refused")


def sync_pass(sync: Any, api: FakeApi, clock: Any, seconds: float = 0.1) -> None:
    """One pod-sync pass ``seconds`` later, then every pod it wrote fed back as its watch would."""
    clock.advance(seconds)
    sync.sync_once()
    for path, obj in list(api.objects.items()):
        if "/pods/" in path:
            sync._apply("MODIFIED", obj)
