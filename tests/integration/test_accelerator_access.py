"""`firedrill run` on the accelerator access feature, honest reference platform: every scenario PASSes, each
judged from what the probe pods themselves reported (docs/ACCESS.md). The FAIL with ``visible-to-all`` is the
defect zoo's (tests/integration/test_defect_zoo.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_isolation import _archive
from tests.integration.test_run import features_copy, firedrill

pytestmark = pytest.mark.integration


def test_each_pod_reaches_its_own_gpus_and_no_other(tmp_path: Path) -> None:
    features = features_copy(tmp_path, "accelerator_access.feature")
    out = firedrill("run", "--features", str(features), timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 passed" in out.stdout, out.stdout
    record = json.loads((_archive(out.stdout) / "record.json").read_text())
    scenarios = {s["scenario"]: s for s in record["scenarios"]}
    none = next(s for name, s in scenarios.items() if "requests no GPU" in name)
    (pod,) = none["details"]["access"]["pods"].values()
    assert pod["requested"] == 0 and pod["first"]["visible"] == "all"  # asked for every GPU, as CUDA images do
    assert pod["first"]["device_nodes"] == [] and pod["first"]["opened"] == []
    assert set(pod["first"]["refused"]) == {f"nvidia{i}" for i in range(8)}  # it tried every GPU of its node
    two = next(s for name, s in scenarios.items() if "Two pods" in name)
    pods = list(two["details"]["access"]["pods"].values())
    opened = [set(p["last"]["opened"]) for p in pods]
    assert [len(o) for o in opened] == [1, 1] and not opened[0] & opened[1]
    # what each was given, by identity, is what the invariant watch read from its start line
    identities = two["details"]["invariants"]["identities"]
    assert sorted(v for p in pods for v in p["last"]["identities"].values()) == sorted(
        g for gpus in identities.values() for g in gpus)
    assert two["details"]["invariants"]["breaches"] == []
    measured = {m["name"]: m["value"] for m in two["measurements"]}
    assert measured["GPUs opened that another pod holds"] == 0 and measured["pods seeing other than their own GPUs"] == 0
