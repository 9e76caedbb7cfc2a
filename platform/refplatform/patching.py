"""PATCH bodies applied to stored objects: JSON patch, merge patch, strategic merge patch.

Why this exists: ``kubectl`` (cordon, label, annotate, apply, edit, patch) and
the official clients change objects with PATCH, and which of three formats they
send decides the result: a JSON patch (RFC 6902) edits by path, a merge patch
(RFC 7386) merges maps and replaces lists, and a Kubernetes strategic merge patch
merges lists by the merge keys the core/v1 types declare and understands the
``$patch``/``$retainKeys``/``$setElementOrder``/``$deleteFromPrimitiveList``
directives.  The strategic merge here follows the apply half of
``k8s.io/apimachinery/pkg/util/strategicpatch`` (v0.36), including its list
ordering rules and error texts; facts were taken from upstream, not code.

Objects are plain JSON dicts; nothing here mutates its inputs or does I/O.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer

from refplatform import jsoncodec
from refplatform.errors import RefPlatformError

__all__ = [
    "APPLY_PATCH", "SCHEMAS", "FieldMeta", "PatchError", "PatchType", "Strategy", "StructMeta", "UnsupportedPatchType",
    "accepted_patch_types", "apply_patch", "schema_for", "strategic_merge",
]


class PatchError(RefPlatformError):
    """A PATCH that cannot be applied; ``code`` is the HTTP status upstream answers with."""

    def __init__(self, message: str, *, code: int = 400) -> None:
        super().__init__(message)
        self.code = code


class UnsupportedPatchType(PatchError):
    """A Content-Type the resource does not accept as a patch (HTTP 415)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=415)


class PatchType(enum.Enum):
    """The patch formats, by their Content-Type."""

    JSON = "application/json-patch+json"
    """RFC 6902: a list of operations addressed by JSON pointers."""
    MERGE = "application/merge-patch+json"
    """RFC 7386: maps merge recursively, null deletes, everything else replaces."""
    STRATEGIC = "application/strategic-merge-patch+json"
    """Kubernetes strategic merge patch; built-in kinds only."""
    APPLY = "application/apply-patch+yaml"
    """Server-side apply: merged with field ownership by refplatform.fieldmanager, not here."""

    @classmethod
    def from_content_type(cls, content_type: str, *, custom_resource: bool = False) -> "PatchType":
        """The patch type a Content-Type names (parameters ignored), or :class:`UnsupportedPatchType`."""
        media = content_type.split(";", 1)[0].strip().lower()
        accepted = accepted_patch_types(custom_resource)
        for patch_type in accepted:
            if patch_type.value == media:
                return patch_type
        raise UnsupportedPatchType("the body of the request was in an unknown format - "
                                   "accepted media types include: " + ", ".join(t.value for t in accepted))


def accepted_patch_types(custom_resource: bool) -> tuple[PatchType, ...]:
    """Patch types a resource accepts: custom resources refuse strategic merge, as upstream."""
    if custom_resource:
        return (PatchType.JSON, PatchType.MERGE, PatchType.APPLY)
    return (PatchType.JSON, PatchType.MERGE, PatchType.STRATEGIC, PatchType.APPLY)


APPLY_PATCH = PatchType.APPLY.value


# --------------------------------------------------------------------------- schemas


class Strategy(enum.Enum):
    """A field's ``patchStrategy`` struct tag."""

    DEFAULT = ""
    """Maps merge key by key; lists are replaced whole."""
    MERGE = "merge"
    """Lists merge: maps by the merge key, primitives as an ordered set."""
    REPLACE = "replace"
    """Maps are replaced whole."""


@dataclass(frozen=True)
class FieldMeta:
    """Patch metadata of one field: strategy, merge key and the schema of its value or items."""

    strategy: Strategy = Strategy.DEFAULT
    merge_key: str = ""
    schema: StructMeta | None = None


@dataclass(frozen=True)
class StructMeta:
    """Patch metadata of one object type; fields not listed have none (default strategy)."""

    fields: Mapping[str, FieldMeta] = field(default_factory=dict)

    def lookup(self, name: str) -> FieldMeta:
        return self.fields.get(name, _NO_META)


_NO_META = FieldMeta()
_EMPTY = StructMeta()


def _by(key: str, schema: StructMeta | None = None) -> FieldMeta:
    """A list merged by ``key`` (``patchStrategy:"merge" patchMergeKey:key``)."""
    return FieldMeta(Strategy.MERGE, key, schema)


def _struct(**fields: FieldMeta | StructMeta) -> StructMeta:
    return StructMeta({name: FieldMeta(schema=f) if isinstance(f, StructMeta) else f
                       for name, f in fields.items()})


_SET = FieldMeta(Strategy.MERGE)  # a merged list of primitives
_OBJECT_META = _struct(ownerReferences=_by("uid"), finalizers=_SET)
_CONTAINER = _struct(ports=_by("containerPort"), env=_by("name"), volumeMounts=_by("mountPath"),
                     volumeDevices=_by("devicePath"))
_POD = _struct(
    metadata=_OBJECT_META,
    spec=_struct(
        volumes=_by("name"), initContainers=_by("name", _CONTAINER), containers=_by("name", _CONTAINER),
        ephemeralContainers=_by("name", _CONTAINER), imagePullSecrets=_by("name"),
        hostAliases=_by("ip"), topologySpreadConstraints=_by("topologyKey"),
        schedulingGates=_by("name"), resourceClaims=_by("name")),
    status=_struct(conditions=_by("type"), podIPs=_by("ip"), hostIPs=_by("ip"),
                   resourceClaimStatuses=_by("name")),
)
_NODE = _struct(metadata=_OBJECT_META, spec=_struct(podCIDRs=_SET),
                status=_struct(conditions=_by("type"), addresses=_by("type")))
_NAMESPACE = _struct(metadata=_OBJECT_META, status=_struct(conditions=_by("type")))
_METADATA_ONLY = _struct(metadata=_OBJECT_META)
_WORKLOAD = _struct(metadata=_OBJECT_META,
                    spec=_struct(template=_struct(metadata=_OBJECT_META, spec=_POD.lookup("spec").schema or _EMPTY)),
                    status=_struct(conditions=_by("type")))
"""Deployments, ReplicaSets, StatefulSets and Jobs: a pod template merges as a pod does."""

SCHEMAS: Mapping[str, StructMeta] = {
    "Pod": _POD, "Node": _NODE, "Namespace": _NAMESPACE, "Event": _METADATA_ONLY,
    "CustomResourceDefinition": _METADATA_ONLY,
    "Deployment": _WORKLOAD, "ReplicaSet": _WORKLOAD, "StatefulSet": _WORKLOAD, "Job": _WORKLOAD,
}
"""Merge metadata of the core/v1 kinds served, from upstream's struct tags.

Lists not named here (node ``spec.taints``, pod ``spec.tolerations``,
``status.containerStatuses``, a CRD's ``status.conditions``...) carry no strategy
upstream and are replaced whole.
"""


def schema_for(kind: str) -> StructMeta:
    """The merge metadata of a built-in kind; other built-ins merge only ``metadata``."""
    return SCHEMAS.get(kind, _METADATA_ONLY)


# --------------------------------------------------------------------------- entry point


def apply_patch(obj: dict[str, Any], patch_body: bytes | str | Any, content_type: str, kind: str, *,
                custom_resource: bool = False) -> dict[str, Any]:
    """Apply a PATCH body to ``obj`` and return the patched copy (``obj`` is left untouched).

    ``patch_body`` is the raw request body (bytes or str) or an already decoded
    JSON value.  ``custom_resource`` makes strategic merge unsupported (HTTP 415),
    as upstream answers for custom resources.
    """
    patch_type = PatchType.from_content_type(content_type, custom_resource=custom_resource)
    if patch_type is PatchType.APPLY:
        raise UnsupportedPatchType("an apply patch is merged by refplatform.fieldmanager, which the caller must use")
    patch = _decode(patch_body)
    doc = jsoncodec.clone(obj)
    if patch_type is PatchType.JSON:
        return _json_patch(doc, patch)
    if not isinstance(patch, dict):
        what = "merge" if patch_type is PatchType.MERGE else "strategic merge"
        raise PatchError(f"invalid JSON document: a {what} patch must be a JSON object, "
                         f"not {_json_kind(patch)}")
    if patch_type is PatchType.MERGE:
        merged: dict[str, Any] = _merge_patch(doc, patch)
        return merged
    return _strategic(doc, patch, schema_for(kind))


def strategic_merge(original: dict[str, Any], patch: dict[str, Any], schema: StructMeta) -> dict[str, Any]:
    """Apply a strategic merge patch with the given merge metadata; inputs are not mutated."""
    return _strategic(copy.deepcopy(original), copy.deepcopy(patch), schema)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _decode(body: bytes | str | Any) -> Any:
    if isinstance(body, (bytes, bytearray, memoryview)):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PatchError(f"invalid JSON in patch body: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not isinstance(body, str):
        return jsoncodec.clone(body)
    try:
        return jsoncodec.loads(body, parse_constant=_reject_constant)
    except ValueError as exc:
        raise PatchError(f"invalid JSON in patch body: {exc}") from None


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


# --------------------------------------------------------------------------- RFC 6902 / RFC 7386


def _json_patch(doc: dict[str, Any], ops: Any) -> dict[str, Any]:
    if not isinstance(ops, list):
        raise PatchError(f"a JSON patch must be a JSON array of operations, not {_json_kind(ops)}")
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise PatchError(f"JSON patch operation {i} must be an object, not {_json_kind(op)}")
    result: Any = doc
    for i, op in enumerate(ops):
        try:
            result = jsonpatch.JsonPatch([op]).apply(result, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException,
                KeyError, IndexError, TypeError, ValueError) as exc:
            raise PatchError(f"JSON patch operation {i} ({op.get('op', '?')} {op.get('path', '')}) "
                             f"failed: {_json_patch_reason(exc)}", code=422) from None
    if not isinstance(result, dict):
        raise PatchError(f"the patched document must be a JSON object, not {_json_kind(result)}", code=422)
    return result


def _json_patch_reason(exc: Exception) -> str:
    """The library's reason, without the whole document some of its messages embed."""
    if isinstance(exc, KeyError):
        return f"member {exc.args[0]!r} not found"
    text = str(exc)
    if isinstance(exc, jsonpatch.JsonPatchConflict) and text.startswith("'") and text.endswith("'"):
        return f"member {text} not found"  # the library re-raises a KeyError as a bare key
    if isinstance(exc, jsonpointer.JsonPointerException):
        text = text.partition(" not found in ")[0].replace(" not found in", "")
        if text.startswith("Document "):
            text = "the path runs through a value that is neither an object nor an array"
        elif text.startswith("member "):
            text += " not found"
    return text if len(text) <= 300 else text[:297] + "..."


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch: objects merge recursively, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge_patch(target.get(key), value)
    return target


# --------------------------------------------------------------------------- strategic merge

_DIRECTIVE = "$patch"
_DELETE, _REPLACE, _MERGE = "delete", "replace", "merge"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PREFIX = "$deleteFromPrimitiveList"
_ORDER_PREFIX = "$setElementOrder"


def _strategic(doc: dict[str, Any], patch: dict[str, Any], schema: StructMeta) -> dict[str, Any]:
    result = _merge_map(doc, patch, schema)
    # Upstream decodes the result into a typed object, which drops any directive a
    # patch left behind in a new subtree; a schemaless store must drop them itself.
    _drop_directive_keys(result)
    return result


def _merge_map(original: dict[str, Any] | None, patch: dict[str, Any], schema: StructMeta) -> dict[str, Any]:
    if _DIRECTIVE in patch:
        directive = patch[_DIRECTIVE]
        if directive == _REPLACE:
            del patch[_DIRECTIVE]
            return patch
        if directive == _DELETE:
            return {}
        raise PatchError(f"unknown patch type: {_gofmt(directive)} in map: {_gofmt(patch)}", code=500)
    if original is None:
        original = {}
    _apply_retain_keys(original, patch)
    _merge_ordered_lists(original, patch, schema)
    for key, value in list(patch.items()):
        delete_list = key.startswith(_DELETE_PREFIX)
        if delete_list:
            key = _extract_key(key, _DELETE_PREFIX)
        if value is None:
            original.pop(key, None)
            continue
        if key not in original or _go_type(original[key]) != _go_type(value):
            if not delete_list:
                _put_without_directives(original, key, value)
            continue
        meta = schema.lookup(key)
        current = original[key]
        if isinstance(current, dict):
            if meta.strategy is Strategy.REPLACE:
                original[key] = value
            else:
                original[key] = _merge_map(current, value, meta.schema or _EMPTY)
        elif isinstance(current, list):
            if meta.strategy is Strategy.MERGE or delete_list:
                original[key] = _merge_list(current, value, meta, delete_list)[0]
            else:
                original[key] = value
        else:
            _put_without_directives(original, key, value)
    return original


def _put_without_directives(target: dict[str, Any], key: str, value: Any) -> None:
    """Store a patch value that has nothing to merge with, minus nulls and ``$patch`` maps."""
    _discard_nulls(value)
    cleaned, keep = _remove_directives(value)
    if keep:
        target[key] = cleaned
    else:
        target.pop(key, None)


def _discard_nulls(value: Any) -> None:
    if isinstance(value, dict):
        for key in [k for k, v in value.items() if v is None]:
            del value[key]
        for v in value.values():
            _discard_nulls(v)
    elif isinstance(value, list):
        for v in value:
            _discard_nulls(v)


def _remove_directives(value: Any) -> tuple[Any, bool]:
    """Drop every map carrying ``$patch`` (the bool says whether ``value`` itself survives)."""
    if isinstance(value, dict):
        if _DIRECTIVE in value:
            return None, False
        for key in list(value):
            cleaned, keep = _remove_directives(value[key])
            if keep:
                value[key] = cleaned
            else:
                del value[key]
        return value, True
    if isinstance(value, list):
        kept = [_remove_directives(v) for v in value]
        return [v for v, keep in kept if keep], True
    return value, True


def _drop_directive_keys(value: Any) -> None:
    if isinstance(value, dict):
        for key in [k for k in value if k in (_DIRECTIVE, _RETAIN_KEYS)
                    or k.startswith((_DELETE_PREFIX + "/", _ORDER_PREFIX + "/"))]:
            del value[key]
        for v in value.values():
            _drop_directive_keys(v)
    elif isinstance(value, list):
        for v in value:
            _drop_directive_keys(v)


def _extract_key(key: str, prefix: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        what = "primitive list" if prefix == _DELETE_PREFIX else "setElementOrder list"
        raise PatchError(f"invalid patch format of {what}")
    return rest


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    """``$retainKeys``: clear every field of ``original`` the list does not name."""
    if _RETAIN_KEYS not in patch:
        return
    retain = patch.pop(_RETAIN_KEYS)
    if not isinstance(retain, list):
        raise PatchError("invalid patch format of retainKeys")
    names = {k for k in retain if isinstance(k, str)}
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_PREFIX, _ORDER_PREFIX)):
            continue
        if key not in names:
            raise PatchError("invalid patch format of retainKeys")
    for key in [k for k in original if k not in names]:
        del original[key]


def _merge_ordered_lists(original: dict[str, Any], patch: dict[str, Any], schema: StructMeta) -> None:
    """Process every ``$setElementOrder/<field>`` with its list (upstream ``mergePatchIntoOriginal``)."""
    for directive in [k for k in patch if k.startswith(_ORDER_PREFIX)]:
        order = patch.pop(directive)
        if not isinstance(order, list):
            raise _bad_arg_type([], order, code=500)
        key = _extract_key(directive, _ORDER_PREFIX)
        in_original, in_patch = key in original, key in patch
        current: list[Any] = []
        patch_list: list[Any] = []
        if in_original:
            if not isinstance(original[key], list):
                raise _bad_arg_type([], original[key], code=500)
            current = original[key]
        if in_patch:
            if not isinstance(patch[key], list):
                raise _bad_arg_type([], patch[key], code=500)
            patch_list = patch[key]
        meta = schema.lookup(key)
        _validate_order(patch_list, order, meta.merge_key)
        server_view = current
        if in_original and in_patch:
            if meta.strategy is Strategy.MERGE:
                merged, server_view = _merge_list(current, patch_list, meta, False)
            else:
                merged = patch_list
        elif in_patch:
            merged, _ = _remove_directives(patch_list)
        elif in_original:
            merged = current
        else:
            continue
        patch_items, server_only = _partition(merged, order, meta.merge_key)
        kind = _element_kind(current, patch_list)
        original[key] = _normalize_order(patch_items, server_only, order, server_view, meta.merge_key, kind)
        patch.pop(key, None)


def _validate_order(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    """The patch list's items must appear in ``$setElementOrder`` in the same relative order."""
    if not order or not patch_list:
        return
    items = _split_deletions(patch_list)[0] if merge_key else patch_list
    pi = si = 0
    while pi < len(items) and si < len(order):
        if isinstance(items[pi], dict) and _DIRECTIVE in items[pi]:
            pi += 1
            continue
        if _merge_key_equal(items[pi], order[si], merge_key):
            pi += 1
        si += 1
    if pi < len(items) and si >= len(order):
        raise PatchError(f"the order in patch list:\n{_gofmt(patch_list)}\n doesn't match "
                         f"{_ORDER_PREFIX} list:\n{_gofmt(order)}", code=500)


def _merge_key_equal(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return _go_eq(left, right)
    for item in (left, right):
        if not isinstance(item, dict):
            raise _bad_arg_type({}, item, code=500)
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
    return _go_eq(left[merge_key], right[merge_key])


def _merge_list(original: list[Any], patch: list[Any], meta: FieldMeta,
                delete_list: bool) -> tuple[list[Any], list[Any]]:
    """Merge a list with merge strategy; returns the result and upstream's view of the live list.

    The view reproduces what upstream's later ordering step sees of the live list
    after it was edited in place (deletions shift items left, additions fill the
    freed slots); the exact order of a merged list depends on it.
    """
    if not original and not patch:
        return original, original
    kind = _element_kind(original, patch)
    if kind != "map":
        if delete_list:
            return [v for v in original if not any(_go_eq(v, d) for d in patch)], original
        merged: list[Any] = []
        for v in original + patch:
            if not any(_go_eq(v, m) for m in merged):
                merged.append(v)
        patch_items, server_only = _partition(merged, patch, "")
        return _normalize_order(patch_items, server_only, patch, original, "", kind), original
    key = meta.merge_key
    if not key:
        raise PatchError("cannot merge lists without merge key for type map", code=500)
    view = list(original)          # the live list's storage, as upstream edits it in place
    live = len(original)           # how much of it is still the live list
    tracking = True                # whether additions still land in that storage
    additions: list[Any] = []
    replace = False
    for item in patch:
        if _DIRECTIVE not in item:
            additions.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == _DELETE:
            if key not in item:
                raise _no_merge_key(item, key)
            while (i := _find(view[:live], key, item[key])) is not None:
                view[i:live - 1] = view[i + 1:live]
                live -= 1
        elif directive == _REPLACE:
            replace = True
        elif directive == _MERGE:
            raise PatchError("merging lists cannot yet be specified in the patch", code=500)
        else:
            raise PatchError(f"unknown patch type: {_gofmt(directive)} in map: {_gofmt(item)}", code=500)
    if replace:
        server_order, additions, tracking = additions, [], False
    else:
        server_order = view[:live]
    merged = list(server_order)
    for item in additions:
        if key not in item:
            raise _no_merge_key(item, key)
        i = _find(merged, key, item[key])
        if i is not None:
            merged[i] = _merge_map(merged[i], item, meta.schema or _EMPTY)
            if tracking:
                view[i] = merged[i]
        else:
            if tracking and len(merged) < len(view):
                view[len(merged)] = item
            else:
                tracking = False
            merged.append(item)
    patch_items, server_only = _partition(merged, additions, key)
    return _normalize_order(patch_items, server_only, additions, server_order, key, kind), view


def _find(items: list[Any], key: str, value: Any) -> int | None:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise PatchError(f"value for key {i} is not a map", code=500)
        if key in item and _go_eq(item[key], value):
            return i
    return None


def _partition(items: list[Any], by: list[Any], key: str) -> tuple[list[Any], list[Any]]:
    """Split ``items`` into those present in ``by`` (by merge key, or by value) and the rest."""
    present: list[Any] = []
    rest: list[Any] = []
    for item in items:
        if key:
            if not isinstance(item, dict):
                raise _bad_arg_type({}, item, code=500)
            if key not in item:
                raise _no_merge_key(item, key)
            found = any(isinstance(b, dict) and key in b and _go_eq(b[key], item[key]) for b in by)
        else:
            found = any(_go_eq(b, item) for b in by)
        (present if found else rest).append(item)
    return present, rest


def _normalize_order(patch_items: list[Any], server_only: list[Any], patch_order: list[Any],
                     server_order: list[Any], key: str, kind: str) -> list[Any]:
    """Order patch items as the patch does, server-only items as the server did, then interleave."""
    patch_items = _sort_by(patch_items, patch_order, key, kind)
    server_only = _sort_by(server_only, server_order, key, kind)
    return _merge_sorted(server_only, patch_items, server_order, key, kind)


def _sort_by(items: list[Any], order: list[Any], key: str, kind: str) -> list[Any]:
    deletions: list[Any] = []
    if kind == "map":
        for item in items + order:
            if not isinstance(item, dict):
                raise _bad_arg_type({}, item, code=500)
            if key not in item:
                raise _no_merge_key(item, key)
        items, deletions = _split_deletions(items)
    items = list(items)

    def less(a: Any, b: Any) -> bool:
        ia = _index(order, a, key, kind)
        if ia >= 0:
            ib = _index(order, b, key, kind)
            if ib >= 0:
                return ia < ib
        return True

    # Go's stable insertion sort, comparator quirks included (items missing from
    # ``order`` move to the front), so the result matches upstream exactly.
    for i in range(1, len(items)):
        j = i
        while j > 0 and less(items[j], items[j - 1]):
            items[j], items[j - 1] = items[j - 1], items[j]
            j -= 1
    return items + deletions


def _merge_sorted(left: list[Any], right: list[Any], server_order: list[Any], key: str,
                  kind: str) -> list[Any]:
    """Insert server-only items (left) among patch items (right) where the live order puts them."""
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li = _index(server_order, left[i], key, kind)
            ri = _index(server_order, right[j], key, kind)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _index(items: list[Any], value: Any, key: str, kind: str) -> int:
    def ident(item: Any) -> Any:
        if kind == "map":
            return item.get(key) if isinstance(item, dict) else None
        return item
    wanted = ident(value)
    for i, item in enumerate(items):
        if _go_eq(ident(item), wanted):
            return i
    return -1


def _split_deletions(items: list[Any]) -> tuple[list[Any], list[Any]]:
    keep: list[Any] = []
    delete: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise _bad_arg_type({}, item, code=500)
        (delete if item.get(_DIRECTIVE) == _DELETE else keep).append(item)
    return keep, delete


def _element_kind(*lists: list[Any]) -> str:
    """The one element type of the lists (upstream ``sliceElementType``)."""
    kind = None
    for lst in lists:
        for item in lst:
            current = _go_type(item)
            if kind is None:
                if current == "slice":
                    raise PatchError("lists of lists are not supported", code=422)
                kind = current
            elif current != kind:
                raise PatchError("list element types are not identical: "
                                 + _gofmt(list(lists)), code=500)
    if kind is None:
        raise PatchError("no elements in any of the given slices", code=500)
    return kind


def _go_type(value: Any) -> str:
    """The Go type a decoded JSON value would have (k8s json decodes integers as int64)."""
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "slice"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    return "nil"


def _go_eq(a: Any, b: Any) -> bool:
    """Go interface equality: same dynamic type and equal value."""
    return _go_type(a) == _go_type(b) and a == b


def _gofmt(value: Any) -> str:
    """Go's ``%v`` of a decoded JSON value, for error messages."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_gofmt(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_gofmt(v) for v in value) + "]"
    return str(value)


_GO_TYPE_NAMES = {"map": "map[string]interface {}", "slice": "[]interface {}", "bool": "bool",
                  "int64": "int64", "float64": "float64", "string": "string", "nil": "%!s(<nil>)"}


def _bad_arg_type(expected: Any, actual: Any, *, code: int) -> PatchError:
    return PatchError(f"expected a {_GO_TYPE_NAMES[_go_type(expected)]}, "
                      f"but received a {_GO_TYPE_NAMES[_go_type(actual)]}", code=code)


def _no_merge_key(item: dict[str, Any], key: str) -> PatchError:
    return PatchError(f"map: {_gofmt(item)} does not contain declared merge key: {key}", code=500)
