"""OpenAPI v3 documents (``/openapi/v3`` and one per group-version), generated, never hand-written.

Why this exists: kubectl 1.32 reads them before ``create -f`` and ``apply -f``
(to learn that the server validates fields itself, ``fieldValidation``), for
``explain``, and for ``apply``'s strategic merge patch (merge keys).  Without
them it falls back to ``/openapi/v2``, which this server does not serve, and
refuses unless given ``--validate=false``.

Where the schemas come from:

- Built-in kinds (core/v1 Namespace, Node, Pod, Event, Service; coordination.k8s.io/v1
  Lease; apps/v1 Deployment, ReplicaSet; discovery.k8s.io/v1 EndpointSlice): the upstream types' ``generated.proto`` (descriptions, field types,
  ``+optional``) and Go struct tags (JSON names, omitempty, inlined structs),
  derived into ``data/k8s-protobuf.json`` by :mod:`refplatform.api.gendata`.
  The Python client's models were the first choice, but their generator drops
  the description of every field that refers to another type (``metadata``,
  ``spec``...) and cannot tell Quantity, IntOrString, int32 and MicroTime apart.
- ``x-kubernetes-patch-strategy``/``-merge-key``: the merge metadata this server
  applies (:data:`refplatform.patching.SCHEMAS`), so that the patch kubectl
  computes is the one the server merges.
- Volcano kinds: the upstream CRDs' ``openAPIV3Schema`` (``data/volcano-openapi.json``).

Documents are built once per process and served with a content hash, as
upstream does, so clients can cache them by URL.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from refplatform import KUBE_VERSION
from refplatform.api.protobuf import (
    FIELDS_V1, INT_OR_STRING, MICRO_TIME, QUANTITY, RAW_EXTENSION, TIME, upstream_messages,
)
from refplatform.patching import StructMeta, Strategy, accepted_patch_types, schema_for
from refplatform.resources import REGISTRY, Registry, ResourceType

Obj = dict[str, Any]
META = "k8s.io.apimachinery.pkg.apis.meta.v1"
PACKAGES = {"": "k8s.io.api.core.v1", "coordination.k8s.io": "k8s.io.api.coordination.v1",
            "apps": "k8s.io.api.apps.v1", "discovery.k8s.io": "k8s.io.api.discovery.v1",
            "autoscaling": "k8s.io.api.autoscaling.v2", "scheduling.k8s.io": "k8s.io.api.scheduling.v1",
            "batch": "k8s.io.api.batch.v1", "policy": "k8s.io.api.policy.v1"}
SCALE = "k8s.io.api.autoscaling.v1.Scale"
"""The ``scale`` subresource's body (autoscaling/v1, whatever the group of the scaled kind)."""
REF = "#/components/schemas/"

#: Query parameters of writes; ``fieldValidation`` is what tells kubectl the server validates fields.
FIELD_MANAGER = {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True},
                 "description": "fieldManager is a name associated with the actor or entity that is making "
                                "these changes: recorded in metadata.managedFields; required for apply patches."}
FIELD_VALIDATION = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True},
                    "description": "How the server handles unknown or duplicate fields in the request body: "
                                   "Ignore, Warn (a Warning header per field), or Strict (400 BadRequest "
                                   "naming every field). Without the parameter nothing is checked."}
LIST_PARAMS = [
    {"name": n, "in": "query", "schema": {"type": t, "uniqueItems": True}, "description": d} for n, t, d in (
        ("labelSelector", "string", "A selector to restrict the list of returned objects by their labels."),
        ("fieldSelector", "string", "A selector to restrict the list of returned objects by their fields."),
        ("limit", "integer", "The maximum number of responses to return for a list call."),
        ("continue", "string", "The continue token of a previous, limited list call."),
        ("resourceVersion", "string", "For watch: the version to start from."),
        ("timeoutSeconds", "integer", "Timeout for the list/watch call."),
        ("watch", "boolean", "Watch for changes to the described resources."),
        ("allowWatchBookmarks", "boolean", "Ask for BOOKMARK watch events."))]
LOG_PARAMS = [
    {"name": n, "in": "query", "schema": {"type": t, "uniqueItems": True}, "description": d} for n, t, d in (
        ("container", "string", "The container for which to stream logs."),
        ("follow", "boolean", "Follow the log stream of the pod."),
        ("tailLines", "integer", "The number of lines from the end of the logs to show."),
        ("timestamps", "boolean", "Prefix every line with an RFC 3339 timestamp."),
        ("sinceSeconds", "integer", "Only return logs newer than this many seconds."),
        ("limitBytes", "integer", "The number of bytes to read from the server before terminating."))]

SPECIAL_SCHEMAS: dict[str, Obj] = {
    TIME: {"type": "string", "format": "date-time"},
    MICRO_TIME: {"type": "string", "format": "date-time"},
    QUANTITY: {"oneOf": [{"type": "string"}, {"type": "number"}]},
    INT_OR_STRING: {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
    RAW_EXTENSION: {"type": "object"},
    FIELDS_V1: {"type": "object"},
    f"{META}.Patch": {"type": "object",
                      "description": "Patch is provided to give a concrete name and type to the Kubernetes "
                                     "PATCH request body."},
}
SCALAR_SCHEMAS: dict[str, Obj] = {
    "string": {"type": "string"}, "bytes": {"type": "string", "format": "byte"}, "bool": {"type": "boolean"},
    "int32": {"type": "integer", "format": "int32"}, "int64": {"type": "integer", "format": "int64"},
    "uint32": {"type": "integer", "format": "int32"}, "uint64": {"type": "integer", "format": "int64"},
    "double": {"type": "number", "format": "double"}, "float": {"type": "number", "format": "float"},
}
#: Kinds without TypeMeta in their message that carry apiVersion and kind in JSON.
TYPED_EXTRA = (f"{META}.Status", f"{META}.DeleteOptions", "k8s.io.api.core.v1.Binding", "k8s.io.api.policy.v1.Eviction")


def schema_name(message: str) -> str:
    """Upstream's component name: ``k8s.io.api.core.v1.Pod`` -> ``io.k8s.api.core.v1.Pod``."""
    return "io.k8s." + message.removeprefix("k8s.io.") if message.startswith("k8s.io.") else message


def crd_schema_name(group: str, version: str, kind: str) -> str:
    """``scheduling.volcano.sh`` v1beta1 PodGroup -> ``sh.volcano.scheduling.v1beta1.PodGroup``."""
    return ".".join(reversed(group.split("."))) + f".{version}.{kind}"


def gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _ref(name: str) -> Obj:
    return {"$ref": REF + name}


# ------------------------------------------------------------------------- built-in schemas
class _BuiltinSchemas:
    """Component schemas of upstream messages, with the server's merge metadata."""

    def __init__(self) -> None:
        self.messages = upstream_messages()
        self.patch: dict[tuple[str, str], tuple[Strategy, str]] = {}
        self.gvks: dict[str, list[dict[str, str]]] = {}

    def annotate(self, message: str, meta: StructMeta) -> None:
        """Record the merge metadata ``meta`` gives the fields of ``message`` and, recursively, below."""
        for number, field in self.messages[message]["fields"].items():
            json_name = field["json"]
            target = field.get("type") or (field.get("map") or ["", ""])[1]
            if field.get("inline") and target in self.messages:
                self.annotate(target, meta)
                continue
            fm = meta.lookup(json_name)
            if fm.strategy is not Strategy.DEFAULT:
                self.patch[(message, json_name)] = (fm.strategy, fm.merge_key)
            if fm.schema is not None and target in self.messages:
                self.annotate(target, fm.schema)

    def reachable(self, roots: list[str]) -> list[str]:
        seen: list[str] = []
        todo = list(roots)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.append(name)
            if name in SPECIAL_SCHEMAS:
                continue
            for field in self.messages[name]["fields"].values():
                for t in [field.get("type"), *(field.get("map") or [])]:
                    if t and (t in self.messages or t in SPECIAL_SCHEMAS) and t not in seen:
                        todo.append(t)
        return sorted(seen)

    def _value_schema(self, type_name: str) -> Obj:
        if type_name in SCALAR_SCHEMAS:
            return dict(SCALAR_SCHEMAS[type_name])
        return _ref(schema_name(type_name))

    def _field_schema(self, message: str, field: Obj) -> Obj:
        out: Obj = {}
        if field.get("doc"):
            out["description"] = field["doc"]
        if "map" in field:
            out.update({"type": "object", "additionalProperties": self._value_schema(field["map"][1])})
        elif field.get("repeated"):
            out.update({"type": "array", "items": self._value_schema(field["type"])})
        elif field["type"] in SCALAR_SCHEMAS:
            out.update(SCALAR_SCHEMAS[field["type"]])
        else:
            if field["type"] in self.messages and not field.get("pointer"):
                out["default"] = {}
            out["allOf"] = [self._value_schema(field["type"])]
        strategy = self.patch.get((message, field["json"]))
        if strategy is not None:
            out["x-kubernetes-patch-strategy"] = strategy[0].value
            if strategy[1]:
                out["x-kubernetes-patch-merge-key"] = strategy[1]
        return out

    def _properties(self, message: str) -> tuple[Obj, list[str]]:
        props: Obj = {}
        required: list[str] = []
        for field in self.messages[message]["fields"].values():
            if field["json"] == "-":
                continue
            if field.get("inline") and field.get("type") in self.messages:
                inner, inner_required = self._properties(field["type"])
                props.update(inner)
                required += inner_required
                continue
            props[field["json"]] = self._field_schema(message, field)
            if not (field.get("omitempty") or field.get("optional") or field.get("pointer")):
                required.append(field["json"])
        return props, required

    def schema(self, message: str) -> Obj:
        if message in SPECIAL_SCHEMAS:
            out = {"description": self.messages.get(message, {}).get("doc", "")} if message in self.messages else {}
            return {**out, **SPECIAL_SCHEMAS[message]}
        props, required = self._properties(message)
        if message in self.gvks or message in TYPED_EXTRA:
            type_meta = {f["json"]: f for f in self.messages[f"{META}.TypeMeta"]["fields"].values()}
            props = {"apiVersion": {"description": type_meta["apiVersion"].get("doc", ""), "type": "string"},
                     "kind": {"description": type_meta["kind"].get("doc", ""), "type": "string"}, **props}
        out: Obj = {"description": self.messages[message]["doc"], "type": "object", "properties": props}
        if required:
            out["required"] = required
        if message in self.gvks:
            out["x-kubernetes-group-version-kind"] = self.gvks[message]
        return out


def _message_of(rt: ResourceType, kind: str) -> str:
    return f"{PACKAGES[rt.group]}.{kind}"


# ------------------------------------------------------------------------- paths
def _gvk(rt: ResourceType, kind: str | None = None) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": kind or rt.kind}


def _content(schema: Obj) -> Obj:
    return {"application/json": {"schema": schema}}


def _op(rt: ResourceType, action: str, verb: str, kind_schema: str, list_schema: str, *, namespaced: bool,
        patch_types: tuple[str, ...], sub: str = "") -> Obj:
    scope = "Namespaced" if namespaced else ""
    group_word = "".join(p.capitalize() for p in (rt.group.split(".")[0] if rt.group else "core").split("-"))
    sub_word = sub.capitalize()
    op: Obj = {"tags": [f"{rt.group.split('.')[0] if rt.group else 'core'}_{rt.version}"],
               "operationId": f"{verb}{group_word}{rt.version.capitalize()}{scope}{rt.kind}{sub_word}",
               "description": f"{verb} {('the ' + sub + ' of ') if sub else ''}{rt.kind}",
               "x-kubernetes-action": action, "x-kubernetes-group-version-kind": _gvk(rt)}
    params: list[Obj] = []
    ok = _content(_ref(kind_schema))
    if action in ("post", "put", "patch"):
        params += [FIELD_MANAGER, FIELD_VALIDATION]
        if action == "patch":
            op["requestBody"] = {"required": True, "content": {t: {"schema": _ref(schema_name(f"{META}.Patch"))}
                                                              for t in patch_types}}
        else:
            op["requestBody"] = {"required": True, "content": _content(_ref(kind_schema))}
    if action == "list":
        params += LIST_PARAMS
        ok = _content(_ref(list_schema))
    if action == "delete":
        params.append({"name": "gracePeriodSeconds", "in": "query", "schema": {"type": "integer", "uniqueItems": True},
                       "description": "The duration in seconds before the object should be deleted."})
        op["requestBody"] = {"content": _content(_ref(schema_name(f"{META}.DeleteOptions")))}
    if params:
        op["parameters"] = params
    op["responses"] = {"200": {"description": "OK", "content": ok}}
    if action == "post":
        op["responses"]["201"] = {"description": "Created", "content": ok}
    return op


def _path_params(namespaced: bool, named: bool) -> list[Obj]:
    params = []
    if named:
        params.append({"name": "name", "in": "path", "required": True, "description": "name of the object",
                       "schema": {"type": "string", "uniqueItems": True}})
    if namespaced:
        params.append({"name": "namespace", "in": "path", "required": True,
                       "description": "object name and auth scope, such as for teams and projects",
                       "schema": {"type": "string", "uniqueItems": True}})
    return params


def _paths(rt: ResourceType, kind_schema: str, list_schema: str) -> Iterator[tuple[str, Obj]]:
    base = "/" + gv_path(rt.group, rt.version)
    patch_types = tuple(t.value for t in accepted_patch_types(rt.custom))
    ns = rt.namespaced
    coll = f"{base}/namespaces/{{namespace}}/{rt.plural}" if ns else f"{base}/{rt.plural}"

    def op(action: str, verb: str, sub: str = "", namespaced: bool = ns) -> Obj:
        return _op(rt, action, verb, kind_schema, list_schema, namespaced=namespaced, patch_types=patch_types,
                   sub=sub)
    yield coll, {"get": op("list", "list"), "post": op("post", "create"), "parameters": _path_params(ns, False)}
    yield f"{coll}/{{name}}", {"get": op("get", "read"), "put": op("put", "replace"), "patch": op("patch", "patch"),
                               "delete": op("delete", "delete"), "parameters": _path_params(ns, True)}
    if ns:
        yield f"{base}/{rt.plural}", {"get": op("list", "list", namespaced=False)}
    for sub in rt.subresources:
        path = f"{coll}/{{name}}/{sub}"
        if sub == "status":
            yield path, {"get": op("get", "read", sub), "put": op("put", "replace", sub),
                         "patch": op("patch", "patch", sub), "parameters": _path_params(ns, True)}
        elif sub == "scale":
            scale = schema_name(SCALE)
            ops = {method: _op(rt, action, verb, scale, list_schema, namespaced=ns, patch_types=patch_types, sub=sub)
                   for method, action, verb in (("get", "get", "read"), ("put", "put", "replace"),
                                                ("patch", "patch", "patch"))}
            yield path, {**ops, "parameters": _path_params(ns, True)}
        elif sub == "log":
            log_op = op("get", "read", sub)
            log_op["parameters"] = LOG_PARAMS
            log_op["responses"] = {"200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}}
            yield path, {"get": log_op, "parameters": _path_params(ns, True)}
        else:
            post = op("post", "create", sub)
            body = {"binding": "k8s.io.api.core.v1.Binding", "eviction": "k8s.io.api.policy.v1.Eviction"}[sub]
            post["requestBody"] = {"required": True, "content": _content(_ref(schema_name(body)))}
            yield path, {"post": post, "parameters": _path_params(ns, True)}


# ------------------------------------------------------------------------- documents
@dataclass(frozen=True)
class Document:
    """One served document: its JSON bytes and the hash clients cache it by."""

    body: bytes
    hash: str


def _document(paths: Obj, schemas: Obj) -> Obj:
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION},
            "paths": dict(sorted(paths.items())),
            "components": {"schemas": dict(sorted(schemas.items())),
                           "securitySchemes": {"BearerToken": {"type": "apiKey", "name": "authorization",
                                                               "in": "header",
                                                               "description": "Bearer Token authentication"}}}}


def _builtin_document(types: list[ResourceType]) -> Obj:
    gen = _BuiltinSchemas()
    roots = [f"{META}.DeleteOptions", f"{META}.Status", f"{META}.Patch"]
    paths: Obj = {}
    for rt in types:
        kind, list_kind = _message_of(rt, rt.kind), _message_of(rt, rt.list_kind)
        gen.gvks[kind] = [_gvk(rt)]
        gen.gvks[list_kind] = [_gvk(rt, rt.list_kind)]
        gen.annotate(kind, schema_for(rt.kind))
        roots += [kind, list_kind]
        for sub in rt.subresources:
            roots += {"binding": ["k8s.io.api.core.v1.Binding"], "eviction": ["k8s.io.api.policy.v1.Eviction"],
                      "scale": [SCALE]}.get(sub, [])
        paths.update(_paths(rt, schema_name(kind), schema_name(list_kind)))
    schemas = {schema_name(m): gen.schema(m) for m in gen.reachable(roots)}
    return _document(paths, schemas)


@lru_cache(maxsize=1)
def volcano_schemas() -> dict[str, Obj]:
    """``group/version/Kind`` -> the upstream CRD's ``openAPIV3Schema`` (package data)."""
    raw = resources.files("refplatform.api").joinpath("data/volcano-openapi.json").read_text()
    crds: dict[str, Obj] = json.loads(raw)["crds"]
    return crds


def _crd_document(types: list[ResourceType]) -> Obj:
    gen = _BuiltinSchemas()
    type_meta = {f["json"]: f.get("doc", "") for f in gen.messages[f"{META}.TypeMeta"]["fields"].values()}
    schemas: Obj = {}
    paths: Obj = {}
    for rt in types:
        crd = volcano_schemas().get(f"{rt.group}/{rt.version}/{rt.kind}")
        name = crd_schema_name(rt.group, rt.version, rt.kind)
        list_name = crd_schema_name(rt.group, rt.version, rt.list_kind)
        schema = copy.deepcopy(crd["schema"]) if crd else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        props = schema.setdefault("properties", {})
        props["apiVersion"] = {"type": "string", "description": type_meta["apiVersion"]}
        props["kind"] = {"type": "string", "description": type_meta["kind"]}
        props["metadata"] = {"description": "Standard object's metadata. More info: https://git.k8s.io/community/"
                                            "contributors/devel/sig-architecture/api-conventions.md#metadata",
                             "allOf": [_ref(schema_name(f"{META}.ObjectMeta"))]}
        schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
        schemas[name] = schema
        schemas[list_name] = {
            "description": f"{rt.list_kind} is a list of {rt.kind}", "type": "object", "required": ["items"],
            "properties": {"apiVersion": props["apiVersion"], "kind": props["kind"],
                           "items": {"type": "array", "items": _ref(name)},
                           "metadata": {"allOf": [_ref(schema_name(f"{META}.ListMeta"))]}},
            "x-kubernetes-group-version-kind": [_gvk(rt, rt.list_kind)]}
        paths.update(_paths(rt, name, list_name))
    for m in gen.reachable([f"{META}.ObjectMeta", f"{META}.ListMeta", f"{META}.DeleteOptions", f"{META}.Status",
                            f"{META}.Patch"]):
        schemas[schema_name(m)] = gen.schema(m)
    return _document(paths, schemas)


def _leakreport_document(group: str, version: str) -> Obj:
    name = crd_schema_name(group, version, "LeakReport")
    gvk = {"group": group, "version": version, "kind": "LeakReport"}
    get = {"operationId": "readFiredrillV1alpha1LeakReport", "description": "read the GPU leak report",
           "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk,
           "responses": {"200": {"description": "OK", "content": _content(_ref(name))}}}
    schema = {"description": "Who held GPUs without using them, per tenant, over a window (docs/LEAKS.md). "
                             "Read-only; served by the reference platform only.",
              "type": "object", "x-kubernetes-preserve-unknown-fields": True,
              "x-kubernetes-group-version-kind": [gvk]}
    return _document({f"/apis/{group}/{version}/leakreport": {"get": get}}, {name: schema})


class OpenApi:
    """The served OpenAPI v3 documents of a registry, built on first use."""

    def __init__(self, registry: Registry = REGISTRY, extra_groups: dict[str, list[str]] | None = None) -> None:
        self.registry = registry
        self.extra_groups = extra_groups or {}
        self._docs: dict[str, Document] | None = None
        self._index: dict[tuple[str, str, str], tuple[Obj, Obj]] | None = None

    def _build(self) -> dict[str, Document]:
        by_gv: dict[tuple[str, str], list[ResourceType]] = {}
        for rt in self.registry.types:
            by_gv.setdefault((rt.group, rt.version), []).append(rt)
        docs: dict[str, Document] = {}
        for (group, version), types in by_gv.items():
            custom = [rt for rt in types if rt.custom]
            doc = _crd_document(custom) if custom else _builtin_document(types)
            docs[gv_path(group, version)] = _encode(doc)
        for group, versions in self.extra_groups.items():
            for version in versions:
                docs[gv_path(group, version)] = _encode(_leakreport_document(group, version))
        return docs

    @property
    def documents(self) -> dict[str, Document]:
        if self._docs is None:
            self._docs = self._build()
        return self._docs

    def index(self) -> Obj:
        return {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={doc.hash}"}
                          for path, doc in sorted(self.documents.items())}}

    def document(self, path: str) -> Document | None:
        """The document at ``/openapi/v3/<path>`` (``api/v1``, ``apis/<group>/<version>``), or None."""
        return self.documents.get(path)

    def schema_index(self) -> dict[tuple[str, str, str], tuple[Obj, Obj]]:
        """(group, version, kind) -> (its schema, the components it refers to), for field validation."""
        if self._index is None:
            out: dict[tuple[str, str, str], tuple[Obj, Obj]] = {}
            for doc in self.documents.values():
                schemas = json.loads(doc.body)["components"]["schemas"]
                for schema in schemas.values():
                    for gvk in schema.get("x-kubernetes-group-version-kind") or []:
                        out[(gvk["group"], gvk["version"], gvk["kind"])] = (schema, schemas)
            self._index = out
        return self._index

    def unknown_fields(self, rt: ResourceType, obj: Any) -> list[str]:
        """Fields of ``obj`` (an object of ``rt`` or a merge patch of one) its schema does not declare."""
        found = self.schema_index().get((rt.group, rt.version, rt.kind))
        if found is None:
            return []
        return unknown_fields(obj, found[0], found[1])


def _encode(doc: Obj) -> Document:
    body = json.dumps(doc, separators=(",", ":")).encode()
    return Document(body, hashlib.sha512(body).hexdigest().upper())


# ------------------------------------------------------------------------- field validation
def _resolve(schema: Obj, schemas: Obj) -> Obj:
    while True:
        if "$ref" in schema:
            schema = schemas.get(schema["$ref"].removeprefix(REF), {})
        elif "allOf" in schema and len(schema["allOf"]) == 1 and not schema.get("properties"):
            schema = schema["allOf"][0]
        else:
            return schema


def unknown_fields(obj: Any, schema: Obj, schemas: Obj, path: str = "") -> list[str]:
    """Paths of the fields in ``obj`` that ``schema`` does not declare (upstream's ``unknown field`` list)."""
    schema = _resolve(schema, schemas)
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource"):
        return []
    out: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            if key.startswith("$"):
                continue  # strategic merge patch directives ($patch, $setElementOrder/..., $retainKeys)
            here = f"{path}.{key}" if path else key
            if props is not None and key in props:
                out += unknown_fields(value, props[key], schemas, here)
            elif isinstance(extra, dict):
                out += unknown_fields(value, extra, schemas, here)
            elif props is not None:
                out.append(here)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            out += unknown_fields(item, schema["items"], schemas, f"{path}[{i}]")
    return out
