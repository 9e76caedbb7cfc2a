"""Field ownership and server-side apply (refplatform.fieldmanager), as pure functions of objects."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from refplatform.fieldmanager import (
    ANCIENT, MAX_UPDATE_MANAGERS, ApplyConflict, FieldManagerError, ManagedEntry, Operation, apply, decode_entries,
    encode_entries, fields_v1, owned_paths, owned_trie, path_string, record_update,
)
from refplatform.patching import schema_for

DEPLOYMENT = schema_for("Deployment")
POD = schema_for("Pod")


def deployment(replicas: int = 1, image: str = "busybox:1", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "d", "uid": "u", "resourceVersion": "7",
                         "labels": labels or {"app": "web"}},
            "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "web"}},
                                                        "spec": {"containers": [{"name": "main", "image": image}]}}},
            "status": {"replicas": 0}}


def config(**spec: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "d"}}
    if spec:
        cfg["spec"] = spec
    return cfg


def created(obj: dict[str, Any], manager: str = "kubectl-create") -> list[ManagedEntry]:
    return record_update([], {}, obj, manager=manager, api_version="apps/v1", now="T0", schema=DEPLOYMENT,
                         has_status=True)


def do_apply(live: dict[str, Any] | None, cfg: dict[str, Any], entries: list[ManagedEntry], manager: str = "kubectl",
             force: bool = False) -> tuple[dict[str, Any], list[ManagedEntry]]:
    return apply(live, cfg, entries, manager=manager, force=force, api_version="apps/v1", now="T1",
                 schema=DEPLOYMENT, has_status=True)


def owned(entries: list[ManagedEntry], manager: str, operation: Operation) -> set[str]:
    entry = next(e for e in entries if e.manager == manager and e.operation is operation)
    return {path_string(p) for p in entry.fields}


def test_a_create_owns_what_it_set_but_not_what_the_server_sets_nor_status() -> None:
    entries = created(deployment())
    assert owned(entries, "kubectl-create", Operation.UPDATE) == {
        ".metadata.labels", ".metadata.labels.app", ".spec.replicas", ".spec.template.metadata.labels",
        ".spec.template.metadata.labels.app", ".spec.template.spec.containers",
        '.spec.template.spec.containers[name="main"]', '.spec.template.spec.containers[name="main"].image',
        '.spec.template.spec.containers[name="main"].name'}
    assert encode_entries(entries)[0]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"] == {
        ".": {}, 'k:{"name":"main"}': {".": {}, "f:image": {}, "f:name": {}}}


def test_fields_v1_round_trips_and_bad_managed_fields_name_the_entry() -> None:
    entries = created(deployment())
    assert decode_entries(encode_entries(entries)) == entries
    with pytest.raises(FieldManagerError, match=r"managedFields\[0\].operation must be Apply or Update"):
        decode_entries([{"manager": "x", "operation": "Delete"}])
    with pytest.raises(FieldManagerError, match=r"managedFields\[1\]: fieldsV1 key 'spec'"):
        decode_entries([{"manager": "x", "operation": "Update"},
                        {"manager": "y", "operation": "Update", "fieldsV1": {"spec": {}}}])
    assert fields_v1([("f:a",), ("f:a", "f:b")]) == {"f:a": {".": {}, "f:b": {}}}


def test_an_update_takes_over_what_it_changed_and_a_no_op_adds_no_entry() -> None:
    live = deployment()
    entries = created(live)
    edited = deployment(replicas=4)
    after = record_update(entries, live, edited, manager="kubectl-edit", api_version="apps/v1", now="T2",
                          schema=DEPLOYMENT, has_status=True)
    assert owned(after, "kubectl-edit", Operation.UPDATE) == {".spec.replicas"}
    assert ".spec.replicas" not in owned(after, "kubectl-create", Operation.UPDATE)
    same = record_update(after, edited, copy.deepcopy(edited), manager="kubectl-label", api_version="apps/v1",
                         now="T3", schema=DEPLOYMENT, has_status=True)
    assert same == after


def test_an_apply_that_changes_another_managers_field_conflicts_and_force_takes_it() -> None:
    live = deployment()
    entries = created(live)
    with pytest.raises(ApplyConflict) as info:
        do_apply(live, config(replicas=3), entries)
    assert str(info.value) == ('Apply failed with 1 conflict: conflict with "kubectl-create" using apps/v1: '
                               ".spec.replicas")
    same, shared = do_apply(live, config(replicas=1), entries)  # same value: shared, no conflict
    assert ".spec.replicas" in owned(shared, "kubectl-create", Operation.UPDATE) & owned(shared, "kubectl",
                                                                                           Operation.APPLY)
    forced, taken = do_apply(live, config(replicas=3), entries, force=True)
    assert forced["spec"]["replicas"] == 3 and live["spec"]["replicas"] == 1
    assert ".spec.replicas" not in owned(taken, "kubectl-create", Operation.UPDATE)


def test_conflicts_with_several_managers_are_grouped_by_manager() -> None:
    live = deployment()
    entries = created(live)
    _, entries = do_apply(live, config(replicas=1), entries, manager="scaler")
    cfg = config(replicas=2, template={"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}})
    with pytest.raises(ApplyConflict) as info:
        do_apply(live, cfg, entries)
    assert str(info.value) == (
        'Apply failed with 3 conflicts: conflicts with "kubectl-create" using apps/v1:\n'
        "- .spec.replicas\n"
        '- .spec.template.spec.containers[name="main"].image\n'
        'conflicts with "scaler":\n'
        "- .spec.replicas")


def test_fields_an_applier_drops_go_unless_someone_else_holds_them() -> None:
    live, entries = do_apply(None, config(replicas=2, template={"metadata": {"labels": {"app": "web", "v": "1"}}}),
                             [])
    live2, entries = do_apply(live, config(template={"metadata": {"labels": {"app": "web"}}}), entries,
                              manager="other")
    after, entries = do_apply(live2, config(), entries)
    assert "replicas" not in after["spec"]
    assert after["spec"]["template"]["metadata"]["labels"] == {"app": "web"}  # "other" holds app; v went
    assert live2["spec"]["template"]["metadata"]["labels"] == {"app": "web", "v": "1"}  # inputs untouched
    assert [e.manager for e in entries] == ["other"]  # an applier holding nothing has no entry


def test_keyed_lists_merge_by_key_and_sets_by_value() -> None:
    live = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["a"]},
            "spec": {"containers": [{"name": "main", "image": "i:1"}, {"name": "side", "image": "s:1"}]}}
    entries = record_update([], {}, live, manager="creator", api_version="v1", now="T0", schema=POD)
    cfg = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["b"]},
           "spec": {"containers": [{"name": "side", "env": [{"name": "X", "value": "1"}]}]}}
    merged, entries = apply(live, cfg, entries, manager="m", force=False, api_version="v1", now="T1", schema=POD)
    assert merged["metadata"]["finalizers"] == ["a", "b"]
    assert merged["spec"]["containers"] == [{"name": "main", "image": "i:1"},
                                            {"name": "side", "image": "s:1", "env": [{"name": "X", "value": "1"}]}]
    assert '.metadata.finalizers[="b"]' in owned(entries, "m", Operation.APPLY)
    assert '.spec.containers[name="side"].env[name="X"].value' in owned(entries, "m", Operation.APPLY)


def test_old_update_managers_fold_into_ancient_changes() -> None:
    live = deployment()
    entries = created(live)
    for n in range(MAX_UPDATE_MANAGERS + 2):
        new = deployment(**{"app": "web", f"l{n}": "x"})
        new["metadata"]["labels"].update(live["metadata"]["labels"])
        entries = record_update(entries, live, new, manager=f"m{n}", api_version="apps/v1", now=f"T{n + 10}",
                                schema=DEPLOYMENT, has_status=True)
        live = new
    updates = [e for e in entries if e.operation is Operation.UPDATE]
    assert len(updates) == MAX_UPDATE_MANAGERS  # the ancient-changes bucket included, as upstream
    ancient = next(e for e in entries if e.manager == ANCIENT)
    assert ".spec.replicas" in {path_string(p) for p in ancient.fields}


@pytest.mark.parametrize("obj", [
    deployment(),
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": "p", "finalizers": ["a", "b"], "labels": {}, "annotations": {"x": "1"}, "uid": "u"},
     "spec": {"containers": [{"name": "main", "image": "i", "env": [{"name": "A", "value": "1"}],
                              "args": ["x", "y"], "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
              "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"key": "k"}]},
     "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
])
@pytest.mark.parametrize(("subresource", "has_status"), [("", True), ("", False), ("status", True)])
def test_a_creates_trie_is_the_same_as_encoding_its_paths(obj: dict[str, Any], subresource: str,
                                                        has_status: bool) -> None:
    """The create fast path (owned_trie) and the general one (owned_paths, then fields_v1) agree, key order too."""
    schema = POD if obj["kind"] == "Pod" else DEPLOYMENT
    fast = owned_trie(obj, schema, subresource, has_status)
    slow = fields_v1(owned_paths(obj, schema, subresource, has_status))
    assert fast == slow and json.dumps(fast) == json.dumps(slow)
    fast_entry = record_update([], {}, obj, manager="m", api_version="v1", now="T", schema=schema,
                               subresource=subresource, has_status=has_status)
    assert [e.fields for e in fast_entry] == ([owned_paths(obj, schema, subresource, has_status)] if slow else [])
