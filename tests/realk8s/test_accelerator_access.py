"""Secure accelerator access on the upstream control plane: the shipped feature, unedited (issue 31, item 3).

One refplatform agent (8 simulated GPUs) is the kubelet, device plugin and container toolkit of an upstream
control plane; the shipped ``features/accelerator_access.feature`` runs with the ``native`` flavor through the
same driver as on a customer's cluster. Every probe pod is placed by the real kube-scheduler (which binds
without naming GPUs: the agent picks them as the kubelet's device manager does) and reports through upstream's
``pods/log``, proxied by kube-apiserver to the agent. The honest agent PASSes all three scenarios; restarted
with the ``visible-to-all`` defect (every container is given every GPU's device node) all three FAIL, each
naming the pod, the node and the GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realk8s.firedrill import firedrill_run
from tests.realk8s.test_native_nodepull import NAMESPACE, PullCluster, start_pull_cluster

pytestmark = pytest.mark.realk8s

REPO = Path(__file__).resolve().parents[2]
FEATURE = REPO / "features" / "accelerator_access.feature"
NODE = "access-node-0"
RUN_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def access_cluster(realk8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PullCluster]:
    made = start_pull_cluster(realk8s_bin_dir, tmp_path_factory.mktemp("access"), (), nodes=(NODE,))
    try:
        yield made
    finally:
        made.agents.close()
        made.cluster.stop()


def run_feature(made: PullCluster, tmp_path: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    features = tmp_path / "features"
    features.mkdir()
    (features / FEATURE.name).write_text(FEATURE.read_text())  # the shipped feature, unedited
    profile = tmp_path / "profile.yaml"
    profile.write_text("\n".join([
        "apiVersion: firedrill.dev/v1alpha1", "kind: TargetProfile", "name: realk8s-access", "flavor: native",
        f"namespace: {NAMESPACE}", "queue: default", "canary_image: firedrill-canary:local",
        "fault:", "  method: kubelet-stop", "  timeout_seconds: 30",
        "safety:", "  allow_label: firedrill.dev/chaos=allowed", "  max_nodes: 1", "  max_gpu_share: 0.3", ""]))
    proc, scenarios = firedrill_run(made.cluster.admin_kubeconfig, profile, features, tmp_path / "reports",
                                    timeout=RUN_TIMEOUT_S)
    return proc.stdout + proc.stderr, {s["scenario"]: s for s in scenarios}


def test_every_scenario_passes_on_the_honest_agent(access_cluster: PullCluster, tmp_path: Path) -> None:
    out, scenarios = run_feature(access_cluster, tmp_path)
    print("accelerator access upstream, honest: " + "; ".join(f"{name}: {s['verdict']} ({s['seconds']:.1f} s)"
                                                              for name, s in scenarios.items()))
    assert len(scenarios) == 3, out
    assert {name: s["verdict"] for name, s in scenarios.items()} == {name: "PASS" for name in scenarios}, out
    two = next(s for name, s in scenarios.items() if "Two pods" in name)
    assert two["details"]["access"]["node"] == NODE
    pods = list(two["details"]["access"]["pods"].values())
    assert [len(p["last"]["opened"]) for p in pods] == [1, 1], pods
    # kube-scheduler bound them; what each was given is what its own start line named (the invariant watch)
    assert sorted(two["details"]["invariants"]["identities"]) == sorted(two["details"]["access"]["pods"]), two


def test_visible_to_all_fails_every_scenario_naming_pod_node_and_gpus(access_cluster: PullCluster,
                                                                     tmp_path: Path) -> None:
    agents = access_cluster.agents
    agents.stop(NODE)
    agents.start(NODE, extra=("--defect", "visible-to-all"))
    try:
        out, scenarios = run_feature(access_cluster, tmp_path)
    finally:
        agents.stop(NODE)
        agents.start(NODE)  # honest again for whatever runs next
    print("accelerator access upstream, visible-to-all: " + "; ".join(
        f"{name}: {s['verdict']} ({s['seconds']:.1f} s): {s['findings'][0] if s['findings'] else ''}"
        for name, s in scenarios.items()))
    assert {s["verdict"] for s in scenarios.values()} == {"FAIL"}, out
    none = next(s for name, s in scenarios.items() if "requests no GPU" in name)
    finding = " ".join(none["findings"])
    assert f"on node {NODE} requested no GPU but sees 8 GPUs: 8 device nodes (nvidia0 (GPU-" in finding, finding
    assert "NVIDIA_VISIBLE_DEVICES=all" in finding, finding
    two = next(s for name, s in scenarios.items() if "Two pods" in name)
    assert any(f"on node {NODE} opened nvidia" in f and "which pod" in f for f in two["findings"]), \
        json.dumps(two["findings"], indent=1)
