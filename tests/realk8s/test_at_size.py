"""The shipped gang, node-pull and governance features on the upstream control plane among KWOK's fake GPU nodes
(issue 29).

Users run Firedrill on clusters of hundreds to thousands of GPU nodes. Here each feature's own cluster (the one
``test_native_gang.py``, ``test_native_nodepull.py`` and ``test_governance.py`` drill) also holds
``FIREDRILL_REALK8S_FAKE_NODES`` fake GPU nodes of KWOK (200 in CI; ``tests/bench/bench_at_size.py`` runs 1,000),
each busy with a Running pod of 4 GPUs (``tests/realk8s/kwok.py``), so every list the harness makes, every
scheduling cycle of kube-scheduler and every node the controllers watch is as many as on a real cluster, while
the canary's ranks run as processes on the refplatform agents, the truth each drill measures. The gang and
governance features must PASS unedited, as must scenario 5.1 of node pull with a job of
``FIREDRILL_REALK8S_PULL_RANKS`` ranks (16 in CI; the bench runs 64) on upstream's default node-monitor grace
period (:data:`~tests.realk8s.kwok.PULL_WINDOWS`); and the harness's own cost per scenario
(``details.harness_cost`` of the evidence: CPU seconds, peak memory, the most watches and log streams open at
once) must not grow with the cluster: a harness that watched or listed per node would show it here first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realk8s.kwok import (CONTROLLER_MANAGER_ARGS, NODE_MONITOR_GRACE_PERIOD_S, PULL_WINDOWS, Fleet,
                                fleet_beside, node_counts)
from tests.realk8s.test_governance import Governed, _features, start_governed
from tests.realk8s.test_native_gang import NODES as GANG_NODES
from tests.realk8s.test_native_gang import GangCluster, firedrill_run as gang_run, start_gang_cluster
from tests.realk8s.firedrill import firedrill_run
from tests.realk8s.test_native_nodepull import (FEATURE, NAMESPACE, PullCluster, feature_for_this_cluster,
                                                profile_yaml, start_pull_cluster)

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(600)]

FAKE_NODES = int(os.environ.get("FIREDRILL_REALK8S_FAKE_NODES", "200"))
PULL_RANKS = int(os.environ.get("FIREDRILL_REALK8S_PULL_RANKS", "16"))
PULL_AGENTS = 4
"""Agents of 8 GPUs for the node pull: 16 ranks of 1 GPU and room for the pulled node's ranks elsewhere."""
MOST_WATCHES = 12
"""The most watch streams one scenario keeps open (the drill's objects, the invariants): a few, at any size."""
MOST_RSS_MIB = 400.0
"""The harness process's peak resident memory in one scenario (about 100 MiB on the embedded platform)."""


def _costs(scenarios: list[dict[str, Any]]) -> list[dict[str, Any]]:
    costs = [s["details"]["harness_cost"] for s in scenarios]
    for scenario, cost in zip(scenarios, costs):
        print(f"{scenario['scenario']}: {cost}")
    return costs


def _bounded(costs: list[dict[str, Any]]) -> None:
    assert costs and all(c["peak_watches"] <= MOST_WATCHES for c in costs), costs
    assert all(c["peak_rss_mib"] <= MOST_RSS_MIB for c in costs), costs


@pytest.fixture(scope="module")
def gang_cluster(realk8s_bin_dir: Path, kwok_dir: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GangCluster, Fleet]]:
    work = tmp_path_factory.mktemp("gang-at-size")
    made = start_gang_cluster(realk8s_bin_dir, work / "cluster", gang_admission=True,
                              node_monitor_grace_period=NODE_MONITOR_GRACE_PERIOD_S,
                              controller_manager_args=CONTROLLER_MANAGER_ARGS)
    with fleet_beside(made, kwok_dir, work, FAKE_NODES) as fleet:
        yield made, fleet


def test_the_gang_feature_passes_among_a_fleet_of_fake_gpu_nodes(gang_cluster: tuple[GangCluster, Fleet],
                                                                tmp_path: Path) -> None:
    made, fleet = gang_cluster
    assert node_counts(made.cluster.admin_kubeconfig) == {"nodes": FAKE_NODES + len(GANG_NODES), "fake": FAKE_NODES}
    print(f"{FAKE_NODES} KWOK nodes Ready and {fleet.load_pods} load pods Running in "
          f"{fleet.seconds_to_ready:.1f} s")
    proc, scenarios = gang_run(made.cluster.admin_kubeconfig, tmp_path)
    assert {s["scenario"]: s["verdict"] for s in scenarios} == {
        "A gang that fits is placed whole": "PASS",
        "Two gangs that each need more than half of the free GPUs": "PASS",
        "A gang that must wait for GPUs holds none while it waits": "PASS"}, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for scenario in scenarios:  # every rank ran on an agent, never on a fake node
        placed = {pod["node"] for pod in scenario["details"].get("bind_report", {}).values() if pod["node"]}
        assert placed <= set(GANG_NODES), placed
    _bounded(_costs(scenarios))


@pytest.fixture(scope="module")
def governed_cluster(realk8s_bin_dir: Path, kwok_dir: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Governed, Fleet]]:
    work = tmp_path_factory.mktemp("governance-at-size")
    made = start_governed(realk8s_bin_dir, work / "governed", node_monitor_grace_period=NODE_MONITOR_GRACE_PERIOD_S,
                          controller_manager_args=CONTROLLER_MANAGER_ARGS)
    with fleet_beside(made, kwok_dir, work, FAKE_NODES) as fleet:
        yield made, fleet


def test_the_governance_feature_passes_among_a_fleet_of_fake_gpu_nodes(governed_cluster: tuple[Governed, Fleet],
                                                                      tmp_path: Path) -> None:
    made, _ = governed_cluster
    proc, scenarios = firedrill_run(made.cluster.admin_kubeconfig, made.profile(tmp_path / "profile.yaml"),
                                    _features(tmp_path), tmp_path / "reports", timeout=300)
    assert {s["verdict"] for s in scenarios} == {"PASS"}, [(s["scenario"], s["verdict"], s["findings"])
                                                           for s in scenarios]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _bounded(_costs(scenarios))


def start_pull_at_size(bin_dir: Path, work: Path, agents: int) -> PullCluster:
    """The node-pull cluster with ``agents`` agents on upstream's default node-monitor grace period."""
    return start_pull_cluster(bin_dir, work, (), grace=NODE_MONITOR_GRACE_PERIOD_S, period=5.0,
                              nodes=tuple(f"pull-node-{i}" for i in range(agents)),
                              controller_manager_args=CONTROLLER_MANAGER_ARGS)


def pull_among_fakes(pull: PullCluster, run: Path, ranks: int) -> tuple[Any, list[dict[str, Any]]]:
    """Scenario 5.1 with a job of ``ranks`` workers of 1 GPU, in the windows of :data:`PULL_WINDOWS`."""
    (run / "features").mkdir(parents=True)
    (run / "features" / FEATURE.name).write_text(feature_for_this_cluster(windows=PULL_WINDOWS, workers=(ranks, 1)))
    (run / "profile.yaml").write_text(profile_yaml(pull.agents))
    return firedrill_run(pull.cluster.admin_kubeconfig, run / "profile.yaml", run / "features", run / "reports",
                         timeout=900, extra=("--namespace", NAMESPACE))


@pytest.fixture(scope="module")
def pull_at_size(realk8s_bin_dir: Path, kwok_dir: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[PullCluster]:
    work = tmp_path_factory.mktemp("pull-at-size")
    made = start_pull_at_size(realk8s_bin_dir, work / "cluster", PULL_AGENTS)
    with fleet_beside(made, kwok_dir, work, FAKE_NODES):
        yield made


def test_a_node_pull_of_many_ranks_passes_among_a_fleet_of_fake_gpu_nodes(pull_at_size: PullCluster,
                                                                        tmp_path: Path) -> None:
    proc, scenarios = pull_among_fakes(pull_at_size, tmp_path, PULL_RANKS)
    (scenario,) = scenarios
    measured = {m["name"]: m["value"] for m in scenario["measurements"]}
    print(f"node pull of {PULL_RANKS} ranks among {FAKE_NODES} KWOK nodes: {measured}")
    assert scenario["verdict"] == "PASS", scenario["findings"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scenario["details"]["fault"]["node"].startswith("pull-node-")  # an agent, never a fake node
    assert all(measured[phase] is not None for phase in ("detect", "evict", "replace", "resume")), measured
    _bounded(_costs(scenarios))
