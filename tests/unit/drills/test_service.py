"""Back in service (drills.target.service): what keeps a node from the service it gave before a fault."""

from __future__ import annotations

from typing import Any

import pytest

from drills.target.service import NodeService, describe, not_back, out_of_service, snapshot

GPU = "nvidia.com/gpu"


def node(name: str, *, ready: str = "True", cordoned: bool = False, taints: list[dict[str, Any]] | None = None,
         gpus: str | None = "8") -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": ready}]}
    if gpus is not None:
        status["allocatable"] = {GPU: gpus}
    spec: dict[str, Any] = {"taints": taints or []}
    if cordoned:
        spec["unschedulable"] = True
    return {"metadata": {"name": name}, "spec": spec, "status": status}


UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
SPARE = {"key": "firedrill.dev/spare", "value": "true", "effect": "NoSchedule"}
OWN = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


@pytest.mark.parametrize("now,problems", [
    (node("n"), []),
    (node("n", ready="Unknown"), ["not Ready"]),
    (node("n", cordoned=True), ["cordoned (spec.unschedulable)"]),
    (node("n", taints=[UNREACHABLE]), ["tainted node.kubernetes.io/unreachable:NoSchedule"]),
    (node("n", taints=[SPARE]), []),  # a spare pool's taint is a role
    (node("n", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]), []),  # discourages, does not repel
    (node("n", gpus="6"), ["6 of its 8 GPUs allocatable"]),
    (node("n", gpus=None), ["0 of its 8 GPUs allocatable"]),
    (node("n", ready="False", cordoned=True, taints=[UNREACHABLE], gpus="0"),
     ["not Ready", "cordoned (spec.unschedulable)", "tainted node.kubernetes.io/unreachable:NoSchedule",
      "0 of its 8 GPUs allocatable"]),
])
def test_what_keeps_a_node_out_of_the_service_it_gave(now: dict[str, Any], problems: list[str]) -> None:
    assert out_of_service(NodeService.of(node("n"), GPU), NodeService.of(now, GPU)) == problems


def test_what_a_node_had_before_the_fault_is_no_fault() -> None:
    before = NodeService.of(node("n", cordoned=True, taints=[OWN]), GPU)
    assert out_of_service(before, NodeService.of(node("n", cordoned=True, taints=[OWN]), GPU)) == []
    assert out_of_service(before, NodeService.of(node("n", cordoned=True, taints=[OWN, UNREACHABLE]), GPU)) == [
        "tainted node.kubernetes.io/unreachable:NoSchedule"]
    assert out_of_service(before, None) == ["gone from the cluster (its Node object deleted)"]


def test_only_the_nodes_that_served_before_are_judged_and_named() -> None:
    before = snapshot([node("a"), node("b"), node("c", ready="False"), node("d", cordoned=True)], GPU)
    now = snapshot([node("a", cordoned=True), node("c", ready="False"), node("d", cordoned=True)], GPU)
    missing = not_back(before, now)
    assert missing == {"a": ["cordoned (spec.unschedulable)"], "b": ["gone from the cluster (its Node object deleted)"]}
    assert not_back(before, now, ["a"]) == {"a": ["cordoned (spec.unschedulable)"]}
    assert describe(missing) == ("a: cordoned (spec.unschedulable); b: gone from the cluster (its Node object "
                                 "deleted)")
