"""The topology feature on an upstream control plane (issue 31, items 3 and 4): which scheduler keeps a gang inside
one rack, and what a cluster lacks when none does.

Four refplatform agents as kubelets of kube-apiserver / kube-scheduler v1.37.2, 8 simulated GPUs each, racked two
to a rack by their ``--node-labels`` (``cloud.provider.com/topology-rack`` rack-0, rack-1, as the embedded platform
racks its nodes), run ``firedrill run --kubeconfig`` on a copy of ``features/topology.feature``:

- **Kueue v0.17.0 with topology-aware scheduling** (beta, on by default since 0.14): a Topology with the levels
  block, rack and hostname, a ResourceFlavor naming it (``topologyName``; a TAS flavor needs ``nodeLabels``
  too), the LocalQueue's ClusterQueue on that flavor. The kueue flavor's pods carry
  ``kueue.x-k8s.io/podset-required-topology``; Kueue's pod webhook gates them and admits the pod group into one
  rack, setting each pod's node selector: 18.1 and 18.2 PASS; 18.3 FAILs, a true finding (Kueue never retries
  the waiting gang when pods outside Kueue free its rack).
- **The same Kueue, a flavor that names no Topology**: INCONCLUSIVE before anything is created, naming the
  ResourceFlavor and what a real cluster needs.
- **kube-scheduler's own topology-aware workload scheduling** (``TopologyAwareWorkloadScheduling``, alpha in 1.36,
  off by default): with the gate off kube-apiserver drops the native PodGroup's ``schedulingConstraints``, and
  the scenarios are INCONCLUSIVE naming the gate; with it on in all three components, all three PASS.

What each run gave is in docs/REAL_CLUSTERS.md, "Topology: a gang inside one rack".
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.kube.flavors import GangFlavor, kueue_queues
from tests.realk8s.agents import RefAgents
from tests.realk8s.cluster import Component, RealCluster, RealClusterSpec
from tests.realk8s.firedrill import firedrill_run as run
from tests.realk8s.kueue import MANAGED_LABEL, KueueManager
from tests.realk8s.standin import node_user
from tests.realk8s.test_control_plane import kubectl
from tests.realk8s.test_native_nodepull import (AGENTCTL, NODE_MONITOR_GRACE_PERIOD_S, NODE_MONITOR_PERIOD_S,
                                                TOLERATION_S)

pytestmark = pytest.mark.realk8s

REPO = Path(__file__).resolve().parents[2]
FEATURE = REPO / "features" / "topology.feature"
NATIVE_PROFILE = REPO / "examples" / "profile-native.yaml"
RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"
HOSTNAME = "kubernetes.io/hostname"
NODES = {f"rack-node-{i}": f"rack-{i // 2}" for i in range(4)}
"""Node -> its rack: two racks of two 8-GPU nodes, as the embedded platform racks its four."""
TAS_NS, PLAIN_NS, NATIVE_NS = "firedrill-tas", "firedrill-plain", "firedrill-native"
LOCAL_QUEUE, TOPOLOGY = "lq-gpu", "firedrill-racks"
RUN_TIMEOUT_S = 300
SCENARIOS = ("A gang that fits in one rack is placed inside one rack",
             "A gang that fits the cluster but no single rack waits whole",
             "A waiting gang is placed inside the first rack that frees up")
RESTART = "A gang that loses a node comes back inside one rack"
"""18.4 pulls a node with ``kill``; these profiles map no stand-in for it, so it is INCONCLUSIVE before its first
step, saying what to set (the real-cluster run of it needs a fault command and tuned node-lifecycle timers)."""


@dataclass
class Racked:
    cluster: RealCluster
    agents: RefAgents


def start_racked(bin_dir: Path, work: Path, *, gates: tuple[str, ...] = ()) -> Racked:
    """A control plane (native gang scheduling on, plus ``gates`` in all three components; node lifecycle tuned as
    the node pull's cluster, so that a pulled node is noticed in seconds) and four racked agents, labelled for
    chaos."""
    extra = {c: tuple(f"--feature-gates={g}=true" for g in gates) for c in Component if c is not Component.ETCD} \
        if gates else {}
    cluster = RealCluster(RealClusterSpec(bin_dir=bin_dir, work_dir=work, extra_args=extra,
                                          node_monitor_grace_period=NODE_MONITOR_GRACE_PERIOD_S,
                                          node_monitor_period=NODE_MONITOR_PERIOD_S,
                                          default_unreachable_toleration_seconds=TOLERATION_S,
                                          default_not_ready_toleration_seconds=TOLERATION_S,
                                          extra_users=tuple(node_user(n) for n in NODES)))
    cluster.start()
    agents = RefAgents(cluster, work / "agents")
    try:
        for name, rack in NODES.items():
            agents.start(name, wait_ready=False, extra=("--node-labels", f"{RACK}={rack},{BLOCK}=block-0"))
        for name in NODES:
            agents.wait_ready(name)
            kubectl(cluster.admin_kubeconfig, "label", "node", name, "firedrill.dev/chaos=allowed")
    except BaseException:
        agents.close()
        cluster.stop()
        raise
    return Racked(cluster, agents)


def apply(made: Racked, obj: dict[str, Any]) -> None:
    kubectl(made.cluster.admin_kubeconfig, "apply", "-f", "-", stdin=json.dumps(obj))


def tas_queues() -> list[dict[str, Any]]:
    """Kueue's topology-aware setup as a cluster admin writes it: the Topology, a flavor naming it, the queues."""
    topology = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": TOPOLOGY},
                "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOSTNAME}]}}
    queues = kueue_queues(namespace=TAS_NS, local_queue=LOCAL_QUEUE, gpus=32, flavor="firedrill-racked",
                          cluster_queue="firedrill-cq-racked", cohort="firedrill-racked",
                          node_labels={"nvidia.com/gpu.present": "true"})
    queues[0]["spec"]["topologyName"] = TOPOLOGY
    return [topology, *queues]


@pytest.fixture(scope="module")
def kueue_racked(realk8s_bin_dir: Path, kueue_dir: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Racked]:
    work = tmp_path_factory.mktemp("topology-kueue")
    made = start_racked(realk8s_bin_dir, work)
    kueue = KueueManager(kueue_dir, made.cluster, work / "kueue")
    try:
        kueue.start()
        for ns in (TAS_NS, PLAIN_NS):
            kubectl(made.cluster.admin_kubeconfig, "create", "namespace", ns)
            kubectl(made.cluster.admin_kubeconfig, "label", "namespace", ns, f"{MANAGED_LABEL}=true")
        for obj in tas_queues() + kueue_queues(namespace=PLAIN_NS, local_queue=LOCAL_QUEUE, gpus=32,
                                               flavor="firedrill-plain", cluster_queue="firedrill-cq-plain",
                                               cohort="firedrill-plain"):
            apply(made, obj)
        yield made
    finally:
        kueue.stop()
        made.agents.close()
        made.cluster.stop()


def kueue_profile(namespace: str, fault: dict[str, Any] | None = None) -> str:
    return yaml.safe_dump({
        "apiVersion": "firedrill.dev/v1alpha1", "kind": "TargetProfile", "name": "realk8s-kueue-racks",
        "flavor": GangFlavor.KUEUE.value, "namespace": namespace, "queue": LOCAL_QUEUE,
        "canary_image": "firedrill-canary:local",
        "fault": fault or {"method": "kubelet-stop", "timeout_seconds": 60},
        "safety": {"allow_label": "firedrill.dev/chaos=allowed", "max_nodes": 1, "max_gpu_share": 0.3},
        "canary": {"shared_volume": {"nfs": {"server": "firedrill-nfs", "path": "/firedrill"}}}})


def host_crash(made: Racked) -> dict[str, Any]:
    """The profile's fault for ``kill`` on this cluster: the agents' own kill (its process group SIGKILLed, a host
    crash) and their power-on tool as its undo, as the node pull's cluster has them."""
    power_on = made.agents.write_power_on(made.agents.work_dir / "power-on.py", made.cluster.admin_kubeconfig)
    return {"method": "command", "command_template": f"{sys.executable} {AGENTCTL} kill {made.agents.data_dir} {{node}}",
            "restore_template": f"{sys.executable} {power_on} {{node}}", "timeout_seconds": 60,
            "stand_ins": {"kill": "command"}}


def restart_feature() -> str:
    """18.4 alone, unedited."""
    header, *scenarios = re.split(r"\n(?=  @clause:)", FEATURE.read_text())
    (scenario,) = [sc for sc in scenarios if "@clause:18.4" in sc]
    return header + "\n" + scenario.rstrip() + "\n"


def test_kueue_topology_aware_scheduling_after_a_node_is_lost_under_a_rack_bound_job(
        kueue_racked: Racked, tmp_path: Path) -> None:
    """18.4, unedited, on Kueue v0.17.0 with TAS: the canary job (a batch/v1 Indexed Job, Kueue's pod-set annotation
    on its template) trains inside one rack; a node under it is crashed (the agents' kill, with the profile's
    ``fault.stand_ins.kill``); the real node lifecycle and taint-eviction controllers take its pod off, and Kueue
    and the Job controller start the job again whole inside the other rack (measured: 14.4 s from the pull, the
    shipped window 30 s; docs/REAL_CLUSTERS.md)."""
    profile = tmp_path / "profile.yaml"
    profile.write_text(kueue_profile(TAS_NS, host_crash(kueue_racked)))
    features = tmp_path / "features"
    features.mkdir()
    (features / FEATURE.name).write_text(restart_feature())
    proc, (scenario,) = run(kueue_racked.cluster.admin_kubeconfig, profile, features, tmp_path / "reports",
                            timeout=RUN_TIMEOUT_S)
    out = proc.stdout + proc.stderr
    details = scenario["details"]
    print(f"18.4 on Kueue TAS: {scenario['verdict']}; findings {scenario['findings']}; "
          f"before {details.get('placement_before_fault')}; after {details.get('placement_after_fault')}")
    before = {p["domain"] for p in details["placement_before_fault"].values()}
    after = {p["domain"] for p in details["placement_after_fault"].values()}
    assert scenario["verdict"] == "PASS", out
    assert len(before) == 1 and len(after) == 1 and before != after, details  # the lost node's rack had no room left


def topology_run(made: Racked, work: Path, profile: Path, *extra: str
                 ) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    features = work / "features"
    features.mkdir(parents=True)
    shutil.copy(FEATURE, features / FEATURE.name)
    proc, scenarios = run(made.cluster.admin_kubeconfig, profile, features, work / "reports", timeout=RUN_TIMEOUT_S,
                          extra=extra)
    return proc, {s["scenario"]: s for s in scenarios}


def gang_racks(scenario: dict[str, Any]) -> set[str]:
    placed = scenario["details"].get("placement") or {}
    return {pod["domain"] for name, pod in placed.items() if "-worker-" in name and pod["node"]}


def judged(scenario: dict[str, Any]) -> list[str]:
    return [j["message"] for j in scenario.get("judgements") or []]


def assert_restart_needs_a_stand_in(scenarios: dict[str, dict[str, Any]]) -> None:
    restart = scenarios.pop(RESTART)
    assert restart["verdict"] == "INCONCLUSIVE", restart
    assert "set fault.stand_ins.kill to one of" in " ".join(restart["findings"]), restart["findings"]


def test_kueue_topology_aware_scheduling_keeps_each_gang_inside_one_rack_but_never_retries_the_waiting_one(
        kueue_racked: Racked, tmp_path: Path) -> None:
    """18.1 and 18.2 PASS: Kueue admits the pod group into one rack, and keeps the gang no rack can hold gated.
    18.3 is a true FAIL: the other job's pods are not Kueue's, and Kueue v0.17.0 retries a TAS workload it found
    inadmissible only when a ResourceFlavor, a node's scheduling properties or a queue changes, not when pods
    outside Kueue free GPUs (pkg/controller/tas: the non-TAS usage controller updates the cache, nothing requeues),
    so the gang stays gated after its rack freed up (docs/REAL_CLUSTERS.md)."""
    profile = tmp_path / "profile.yaml"
    profile.write_text(kueue_profile(TAS_NS))
    proc, scenarios = topology_run(kueue_racked, tmp_path, profile)
    out = proc.stdout + proc.stderr
    assert_restart_needs_a_stand_in(scenarios)
    assert {name: s["verdict"] for name, s in scenarios.items()} == dict(zip(SCENARIOS, ("PASS", "PASS", "FAIL"))), out
    assert proc.returncode == 1, out
    assert len(gang_racks(scenarios[SCENARIOS[0]])) == 1
    assert not gang_racks(scenarios[SCENARIOS[1]])  # it waited: no pod placed
    third = scenarios[SCENARIOS[2]]
    assert not third["findings"], third["findings"]  # it held nothing while it waited: no pod went anywhere
    assert "GPUs the waiting gang held: measured 0.000 GPUs" in " ".join(judged(third))
    assert any("never measured (0 of 4 workers running after 70 s)" in j for j in judged(third)), judged(third)
    events = json.loads(kubectl(kueue_racked.cluster.admin_kubeconfig, "-n", TAS_NS, "get", "events", "-o",
                                "json").stdout)["items"]
    assert {"QuotaReserved", "Admitted"} & {e.get("reason") for e in events}, out  # Kueue admitted the first gang


def test_a_kueue_flavor_without_a_topology_is_inconclusive_naming_it(kueue_racked: Racked, tmp_path: Path) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(kueue_profile(PLAIN_NS))
    proc, scenarios = topology_run(kueue_racked, tmp_path, profile)
    for name in SCENARIOS:
        assert scenarios[name]["verdict"] == "INCONCLUSIVE", proc.stdout + proc.stderr
    reason = " ".join(scenarios[SCENARIOS[0]]["findings"]) + proc.stdout
    assert "ResourceFlavor firedrill-plain names no topology" in reason, reason
    listed = kubectl(kueue_racked.cluster.admin_kubeconfig, "-n", PLAIN_NS, "get", "pods", "-o", "name")
    assert listed.stdout.strip() == "", "the drill created pods before it knew Kueue would not place them by rack"


def native_run(bin_dir: Path, work: Path, gates: tuple[str, ...] = ()
               ) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """The feature with the native example profile on a racked cluster started with ``gates``, then stopped."""
    made = start_racked(bin_dir, work / "cluster", gates=gates)
    try:
        kubectl(made.cluster.admin_kubeconfig, "create", "namespace", NATIVE_NS)
        return topology_run(made, work / "run", NATIVE_PROFILE, "--namespace", NATIVE_NS)
    finally:
        made.agents.close()
        made.cluster.stop()


def test_without_topology_aware_workload_scheduling_the_native_flavor_is_inconclusive(
        realk8s_bin_dir: Path, tmp_path: Path) -> None:
    proc, scenarios = native_run(realk8s_bin_dir, tmp_path)
    assert {s["verdict"] for s in scenarios.values()} == {"INCONCLUSIVE"}, proc.stdout + proc.stderr
    assert "TopologyAwareWorkloadScheduling" in proc.stdout, proc.stdout


def test_with_topology_aware_workload_scheduling_the_native_flavor_passes(realk8s_bin_dir: Path,
                                                                          tmp_path: Path) -> None:
    """kube-scheduler's TopologyPlacement places each PodGroup inside one rack, keeps the one no rack holds
    unschedulable whole, and places it once a rack frees up (a pod's end is an event its queue reacts to)."""
    proc, scenarios = native_run(realk8s_bin_dir, tmp_path, gates=("TopologyAwareWorkloadScheduling",))
    out = proc.stdout + proc.stderr
    assert_restart_needs_a_stand_in(scenarios)
    assert {s["verdict"] for s in scenarios.values()} == {"PASS"}, out
    assert proc.returncode == 3, out  # 18.4 INCONCLUSIVE
    assert len(gang_racks(scenarios[SCENARIOS[0]])) == 1 and len(gang_racks(scenarios[SCENARIOS[2]])) == 1
    assert not gang_racks(scenarios[SCENARIOS[1]])
