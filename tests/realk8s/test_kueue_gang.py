"""The ``kueue`` gang flavor against Kueue itself (issue 13, items 1 and 3; Done-when 2).

Kueue's manager, built from ``sigs.k8s.io/kueue`` by ``build_kueue.sh``, runs against a real control plane
with four refplatform agents as kubelets (8 simulated GPUs each), its CRDs installed and its own webhooks
serving on loopback (``tests/realk8s/kueue.py``).  ``firedrill run --kubeconfig`` runs the shipped
gang-submission feature with the kueue flavor: each gang is a Kueue plain-pod group (pods labelled with the
LocalQueue and the group, gated by Kueue's pod webhook until the group is admitted against a 32-GPU
ClusterQueue quota).

- in a namespace Kueue manages, both scenarios PASS: the second gang waits, holding nothing, until the first
  one's quota comes back;
- in a namespace Kueue's webhook does not see (gang admission switched off for it: the same pods, ungated),
  the default scheduler places them pod by pod and the two-gang scenario FAILs naming the deadlock.
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
import yaml

from drills.kube.flavors import GangFlavor, queue_manifests
from tests.realk8s.agents import RefAgents
from tests.realk8s.cluster import RealCluster, RealClusterSpec
from tests.realk8s.firedrill import firedrill_run as run
from tests.realk8s.kueue import MANAGED_LABEL, KueueManager
from tests.realk8s.standin import node_user
from tests.realk8s.test_control_plane import kubectl

pytestmark = pytest.mark.realk8s

REPO = Path(__file__).resolve().parents[2]
FEATURE = REPO / "features" / "gang_submission.feature"
NODES = tuple(f"kueue-node-{i}" for i in range(4))
MANAGED, UNMANAGED = "firedrill-kueue", "firedrill-nokueue"
LOCAL_QUEUE = "lq-gpu"
RUN_TIMEOUT_S = 240


@dataclass
class KueueCluster:
    cluster: RealCluster
    agents: RefAgents
    kueue: KueueManager


@pytest.fixture(scope="module")
def kueue_cluster(realk8s_bin_dir: Path, kueue_dir: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[KueueCluster]:
    work = tmp_path_factory.mktemp("kueue")
    cluster = RealCluster(RealClusterSpec(bin_dir=realk8s_bin_dir, work_dir=work,
                                          extra_users=tuple(node_user(n) for n in NODES)))
    cluster.start()
    agents = RefAgents(cluster, work / "agents")
    kueue = KueueManager(kueue_dir, cluster, work / "kueue")
    try:
        for name in NODES:
            agents.start(name, wait_ready=False)
        for name in NODES:
            agents.wait_ready(name)
        kueue.start()
        for ns, managed in ((MANAGED, "true"), (UNMANAGED, "false")):
            kubectl(cluster.admin_kubeconfig, "create", "namespace", ns)
            kubectl(cluster.admin_kubeconfig, "label", "namespace", ns, f"{MANAGED_LABEL}={managed}")
        for obj in queue_manifests(GangFlavor.KUEUE, queue=LOCAL_QUEUE, namespace=MANAGED, gpus=32):
            kubectl(cluster.admin_kubeconfig, "apply", "-f", "-", stdin=json.dumps(obj))
        yield KueueCluster(cluster, agents, kueue)
    finally:
        kueue.stop()
        agents.close()
        cluster.stop()


def profile_yaml(namespace: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "firedrill.dev/v1alpha1", "kind": "TargetProfile", "name": "realk8s-kueue",
        "flavor": "kueue", "namespace": namespace, "queue": LOCAL_QUEUE, "canary_image": "firedrill-canary:local",
        "fault": {"method": "kubelet-stop", "timeout_seconds": 60},
        "safety": {"allow_label": "firedrill.dev/chaos=allowed", "max_nodes": 1, "max_gpu_share": 0.3},
        "canary": {"shared_volume": {"nfs": {"server": "firedrill-nfs", "path": "/firedrill"}}}})


def firedrill_run(made: KueueCluster, namespace: str, work: Path) -> tuple[subprocess.CompletedProcess[str],
                                                                          list[dict[str, Any]]]:
    features = work / "features"
    features.mkdir(parents=True)
    shutil.copy(FEATURE, features / FEATURE.name)
    profile = work / "profile.yaml"
    profile.write_text(profile_yaml(namespace))
    return run(made.cluster.admin_kubeconfig, profile, features, work / "reports", timeout=RUN_TIMEOUT_S)


def verdicts(scenarios: list[dict[str, Any]]) -> dict[str, str]:
    return {s["scenario"]: s["verdict"] for s in scenarios}


def test_kueue_admits_each_gang_whole_and_the_gang_feature_passes(kueue_cluster: KueueCluster,
                                                                  tmp_path: Path) -> None:
    proc, scenarios = firedrill_run(kueue_cluster, MANAGED, tmp_path)
    assert verdicts(scenarios) == {"A gang that fits is placed whole": "PASS",
                                   "Two gangs that each need more than half of the free GPUs": "PASS",
                                   "A gang that must wait for GPUs holds none while it waits": "PASS"}, \
        proc.stdout + proc.stderr + kueue_cluster.kueue.log_path.read_text(errors="replace")[-3000:]
    assert proc.returncode == 0
    two = next(s for s in scenarios if s["scenario"].startswith("Two gangs"))
    placed = [pod for pod in two["details"]["bind_report"].values() if pod["node"]]
    assert {pod["node"] for pod in placed} <= set(NODES) and len(placed) == 6  # both ran, one after the other
    # Kueue really held the pods: it made a Workload per gang (deleted with the pods on rollback)
    events = kubectl(kueue_cluster.cluster.admin_kubeconfig, "-n", MANAGED, "get", "events", "-o", "json")
    reasons = {e.get("reason") for e in json.loads(events.stdout)["items"]}
    assert {"QuotaReserved", "Admitted"} & reasons, sorted(r for r in reasons if r)


def test_without_kueue_s_admission_the_same_gangs_deadlock(kueue_cluster: KueueCluster, tmp_path: Path) -> None:
    proc, scenarios = firedrill_run(kueue_cluster, UNMANAGED, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert verdicts(scenarios)["Two gangs that each need more than half of the free GPUs"] == "FAIL"
    two = next(s for s in scenarios if s["scenario"].startswith("Two gangs"))
    assert any(f.startswith("DEADLOCK:") for f in two["findings"]), two["findings"]
