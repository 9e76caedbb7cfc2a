"""The shipped gang and governance features on the upstream control plane among KWOK's fake GPU nodes (issue 29).

Users run Firedrill on clusters of hundreds to thousands of GPU nodes. Here each feature's own cluster (the one
``test_native_gang.py`` and ``test_governance.py`` drill) also holds ``FIREDRILL_REALK8S_FAKE_NODES`` fake GPU
nodes of KWOK (200 in CI; ``tests/bench/bench_at_size.py`` runs 1,000), each busy with a Running pod of 4 GPUs
(``tests/realk8s/kwok.py``), so every list the harness makes, every scheduling cycle of kube-scheduler and
every node the controllers watch is as many as on a real cluster, while the canary's ranks run as processes on
the refplatform agents, the truth each drill measures. Both features must PASS unedited, and the harness's own
cost per scenario (``details.harness_cost`` of the evidence: CPU seconds, peak memory, the most watches and log
streams open at once) must not grow with the cluster: a harness that watched or listed per node would show it
here first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realk8s.kwok import CONTROLLER_MANAGER_ARGS, NODE_MONITOR_GRACE_PERIOD_S, Fleet, fleet_beside, node_counts
from tests.realk8s.test_governance import Governed, _features, start_governed
from tests.realk8s.test_native_gang import NODES as GANG_NODES
from tests.realk8s.test_native_gang import GangCluster, firedrill_run as gang_run, start_gang_cluster
from tests.realk8s.firedrill import firedrill_run

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(600)]

FAKE_NODES = int(os.environ.get("FIREDRILL_REALK8S_FAKE_NODES", "200"))
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
