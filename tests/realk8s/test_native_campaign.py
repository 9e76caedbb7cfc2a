"""A campaign against the real control plane: the node-kill part of a mix, on upstream's controllers (issue 27,
Done-when 4).

Four refplatform agents are the kubelets of an upstream control plane, tuned as the node-pull test runs it. The
campaign's mix is the customer's own file (the node-kill rows alone: GPU faults are injected through the reference
platform's agents and a real cluster's campaign skips and counts them); the profile maps ``kill`` to a ``command``,
``agentctl.py kill`` (SIGKILL of the agent's process group, a host crash), with no restore: a killed node stays
down, as a crashed host does until someone powers it on, so the job of one worker of 8 GPUs moves to one of the
nodes left each time. Every number is the harness's own: the upstream node lifecycle and taint-eviction
controllers, the Job controller (with its pod-failure back-off) and kube-scheduler recover the job; the canary's
log says how much of the campaign turned into progress.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realk8s.firedrill import firedrill_run as run
from tests.realk8s.test_native_nodepull import AGENTCTL, NAMESPACE, PullCluster, start_pull_cluster

pytestmark = pytest.mark.realk8s

RUN_TIMEOUT_S = 300
MIX = """\
name: node-kill-only
source: "the node-kill rows of mixes/llama3-405b.yaml, the part of it a real cluster's campaign injects"
faults:
  - kind: node-kill
    weight: 46
"""
FEATURE = """\
Feature: Goodput on the upstream control plane
  @clause:15.9
  Scenario: A one-worker job keeps training while hosts crash
    Given a canary training job of 1 worker with 8 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    And the campaign's seed is 3
    When faults from the {mix} mix arrive every 20 seconds on average for 40 seconds
    Then effective training time is at least 20 %
    And every fault is recovered automatically within 45 seconds
    And at most 10 steps are lost per fault
"""


@pytest.fixture(scope="module")
def campaign_cluster(realk8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PullCluster]:
    made = start_pull_cluster(realk8s_bin_dir, tmp_path_factory.mktemp("campaign"), ())
    try:
        yield made
    finally:
        made.agents.close()
        made.cluster.stop()


def test_a_campaign_of_host_crashes_is_measured_on_the_real_controllers(campaign_cluster: PullCluster,
                                                                        tmp_path: Path) -> None:
    mix = tmp_path / "node-kill-only.yaml"
    mix.write_text(MIX)
    features = tmp_path / "features"
    features.mkdir()
    (features / "campaign.feature").write_text(FEATURE.format(mix=mix))
    kill = f"{sys.executable} {AGENTCTL} kill {campaign_cluster.agents.data_dir} {{node}}"
    profile = tmp_path / "profile.yaml"
    profile.write_text("\n".join([
        "apiVersion: firedrill.dev/v1alpha1", "kind: TargetProfile", "name: realk8s-campaign", "flavor: native",
        f"namespace: {NAMESPACE}", "queue: default", "canary_image: firedrill-canary:local",
        "fault:", "  method: command", f"  command_template: {json.dumps(kill)}", "  timeout_seconds: 30",
        "  stand_ins:", "    kill: command",
        "safety:", "  allow_label: firedrill.dev/chaos=allowed", "  max_nodes: 1", "  max_gpu_share: 0.3",
        "canary:", "  shared_volume:", "    nfs:", "      server: firedrill-nfs", "      path: /firedrill", ""]))
    proc, (scenario,) = run(campaign_cluster.cluster.admin_kubeconfig, profile, features, tmp_path / "reports",
                            timeout=RUN_TIMEOUT_S)
    out = proc.stdout + proc.stderr
    campaign = scenario["details"]["campaign"]
    measured = {m["name"]: m["value"] for m in scenario["measurements"]}
    print(f"campaign on the real controllers: {scenario['verdict']}; " + ", ".join(
        f"{k} {v:.2f}" for k, v in measured.items() if v is not None)
          + f"; faults {[(f['kind'], f.get('recovery_s'), f.get('skipped')) for f in campaign['faults']]}")
    injected = [f for f in campaign["faults"] if not f.get("skipped")]
    assert campaign["seed"] == 3 and injected, out
    assert all(f["kind"] == "node-kill" and f["recovery_s"] is not None for f in injected), out
    assert scenario["verdict"] == "PASS" and proc.returncode == 0, out
    assert 0 < measured["effective training time"] < 100, out
