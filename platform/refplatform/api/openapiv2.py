"""``/openapi/v2``: the served kinds' schemas as one Swagger 2.0 document, in JSON or in gnostic protobuf.

Why: kubectl validates a ``kind: List`` (``kubectl get -o json`` writes one) client-side, item by item,
against the OpenAPI v2 models, and asks for them as protobuf
(``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``, the ``openapi_v2.Document`` message of
google/gnostic-models); without the document ``create -f list.json`` fails before sending anything.

What: ``definitions`` are the component schemas of the OpenAPI v3 documents (refplatform.api.openapi),
rewritten the way upstream's v2 spells them: ``#/definitions/`` references, a lone ``allOf`` reference as the
reference itself, IntOrString as ``type: string, format: int-or-string``, v3-only keywords (``anyOf``,
``oneOf``, ``nullable``) dropped.  ``paths`` is empty: kubectl reads only the definitions, each tied to its
kind by ``x-kubernetes-group-version-kind``.  Built once per process, served with an ETag.

No maintained Python package carries the gnostic messages, so :func:`encode` writes the few of them the
document uses (Document, Info, Definitions, NamedSchema, Schema, TypeItem, ItemsItem, Properties,
AdditionalPropertiesItem, NamedAny, Any) with field numbers from ``openapiv2/OpenAPIv2.proto``.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

from refplatform import KUBE_VERSION

Obj = dict[str, Any]
ACCEPT_PROTOBUF = "application/com.github.proto-openapi.spec.v2"
"""What a client that wants protobuf asks for (kubectl: ``...spec.v2@v1.0+protobuf``)."""
PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
"""The Content-Type upstream answers with (Go's media type parser refuses the ``@`` form)."""
V3_REF, V2_REF = "#/components/schemas/", "#/definitions/"


def definitions(v3_documents: list[Obj]) -> Obj:
    """The v2 definitions of every component schema of the v3 documents."""
    out: Obj = {}
    for doc in v3_documents:
        for name, schema in ((doc.get("components") or {}).get("schemas") or {}).items():
            out.setdefault(name, _v2(schema))
    return dict(sorted(out.items()))


def _v2(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    s = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf", "nullable")}
    all_of = s.pop("allOf", None)
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        s["$ref"] = all_of[0]["$ref"]
    elif all_of:
        s["allOf"] = [_v2(x) for x in all_of]
    if isinstance(s.get("$ref"), str):
        s["$ref"] = s["$ref"].replace(V3_REF, V2_REF)
    if s.get("x-kubernetes-int-or-string") and "type" not in s:
        s.update(type="string", format="int-or-string")
    if isinstance(s.get("properties"), dict):
        s["properties"] = {k: _v2(v) for k, v in s["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(s.get(key), dict):
            s[key] = _v2(s[key])
    return s


def document(v3_documents: list[Obj]) -> Obj:
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION}, "paths": {},
            "definitions": definitions(v3_documents)}


# ---------------------------------------------------------------- gnostic protobuf
def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _str(field: int, value: str) -> bytes:
    return _bytes(field, value.encode())


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(int(value))


def _double(field: int, value: float) -> bytes:
    return _varint(field << 3 | 1) + struct.pack("<d", float(value))


def _any(value: Any) -> bytes:
    """gnostic ``Any``: the value as YAML text (field 2); JSON is YAML."""
    return _str(2, json.dumps(value))


SCALARS: dict[str, tuple[int, str]] = {
    "format": (2, "str"), "title": (3, "str"), "description": (4, "str"), "multipleOf": (6, "double"),
    "maximum": (7, "double"), "exclusiveMaximum": (8, "bool"), "minimum": (9, "double"),
    "exclusiveMinimum": (10, "bool"), "maxLength": (11, "int"), "minLength": (12, "int"), "pattern": (13, "str"),
    "maxItems": (14, "int"), "minItems": (15, "int"), "uniqueItems": (16, "bool"), "maxProperties": (17, "int"),
    "minProperties": (18, "int"), "discriminator": (26, "str"), "readOnly": (27, "bool"),
}


def encode_schema(s: Obj) -> bytes:
    out = bytearray()
    if "$ref" in s:
        out += _str(1, s["$ref"])
    for key, (field, kind) in SCALARS.items():
        if key not in s:
            continue
        value = s[key]
        out += (_str(field, value) if kind == "str" else _double(field, value) if kind == "double"
                else _int(field, 1 if value else 0) if kind == "bool" else _int(field, value))
    if "default" in s:
        out += _bytes(5, _any(s["default"]))
    for name in s.get("required") or []:
        out += _str(19, name)
    for value in s.get("enum") or []:
        out += _bytes(20, _any(value))
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        out += _bytes(21, _bytes(1, encode_schema(extra)))
    elif isinstance(extra, bool):
        out += _bytes(21, _int(2, int(extra)))
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        out += _bytes(22, b"".join(_str(1, t) for t in types))
    if isinstance(s.get("items"), dict):
        out += _bytes(23, _bytes(1, encode_schema(s["items"])))
    for part in s.get("allOf") or []:
        out += _bytes(24, encode_schema(part))
    if isinstance(s.get("properties"), dict):
        out += _bytes(25, b"".join(_bytes(1, _str(1, k) + _bytes(2, encode_schema(v)))
                                   for k, v in s["properties"].items()))
    for key, value in s.items():
        if key.startswith("x-"):
            out += _bytes(31, _str(1, key) + _bytes(2, _any(value)))
    return bytes(out)


def encode(doc: Obj) -> bytes:
    """``openapi_v2.Document``: swagger (1), info (2), paths (8, empty), definitions (9)."""
    info = _str(1, doc["info"]["title"]) + _str(2, doc["info"]["version"])
    defs = b"".join(_bytes(1, _str(1, name) + _bytes(2, encode_schema(schema)))
                    for name, schema in doc["definitions"].items())
    return _str(1, doc["swagger"]) + _bytes(2, info) + _bytes(8, b"") + _bytes(9, defs)


@dataclass(frozen=True)
class Served:
    json_body: bytes
    protobuf_body: bytes
    etag: str


def build(v3_documents: list[Obj]) -> Served:
    doc = document(v3_documents)
    body = json.dumps(doc, separators=(",", ":")).encode()
    return Served(body, encode(doc), '"' + hashlib.sha512(body).hexdigest()[:32].upper() + '"')
