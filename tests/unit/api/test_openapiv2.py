"""/openapi/v2: the v3 component schemas as upstream's v2 spells them, and a protobuf body kubectl can read
(the kubectl side: tests/integration/test_kubectl_everyday.py validates a List against it)."""

from __future__ import annotations

import json

from refplatform.api.openapi import OpenApi
from refplatform.api.openapiv2 import _v2, build
from refplatform.api.protobuf import _fields


def test_v3_spellings_become_v2() -> None:
    assert _v2({"allOf": [{"$ref": "#/components/schemas/X"}], "description": "d"}) == {
        "$ref": "#/definitions/X", "description": "d"}
    assert _v2({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}) == {
        "type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": True}
    nested = _v2({"type": "object", "properties": {"a": {"type": "array", "items": {
        "$ref": "#/components/schemas/Y"}}}})
    assert nested["properties"]["a"]["items"] == {"$ref": "#/definitions/Y"}


def test_every_served_kind_has_its_definition_tied_to_its_group_version_kind() -> None:
    served = build([json.loads(d.body) for d in OpenApi().documents.values()])
    doc = json.loads(served.json_body)
    assert doc["swagger"] == "2.0"
    gvks = {(g["group"], g["version"], g["kind"]) for d in doc["definitions"].values()
            for g in d.get("x-kubernetes-group-version-kind", [])}
    assert {("", "v1", "ConfigMap"), ("", "v1", "Pod"), ("apps", "v1", "Deployment")} <= gvks
    assert "#/components/" not in served.json_body.decode()
    # the protobuf Document: swagger (1), info (2), paths (8), definitions (9) with one entry per definition
    fields = {number: value for number, _, value in _fields(served.protobuf_body, "Document")}
    assert fields[1] == b"2.0" and set(fields) == {1, 2, 8, 9}
    assert len(_fields(fields[9], "Definitions")) == len(doc["definitions"])
