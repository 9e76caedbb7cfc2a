"""The ``native`` gang flavor against the real control plane (issue 13, item 3; Done-when 2).

``drills/kube/flavors.py`` writes a gang as Kubernetes 1.37's native gang scheduling wants it (a
``scheduling.k8s.io/v1beta1`` Workload and PodGroup, pods with ``spec.schedulingGroup``); the real
kube-apiserver accepts the manifests (server-side dry-run), and ``firedrill run --kubeconfig`` runs the
shipped gang-submission feature against a cluster of four refplatform agents (8 simulated GPUs each):

- with the real kube-scheduler's gang scheduling on, both scenarios PASS;
- with it switched off (kube-scheduler started with ``GenericWorkload=false``: no GangScheduling plugin,
  no pod-group cycle, while kube-apiserver still serves the objects), the two-gang scenario FAILs and
  names the deadlock: each gang holds two of its three nodes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from drills.kube.flavors import GangFlavor, GangSpec, gang_manifests
from tests.realk8s.agents import RefAgents
from tests.realk8s.cluster import Component, RealCluster, RealClusterSpec
from tests.realk8s.firedrill import firedrill_run as run
from tests.realk8s.conftest import (DEFAULT_NOT_READY_TOLERATION_S, DEFAULT_UNREACHABLE_TOLERATION_S,
                                    NODE_MONITOR_GRACE_PERIOD_S, NODE_MONITOR_PERIOD_S)
from tests.realk8s.standin import node_user
from tests.realk8s.test_control_plane import kubectl

pytestmark = pytest.mark.realk8s

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "examples" / "profile-native.yaml"
FEATURE = REPO / "features" / "gang_submission.feature"
NODES = tuple(f"gang-node-{i}" for i in range(4))
"""The feature's Background wants 4 nodes with 8 free GPUs; the two-gang scenario needs fewer than 6."""
NAMESPACE = "firedrill-native"
RUN_TIMEOUT_S = 240


@dataclass
class GangCluster:
    cluster: RealCluster
    agents: RefAgents


def start_gang_cluster(bin_dir: Path, work: Path, *, gang_admission: bool,
                       node_monitor_grace_period: float = NODE_MONITOR_GRACE_PERIOD_S,
                       controller_manager_args: tuple[str, ...] = ()) -> GangCluster:
    """``node_monitor_grace_period``: tuned short by default; a cluster of KWOK nodes, whose Leases are renewed
    every 10 s as a kubelet's are, takes upstream's default, and ``controller_manager_args`` raise the
    controllers' API rate limits as a large cluster's are (``tests/realk8s/kwok.py``)."""
    cluster = RealCluster(RealClusterSpec(
        bin_dir=bin_dir, work_dir=work, node_monitor_grace_period=node_monitor_grace_period,
        node_monitor_period=NODE_MONITOR_PERIOD_S,
        default_unreachable_toleration_seconds=DEFAULT_UNREACHABLE_TOLERATION_S,
        default_not_ready_toleration_seconds=DEFAULT_NOT_READY_TOLERATION_S,
        scheduler_gang_scheduling=gang_admission, extra_users=tuple(node_user(n) for n in NODES),
        extra_args={Component.CONTROLLER_MANAGER: controller_manager_args}))
    cluster.start()
    agents = RefAgents(cluster, work / "agents")
    try:
        for name in NODES:
            agents.start(name, wait_ready=False)
        for name in NODES:
            agents.wait_ready(name)
        kubectl(cluster.admin_kubeconfig, "create", "namespace", NAMESPACE)
    except BaseException:
        agents.close()
        cluster.stop()
        raise
    return GangCluster(cluster, agents)


@pytest.fixture(scope="module")
def gang_on(realk8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GangCluster]:
    """A cluster whose kube-scheduler gang-schedules (GenericWorkload on everywhere)."""
    made = start_gang_cluster(realk8s_bin_dir, tmp_path_factory.mktemp("native-on"), gang_admission=True)
    try:
        yield made
    finally:
        made.agents.close()
        made.cluster.stop()


def firedrill_run(kubeconfig: Path, work: Path) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``firedrill run`` of a copy of the shipped gang-submission feature with the native example profile;
    returns the process and the run's scenarios from its evidence record."""
    features = work / "features"
    features.mkdir(parents=True)
    shutil.copy(FEATURE, features / FEATURE.name)
    return run(kubeconfig, PROFILE, features, work / "reports", timeout=RUN_TIMEOUT_S,
               extra=("--namespace", NAMESPACE))


def verdicts(scenarios: list[dict[str, Any]]) -> dict[str, str]:
    return {s["scenario"]: s["verdict"] for s in scenarios}


def test_native_manifests_pass_the_real_api_servers_validation(gang_on: GangCluster) -> None:
    # A PodGroup resolves its priority class like a pod (and, unlike a pod, may not use the system classes).
    kubectl(gang_on.cluster.admin_kubeconfig, "create", "priorityclass", "firedrill-training", "--value=1000")
    spec = GangSpec(name="dry", run_id="r1", workers=3, gpus_per_worker=8, min_member=2, image="firedrill-canary:0",
                    namespace=NAMESPACE, priority_class="firedrill-training", command=("firedrill-canary",))
    manifests = gang_manifests(spec, GangFlavor.NATIVE)
    assert [m["kind"] for m in manifests] == ["Workload", "PodGroup", "Pod", "Pod", "Pod"]
    for manifest in manifests:
        answer = kubectl(gang_on.cluster.admin_kubeconfig, "create", "--dry-run=server", "-o", "json", "-f", "-",
                         stdin=json.dumps(manifest))
        stored = json.loads(answer.stdout)
        if manifest["kind"] == "Workload":
            template = stored["spec"]["podGroupTemplates"][0]
            assert template["schedulingPolicy"] == {"gang": {"minCount": 2}}
            assert template["priorityClassName"] == "firedrill-training"
        elif manifest["kind"] == "PodGroup":
            assert stored["spec"]["workloadRef"] == {"workloadName": "dry", "templateName": "worker"}
            assert stored["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
            assert stored["spec"]["priority"] == 1000
        else:
            assert stored["spec"]["schedulingGroup"] == {"podGroupName": "dry"}, "the gate dropped the field"
            assert stored["spec"]["schedulerName"] == "default-scheduler"
    # Nothing was created: a dry run.
    listed = kubectl(gang_on.cluster.admin_kubeconfig, "-n", NAMESPACE, "get", "podgroups,workloads,pods", "-o", "name")
    assert listed.stdout.strip() == ""


def test_firedrill_run_passes_the_gang_feature_with_the_real_gang_scheduler(gang_on: GangCluster,
                                                                           tmp_path: Path) -> None:
    proc, scenarios = firedrill_run(gang_on.cluster.admin_kubeconfig, tmp_path)
    assert verdicts(scenarios) == {"A gang that fits is placed whole": "PASS",
                                   "Two gangs that each need more than half of the free GPUs": "PASS",
                                   "A gang that must wait for GPUs holds none while it waits": "PASS"}, proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    two = next(s for s in scenarios if s["scenario"].startswith("Two gangs"))
    placed = [pod for pod in two["details"]["bind_report"].values() if pod["node"]]
    assert {pod["node"] for pod in placed} <= set(NODES) and len(placed) == 6  # both gangs ran, one after the other
    for scenario in scenarios:  # the invariants held, from the canaries' own logs (docs/INVARIANTS.md)
        assert scenario["details"]["invariants"]["breaches"] == [], scenario["details"]["invariants"]
    named = [gpu for gpus in two["details"]["invariants"]["identities"].values() for gpu in gpus]
    assert named and all(gpu.startswith("GPU-") for gpu in named), two["details"]["invariants"]
    leftovers = kubectl(gang_on.cluster.admin_kubeconfig, "-n", NAMESPACE, "get", "podgroups,workloads", "-o", "name")
    assert leftovers.stdout.strip() == "", "the drill's rollback left group objects behind"


def test_firedrill_run_names_the_deadlock_when_gang_admission_is_switched_off(
        realk8s_bin_dir: Path, tmp_path: Path) -> None:
    made = start_gang_cluster(realk8s_bin_dir, tmp_path / "cluster", gang_admission=False)
    try:
        # The API server still takes the native objects; only the scheduler ignores them.
        assert made.cluster.gang is not None and not made.cluster.spec.scheduler_gang_scheduling
        proc, scenarios = firedrill_run(made.cluster.admin_kubeconfig, tmp_path / "run")
    finally:
        made.agents.close()
        made.cluster.stop()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert verdicts(scenarios) == {"A gang that fits is placed whole": "PASS",
                                   "Two gangs that each need more than half of the free GPUs": "FAIL",
                                   "A gang that must wait for GPUs holds none while it waits": "FAIL"}
    two = next(s for s in scenarios if s["scenario"].startswith("Two gangs"))
    deadlock = [f for f in two["findings"] if f.startswith("DEADLOCK:")]
    assert deadlock, two["findings"]
    assert deadlock[0].count("holds 16 GPUs with 2 of 3 workers placed") == 2, deadlock[0]
    assert "DEADLOCK" in proc.stdout
