"""Request bodies in ``application/vnd.kubernetes.protobuf``, decoded to the JSON form the server stores.

Why this exists: client-go's typed clients send built-in kinds as protobuf and do
not fall back to JSON on 415 (only a CBOR request does), so ``kubectl create
namespace``, ``kubectl run`` and every other generator command failed here.
This is a decoder of exactly the messages a client sends to the resources this
server serves (Pod, Namespace, Node, Event, Binding, Eviction, Lease,
DeleteOptions and what they contain), nothing more: no encoder, no other kinds.
No maintained Python package ships Kubernetes' protobuf types (``k8s-proto`` on
PyPI is a 2019 snapshot), and the ``protobuf`` runtime alone would still need
the descriptors and every JSON quirk below.

The wire format (``k8s.io/apimachinery/pkg/runtime/serializer/protobuf``): the
magic ``k8s\\x00``, then a ``runtime.Unknown`` whose ``typeMeta`` names apiVersion
and kind and whose ``raw`` is the object's message.  Field numbers, JSON names
and Go struct tags come from ``data/k8s-protobuf.json``, derived from upstream's
``generated.proto`` and Go types by :mod:`refplatform.api.gendata`.  The JSON
form follows encoding/json on the Go structs: ``omitempty`` zero values are
dropped unless the Go field is a pointer, embedded structs are inlined, Time is
RFC 3339, Quantity a string, IntOrString an int or a string, int64 a number.
"""

from __future__ import annotations

import base64
import json
import struct
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from typing import Any

from refplatform.errors import RefPlatformError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

META = "k8s.io.apimachinery.pkg.apis.meta.v1"
TIME = f"{META}.Time"
MICRO_TIME = f"{META}.MicroTime"
DURATION = f"{META}.Duration"
FIELDS_V1 = f"{META}.FieldsV1"
QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
RAW_EXTENSION = "k8s.io.apimachinery.pkg.runtime.RawExtension"
UNKNOWN = "k8s.io.apimachinery.pkg.runtime.Unknown"

#: API group -> proto package of its built-in kinds.
GROUP_PACKAGES = {"": "k8s.io.api.core.v1", "coordination.k8s.io": "k8s.io.api.coordination.v1",
                  "policy": "k8s.io.api.policy.v1", "apps": "k8s.io.api.apps.v1",
                  "discovery.k8s.io": "k8s.io.api.discovery.v1", "autoscaling": "k8s.io.api.autoscaling.v2",
                  "scheduling.k8s.io": "k8s.io.api.scheduling.v1",
                  "authorization.k8s.io": "k8s.io.api.authorization.v1",
                  "authentication.k8s.io": "k8s.io.api.authentication.v1", "batch": "k8s.io.api.batch.v1"}
#: (group, version) -> proto package where a group's versions live in different packages.
VERSION_PACKAGES = {("autoscaling", "v1"): "k8s.io.api.autoscaling.v1"}
#: Kinds that every group accepts and that live in meta/v1.
META_KINDS = frozenset({"DeleteOptions"})

_OMIT = object()


class ProtobufError(RefPlatformError):
    """A protobuf body that cannot be decoded; the message says what and where."""


@lru_cache(maxsize=1)
def upstream_messages() -> dict[str, dict[str, Any]]:
    """The package data: per message its ``doc`` and ``fields`` (keyed by field number as a string)."""
    raw = resources.files("refplatform.api").joinpath("data/k8s-protobuf.json").read_text()
    messages: dict[str, dict[str, Any]] = json.loads(raw)["messages"]
    return messages


@lru_cache(maxsize=1)
def message_table() -> dict[str, dict[str, dict[str, Any]]]:
    """The field table, keyed by message, then field number as a string."""
    return {name: m["fields"] for name, m in upstream_messages().items()}


def message_for(api_version: str, kind: str) -> str:
    """The proto message of a built-in kind, e.g. ``k8s.io.api.core.v1.Pod`` for ``v1``/``Pod``."""
    group, _, version = api_version.rpartition("/")
    package = META if kind in META_KINDS else VERSION_PACKAGES.get((group, version), GROUP_PACKAGES.get(group))
    name = f"{package}.{kind}" if package else ""
    if package is None or not version or name not in message_table():
        raise ProtobufError(f"no protobuf decoding for {kind} in {api_version or 'no apiVersion'}; send "
                            "application/json (this server decodes protobuf only for the built-in kinds it serves)")
    return name


def decode_object(body: bytes) -> dict[str, Any]:
    """A ``k8s\\x00``-framed protobuf object as its JSON dict, with apiVersion and kind."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the protobuf body does not start with the Kubernetes magic number k8s\\x00")
    envelope = decode_message(body[len(MAGIC):], UNKNOWN, "Unknown", raw_unknown=True)
    api_version, kind = envelope.get("apiVersion", ""), envelope.get("kind", "")  # typeMeta is inlined
    if envelope.get("contentEncoding"):
        raise ProtobufError(f"content encoding {envelope['contentEncoding']!r} is not supported")
    obj = decode_message(envelope.get("raw", b""), message_for(api_version, kind), kind)
    return {"apiVersion": api_version, "kind": kind, **obj}


# ----------------------------------------------------------------------------- wire format
def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError(f"truncated varint in {where}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError(f"varint longer than 10 bytes in {where}")


def _fields(buf: bytes, where: str) -> list[tuple[int, int, Any]]:
    """(field number, wire type, raw value) in wire order."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos, where)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, where)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos, where)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number} in {where}")
        if pos > len(buf):
            raise ProtobufError(f"field {number} runs past the end of {where}")
        out.append((number, wire, value))
    return out


def _signed(v: int, bits: int) -> int:
    v &= (1 << 64) - 1
    if v >= 1 << 63:
        v -= 1 << 64
    if bits == 32 and not -(1 << 31) <= v < (1 << 31):
        v = (v + (1 << 31)) % (1 << 32) - (1 << 31)
    return v


def _scalar(kind: str, wire: int, value: Any, where: str) -> Any:
    if kind == "string":
        if wire != 2:
            raise ProtobufError(f"{where}: expected a string")
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            raise ProtobufError(f"{where}: string is not UTF-8") from None
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if kind == "bool":
        return bool(value)
    if kind in ("int32", "int64"):
        return _signed(value, 32 if kind == "int32" else 64)
    if kind in ("uint32", "uint64"):
        return value
    if kind == "double":
        return struct.unpack("<d", value)[0]
    if kind == "float":
        return struct.unpack("<f", value)[0]
    raise ProtobufError(f"{where}: unsupported scalar type {kind}")


def _zero(value: Any) -> bool:
    """encoding/json's empty value for omitempty (scalars only: structs are never omitted)."""
    return value is False or value == "" or (type(value) in (int, float) and value == 0)


def _packed(kind: str, buf: bytes, where: str) -> list[Any]:
    values, pos = [], 0
    if kind == "double":
        return [struct.unpack("<d", buf[i:i + 8])[0] for i in range(0, len(buf), 8)]
    while pos < len(buf):
        v, pos = _varint(buf, pos, where)
        values.append(_scalar(kind, 0, v, where))
    return values


def _go_duration(ns: int) -> str:
    """A Go time.Duration's String(): 1h2m3.5s, 1.5s, 500ms, 0s."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return sign + f"{ns / size:f}".rstrip("0").rstrip(".") + unit
    h, rem = divmod(ns, 3_600_000_000_000)
    m, rem = divmod(rem, 60_000_000_000)
    s = f"{rem / 1e9:f}".rstrip("0").rstrip(".") + "s"
    return sign + (f"{h}h{m}m" if h else f"{m}m" if m else "") + s


def _special(name: str, fields: list[tuple[int, int, Any]], where: str) -> Any:
    values = {n: v for n, _, v in fields}
    if name in (TIME, MICRO_TIME):
        seconds = _signed(values.get(1, 0), 64)
        nanos = _signed(values.get(2, 0), 32)
        if seconds == 0 and nanos == 0:
            return _OMIT  # Go marshals the zero Time as null
        when = datetime.fromtimestamp(seconds, timezone.utc)
        if name == TIME:
            return when.strftime("%Y-%m-%dT%H:%M:%SZ")
        return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos // 1000:06d}Z"
    if name == DURATION:
        return _go_duration(_signed(values.get(1, 0), 64))
    if name == QUANTITY:
        return _scalar("string", 2, values.get(1, b""), where)
    if name == INT_OR_STRING:
        if values.get(1, 0) == 1:
            return _scalar("string", 2, values.get(3, b""), where)
        return _signed(values.get(2, 0), 32)
    if name in (RAW_EXTENSION, FIELDS_V1):
        raw = bytes(values.get(1, b""))
        if not raw:
            return _OMIT
        try:
            return json.loads(raw)
        except ValueError:
            raise ProtobufError(f"{where}: embedded object is not JSON (nested protobuf is not supported)") from None
    return None


SPECIAL = frozenset({TIME, MICRO_TIME, DURATION, QUANTITY, INT_OR_STRING, RAW_EXTENSION, FIELDS_V1})


def _value(type_name: str, wire: int, raw: Any, where: str) -> Any:
    if type_name in message_table() or type_name in SPECIAL:
        if wire != 2:
            raise ProtobufError(f"{where}: expected an embedded message")
        return decode_message(bytes(raw), type_name, where)
    return _scalar(type_name, wire, raw, where)


def decode_message(buf: bytes, name: str, where: str, raw_unknown: bool = False) -> Any:
    """One message as its JSON value (a dict for most, a string or number for the special ones)."""
    fields = _fields(buf, where)
    if name in SPECIAL:
        special = _special(name, fields, where)
        return special
    spec = message_table().get(name)
    if spec is None:
        raise ProtobufError(f"{where}: no field table for message {name}")
    out: dict[str, Any] = {}
    for number, wire, raw in fields:
        field = spec.get(str(number))
        if field is None:
            continue  # unknown fields are ignored, as the Go decoder does
        json_name = field["json"]
        here = f"{where}.{json_name}"
        if json_name == "-":  # json:"-": not part of the JSON form; only Unknown's raw bytes are wanted
            if raw_unknown and name == UNKNOWN:
                out["raw"] = bytes(raw)
            continue
        if "map" in field:
            key_type, value_type = field["map"]
            entry = {n: (w, v) for n, w, v in _fields(bytes(raw), here)}
            key = _scalar(key_type, *entry[1], here) if 1 in entry else ""
            if 2 in entry:
                value = _value(value_type, entry[2][0], entry[2][1], f"{here}[{key}]")
            else:
                value = {} if value_type in message_table() else "" if value_type in ("string", "bytes",
                                                                                        QUANTITY) else 0
            out.setdefault(json_name, {})[key] = value
            continue
        type_name = field["type"]
        if field.get("repeated"):
            if wire == 2 and type_name not in ("string", "bytes") and type_name not in message_table() \
                    and type_name not in SPECIAL:
                out.setdefault(json_name, []).extend(_packed(type_name, bytes(raw), here))
            else:
                value = _value(type_name, wire, raw, here)
                if value is not _OMIT:
                    out.setdefault(json_name, []).append(value)
            continue
        value = _value(type_name, wire, raw, here)
        if value is _OMIT:
            continue
        if field.get("inline") and isinstance(value, dict):
            out.update(value)
            continue
        if field.get("omitempty") and not field.get("pointer") and not isinstance(value, dict) and _zero(value):
            out.pop(json_name, None)
            continue
        out[json_name] = value
    return out
