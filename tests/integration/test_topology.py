"""`firedrill run` on the topology feature against the honest embedded platform: its racked nodes (two to a rack)
keep every gang that asks for one rack inside one (a training gang also after a node under it was pulled and its
job restarted), and the gang no rack can hold waits whole.  (Its FAILs on the ``topology-blind`` and
``topology-lost-on-restart`` defects are the defect zoo's rows.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.test_run import evidence_dir, features_copy, firedrill

pytestmark = pytest.mark.integration


def test_every_gang_stays_inside_one_rack_or_waits_whole(tmp_path: Path) -> None:
    features = features_copy(tmp_path, "topology.feature")
    out = firedrill("run", "--features", str(features), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 passed" in out.stdout, out.stdout
    record = json.loads((evidence_dir(out.stdout) / "record.json").read_text())
    by_name = {s["scenario"]: s for s in record["scenarios"]}
    placed = by_name["A gang that fits in one rack is placed inside one rack"]["details"]["placement"]
    gang = {pod["domain"] for name, pod in placed.items() if "-worker-" in name}
    other = {pod["domain"] for name, pod in placed.items() if "-other-" in name}
    assert len(gang) == 1 and gang.isdisjoint(other), placed  # the other job's rack was half full: the gang went on
    waited = by_name["A gang that fits the cluster but no single rack waits whole"]["details"]["placement"]
    assert all(pod["node"] is None for pod in waited.values()), waited
    freed = by_name["A waiting gang is placed inside the first rack that frees up"]
    assert len({pod["domain"] for name, pod in freed["details"]["placement"].items() if "-worker-" in name}) == 1
    restarted = by_name["A gang that loses a node comes back inside one rack"]["details"]
    before = {pod["domain"] for pod in restarted["placement_before_fault"].values()}
    after = {pod["domain"] for pod in restarted["placement_after_fault"].values()}
    nodes_after = {pod["node"] for pod in restarted["placement_after_fault"].values()}
    assert len(before) == 1 and len(after) == 1, restarted  # inside one rack, before the pull and after it
    assert restarted["fault"]["node"] not in nodes_after, restarted


SMALLER_THAN_A_RACK = """\
Feature: A gang smaller than a rack (issue 51)

  Background:
    Given a rack is the set of nodes that share the label cloud.provider.com/topology-rack
    And the cluster has at least 2 racks with 16 free GPUs each

  Scenario: A gang of three 4-GPU workers waits whole and is placed in the first rack that frees up
    Given another job holds 4 GPUs on each node of every rack for 5 seconds
    When I submit a gang of 3 workers with 4 GPUs each that must stay inside one rack
    Then the gang places no pod and holds no GPU until a rack frees up
    And every worker runs inside one rack within 20 seconds of a rack freeing up
"""
"""A contract written from docs/STEPS.md with other numbers than the shipped 18.3: on the embedded platform's racks
of two 8-GPU nodes, each lending 4 GPUs, a rack has room for this gang once ONE of its holders ended."""


def _smaller_gang_feature(tmp_path: Path) -> Path:
    features = tmp_path / "features"
    features.mkdir()
    (features / "smaller_gang.feature").write_text(SMALLER_THAN_A_RACK)
    return features


def test_a_gang_smaller_than_a_rack_waits_then_runs_once_one_rack_has_room(tmp_path: Path) -> None:
    out = firedrill("run", "--features", str(_smaller_gang_feature(tmp_path)), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    record = json.loads((evidence_dir(out.stdout) / "record.json").read_text())
    (scenario,) = record["scenarios"]
    details = scenario["details"]
    room = details["room_for_the_gang"]
    workers = {name: pod for name, pod in details["placement"].items() if "-worker-" in name}
    ended = sorted(pod["ended_s"] for name, pod in details["placement"].items() if "-other-" in name)
    # the first holder's end gave a rack room, not the last's; the holders often end within the same millisecond
    # (a fresh-clone CI run saw all four at 5.194 s), so "before the last" is only there to see when they do not
    assert room["at_s"] == ended[0], details
    # inside one rack, bound once a rack had room: not necessarily the first rack that did (the holders of both
    # racks end within milliseconds, and a scheduling cycle that saw both may pick either)
    assert len({pod["domain"] for pod in workers.values()}) == 1, details
    assert all(pod["bound_s"] >= room["at_s"] for pod in workers.values()), details


@pytest.mark.parametrize(("defect", "finding"), [
    ("topology-blind", r"but 3 of its 3 pods were placed, holding 12 GPUs in 2 racks"),
    ("partial-gang-bind", r"but 2 of its 3 pods were placed, holding 8 GPUs in 1 rack"),
])
def test_a_gang_smaller_than_a_rack_bound_early_fails_naming_rack_and_pods(tmp_path: Path, defect: str,
                                                                          finding: str) -> None:
    out = firedrill("run", "--features", str(_smaller_gang_feature(tmp_path)), "--defect", defect, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    record = json.loads((evidence_dir(out.stdout) / "record.json").read_text())
    (scenario,) = record["scenarios"]
    text = " ".join(scenario["findings"])
    assert re.search(finding, text), text
    assert re.search(r"rack-\d holds gang-\w+-worker-\d on gpu-node-\d", text), text
    assert "bound after submission: gang-" in text and "no rack had room for the whole gang yet" in text, text
