"""An in-memory API and cache for controller unit tests: objects by REST path, every call recorded."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from refplatform.client import ApiStatusError, resource_path
from refplatform.patching import PatchError, apply_patch
from refplatform.resources import LEASES, NODES, PODGROUPS, PODS, VCJOBS, ResourceType

Obj = dict[str, Any]
TYPES = (NODES, PODS, PODGROUPS, VCJOBS, LEASES)


def path_of(rt: ResourceType, namespace: str, name: str) -> str:
    return resource_path(rt.group, rt.version, rt.plural, namespace if rt.namespaced else None, name)


class FakeApi:
    """Enough of :class:`refplatform.client.RestClient` for the controllers: get/create/patch/delete."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self._rv = itertools.count(100)
        self.version = 99
        """The newest resourceVersion handed out."""
        self._uid = itertools.count(1)

    # -- seeding -------------------------------------------------------------
    def put(self, rt: ResourceType, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uid)}")
        meta.setdefault("namespace", "default") if rt.namespaced else None
        meta["resourceVersion"] = self._next_rv()
        obj.setdefault("apiVersion", rt.api_version)
        obj.setdefault("kind", rt.kind)
        self.objects[path_of(rt, meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def _next_rv(self) -> str:
        self.version = next(self._rv)
        return str(self.version)

    def cache(self) -> "FakeCache":
        return FakeCache(self)

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self.objects.get(path_of(rt, namespace, name))

    # -- verbs ---------------------------------------------------------------
    def get(self, path: str, params: Any = None) -> Obj:
        self.calls.append(("GET", path, None))
        if path not in self.objects:
            raise ApiStatusError(404, "NotFound", path)
        return copy.deepcopy(self.objects[path])

    def create(self, path: str, body: Obj, params: Any = None) -> Obj:
        self.calls.append(("POST", path, copy.deepcopy(body)))
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', 'obj-')}{next(self._uid)}"
        full = f"{path}/{meta['name']}"
        if full in self.objects:
            raise ApiStatusError(409, "AlreadyExists", full)
        meta["uid"] = f"uid-{next(self._uid)}"
        meta["resourceVersion"] = self._next_rv()
        self.objects[full] = obj
        return copy.deepcopy(obj)

    def patch(self, path: str, body: Any, content_type: str, params: Any = None) -> Obj:
        self.calls.append(("PATCH", path, copy.deepcopy(body)))
        base, _, sub = path.partition("/status") if path.endswith("/status") else (path, "", "")
        if base not in self.objects:
            raise ApiStatusError(404, "NotFound", base)
        current = self.objects[base]
        try:
            new = apply_patch(current, body, content_type, current.get("kind", ""))
        except PatchError as exc:
            raise ApiStatusError(exc.code, "Invalid", str(exc)) from None
        want = (new.get("metadata") or {}).get("resourceVersion")
        if want and want != current["metadata"]["resourceVersion"]:
            raise ApiStatusError(409, "Conflict", "the object has been modified")
        if path.endswith("/status"):
            new = {**copy.deepcopy(current), "status": new.get("status", {})}
        elif "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        new["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[base] = new
        return copy.deepcopy(new)

    def delete(self, path: str, body: Obj | None = None, params: Any = None) -> Obj:
        self.calls.append(("DELETE", path, copy.deepcopy(body)))
        if path not in self.objects:
            raise ApiStatusError(404, "NotFound", path)
        obj = self.objects[path]
        grace = (body or {}).get("gracePeriodSeconds")
        if grace == 0 or not (obj.get("spec") or {}).get("nodeName"):
            return self.objects.pop(path)
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        obj["metadata"]["resourceVersion"] = self._next_rv()
        return copy.deepcopy(obj)

    def writes(self, *, kinds: tuple[str, ...] = ("POST", "PATCH", "DELETE"),
               events: bool = False) -> list[tuple[str, str, Any]]:
        return [c for c in self.calls if c[0] in kinds and (events or "/events" not in c[1])]

    def events(self) -> list[Obj]:
        return [o for p, o in self.objects.items() if "/events/" in p]


class FakeCache:
    """The controllers' :class:`~refplatform.controllers.manager.Cache` over the fake API's objects."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api

    def list(self, rt: ResourceType) -> list[Obj]:
        prefix = resource_path(rt.group, rt.version, rt.plural)
        out = []
        for path, obj in self.api.objects.items():
            plural_at = f"/{rt.plural}/"
            if not path.startswith(prefix.rsplit(f"/{rt.plural}", 1)[0]) or plural_at not in path:
                continue
            if obj.get("kind") == rt.kind and obj.get("apiVersion") == rt.api_version:
                out.append(copy.deepcopy(obj))
        return out

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        obj = self.api.find(rt, namespace, name)
        return copy.deepcopy(obj) if obj is not None else None

    def resource_version(self, rt: ResourceType) -> str:
        """Caught up with every write so far (a copy of the API itself)."""
        return str(self.api.version)
