"""`firedrill run` on the topology feature against the honest embedded platform: its racked nodes (two to a rack)
keep every gang that asks for one rack inside one, and the gang no rack can hold waits whole.  (Its FAIL on the
``topology-blind`` defect is the defect zoo's row.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_run import evidence_dir, features_copy, firedrill

pytestmark = pytest.mark.integration


def test_every_gang_stays_inside_one_rack_or_waits_whole(tmp_path: Path) -> None:
    features = features_copy(tmp_path, "topology.feature")
    out = firedrill("run", "--features", str(features), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 passed" in out.stdout, out.stdout
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
