"""Safety checks as tables: given nodes and pods, expect eligible nodes, refusals and pre-flight problems."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from drills.errors import FiredrillError
from drills.target.profile import SafetySettings
from drills.target.safety import (
    SafetyError, check_blast_radius, eligible_nodes, ineligible_reasons, is_control_plane, is_ready, preflight,
    require_preflight,
)

ALLOW = {"firedrill.dev/chaos": "allowed"}
NOW = datetime(2026, 8, 1, 12, 0, 0, tzinfo=timezone.utc)


def node(name: str, *, labels: dict[str, str] | None = None, ready: str | None = "True", gpus: int = 8,
         allocatable: int | None = None, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True"
                           else "NodeStatusUnknown", "lastTransitionTime": "2026-08-01T11:59:00Z"})
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {"conditions": conditions,
                   "capacity": {"cpu": "64", "nvidia.com/gpu": str(gpus)},
                   "allocatable": {"cpu": "63", "nvidia.com/gpu": str(gpus if allocatable is None else allocatable)}},
    }


def pod(name: str, *, deleted_at: datetime | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if deleted_at is not None:
        meta["deletionTimestamp"] = deleted_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": meta, "spec": {"nodeName": "gpu-1"}, "status": {"phase": "Running"}}


def names(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


DEFAULT = SafetySettings()

# --- eligible nodes -----------------------------------------------------------------------------------------

ELIGIBLE_CASES = [
    ("allow label present, Ready", [node("a", labels=ALLOW)], DEFAULT, ["a"]),
    ("no allow label", [node("a")], DEFAULT, []),
    ("allow label with another value", [node("a", labels={"firedrill.dev/chaos": "denied"})], DEFAULT, []),
    ("control-plane label (kubeadm writes it empty)",
     [node("cp", labels={**ALLOW, "node-role.kubernetes.io/control-plane": ""})], DEFAULT, []),
    ("legacy master label", [node("m", labels={**ALLOW, "node-role.kubernetes.io/master": ""})], DEFAULT, []),
    ("control plane allowed when refuse_control_plane is false",
     [node("cp", labels={**ALLOW, "node-role.kubernetes.io/control-plane": ""})],
     SafetySettings(refuse_control_plane=False), ["cp"]),
    ("NotReady", [node("a", labels=ALLOW, ready="False")], DEFAULT, []),
    ("Ready Unknown", [node("a", labels=ALLOW, ready="Unknown")], DEFAULT, []),
    ("no Ready condition", [node("a", labels=ALLOW, ready=None)], DEFAULT, []),
    ("custom allow label", [node("a", labels={"pool": "chaos"}), node("b", labels=ALLOW)],
     SafetySettings(allow_label="pool=chaos"), ["a"]),
    ("mixed, order kept",
     [node("c", labels=ALLOW), node("b"), node("a", labels=ALLOW), node("d", labels=ALLOW, ready="False")],
     DEFAULT, ["c", "a"]),
]


@pytest.mark.parametrize(("nodes", "safety", "expected"), [c[1:] for c in ELIGIBLE_CASES],
                         ids=[c[0] for c in ELIGIBLE_CASES])
def test_eligible_nodes(nodes: list[dict[str, Any]], safety: SafetySettings, expected: list[str]) -> None:
    assert names(eligible_nodes(nodes, safety)) == expected


def test_ineligible_reasons_say_why() -> None:
    bad = node("cp", labels={"firedrill.dev/chaos": "no", "node-role.kubernetes.io/control-plane": ""},
               ready="Unknown")
    assert ineligible_reasons(bad, DEFAULT) == [
        "it lacks the allow label firedrill.dev/chaos=allowed (it has firedrill.dev/chaos=no)",
        "it is a control-plane node", "it is not Ready"]
    assert is_control_plane(bad) and not is_ready(bad)
    assert ineligible_reasons(node("ok", labels=ALLOW), DEFAULT) == []


# --- blast radius ---------------------------------------------------------------------------------------------

CLUSTER = [node(f"gpu-{i}", labels=ALLOW) for i in range(4)] + [node("big", labels=ALLOW, gpus=16),
                                                                node("cpu-0", labels=ALLOW, gpus=0)]
# 4 x 8 + 16 + 0 = 48 GPUs


def by_name(*wanted: str) -> list[dict[str, Any]]:
    return [n for n in CLUSTER if n["metadata"]["name"] in wanted]


BLAST_OK = [
    ("one 8-GPU node of 48 (16.7%)", by_name("gpu-0"), DEFAULT, 8),
    ("a CPU node removes no GPU", by_name("cpu-0"), DEFAULT, 0),
    ("two nodes when allowed", by_name("gpu-0", "gpu-1"), SafetySettings(max_nodes=2, max_gpu_share=0.5), 16),
    ("the same node twice counts once", by_name("gpu-0") * 2, DEFAULT, 8),
    ("exactly at the share cap", by_name("big"), SafetySettings(max_gpu_share=1 / 3), 16),
    ("nothing chosen", [], DEFAULT, 0),
]


@pytest.mark.parametrize(("chosen", "safety", "gpus"), [c[1:] for c in BLAST_OK], ids=[c[0] for c in BLAST_OK])
def test_blast_radius_allowed(chosen: list[dict[str, Any]], safety: SafetySettings, gpus: int) -> None:
    radius = check_blast_radius(chosen, CLUSTER, safety)
    assert radius.gpus == gpus and radius.total_gpus == 48
    assert radius.gpu_share == pytest.approx(gpus / 48)


BLAST_REFUSED = [
    ("too many nodes", by_name("gpu-0", "gpu-1"), SafetySettings(max_gpu_share=1.0),
     r"refusing to pull 2 node\(s\) \(gpu-0, gpu-1\).*safety.max_nodes is 1.*raise safety.max_nodes"),
    ("too large a GPU share", by_name("big"), DEFAULT,
     r"holding 16 of 48 GPUs \(33.3%\): safety.max_gpu_share is 25.0%.*raise safety.max_gpu_share"),
    ("a node missing from the cluster list", [node("gpu-9")], DEFAULT, "not in the cluster's node list"),
]


@pytest.mark.parametrize(("chosen", "safety", "message"), [c[1:] for c in BLAST_REFUSED],
                         ids=[c[0] for c in BLAST_REFUSED])
def test_blast_radius_refused(chosen: list[dict[str, Any]], safety: SafetySettings, message: str) -> None:
    with pytest.raises(SafetyError, match=message):
        check_blast_radius(chosen, CLUSTER, safety)


@pytest.mark.parametrize(("bad", "reason"), [
    (node("x"), "lacks the allow label"),
    (node("x", labels={**ALLOW, "node-role.kubernetes.io/master": ""}), "control-plane"),
    (node("x", labels=ALLOW, ready="Unknown"), "not Ready"),
])
def test_blast_radius_refuses_protected_nodes(bad: dict[str, Any], reason: str) -> None:
    with pytest.raises(SafetyError, match=f"protects: x: .*{reason}.*kubectl label node NAME") as caught:
        check_blast_radius([bad], [*CLUSTER, bad], DEFAULT)
    assert isinstance(caught.value, FiredrillError)


MIG = "nvidia.com/mig-1g.10gb"


def mig_node(name: str, slices: int) -> dict[str, Any]:
    """A node of a MIG mixed-strategy cluster: the device plugin advertises slices, no ``nvidia.com/gpu``."""
    n = node(name, labels=ALLOW, gpus=0)
    n["status"]["capacity"][MIG] = n["status"]["allocatable"][MIG] = str(slices)
    return n


def test_blast_radius_counts_the_profiles_gpu_resource_on_a_mig_cluster() -> None:
    cluster = [mig_node("mig-0", 7), mig_node("mig-1", 7)]
    radius = check_blast_radius(cluster[:1], cluster, SafetySettings(max_gpu_share=0.5), MIG)
    assert (radius.gpus, radius.total_gpus) == (7, 14)
    with pytest.raises(SafetyError, match=r"holding 7 of 14 GPUs \(50.0%\).*25.0% of the cluster's "
                                          r"nvidia.com/mig-1g.10gb capacity"):
        check_blast_radius(cluster[:1], cluster, DEFAULT, MIG)
    # Counted in nvidia.com/gpu (the default) the same node holds nothing, and the cap could never refuse it.
    assert check_blast_radius(cluster[:1], cluster, DEFAULT).gpu_share == 0.0


def test_blast_radius_of_a_gpu_less_cluster() -> None:
    cpu = [node("a", labels=ALLOW, gpus=0)]
    assert check_blast_radius(cpu, cpu, DEFAULT).gpu_share == 0.0


# --- pre-flight -------------------------------------------------------------------------------------------------

PREFLIGHT_CASES: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[str]]] = [
    ("healthy", [node("a"), node("b")], [pod("p"), pod("q", deleted_at=NOW - timedelta(seconds=30))], []),
    ("NotReady node", [node("a", ready="Unknown")], [],
     ["node a is NotReady (Ready=Unknown; reason NodeStatusUnknown, lastTransitionTime 2026-08-01T11:59:00Z)"]),
    ("no Ready condition", [node("a", ready=None)], [], ["node a reports no Ready condition"]),
    ("unreachable taint on a Ready node",
     [node("a", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])], [],
     ["node a has the taint node.kubernetes.io/unreachable:NoExecute"]),
    ("not-ready taint", [node("a", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])],
     [], ["node a has the taint node.kubernetes.io/not-ready:NoSchedule"]),
    ("unrelated taint is fine", [node("a", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])], [], []),
    ("an unhealthy GPU", [node("a", allocatable=7)], [],
     ["node a has 7 of 8 nvidia.com/gpu allocatable: the device plugin reports 1 GPU(s) unhealthy"]),
    ("pod stuck Terminating", [node("a")], [pod("stuck", deleted_at=NOW - timedelta(minutes=5))],
     ["pod team-a/stuck on gpu-1 has been Terminating 300 s past its grace period"]),
    ("pod within its grace period", [node("a")], [pod("going", deleted_at=NOW + timedelta(seconds=20))], []),
    ("several at once", [node("a", ready="False"), node("b", allocatable=6)],
     [pod("stuck", deleted_at=NOW - timedelta(hours=1))], ["node a is NotReady", "node b has 6 of 8",
                                                            "pod team-a/stuck"]),
]


@pytest.mark.parametrize(("nodes", "pods", "expected"), [c[1:] for c in PREFLIGHT_CASES],
                         ids=[c[0] for c in PREFLIGHT_CASES])
def test_preflight(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], expected: list[str]) -> None:
    problems = preflight(nodes, pods, DEFAULT, now=NOW)
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start), problem


def test_preflight_other_gpu_resource() -> None:
    mig = node("a")
    mig["status"]["capacity"]["nvidia.com/mig-1g.10gb"] = "7"
    mig["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "6"
    assert preflight([mig], [], DEFAULT, now=NOW) == []
    assert preflight([mig], [], DEFAULT, now=NOW, gpu_resource="nvidia.com/mig-1g.10gb") == [
        "node a has 6 of 7 nvidia.com/mig-1g.10gb allocatable: the device plugin reports 1 GPU(s) unhealthy"]


def test_require_preflight_refuses_or_warns() -> None:
    sick = [node("a", ready="False")]
    with pytest.raises(SafetyError, match=r"(?s)already degraded \(1 problem\(s\)\):\n  - node a is NotReady.*"
                                          r"safety.require_healthy: false"):
        require_preflight(sick, [], DEFAULT, now=NOW)
    assert require_preflight(sick, [], SafetySettings(require_healthy=False), now=NOW) == \
        preflight(sick, [], DEFAULT, now=NOW)
    assert require_preflight([node("a")], [], DEFAULT, now=NOW) == []
