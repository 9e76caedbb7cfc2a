"""Partition isolation on the upstream control plane: the shipped feature, unedited (issue 29).

Four refplatform agents are the kubelets of an upstream control plane, each with one GPU partitioned as one
row of the shipped ``features/partition_isolation.feature`` asks: an H200 as ``MIG 7 x 1g.18gb`` and as the
mixed ``MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb``, an H100-80GB as ``time-slicing x 4`` and as ``HAMi x 4``.
Each advertises its slices to upstream as the NVIDIA device plugin names them (``nvidia.com/gpu`` with
``nvidia.com/mig.strategy=single``, ``nvidia.com/mig-<profile>`` with ``mixed``, replicas with the sharing
labels; docs/PARTITIONING.md) and is the device plugin and the GPUs behind them.

On a real cluster the partitioned node's sentence does not start a node: it picks the node with the allow label
that advertises the layout it describes. The agents' GPUs are simulated (``firedrill.dev/simulated-gpus=true``),
so the tenants are canaries whose memory use the agent's GPUs hold them to, as on the embedded platform; every
tenant pod is placed by the real kube-scheduler (7.2's surplus tenants are refused by it, with its own
FailedScheduling Events) and failed by the agent through upstream's ``pods/status``. The Xids come from the
profile's ``fault.xid`` template, ``xidctl.py inject-at`` (the slice the agent assigned the victim), behind the
same safety checks as on any cluster, and ``xidctl.py clear`` restores the GPU after each.

Every scenario PASSes; with the ``leaky-mig`` defect on the agents (a contained Xid on one MIG instance fails
every instance of that GPU) the MIG rows FAIL, naming the tenants that escaped isolation.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.kinds.isolation.drill import gpu_model, partition_config
from tests.realk8s.agents import RefAgents
from tests.realk8s.cluster import RealCluster, RealClusterSpec
from tests.realk8s.firedrill import firedrill_run
from tests.realk8s.standin import node_user
from tests.realk8s.test_control_plane import kubectl

pytestmark = pytest.mark.realk8s

REPO = Path(__file__).resolve().parents[2]
FEATURE = REPO / "features" / "partition_isolation.feature"
XIDCTL = Path(__file__).with_name("xidctl.py")
NAMESPACE = "firedrill-isolation"
RUN_TIMEOUT_S = 420
NODES = {"iso-mig-7": ("H200", "MIG 7 x 1g.18gb"),
         "iso-mig-mixed": ("H200", "MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb"),
         "iso-sliced": ("H100-80GB", "time-slicing x 4"),
         "iso-hami": ("H100-80GB", "HAMi x 4")}
"""One agent per row of the feature's Examples: node -> (GPU model, layout in the feature's words)."""


@dataclass
class Partitioned:
    cluster: RealCluster
    agents: RefAgents

    def profile(self, path: Path) -> Path:
        kubeconfig = self.cluster.admin_kubeconfig
        inject = f"{sys.executable} {XIDCTL} inject-at {kubeconfig} {{node}} {{gpu}} {{instance}} {{xid}}"
        clear = f"{sys.executable} {XIDCTL} clear {kubeconfig} {{node}}"
        path.write_text("\n".join([
            "apiVersion: firedrill.dev/v1alpha1", "kind: TargetProfile", "name: realk8s-isolation",
            "flavor: native", f"namespace: {NAMESPACE}", "queue: default", "canary_image: firedrill-canary:local",
            "fault:", "  method: kubelet-stop", "  timeout_seconds: 30",
            "  xid:", f"    command_template: {json.dumps(inject)}", f"    restore_template: {json.dumps(clear)}",
            "safety:", "  allow_label: firedrill.dev/chaos=allowed", "  max_nodes: 1", "  max_gpu_share: 0.5", ""]))
        return path

    def start_agents(self, work: Path, defects: tuple[str, ...] = ()) -> None:
        """Start (or restart, with ``defects``) one agent per row, each Ready and labelled for chaos."""
        for name, (model, layout) in NODES.items():
            config = work / f"{name}.yaml"
            config.write_text(yaml.safe_dump(partition_config(layout, model)))
            extra = ("--gpus", "1", "--gpu-model", gpu_model(model), "--partition-config", str(config),
                     *(arg for d in defects for arg in ("--defect", d)))
            self.agents.start(name, wait_ready=False, extra=extra)
        for name in NODES:
            self.agents.wait_ready(name)
            kubectl(self.cluster.admin_kubeconfig, "label", "node", name, "--overwrite", "firedrill.dev/chaos=allowed")


@pytest.fixture(scope="module")
def partitioned(realk8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Partitioned]:
    work = tmp_path_factory.mktemp("isolation")
    cluster = RealCluster(RealClusterSpec(bin_dir=realk8s_bin_dir, work_dir=work / "cluster",
                                          extra_users=tuple(node_user(n) for n in NODES)))
    cluster.start()
    made = Partitioned(cluster, RefAgents(cluster, work / "agents"))
    try:
        made.start_agents(work)
        kubectl(cluster.admin_kubeconfig, "create", "namespace", NAMESPACE)
        yield made
    finally:
        made.agents.close()
        cluster.stop()


def run_feature(made: Partitioned, tmp_path: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    features = tmp_path / "features"
    features.mkdir()
    (features / FEATURE.name).write_text(FEATURE.read_text())  # the shipped feature, unedited
    proc, scenarios = firedrill_run(made.cluster.admin_kubeconfig, made.profile(tmp_path / "profile.yaml"),
                                    features, tmp_path / "reports", timeout=RUN_TIMEOUT_S)
    by_row = {}
    for s in scenarios:
        layout = s["details"].get("partition_layout") or {}
        by_row[f"{s['scenario']} [{layout.get('node')}]"] = s
        print(f"{s['scenario']} on {layout.get('node')}: {s['verdict']} {s.get('findings') or ''}")
    return proc.stdout + proc.stderr, by_row


AGENT_WORDS = ("out of service", "Xid", "heartbeat", "GPU 0", "Traceback", "Error")
"""The agent log lines that tell why a row's slices did or did not leave allocatable."""


def why_not_pass(made: Partitioned, by_row: dict[str, dict[str, Any]]) -> str:
    """For each row that did not PASS: what the drill saw of the node's allocatable after the fault, and what the
    node's agent logged about its GPU's health and its heartbeats (a FAIL here must name its cause)."""
    parts = []
    for name, s in by_row.items():
        if s["verdict"] == "PASS":
            continue
        node = (s["details"].get("partition_layout") or {}).get("node")
        parts.append(f"--- {name}: {s['verdict']}; slices_out: {json.dumps(s['details'].get('slices_out'))}")
        agent = made.agents.agents.get(str(node))
        if agent is not None:
            lines = [line for line in agent.log_path.read_text(errors="replace").splitlines()
                     if any(word in line for word in AGENT_WORDS)]
            parts.append(f"--- agent {node}, its health and heartbeat lines (last 40):\n" + "\n".join(lines[-40:]))
    return "\n".join(parts)


def test_the_isolation_feature_passes_on_the_nodes_it_describes(partitioned: Partitioned, tmp_path: Path) -> None:
    out, by_row = run_feature(partitioned, tmp_path)
    assert len(by_row) == 5, out
    assert {name: s["verdict"] for name, s in by_row.items()} == dict.fromkeys(by_row, "PASS"), (
        out + "\n" + why_not_pass(partitioned, by_row))
    nodes = {s["details"]["partition_layout"]["node"] for s in by_row.values()}
    assert nodes == set(NODES), nodes  # each row on the node that advertises its layout
    for s in by_row.values():
        assert s["details"]["partition_layout"]["tenants"] == "canary"
    refused = next(s for name, s in by_row.items() if "beyond its slices" in name)
    pending = refused["details"]["fill"]["pending"]
    assert len(pending) == 2 and all("Insufficient nvidia.com/gpu" in why for why in pending.values()), pending
    injected = [p["injection"]["command"] for s in by_row.values()
                for p in s["details"].get("isolation_matrix", {}).get("probes", []) if p.get("injection")]
    assert injected and all("xidctl.py inject-at" in c for c in injected), injected


def test_a_gpu_that_leaks_a_contained_fault_fails_the_mig_rows(partitioned: Partitioned, tmp_path: Path) -> None:
    for name in NODES:
        partitioned.agents.stop(name)
    partitioned.start_agents(tmp_path, defects=("leaky-mig",))
    out, by_row = run_feature(partitioned, tmp_path)
    mig = {name: s for name, s in by_row.items() if "partitioned as MIG" in name}
    assert mig and all(s["verdict"] == "FAIL" for s in mig.values()), out
    for s in mig.values():
        assert any("ISOLATION ESCAPED: contained fault (Xid 94)" in f for f in s["findings"]), s["findings"]
    others = {name: s["verdict"] for name, s in by_row.items() if name not in mig}
    assert others and set(others.values()) == {"PASS"}, out
