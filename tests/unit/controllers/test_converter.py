"""The scheduler's memoizing converter: the same snapshot as snapshot_of, without converting again what did
not change since the last cycle."""

from __future__ import annotations

import copy
from typing import Any

from refplatform.controllers.convert import Converter, snapshot_of

Obj = dict[str, Any]


def node(name: str, rv: str) -> Obj:
    return {"metadata": {"name": name, "resourceVersion": rv},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, rv: str, node_name: str | None = None, gpus: str = "") -> Obj:
    obj: Obj = {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": rv,
                             "creationTimestamp": "2026-12-01T00:00:00Z", "annotations": {}},
                "spec": {"schedulerName": "volcano", "containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    if node_name:
        obj["spec"]["nodeName"] = node_name
    if gpus:
        obj["metadata"]["annotations"]["firedrill.dev/gpu-index"] = gpus
    return obj


def test_same_snapshot_as_snapshot_of_and_unchanged_objects_are_reused() -> None:
    nodes, pods = [node("n0", "1"), node("n1", "2")], [pod("a", "3"), pod("b", "4", "n0", "0")]
    convert = Converter()
    first = convert.snapshot(nodes, pods, [], [], 10.0, arrival={"uid-a": 0.5})
    assert first == snapshot_of(nodes, pods, [], [], 10.0, arrival={"uid-a": 0.5})
    second = convert.snapshot(copy.deepcopy(nodes), copy.deepcopy(pods), [], [], 11.0, arrival={"uid-a": 0.5})
    assert all(x is y for x, y in zip(first.pods, second.pods))
    assert all(x is y for x, y in zip(first.nodes, second.nodes))
    assert second.now == 11.0


def test_a_new_version_an_assumed_bind_or_a_new_arrival_is_converted_again() -> None:
    convert = Converter()
    before = convert.snapshot([node("n0", "1")], [pod("a", "3")], [], [], 1.0)
    assumed = convert.snapshot([node("n0", "1")], [pod("a", "3", "n0", "2")], [], [], 1.0)  # same version, overlaid
    assert assumed.pods[0].node_name == "n0" and assumed.pods[0].gpu_indices == (2,)
    bound = convert.snapshot([node("n0", "5")], [pod("a", "6", "n0", "2")], [], [], 1.0)
    assert bound.pods[0] is not assumed.pods[0] and bound.nodes[0] is not before.nodes[0]
    later = convert.snapshot([node("n0", "5")], [pod("a", "6", "n0", "2")], [], [], 1.0, arrival={"uid-a": 0.25})
    assert later.pods[0].created_at == bound.pods[0].created_at + 0.25
    gone = convert.snapshot([node("n0", "5")], [], [], [], 1.0)
    assert gone.pods == () and len(convert._pods) == 0  # only what the last snapshot held is remembered


def test_the_very_same_object_is_recognised_by_identity_and_a_new_arrival_or_scheduler_still_counts() -> None:
    convert = Converter()
    objs = [pod("a", "3"), pod("b", "4", "n0", "0")]
    first = convert.snapshot([node("n0", "1")], objs, [], [], 1.0)
    assert [p.name for p in convert.snapshot([node("n0", "1")], objs, [], [], 2.0).pods] == ["a", "b"]
    assert all(x is y for x, y in zip(first.pods, convert.snapshot([node("n0", "1")], objs, [], [], 3.0).pods))
    # the same object with an arrival it did not have: converted again, and its uid entry kept for later
    arrived = convert.snapshot([node("n0", "1")], objs, [], [], 4.0, arrival={"uid-a": 0.5})
    assert arrived.pods[0].created_at == first.pods[0].created_at + 0.5 and set(convert._pods) == {"uid-a", "uid-b"}
    # another scheduler's names: the unbound pod is not this scheduler's any more, the bound one still holds room
    other = convert.snapshot([node("n0", "1")], objs, [], [], 5.0, frozenset({"someone-else"}))
    assert [p.name for p in other.pods] == ["b"]
