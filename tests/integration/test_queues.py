"""`firedrill queues --apply` against a real API server (the reference platform's, which serves Volcano's
``scheduling.volcano.sh/v1beta1`` Queue): created once, reported 'unchanged (exists)' the second time, and
never labelled with a drill run (the queue outlives every run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from drills.cli import app
from drills.kube.driver import RESOURCES, KubeDriver
from drills.kube.flavors import RUN_LABEL
from refplatform.cluster import Cluster

pytestmark = pytest.mark.integration
QUEUE = RESOURCES[("scheduling.volcano.sh/v1beta1", "Queue")]


def test_apply_creates_a_volcano_queue_once(apiserver: Cluster, tmp_path: Path) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"name": "ref", "flavor": "volcano", "namespace": "default",
                                       "queue": "firedrill-gpu", "canary_image": "registry.k8s.io/pause:3.10",
                                       "fault": {"method": "kill"}}))
    args = ["queues", "--profile", str(profile), "--gpus", "24", "--apply", "--kubeconfig", str(apiserver.kubeconfig)]
    runner = CliRunner()
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.stderr
    assert "Queue firedrill-gpu: created" in first.stderr
    assert [d["kind"] for d in yaml.safe_load_all(first.stdout) if d] == ["Queue"]
    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.stderr
    assert "Queue firedrill-gpu: unchanged (exists)" in second.stderr
    driver = KubeDriver.connect(apiserver.kubeconfig)
    try:
        queue = driver.get(QUEUE, "firedrill-gpu")
    finally:
        driver.close()
    assert queue["spec"]["capability"]["nvidia.com/gpu"] in ("24", 24)
    assert RUN_LABEL not in (queue["metadata"].get("labels") or {})
