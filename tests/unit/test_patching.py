"""PATCH application: JSON patch, merge patch and strategic merge patch, as upstream applies them.

The strategic-merge tables marked "upstream" restate cases of apimachinery's
``strategicpatch`` tests (original object, patch, expected result) against a
schema shaped like their ``MergeItem`` test type.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from refplatform.errors import RefPlatformError
from refplatform.patching import (
    FieldMeta, PatchError, PatchType, Strategy, StructMeta, UnsupportedPatchType, accepted_patch_types,
    apply_patch, schema_for, strategic_merge,
)

JSON_PATCH = "application/json-patch+json"
MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"


def _y(text: str) -> Any:
    return yaml.safe_load(text)


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml", "labels": {"app": "trainer"},
                     "finalizers": ["a/one", "b/two"],
                     "ownerReferences": [{"uid": "u1", "kind": "Job", "name": "j"}]},
        "spec": {
            "containers": [
                {"name": "main", "image": "train:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                 "ports": [{"containerPort": 8080, "name": "http"}],
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "sidecar", "image": "log:1"},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "nodeName": "n1",
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "main", "ready": True}, {"name": "sidecar", "ready": True}],
        },
    }


def _node() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"gpu": "h200"}},
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}],
                 "podCIDRs": ["10.0.0.0/24"]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"},
                                  {"type": "MemoryPressure", "status": "False"}],
                   "addresses": [{"type": "InternalIP", "address": "10.1.0.1"},
                                 {"type": "Hostname", "address": "n1"}]},
    }


# --------------------------------------------------------------------------- dispatch and bodies


@pytest.mark.parametrize(("content_type", "expected"), [
    (JSON_PATCH, PatchType.JSON),
    (MERGE, PatchType.MERGE),
    (SMP, PatchType.STRATEGIC),
    ("Application/Merge-Patch+JSON; charset=utf-8", PatchType.MERGE),
    ("application/apply-patch+yaml", PatchType.APPLY),
])
def test_content_types(content_type: str, expected: PatchType) -> None:
    assert PatchType.from_content_type(content_type) is expected


BUILTIN_ACCEPTED = ("the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/strategic-merge-patch+json, application/apply-patch+yaml")


@pytest.mark.parametrize(("content_type", "custom", "message"), [
    ("application/json", False, BUILTIN_ACCEPTED),
    ("", False, BUILTIN_ACCEPTED),
    (SMP, True, "the body of the request was in an unknown format - accepted media types include: "
     "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"),
])
def test_unsupported_content_types(content_type: str, custom: bool, message: str) -> None:
    """Apply patches are accepted (and merged by refplatform.fieldmanager, not by apply_patch)."""
    with pytest.raises(UnsupportedPatchType) as err:
        apply_patch(_pod(), "{}", content_type, "Pod", custom_resource=custom)
    assert str(err.value) == message
    assert err.value.code == 415
    assert isinstance(err.value, PatchError) and isinstance(err.value, RefPlatformError)


def test_accepted_patch_types() -> None:
    assert accepted_patch_types(False) == (PatchType.JSON, PatchType.MERGE, PatchType.STRATEGIC, PatchType.APPLY)
    assert accepted_patch_types(True) == (PatchType.JSON, PatchType.MERGE, PatchType.APPLY)


@pytest.mark.parametrize(("body", "content_type", "message"), [
    (b"\xff", MERGE, "invalid JSON in patch body: not UTF-8 (invalid start byte at byte 0)"),
    ("", MERGE, "invalid JSON in patch body: Expecting value: line 1 column 1 (char 0)"),
    ("{", SMP, "invalid JSON in patch body: Expecting property name enclosed in double quotes: "
     "line 1 column 2 (char 1)"),
    ('{"a": NaN}', MERGE, "invalid JSON in patch body: NaN is not valid JSON"),
    ("[]", MERGE, "invalid JSON document: a merge patch must be a JSON object, not an array"),
    ("[]", SMP, "invalid JSON document: a strategic merge patch must be a JSON object, not an array"),
    ('"x"', SMP, "invalid JSON document: a strategic merge patch must be a JSON object, not a string"),
    ("null", MERGE, "invalid JSON document: a merge patch must be a JSON object, not null"),
    ("{}", JSON_PATCH, "a JSON patch must be a JSON array of operations, not an object"),
    ("[1]", JSON_PATCH, "JSON patch operation 0 must be an object, not a number"),
])
def test_bad_bodies(body: Any, content_type: str, message: str) -> None:
    with pytest.raises(PatchError) as err:
        apply_patch(_pod(), body, content_type, "Pod")
    assert str(err.value) == message
    assert err.value.code == 400


@pytest.mark.parametrize("body", [
    b'{"metadata": {"labels": {"x": "1"}}}',
    '{"metadata": {"labels": {"x": "1"}}}',
    bytearray(b'{"metadata": {"labels": {"x": "1"}}}'),
    {"metadata": {"labels": {"x": "1"}}},
])
def test_body_forms(body: Any) -> None:
    out = apply_patch(_pod(), body, SMP, "Pod")
    assert out["metadata"]["labels"] == {"app": "trainer", "x": "1"}


@pytest.mark.parametrize(("content_type", "body"), [
    (JSON_PATCH, [{"op": "add", "path": "/metadata/labels/x", "value": "1"},
                  {"op": "remove", "path": "/spec/containers/1"}]),
    (MERGE, {"metadata": {"labels": {"app": None}}, "spec": {"containers": []}}),
    (SMP, {"spec": {"containers": [{"name": "main", "image": "train:2"}, {"name": "sidecar", "$patch": "delete"}]},
           "metadata": {"$deleteFromPrimitiveList/finalizers": ["a/one"]}}),
])
def test_inputs_are_never_mutated(content_type: str, body: Any) -> None:
    obj, patch = _pod(), copy.deepcopy(body)
    out = apply_patch(obj, patch, content_type, "Pod")
    assert obj == _pod() and patch == body
    assert out is not obj and out != obj
    out["spec"]["nodeName"] = "changed"
    assert obj["spec"]["nodeName"] == "n1"  # no shared structure


def test_python_client_conventions() -> None:
    """The official client sends a dict body as strategic merge and a list body as JSON patch."""
    node = _node()
    by_dict = apply_patch(node, json.dumps({"spec": {"unschedulable": True}}), SMP, "Node")
    by_list = apply_patch(node, json.dumps([{"op": "add", "path": "/spec/unschedulable", "value": True}]),
                          JSON_PATCH, "Node")
    assert by_dict == by_list
    assert by_dict["spec"]["unschedulable"] is True


# --------------------------------------------------------------------------- RFC 6902


@pytest.mark.parametrize(("ops", "check"), [
    ([{"op": "add", "path": "/metadata/labels/x", "value": "1"}],
     lambda o: o["metadata"]["labels"] == {"app": "trainer", "x": "1"}),
    ([{"op": "replace", "path": "/spec/containers/0/image", "value": "train:2"}],
     lambda o: o["spec"]["containers"][0]["image"] == "train:2"),
    ([{"op": "remove", "path": "/spec/tolerations"}], lambda o: "tolerations" not in o["spec"]),
    ([{"op": "add", "path": "/spec/containers/-", "value": {"name": "third"}}],
     lambda o: [c["name"] for c in o["spec"]["containers"]] == ["main", "sidecar", "third"]),
    ([{"op": "test", "path": "/spec/nodeName", "value": "n1"},
      {"op": "replace", "path": "/spec/nodeName", "value": "n2"}], lambda o: o["spec"]["nodeName"] == "n2"),
    ([{"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/copy"}],
     lambda o: o["metadata"]["labels"]["copy"] == "trainer"),
    ([{"op": "move", "from": "/spec/nodeName", "path": "/status/nominatedNodeName"}],
     lambda o: "nodeName" not in o["spec"] and o["status"]["nominatedNodeName"] == "n1"),
    ([{"op": "add", "path": "/metadata/annotations", "value": {"a~b/c": "x"}},
      {"op": "remove", "path": "/metadata/annotations/a~0b~1c"}], lambda o: o["metadata"]["annotations"] == {}),
    ([], lambda o: o == _pod()),
])
def test_json_patch(ops: list[dict[str, Any]], check: Any) -> None:
    assert check(apply_patch(_pod(), json.dumps(ops), JSON_PATCH, "Pod"))


@pytest.mark.parametrize(("ops", "message"), [
    ([{"op": "test", "path": "/spec/nodeName", "value": "n2"}],
     "JSON patch operation 0 (test /spec/nodeName) failed: n1 (<class 'str'>) is not equal to tested value "
     "n2 (<class 'str'>)"),
    ([{"op": "add", "path": "/metadata/labels/x", "value": "1"}, {"op": "replace", "path": "/spec/nope", "value": 1}],
     "JSON patch operation 1 (replace /spec/nope) failed: can't replace a non-existent object 'nope'"),
    ([{"op": "remove", "path": "/spec/containers/5"}],
     "JSON patch operation 0 (remove /spec/containers/5) failed: can't remove a non-existent object '5'"),
    ([{"op": "add", "path": "/missing/deep", "value": 1}],
     "JSON patch operation 0 (add /missing/deep) failed: member 'missing' not found"),
    ([{"op": "move", "from": "/nope", "path": "/spec/x"}],
     "JSON patch operation 0 (move /spec/x) failed: member 'nope' not found"),
    ([{"op": "frob", "path": "/a"}], "JSON patch operation 0 (frob /a) failed: Unknown operation 'frob'"),
    ([{"path": "/a"}], "JSON patch operation 0 (? /a) failed: Operation does not contain 'op' member"),
    ([{"op": "replace", "path": "", "value": []}], "the patched document must be a JSON object, not an array"),
])
def test_json_patch_failures(ops: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(PatchError) as err:
        apply_patch(_pod(), json.dumps(ops), JSON_PATCH, "Pod")
    assert str(err.value) == message
    assert err.value.code == 422


# --------------------------------------------------------------------------- RFC 7386


@pytest.mark.parametrize(("target", "patch", "result"), [  # RFC 7386 appendix A, object patches
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}, {"spec": {"containers": [{"name": "c"}]}},
     {"spec": {"containers": [{"name": "c"}]}}),  # lists replace, even merge-keyed ones
])
def test_merge_patch(target: dict[str, Any], patch: dict[str, Any], result: dict[str, Any]) -> None:
    assert apply_patch(target, json.dumps(patch), MERGE, "Pod") == result


def test_kubectl_label_and_annotate_merge_patch() -> None:
    body = {"metadata": {"labels": {"app": None, "team": "ml"}, "annotations": {"note": "x"}}}
    out = apply_patch(_pod(), json.dumps(body), MERGE, "Pod")
    assert out["metadata"]["labels"] == {"team": "ml"}
    assert out["metadata"]["annotations"] == {"note": "x"}
    assert out["metadata"]["finalizers"] == ["a/one", "b/two"]


# --------------------------------------------------------------------------- strategic merge: upstream cases

_ITEM_FIELDS: dict[str, FieldMeta] = {}
MERGE_ITEM = StructMeta(_ITEM_FIELDS)
_ITEM_FIELDS.update({
    "mergingList": FieldMeta(Strategy.MERGE, "name", MERGE_ITEM),
    "nonMergingList": FieldMeta(schema=MERGE_ITEM),
    "mergingIntList": FieldMeta(Strategy.MERGE),
    "mergeItemPtr": FieldMeta(Strategy.MERGE, "name", MERGE_ITEM),
    "replacingItem": FieldMeta(Strategy.REPLACE),
    "retainKeysMap": FieldMeta(schema=MERGE_ITEM),
    "retainKeysMergingList": FieldMeta(Strategy.MERGE, "name", MERGE_ITEM),
})

UPSTREAM_CASES = [
    ("unique scalars when merging lists", "mergingIntList: [1, 2]", "mergingIntList: [2, 3]",
     "mergingIntList: [1, 2, 3]"),
    ("delete map from nested map", "simpleMap: {key1: 1, key2: 1}", "simpleMap: {$patch: delete}", "simpleMap: {}"),
    ("delete all items from merging list", "mergingList: [{name: 1}, {name: 2}]",
     "mergingList: [{$patch: replace}]", "mergingList: []"),
    ("merge empty merging lists", "mergingList: []", "mergingList: []", "mergingList: []"),
    ("delete all keys from map", "{name: 1, value: 1}", "{$patch: replace}", "{}"),
    ("add key and delete all keys from map", "{name: 1, value: 1}", "{other: a, $patch: replace}", "{other: a}"),
    ("delete all duplicate entries in a merging list",
     "mergingList: [{name: 1}, {name: 1}, {name: 2, value: a}, {name: 3}, {name: 3}]",
     "mergingList: [{name: 1, $patch: delete}, {name: 3, $patch: delete}]", "mergingList: [{name: 2, value: a}]"),
    ("retainKeys list can delete a field when no retainKeys directive present",
     "retainKeysMergingList: [{name: bar}, {name: foo, value: a}]",
     "retainKeysMergingList: [{name: foo, value: null}]", "retainKeysMergingList: [{name: bar}, {name: foo}]"),
    ("preserve the order from the patch in a merging list",
     "mergingList: [{name: 1}, {name: 2, value: b}, {name: 3}]",
     "mergingList: [{name: 3, value: c}, {name: 1, value: a}, {name: 2, other: x}]",
     "mergingList: [{name: 3, value: c}, {name: 1, value: a}, {name: 2, value: b, other: x}]"),
    ("preserve the order from the patch in a merging list 2",
     "mergingList: [{name: 1}, {name: 2, value: b}, {name: 3}]",
     "mergingList: [{name: 3, value: c}, {name: 1, value: a}]",
     "mergingList: [{name: 2, value: b}, {name: 3, value: c}, {name: 1, value: a}]"),
    ("preserve the order from the patch in a merging int list", "mergingIntList: [1, 2, 3]",
     "mergingIntList: [3, 1]", "mergingIntList: [2, 3, 1]"),
    ("$setElementOrder contains item that is not present in the list to be merged",
     "mergingList: [{name: 1}, {name: 3}]",
     "{$setElementOrder/mergingList: [{name: 3}, {name: 2}, {name: 1}], "
     "mergingList: [{name: 3, value: 3}, {name: 1, value: 1}]}",
     "mergingList: [{name: 3, value: 3}, {name: 1, value: 1}]"),
    ("$setElementOrder contains item that is not present in the int list to be merged",
     "mergingIntList: [1, 3]", "{$setElementOrder/mergingIntList: [3, 2, 1]}", "mergingIntList: [3, 1]"),
    ("$deleteFromPrimitiveList of nonexistent item should not add the item", "mergingIntList: [1, 2]",
     "{$deleteFromPrimitiveList/mergingIntList: [3]}", "mergingIntList: [1, 2]"),
    ("$deleteFromPrimitiveList on empty primitive list should not add the item", "mergingIntList: null",
     "{$deleteFromPrimitiveList/mergingIntList: [3]}", "mergingIntList: null"),
    ("$deleteFromPrimitiveList on nonexistent primitive list should not add the list", "foo: [bar]",
     "{$deleteFromPrimitiveList/mergingIntList: [3]}", "foo: [bar]"),
    ("$deleteFromPrimitiveList from a list without merge patch strategy", "nonMergingIntList: [1, 2, 3]",
     "{$deleteFromPrimitiveList/nonMergingIntList: [2]}", "nonMergingIntList: [1, 3]"),
    ("nested patch merge with empty list", "{name: hi}",
     "mergingList: [{name: hello}, {$patch: delete, name: doesntexist}]", "{name: hi, mergingList: [{name: hello}]}"),
    ("nested patch merge with empty list (three-way)", "{name: hi, mergingList: [{name: hello2}]}",
     "{$setElementOrder/mergingList: [{name: hello}, {name: doesntexist}], "
     "mergingList: [{name: hello}, {$patch: delete, name: doesntexist}]}",
     "{name: hi, mergingList: [{name: hello}, {name: hello2}]}"),
    ("delete all duplicate items in lists of scalars", "mergingIntList: [1, 2, 3, 3, 4]",
     "{$setElementOrder/mergingIntList: [1, 2], $deleteFromPrimitiveList/mergingIntList: [3]}",
     "mergingIntList: [1, 2, 4]"),
    ("merge lists of maps", "mergingList: [{name: 1, other: a}, {name: 2, value: 2, other: b}]",
     "{$setElementOrder/mergingList: [{name: 4}, {name: 1}, {name: 2}, {name: 3}], "
     "mergingList: [{name: 4, value: 4}, {name: 3, value: 3}]}",
     "mergingList: [{name: 4, value: 4}, {name: 1, other: a}, {name: 2, value: 2, other: b}, {name: 3, value: 3}]"),
    ("add field to map in merging list with conflict", "mergingList: [{name: 1, other: a}, {name: 3, value: 2, other: b}]",
     "{$setElementOrder/mergingList: [{name: 1}, {name: 2}], mergingList: [{name: 1, value: 1}, {name: 2, value: 2}]}",
     "mergingList: [{name: 1, value: 1, other: a}, {name: 2, value: 2}, {name: 3, value: 2, other: b}]"),
    ("delete missing map from merging list with conflict", "mergingList: [{name: 3, other: a}]",
     "{$setElementOrder/mergingList: [{name: 2}], mergingList: [{name: 2}, {name: 1, $patch: delete}]}",
     "mergingList: [{name: 2}, {name: 3, other: a}]"),
    ("add map and delete map from merging list",
     "mergingList: [{name: 1}, {name: 2, other: b}, {name: 4, other: c}]",
     "{$setElementOrder/mergingList: [{name: 2}, {name: 3}], mergingList: [{name: 3}, {name: 1, $patch: delete}]}",
     "mergingList: [{name: 2, other: b}, {name: 4, other: c}, {name: 3}]"),
    ("add map and delete map from merging list with conflict",
     "mergingList: [{name: 1, other: a}, {name: 4, other: c}]",
     "{$setElementOrder/mergingList: [{name: 2}, {name: 3}], "
     "mergingList: [{name: 2}, {name: 3}, {name: 1, $patch: delete}]}",
     "mergingList: [{name: 4, other: c}, {name: 2}, {name: 3}]"),
    ("delete field from map in merging list", "mergingList: [{name: 1, value: 1, other: a}, {name: 2, value: 2}]",
     "{$setElementOrder/mergingList: [{name: 1}, {name: 2}], mergingList: [{name: 1, value: null}]}",
     "mergingList: [{name: 1, other: a}, {name: 2, value: 2}]"),
    ("replace non merging list nested in merging list",
     "mergingList: [{name: 1, other: a, nonMergingList: [{name: 1}, {name: 2, value: 2}]}, {name: 2, other: b}]",
     "{$setElementOrder/mergingList: [{name: 1}, {name: 2}], "
     "mergingList: [{name: 1, nonMergingList: [{name: 1, value: 1}]}]}",
     "mergingList: [{name: 1, other: a, nonMergingList: [{name: 1, value: 1}]}, {name: 2, other: b}]"),
    ("set elements order in a list with server-only items 2",
     "mergingList: [{name: 1, other: a}, {name: 2, value: 2}, {name: 9}, {name: 3, value: 3}, {name: 4, value: 4}]",
     "{$setElementOrder/mergingList: [{name: 2}, {name: 1}, {name: 4}, {name: 3}]}",
     "mergingList: [{name: 2, value: 2}, {name: 1, other: a}, {name: 9}, {name: 4, value: 4}, {name: 3, value: 3}]"),
    ("set elements order in a int list with server-only items 3", "mergingIntList: [1, 2, 7, 9, 8, 3, 4]",
     "{$setElementOrder/mergingIntList: [2, 1, 4, 3]}", "mergingIntList: [2, 1, 7, 9, 8, 4, 3]"),
    ("add and delete an item in a int list and preserve order", "mergingIntList: [1, 2, 3]",
     "{$setElementOrder/mergingIntList: [4, 2, 1], mergingIntList: [4], $deleteFromPrimitiveList/mergingIntList: [3]}",
     "mergingIntList: [4, 2, 1]"),
    ("behavior of set element order for a merging list with duplicate",
     "mergingList: [{name: 1}, {name: 2, value: dup1}, {name: 3}, {name: 2, value: dup2}, {name: 4}]",
     "{$setElementOrder/mergingList: [{name: 2}, {name: 1}, {name: 4}, {name: 3}, {name: 2}]}",
     "mergingList: [{name: 2, value: dup1}, {name: 2, value: dup2}, {name: 1}, {name: 4}, {name: 3}]"),
    ("retainKeys map should clear defaulted field with conflict (discriminated union)",
     "retainKeysMap: {name: type1, value: foo}",
     "retainKeysMap: {$retainKeys: [name, other], name: type2, other: bar}",
     "retainKeysMap: {name: type2, other: bar}"),
    ("retainKeys map deletes a field and clears a field", "retainKeysMap: {name: foo, value: bar, other: a}",
     "retainKeysMap: {$retainKeys: [name], value: null}", "retainKeysMap: {name: foo}"),
    ("retainKeys map adds a field in a nested map", "retainKeysMap: {name: foo, value: bar, simpleMap: {key1: a, key3: c}}",
     "retainKeysMap: {$retainKeys: [name, simpleMap, value], simpleMap: {key2: b}}",
     "retainKeysMap: {name: foo, value: bar, simpleMap: {key1: a, key2: b, key3: c}}"),
    ("replacing strategy replaces a map", "replacingItem: {a: 1, b: 2}", "replacingItem: {b: 3}",
     "replacingItem: {b: 3}"),
]


@pytest.mark.parametrize(("description", "original", "patch", "result"), UPSTREAM_CASES,
                         ids=[c[0] for c in UPSTREAM_CASES])
def test_strategic_merge_upstream_cases(description: str, original: str, patch: str, result: str) -> None:
    assert strategic_merge(_y(original), _y(patch), MERGE_ITEM) == _y(result)


UPSTREAM_ERRORS = [
    ("should check if order in $setElementOrder and patch list match",
     "mergingList: [{name: 1}, {name: 3}, {name: 2}]",
     "{$setElementOrder/mergingList: [{name: 1}, {name: 2}, {name: 3}], "
     "mergingList: [{name: 3, value: 3}, {name: 1, value: 1}]}",
     "the order in patch list:\n[map[name:3 value:3] map[name:1 value:1]]\n doesn't match $setElementOrder "
     "list:\n[map[name:1] map[name:2] map[name:3]]", 500),
    ("int list order mismatch", "mergingIntList: [1, 3, 2]",
     "{$setElementOrder/mergingIntList: [1, 2, 3], mergingIntList: [3, 1]}",
     "the order in patch list:\n[3 1]\n doesn't match $setElementOrder list:\n[1 2 3]", 500),
    ("missing merge key should error out", "mergingList: [{name: 1, value: a}]", "mergingList: [{value: b}]",
     "map: map[value:b] does not contain declared merge key: name", 500),
    ("delete directive without merge key", "mergingList: [{name: 1}]", "mergingList: [{$patch: delete}]",
     "map: map[$patch:delete] does not contain declared merge key: name", 500),
    ("$patch: merge in a list", "mergingList: [{name: 1}]", "mergingList: [{name: 1, $patch: merge}]",
     "merging lists cannot yet be specified in the patch", 500),
    ("$patch: merge in a map", "simpleMap: {a: 1}", "simpleMap: {$patch: merge}",
     "unknown patch type: merge in map: map[$patch:merge]", 500),
    ("unknown $patch in a list", "mergingList: [{name: 1}]", "mergingList: [{name: 1, $patch: frob}]",
     "unknown patch type: frob in map: map[$patch:frob name:1]", 500),
    ("retainKeys must be a list", "retainKeysMap: {name: a}", "retainKeysMap: {$retainKeys: name}",
     "invalid patch format of retainKeys", 400),
    ("patch fields must be retained", "retainKeysMap: {name: a}", "retainKeysMap: {$retainKeys: [name], value: b}",
     "invalid patch format of retainKeys", 400),
    ("bad $setElementOrder key", "mergingList: []", "{$setElementOrderX: []}",
     "invalid patch format of setElementOrder list", 400),
    ("bad $deleteFromPrimitiveList key", "mergingIntList: [1]", "{$deleteFromPrimitiveListX/mergingIntList: [1]}",
     "invalid patch format of primitive list", 400),
    ("$setElementOrder must be a list", "mergingIntList: [1]", "{$setElementOrder/mergingIntList: 1}",
     "expected a []interface {}, but received a int64", 500),
    ("lists of lists", "mergingIntList: [[1]]", "mergingIntList: [[2]]", "lists of lists are not supported", 422),
    ("element types differ", "mergingIntList: [1]", "mergingIntList: [a]",
     "list element types are not identical: [[1] [a]]", 500),
    ("merging a map list without merge key", "mergingIntList: [{a: 1}]", "mergingIntList: [{a: 2}]",
     "cannot merge lists without merge key for type map", 500),
]


@pytest.mark.parametrize(("description", "original", "patch", "message", "code"), UPSTREAM_ERRORS,
                         ids=[c[0] for c in UPSTREAM_ERRORS])
def test_strategic_merge_errors(description: str, original: str, patch: str, message: str, code: int) -> None:
    with pytest.raises(PatchError) as err:
        strategic_merge(_y(original), _y(patch), MERGE_ITEM)
    assert str(err.value) == message
    assert err.value.code == code


# --------------------------------------------------------------------------- strategic merge: core kinds


def _names(items: list[dict[str, Any]], key: str = "name") -> list[Any]:
    return [i[key] for i in items]


def test_containers_merge_by_name() -> None:
    """Documented upstream example: patching one container keeps the others (merge key ``name``)."""
    out = apply_patch(_pod(), json.dumps({"spec": {"containers": [{"name": "main", "image": "train:2"}]}}),
                      SMP, "Pod")
    main, sidecar = out["spec"]["containers"]
    assert main["image"] == "train:2" and main["env"] == _pod()["spec"]["containers"][0]["env"]
    assert sidecar == {"name": "sidecar", "image": "log:1"}


def test_new_container_is_added() -> None:
    """A patch item absent from the live list is added; upstream places it by its position in the patch."""
    patch = {"spec": {"containers": [{"name": "sidecar", "image": "log:2"}, {"name": "debug", "image": "busybox"}]}}
    out = apply_patch(_pod(), json.dumps(patch), SMP, "Pod")
    assert _names(out["spec"]["containers"]) == ["main", "sidecar", "debug"]
    patch = {"spec": {"containers": [{"name": "debug", "image": "busybox"}]}}
    out = apply_patch(_pod(), json.dumps(patch), SMP, "Pod")
    assert _names(out["spec"]["containers"]) == ["debug", "main", "sidecar"]


def test_delete_container_with_patch_directive() -> None:
    """Documented upstream example: ``$patch: delete`` removes the list item with that merge key."""
    patch = {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}
    out = apply_patch(_pod(), json.dumps(patch), SMP, "Pod")
    assert _names(out["spec"]["containers"]) == ["main"]


def test_condition_updated_by_type() -> None:
    """Status conditions merge by ``type``: one condition changes, the rest stay."""
    patch = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Evicted"}]}}
    out = apply_patch(_pod(), json.dumps(patch), SMP, "Pod")
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False", "reason": "Evicted"},
                                           {"type": "PodScheduled", "status": "True"}]
    patch = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    out = apply_patch(_node(), json.dumps(patch), SMP, "Node")
    assert out["status"]["conditions"][0] == {"type": "Ready", "status": "False", "reason": "KubeletReady"}
    assert out["status"]["conditions"][1]["type"] == "MemoryPressure"


def test_taints_are_replaced() -> None:
    """Node ``spec.taints`` has no patch strategy upstream: the list in the patch replaces it."""
    patch = {"spec": {"taints": [{"key": "c", "effect": "NoSchedule"}]}}
    out = apply_patch(_node(), json.dumps(patch), SMP, "Node")
    assert out["spec"]["taints"] == [{"key": "c", "effect": "NoSchedule"}]


def test_kubectl_cordon() -> None:
    out = apply_patch(_node(), '{"spec":{"unschedulable":true}}', SMP, "Node")
    assert out["spec"]["unschedulable"] is True
    assert out["spec"]["taints"] == _node()["spec"]["taints"]
    uncordoned = apply_patch(out, '{"spec":{"unschedulable":null}}', SMP, "Node")
    assert "unschedulable" not in uncordoned["spec"]


def test_kubectl_label_strategic() -> None:
    body = {"metadata": {"labels": {"gpu": None, "zone": "a"}}}
    assert apply_patch(_node(), json.dumps(body), SMP, "Node")["metadata"]["labels"] == {"zone": "a"}


@pytest.mark.parametrize(("kind", "make", "patch", "path", "expected"), [
    ("Pod", _pod, {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "3"},
                                                                    {"name": "C", "value": "4"}]}]}},
     ("spec", "containers", 0, "env"),
     [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]),
    ("Pod", _pod, {"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 8080, "protocol": "TCP"},
                                                                      {"containerPort": 9090}]}]}},
     ("spec", "containers", 0, "ports"),
     [{"containerPort": 8080, "name": "http", "protocol": "TCP"}, {"containerPort": 9090}]),
    ("Pod", _pod, {"spec": {"containers": [{"name": "main", "volumeMounts": [
        {"mountPath": "/data", "readOnly": True}]}]}},
     ("spec", "containers", 0, "volumeMounts"), [{"name": "data", "mountPath": "/data", "readOnly": True}]),
    ("Pod", _pod, {"spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]}},
     ("spec", "volumes"), [{"name": "scratch", "emptyDir": {}}, {"name": "data", "emptyDir": {}}]),
    ("Pod", _pod, {"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"],
                                         "hostPath": {"path": "/mnt"}}]}},
     ("spec", "volumes"), [{"name": "data", "hostPath": {"path": "/mnt"}}]),
    ("Pod", _pod, {"spec": {"tolerations": [{"key": "other", "operator": "Exists"}]}},
     ("spec", "tolerations"), [{"key": "other", "operator": "Exists"}]),
    ("Pod", _pod, {"status": {"containerStatuses": [{"name": "main", "ready": False}]}},
     ("status", "containerStatuses"), [{"name": "main", "ready": False}]),
    ("Pod", _pod, {"metadata": {"finalizers": ["c/three", "a/one"]}},
     ("metadata", "finalizers"), ["c/three", "a/one", "b/two"]),  # upstream's interleaving
    ("Pod", _pod, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/one"]}},
     ("metadata", "finalizers"), ["b/two"]),
    ("Pod", _pod, {"metadata": {"ownerReferences": [{"uid": "u1", "controller": True},
                                                    {"uid": "u2", "kind": "Node", "name": "n1"}]}},
     ("metadata", "ownerReferences"),
     [{"uid": "u1", "kind": "Job", "name": "j", "controller": True}, {"uid": "u2", "kind": "Node", "name": "n1"}]),
    ("Pod", _pod, {"metadata": {"ownerReferences": [{"uid": "u1", "$patch": "delete"}]}},
     ("metadata", "ownerReferences"), []),
    ("Pod", _pod, {"spec": {"imagePullSecrets": [{"name": "regcred"}]}},
     ("spec", "imagePullSecrets"), [{"name": "regcred"}]),
    ("Pod", _pod, {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}},
     ("spec", "containers"), [{"name": "only", "image": "x"}]),
    ("Pod", _pod, {"spec": {"$patch": "replace", "nodeName": "n9"}}, ("spec",), {"nodeName": "n9"}),
    ("Node", _node, {"status": {"addresses": [{"type": "InternalIP", "address": "10.1.0.2"}]}},
     ("status", "addresses"), [{"type": "InternalIP", "address": "10.1.0.2"}, {"type": "Hostname", "address": "n1"}]),
    ("Node", _node, {"spec": {"podCIDRs": ["fd00::/64"]}}, ("spec", "podCIDRs"), ["fd00::/64", "10.0.0.0/24"]),
    ("Namespace", lambda: {"status": {"conditions": [{"type": "A", "status": "True"}]}},
     {"status": {"conditions": [{"type": "B", "status": "True"}]}}, ("status", "conditions"),
     [{"type": "B", "status": "True"}, {"type": "A", "status": "True"}]),
    ("Event", lambda: {"metadata": {"finalizers": ["x"]}, "related": [{"name": "a"}]},
     {"metadata": {"finalizers": ["y"]}, "related": [{"name": "b"}]}, ("related",), [{"name": "b"}]),
    ("Lease", lambda: {"metadata": {"finalizers": ["x"]}}, {"metadata": {"finalizers": ["y"]}},
     ("metadata", "finalizers"), ["y", "x"]),
    ("CustomResourceDefinition", lambda: {"status": {"conditions": [{"type": "Established"}]}},
     {"status": {"conditions": [{"type": "NamesAccepted"}]}}, ("status", "conditions"), [{"type": "NamesAccepted"}]),
])
def test_core_merge_keys(kind: str, make: Any, patch: dict[str, Any], path: tuple[Any, ...], expected: Any) -> None:
    out: Any = apply_patch(make(), json.dumps(patch), SMP, kind)
    for part in path:
        out = out[part]
    assert out == expected


def test_kubectl_apply_style_patch() -> None:
    """A three-way patch as kubectl apply sends it: order directive, additions, deletions, retained keys."""
    patch = {
        "metadata": {"$setElementOrder/finalizers": ["b/two", "c/three"], "finalizers": ["c/three"],
                     "$deleteFromPrimitiveList/finalizers": ["a/one"]},
        "spec": {"$setElementOrder/containers": [{"name": "main"}, {"name": "new"}],
                 "containers": [{"name": "main", "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
                                 "env": [{"name": "C", "value": "3"}, {"name": "B", "$patch": "delete"}]},
                                {"name": "new", "image": "n:1"},
                                {"name": "sidecar", "$patch": "delete"}]},
    }
    out = apply_patch(_pod(), json.dumps(patch), SMP, "Pod")
    assert out["metadata"]["finalizers"] == ["b/two", "c/three"]
    assert _names(out["spec"]["containers"]) == ["main", "new"]
    assert out["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "C", "value": "3"}]
    assert "$setElementOrder/env" not in json.dumps(out)


def test_null_deletes_and_directives_never_leak() -> None:
    patch = {"spec": {"nodeName": None, "affinity": {"nodeAffinity": {"x": None, "$patch": "delete"},
                                                     "podAffinity": {"$retainKeys": ["a"], "a": 1, "b": None}}}}
    out = apply_patch(_pod(), json.dumps(patch), SMP, "Pod")
    assert "nodeName" not in out["spec"]
    assert out["spec"]["affinity"] == {"podAffinity": {"a": 1}}


def test_whole_object_directives() -> None:
    assert apply_patch(_pod(), '{"$patch": "delete"}', SMP, "Pod") == {}
    assert apply_patch(_pod(), '{"$patch": "replace", "kind": "Pod"}', SMP, "Pod") == {"kind": "Pod"}


def test_unknown_kind_merges_metadata_only() -> None:
    assert schema_for("Lease") is schema_for("SomethingElse")
    assert schema_for("Pod").lookup("spec").schema is not None
