"""A campaign of node losses on a real Slurm (issue 47, Done-when 1): the node-kill rows of a mix arrive at the
canary job for 40 seconds, each a host crash (``nodectl.py kill``) undone once the job recovered
(``nodectl.py restore``); Slurm requeues the job each time and the canary resumes from its checkpoint.  The
effective training time comes from the canary's own log, each recovery from the harness's reads, as on
Kubernetes (``tests/realk8s/test_native_campaign.py`` runs the same mix there)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realslurm.cluster import SlurmCluster, SlurmClusterSpec, running
from tests.realslurm.drill import firedrill_run
from tests.realslurm.test_cluster import TUNED

pytestmark = pytest.mark.realslurm

MIX = """\
name: node-kill-only
source: "the node-kill rows of mixes/llama3-405b.yaml, the part of it a real cluster's campaign injects"
faults:
  - kind: node-kill
    weight: 46
"""
FEATURE = """\
Feature: Goodput on a real Slurm
  @clause:15.9
  Scenario: A two-worker job keeps training while hosts crash
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    And the campaign's seed is 3
    When faults from the {mix} mix arrive every 20 seconds on average for 40 seconds
    Then effective training time is at least 20 %
    And every fault is recovered automatically within 30 seconds
    And at most 10 steps are lost per fault
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    with running(SlurmClusterSpec(tmp_path / "slurm", nodes=3, gpus_per_node=4, **TUNED)) as made:
        yield made


def test_a_campaign_of_host_crashes_is_measured_on_slurm(cluster: SlurmCluster, tmp_path: Path) -> None:
    mix = tmp_path / "node-kill-only.yaml"
    mix.write_text(MIX)
    proc, (result,) = firedrill_run(cluster, tmp_path, FEATURE.format(mix=mix), name="campaign.feature")
    out = proc.stdout + proc.stderr
    campaign = result["details"]["campaign"]
    measured = {m["name"]: m["value"] for m in result["measurements"]}
    print(f"campaign on slurm: {result['verdict']}; " + ", ".join(f"{k} {v:.2f}" for k, v in measured.items()
                                                                   if v is not None))
    assert proc.returncode == 0 and result["verdict"] == "PASS", out
    injected = [f for f in campaign["faults"] if not f.get("skipped")]
    assert injected and campaign["recovered"] == len(injected), campaign["faults"]
    assert 20 <= measured["effective training time"] < 100, measured  # the crashes cost training time
    assert result["details"]["invariants"]["breaches"] == [], result["details"]["invariants"]
