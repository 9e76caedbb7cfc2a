"""Who set which field: ``metadata.managedFields`` and server-side apply.

Why this exists: GitOps tools and ``kubectl apply --server-side`` send the
configuration they want (``application/apply-patch+yaml``) and let the server
merge it, remember which fields each *field manager* set, refuse (409) to
overwrite a field another manager set to a different value unless forced, and
remove the fields an applier stopped sending that no one else holds.  Every
other write (create, replace, patch) is an ``Update`` that takes over the fields
it changed.  Facts follow upstream's documentation and ``structured-merge-diff``
(FieldsV1 encoding, conflict texts, the ten ``Update`` entries kept before older
ones fold into ``ancient-changes``); the code is ours.

Model.  A field is a path of FieldsV1 elements (``f:name`` for a map or struct
key, ``k:{"name":"x"}`` for an item of a list merged by key, ``v:"x"`` for an item
of a set); a manager owns a set of paths.  Which lists merge by key and which
are sets comes from the strategic-merge metadata of :mod:`refplatform.patching`
(upstream reads ``x-kubernetes-list-type``; for the core kinds they agree but
for lists keyed by two fields, such as container ports, where one key is used
here).  Lists without metadata, and every list of a custom resource, are atomic.

Pure: objects are JSON dicts, nothing is mutated in place, time is passed in.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from refplatform import jsoncodec
from refplatform.errors import RefPlatformError
from refplatform.patching import FieldMeta, Strategy, StructMeta

__all__ = [
    "ANCIENT", "MAP_FIELDS", "MAX_UPDATE_MANAGERS", "ApplyConflict", "Conflict", "FieldManagerError", "ManagedEntry",
    "Operation", "Path", "apply", "decode_entries", "encode_entries", "fields_v1", "manager_from_user_agent",
    "owned_paths", "owned_trie", "path_string", "record_update",
]

Obj = dict[str, Any]
Path = tuple[str, ...]
"""A field: FieldsV1 elements from the object's root (``("f:spec", "f:replicas")``)."""

MAX_UPDATE_MANAGERS = 10
"""Update entries kept per object; older ones fold into :data:`ANCIENT`, as upstream."""
ANCIENT = "ancient-changes"

_NOT_OWNED_META = frozenset({"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                             "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"})
"""``metadata`` fields the server sets, which no manager owns (upstream strips them too)."""
_EMPTY = StructMeta()


class FieldManagerError(RefPlatformError):
    """managedFields that cannot be read, or an apply that cannot be made (HTTP 400)."""


class Operation(enum.Enum):
    APPLY = "Apply"
    UPDATE = "Update"


@dataclass(frozen=True)
class ManagedEntry:
    """One ``metadata.managedFields`` item: a manager, how it wrote, and the fields it owns (``trie``, FieldsV1).

    The set of paths (:attr:`fields`) is read from the trie only when needed: most writes only ask whether an
    entry owns one of the few fields they changed (:meth:`owns_any`), which a walk of the trie answers."""

    manager: str
    operation: Operation
    api_version: str
    time: str
    trie: Obj
    subresource: str = ""

    @classmethod
    def of(cls, manager: str, operation: Operation, api_version: str, time: str, fields: Iterable[Path],
           subresource: str = "") -> "ManagedEntry":
        paths = frozenset(fields)
        entry = cls(manager, operation, api_version, time, fields_v1(paths), subresource)
        entry.__dict__["fields"] = paths  # seed the cached property: no need to read back what was just written
        return entry

    @cached_property
    def fields(self) -> frozenset[Path]:
        paths: set[Path] = set()
        _paths_of_v1(self.trie, (), paths, f"managedFields entry of {self.manager!r}")
        return frozenset(paths)

    def owns_any(self, paths: Iterable[Path]) -> bool:
        for path in paths:
            node = self.trie
            for element in path:
                node = node.get(element)
                if node is None:
                    break
            else:
                if not node or "." in node:
                    return True
        return False

    def same_manager(self, manager: str, operation: Operation, subresource: str) -> bool:
        return (self.manager, self.operation, self.subresource) == (manager, operation, subresource)

    def describe(self) -> str:
        """How upstream names a manager in a conflict: by name, and for an Update with the API version it wrote
        (kube-apiserver v1.37.2 prints no time: its manager identifiers carry none)."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation is Operation.UPDATE:
            text += f" using {self.api_version}"
        return text

    def to_json(self) -> Obj:
        out: Obj = {"manager": self.manager, "operation": self.operation.value, "apiVersion": self.api_version}
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = self.trie
        if self.subresource:
            out["subresource"] = self.subresource
        return out


@dataclass(frozen=True)
class Conflict:
    """A field an apply would change that another manager owns."""

    manager: ManagedEntry
    path: Path


class ApplyConflict(FieldManagerError):
    """The apply would overwrite other managers' fields (HTTP 409 Conflict)."""

    def __init__(self, conflicts: list[Conflict]) -> None:
        self.conflicts = conflicts
        super().__init__(_conflict_message(conflicts))


def _conflict_message(conflicts: list[Conflict]) -> str:
    if len(conflicts) == 1:
        c = conflicts[0]
        return f"Apply failed with 1 conflict: conflict with {c.manager.describe()}: {path_string(c.path)}"
    by_manager: dict[str, list[Path]] = {}
    for c in conflicts:
        by_manager.setdefault(c.manager.describe(), []).append(c.path)
    lines: list[str] = []
    for manager in sorted(by_manager):
        lines.append(f"conflicts with {manager}:")
        lines += [f"- {path_string(p)}" for p in by_manager[manager]]
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


def path_string(path: Path) -> str:
    """A path as upstream prints it: ``.spec.containers[name="main"].image``, ``.metadata.finalizers[="x"]``."""
    out = ""
    for element in path:
        kind, text = element[:1], element[2:]
        if kind == "f":
            out += "." + text
        elif kind == "k":
            keys = json.loads(text)
            out += "[" + ",".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in keys.items()) + "]"
        elif kind == "v":
            out += f"[={text}]"
        else:
            out += f"[{text}]"
    return out


def manager_from_user_agent(user_agent: str) -> str:
    """The manager upstream records for a write without ``fieldManager``: the User-Agent up to its first ``/``."""
    return user_agent.split("/", 1)[0][:128]


# --------------------------------------------------------------------------- FieldsV1


def fields_v1(paths: Iterable[Path]) -> Obj:
    """The FieldsV1 trie of a set of paths, keys sorted; ``.`` marks a path that also has owned children."""
    root: Obj = {}
    for path in sorted(paths):  # a path comes before the paths under it
        node = root
        for element in path:
            child = node.get(element)
            if child is None:
                child = node[element] = {}
            elif not child:
                child["."] = {}  # an owned leaf so far, now with children: it stays owned
            node = child
    return root


def _paths_of_v1(node: Any, prefix: Path, out: set[Path], where: str) -> None:
    if not isinstance(node, dict):
        raise FieldManagerError(f"{where}: fieldsV1 must be an object of objects, found {type(node).__name__} "
                                f"at {path_string(prefix) or 'the root'}")
    for key, child in node.items():
        if key == ".":
            if prefix:
                out.add(prefix)
            continue
        if key[:2] not in ("f:", "k:", "v:", "i:"):
            raise FieldManagerError(f"{where}: fieldsV1 key {key!r} at {path_string(prefix) or 'the root'} is "
                                    "not '.', 'f:<name>', 'k:<keys>', 'v:<value>' or 'i:<index>'")
        path = prefix + (key,)
        if isinstance(child, dict) and not child:
            out.add(path)
        else:
            _paths_of_v1(child, path, out, where)


def decode_entries(raw: Any, *, check: bool = True) -> list[ManagedEntry]:
    """Stored or client-sent ``metadata.managedFields`` as entries; a malformed one raises, naming the index.
    ``check=False`` trusts the tries (the server wrote and checked them) and reads them only when needed."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise FieldManagerError(f"metadata.managedFields must be a list, not {type(raw).__name__}")
    entries = []
    for i, item in enumerate(raw):
        where = f"metadata.managedFields[{i}]"
        if not isinstance(item, dict):
            raise FieldManagerError(f"{where} must be an object")
        try:
            operation = Operation(item.get("operation"))
        except ValueError:
            raise FieldManagerError(f"{where}.operation must be Apply or Update, "
                                    f"not {item.get('operation')!r}") from None
        if item.get("fieldsType", "FieldsV1") != "FieldsV1":
            raise FieldManagerError(f'{where}.fieldsType must be "FieldsV1", not {item.get("fieldsType")!r}')
        trie = item.get("fieldsV1") or {}
        entry = ManagedEntry(str(item.get("manager") or ""), operation, str(item.get("apiVersion") or ""),
                             str(item.get("time") or ""), trie, str(item.get("subresource") or ""))
        if check:
            paths: set[Path] = set()
            _paths_of_v1(trie, (), paths, where)
            entry.__dict__["fields"] = frozenset(paths)
        entries.append(entry)
    return entries


def encode_entries(entries: Iterable[ManagedEntry]) -> list[Obj]:
    return [e.to_json() for e in entries]


# --------------------------------------------------------------------------- fields of an object


_PLAIN = re.compile(r"[ !#-\[\]-~]*")
"""Printable ASCII but quote and backslash: a string JSON writes as it is."""


def _json(value: Any) -> str:
    """Compact JSON of a scalar (the common cases without json.dumps: this runs on every write)."""
    if type(value) is str and _PLAIN.fullmatch(value):
        return '"' + value + '"'
    if type(value) is int:
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _key_element(item: Obj, key: str) -> str:
    return f'k:{{"{key}":{_json(item[key])}}}'


def _value_element(value: Any) -> str:
    return "v:" + _json(value)


def _list_shape(meta: FieldMeta, *lists: list[Any]) -> str:
    """``keyed``, ``set`` or ``atomic``: how a list field merges and is owned."""
    if meta.strategy is Strategy.MERGE:
        key = meta.merge_key
        if key:
            if all(isinstance(i, dict) and key in i for lst in lists for i in lst):
                return "keyed"
        elif all(not isinstance(i, (dict, list)) for lst in lists for i in lst):
            return "set"
    return "atomic"


MAP_FIELDS = frozenset({"labels", "annotations", "data", "binaryData", "stringData", "nodeSelector", "limits",
                        "requests", "capacity", "allocatable", "matchLabels", "hard", "used", "overhead"})
"""Fields of the served kinds that are maps rather than structs: owned as a whole (``.``) as well as key by key,
as upstream does for map-typed fields.  Other objects are structs, owned only through their fields."""


def _whole(path: Path, value: Obj) -> bool:
    """Whether a dict's own node is owned: an empty one (a leaf), or a map (:data:`MAP_FIELDS`)."""
    return not value or (bool(path) and path[-1][2:] in MAP_FIELDS)


def _collect(value: Any, meta: FieldMeta, path: Path, out: set[Path]) -> None:
    if isinstance(value, dict):
        if _whole(path, value):
            out.add(path)
        schema = meta.schema or _EMPTY
        for key, child in value.items():
            _collect(child, schema.lookup(key), path + ("f:" + key,), out)
    elif isinstance(value, list):
        out.add(path)
        shape = _list_shape(meta, value)
        if shape == "keyed":
            item_meta = FieldMeta(schema=meta.schema)
            for item in value:
                item_path = path + (_key_element(item, meta.merge_key),)
                out.add(item_path)
                _collect(item, item_meta, item_path, out)
        elif shape == "set":
            out.update(path + (_value_element(v),) for v in value)
    else:
        out.add(path)


def owned_trie(obj: Obj, schema: StructMeta, subresource: str = "", has_status: bool = False) -> Obj:
    """``fields_v1(owned_paths(obj, ...))`` built in one walk, without paths: what a create owns.  Creates are
    most writes, so this is their fast path."""
    root: Obj = {}
    for key in sorted(obj):
        if key in ("apiVersion", "kind") or not _written_through(key, subresource, has_status):
            continue
        value = obj[key]
        if key == "metadata" and isinstance(value, dict):
            meta_schema = schema.lookup("metadata").schema or _EMPTY
            node = {"f:" + k: _trie_node(value[k], meta_schema.lookup(k), k) for k in sorted(value)
                    if k not in _NOT_OWNED_META}
            if node:
                root["f:metadata"] = node
        else:
            root["f:" + key] = _trie_node(value, schema.lookup(key), key)
    return root


def _trie_node(value: Any, meta: FieldMeta, name: str) -> Obj:
    """The FieldsV1 node of one owned field and everything under it (the rules of :func:`_collect`)."""
    if isinstance(value, dict):
        if not value:
            return {}
        schema = meta.schema or _EMPTY
        children = {"f:" + k: _trie_node(value[k], schema.lookup(k), k) for k in sorted(value)}
        return {".": {}, **children} if name in MAP_FIELDS else children
    if isinstance(value, list):
        shape = _list_shape(meta, value)
        items: Obj = {}
        if shape == "keyed":
            item_meta = FieldMeta(schema=meta.schema)
            for item in value:
                items[_key_element(item, meta.merge_key)] = {".": {}, **_trie_node(item, item_meta, "")}
        elif shape == "set":
            items = {_value_element(v): {} for v in value}
        return {".": {}, **{k: items[k] for k in sorted(items)}} if items else {}
    return {}


def owned_paths(obj: Obj, schema: StructMeta, subresource: str = "", has_status: bool = False) -> set[Path]:
    """The fields of ``obj`` a write of it owns: all but what the server sets, and only the part of the
    object the endpoint writes (``status`` through the status subresource, the rest through the main one)."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or not _written_through(key, subresource, has_status):
            continue
        path: Path = ("f:" + key,)
        if key == "metadata" and isinstance(value, dict):
            meta_schema = schema.lookup("metadata").schema or _EMPTY
            for mkey, mvalue in value.items():
                if mkey not in _NOT_OWNED_META:
                    _collect(mvalue, meta_schema.lookup(mkey), path + ("f:" + mkey,), out)
        else:
            _collect(value, schema.lookup(key), path, out)
    return out


def _written_through(key: str, subresource: str, has_status: bool) -> bool:
    if subresource == "status":
        return key in ("status", "metadata")
    return not (has_status and key == "status")


# --------------------------------------------------------------------------- differences


_MISSING: Any = object()


def _diff_key(old: Obj, new: Obj, key: str, schema: StructMeta, path: Path, now_set: set[Path],
              gone: set[Path]) -> None:
    a, b = old.get(key, _MISSING), new.get(key, _MISSING)
    if a is _MISSING:
        _collect(b, schema.lookup(key), path + ("f:" + key,), now_set)
    elif b is _MISSING:
        _collect(a, schema.lookup(key), path + ("f:" + key,), gone)
    elif a != b:
        _diff(a, b, schema.lookup(key), path + ("f:" + key,), now_set, gone)


def _diff(old: Any, new: Any, meta: FieldMeta, path: Path, now_set: set[Path], gone: set[Path]) -> None:
    """Add to ``now_set`` the fields of ``new`` that are new or changed, and to ``gone`` those only ``old`` has."""
    if isinstance(old, dict) and isinstance(new, dict):
        schema = meta.schema or _EMPTY
        if _whole(path, old) != _whole(path, new):
            (now_set if _whole(path, new) else gone).add(path)
        for key in old.keys() | new.keys():
            _diff_key(old, new, key, schema, path, now_set, gone)
        return
    if isinstance(old, list) and isinstance(new, list):
        shape = _list_shape(meta, old, new)
        if shape == "keyed":
            key, item_meta = meta.merge_key, FieldMeta(schema=meta.schema)
            before = {_key_element(i, key): i for i in old}
            after = {_key_element(i, key): i for i in new}
            for element in before.keys() | after.keys():
                item_path = path + (element,)
                if element not in after:
                    _collect(before[element], item_meta, item_path, gone)
                elif element not in before:
                    _collect(after[element], item_meta, item_path, now_set)
                elif before[element] != after[element]:
                    _diff(before[element], after[element], item_meta, item_path, now_set, gone)
            return
        if shape == "set":
            gone.update(path + (_value_element(v),) for v in old if v not in new)
            now_set.update(path + (_value_element(v),) for v in new if v not in old)
            return
    before: set[Path] = set()
    after: set[Path] = set()
    _collect(old, meta, path, before)
    _collect(new, meta, path, after)
    gone.update(before - after)
    now_set.update(after)


def _changes(old: Obj, new: Obj, schema: StructMeta, subresource: str,
             has_status: bool) -> tuple[set[Path], set[Path]]:
    """(fields set or changed by the write, fields it removed), among the fields managers own."""
    now_set: set[Path] = set()
    gone: set[Path] = set()
    for key in old.keys() | new.keys():
        if key in ("apiVersion", "kind") or not _written_through(key, subresource, has_status):
            continue
        if key != "metadata":
            _diff_key(old, new, key, schema, (), now_set, gone)
            continue
        a, b = old.get(key), new.get(key)
        a, b = a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}
        if a == b:
            continue
        meta_schema = schema.lookup("metadata").schema or _EMPTY
        for mkey in a.keys() | b.keys():
            if mkey not in _NOT_OWNED_META:
                _diff_key(a, b, mkey, meta_schema, ("f:metadata",), now_set, gone)
    return now_set, gone


# --------------------------------------------------------------------------- Update


def record_update(entries: list[ManagedEntry], old: Obj, new: Obj, *, manager: str, api_version: str, now: str,
                  schema: StructMeta, subresource: str = "", has_status: bool = False) -> list[ManagedEntry]:
    """managedFields after an Update by ``manager``: it owns what it changed; others lose what it changed."""
    if not entries and not old:  # a create: the creator owns every field it set
        trie = owned_trie(new, schema, subresource, has_status)
        return [ManagedEntry(manager, Operation.UPDATE, api_version, now, trie, subresource)] if trie else []
    now_set, gone = _changes(old, new, schema, subresource, has_status)
    changed = now_set | gone
    if not changed:
        return entries
    kept: list[ManagedEntry] = []
    mine: ManagedEntry | None = None
    for entry in entries:
        if entry.same_manager(manager, Operation.UPDATE, subresource):
            mine = entry
            continue
        if not entry.owns_any(changed):
            kept.append(entry)
        elif fields := entry.fields - changed:
            kept.append(_with(entry, fields))
    mine_fields = ((mine.fields if mine else frozenset()) | now_set) - gone
    if mine_fields:
        updated = ManagedEntry.of(manager, Operation.UPDATE, api_version, now, mine_fields, subresource)
        if mine is not None:
            kept.insert(min(entries.index(mine), len(kept)), updated)
        else:
            kept.append(updated)
    return _fold_ancient(kept)


def _with(entry: ManagedEntry, fields: frozenset[Path]) -> ManagedEntry:
    return ManagedEntry.of(entry.manager, entry.operation, entry.api_version, entry.time, fields, entry.subresource)


def _fold_ancient(entries: list[ManagedEntry]) -> list[ManagedEntry]:
    """At most :data:`MAX_UPDATE_MANAGERS` Update entries: the oldest merge into one :data:`ANCIENT` entry."""
    updates = [e for e in entries if e.operation is Operation.UPDATE]
    if len(updates) <= MAX_UPDATE_MANAGERS:
        return entries
    oldest = sorted(updates, key=lambda e: e.time)[:len(updates) - MAX_UPDATE_MANAGERS + 1]
    oldest += [e for e in updates if e.manager == ANCIENT and e not in oldest]
    newest = max(oldest, key=lambda e: e.time)
    merged = frozenset().union(*(e.fields for e in oldest))
    folded = [e for e in entries if not any(e is o for o in oldest)]
    folded.append(ManagedEntry.of(ANCIENT, Operation.UPDATE, newest.api_version, newest.time, merged))
    return folded


# --------------------------------------------------------------------------- Apply


def _merge(live: Any, config: Any, meta: FieldMeta) -> Any:
    """The live value with the applied configuration merged in (maps by key, keyed lists by key, sets by value)."""
    if isinstance(config, dict):
        out = dict(live) if isinstance(live, dict) else {}
        schema = meta.schema or _EMPTY
        for key, value in config.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(out.get(key), value, schema.lookup(key))
        return out
    if isinstance(config, list) and isinstance(live, list):
        shape = _list_shape(meta, live, config)
        if shape == "keyed":
            key, item_meta = meta.merge_key, FieldMeta(schema=meta.schema)
            merged = list(live)
            index = {_key_element(i, key): n for n, i in enumerate(merged)}
            for item in config:
                n = index.get(_key_element(item, key))
                if n is None:
                    index[_key_element(item, key)] = len(merged)
                    merged.append(_merge(None, item, item_meta))
                else:
                    merged[n] = _merge(merged[n], item, item_meta)
            return merged
        if shape == "set":
            return list(live) + [v for v in config if v not in live]
    if isinstance(config, list):
        return [_merge(None, v, FieldMeta(schema=meta.schema)) if isinstance(v, dict) else v for v in config]
    return config


def _remove(obj: Any, path: Path) -> None:
    """Remove one field from ``obj`` in place; a path that is not there is a no-op."""
    node = obj
    for element in path[:-1]:
        node = _child(node, element)
        if node is None:
            return
    last = path[-1]
    if isinstance(node, dict) and last.startswith("f:"):
        node.pop(last[2:], None)
    elif isinstance(node, list):
        for n, item in enumerate(node):
            if _matches(item, last):
                del node[n]
                return


def _child(node: Any, element: str) -> Any:
    if isinstance(node, dict):
        return node.get(element[2:]) if element.startswith("f:") else None
    if isinstance(node, list):
        return next((item for item in node if _matches(item, element)), None)
    return None


def _matches(item: Any, element: str) -> bool:
    kind, text = element[:2], element[2:]
    if kind == "k:":
        return isinstance(item, dict) and all(item.get(k) == v for k, v in json.loads(text).items())
    if kind == "v:":
        return bool(item == json.loads(text))
    return False


def apply(live: Obj | None, config: Obj, entries: list[ManagedEntry], *, manager: str, force: bool,
          api_version: str, now: str, schema: StructMeta, subresource: str = "",
          has_status: bool = False) -> tuple[Obj, list[ManagedEntry]]:
    """Server-side apply of ``config`` by ``manager`` onto ``live`` (None: the object is new).

    Answers the merged object and its new managedFields, or raises :class:`ApplyConflict`
    naming every field another manager owns that the apply would change (unless ``force``,
    which takes those fields over).  Fields this manager applied before and no longer sends
    are removed unless another manager owns them or something inside them.
    """
    applied = frozenset(owned_paths(config, schema, subresource, has_status))
    base = live or {}
    merged = _merge(jsoncodec.clone(base), config, FieldMeta(schema=schema))
    now_set, gone = _changes(base, merged, schema, subresource, has_status)
    changed = now_set | gone
    mine = next((e for e in entries if e.same_manager(manager, Operation.APPLY, subresource)), None)
    others = [e for e in entries if e is not mine]
    conflicts = [Conflict(e, p) for e in others for p in sorted(e.fields & changed)]
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    if conflicts:
        taken = frozenset(c.path for c in conflicts)
        others = [_with(e, e.fields - taken) for e in others]
        others = [e for e in others if e.fields]
    held: set[Path] = set()
    for path in applied.union(*(e.fields for e in others)):
        held.update(path[:i] for i in range(1, len(path) + 1))
    for path in sorted((mine.fields if mine else frozenset()) - applied, key=len, reverse=True):
        if path not in held:
            _remove(merged, path)
    entry = ManagedEntry.of(manager, Operation.APPLY, api_version, now, applied, subresource)
    remaining = {(e.manager, e.operation, e.subresource): e for e in others}
    result: list[ManagedEntry] = []
    for e in entries:
        current = entry if e is mine else remaining.get((e.manager, e.operation, e.subresource))
        if current is not None and current.fields:
            result.append(current)
    if mine is None and applied:
        result.append(entry)
    return merged, result
