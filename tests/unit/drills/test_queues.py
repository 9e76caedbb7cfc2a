"""`firedrill queues`: the queue objects for the profile's flavor, their GPU quota sized from the features
(issue 32, item 5; docs/QUEUES.md)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from drills.bdd.features import load_features
from drills.bdd.queues import (CAPACITY_SENTENCES, WORKLOAD_SENTENCES, ApplyOutcome, DemandKind, QuotaError,
                               QuotaPlan, apply_manifests, quota_for)
from drills.cli import app
from drills.kube.driver import KubeError
from drills.kube.flavors import RUN_LABEL
from drills.scenario.vocabulary import SENTENCES

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()


def profile_file(tmp_path: Path, flavor: str, **extra: Any) -> Path:
    doc = {"name": f"test-{flavor}", "flavor": flavor, "namespace": "team-gpu", "queue": "lq-train",
           "canary_image": "registry.k8s.io/pause:3.10", "fault": {"method": "kubelet-stop"}, **extra}
    path = tmp_path / f"profile-{flavor}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def feature_dir(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "features"
    folder.mkdir()
    for name, text in files.items():
        (folder / f"{name}.feature").write_text(text)
    return folder


SMALL_GANGS = """Feature: Small gangs
  Background:
    Given the cluster has at least 2 schedulable GPU nodes with 4 free GPUs each

  Scenario: A small gang fits
    When I submit a gang of 2 workers with 4 GPUs each
    Then all workers are running within 30 seconds

  Scenario: A wider cluster
    Given the cluster has at least 3 schedulable GPU nodes with 4 free GPUs each
    When I submit a gang of 3 workers with 4 GPUs each
    Then all workers are running within 30 seconds
"""

BIG_TRAINING = """Feature: Big training
  Scenario: A training job wider than the gang cluster
    Given a canary training job of 4 workers with 8 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with kill
    Then the platform detects the failure within 5 seconds
"""

TRAINING_ONLY = """Feature: Training only
  Scenario: Two ranks
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with kill
    Then the platform detects the failure within 5 seconds

  Scenario: One wide rank
    Given a canary training job of 1 worker with 8 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with kill
    Then the platform detects the failure within 5 seconds

  Scenario: Four narrow ranks
    Given a canary training job of 4 workers with 2 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with kill
    Then the platform detects the failure within 5 seconds
"""

NO_GPUS = """Feature: Control plane only
  Scenario: Load without GPUs
    Given steady control-plane load from 4 users writing, listing and watching pods
    When a node is pulled with kill after 3 seconds of load
    And the load goes on for 10 seconds
    Then every write the API acknowledged is found afterwards
"""


# --- sizing ------------------------------------------------------------------------------------------------


def test_the_shipped_features_size_the_quota_at_the_gang_scenarios_free_capacity() -> None:
    plan = quota_for(load_features(REPO / "features"))
    assert plan.gpus == 32
    decided = plan.decided_by
    assert decided is not None and decided.kind is DemandKind.CAPACITY
    assert decided.feature.name == "gang_submission.feature"
    assert decided.scenario == "A gang that fits is placed whole"
    assert decided.step == "the cluster has at least 4 schedulable GPU nodes with 8 free GPUs each"
    assert (decided.units, decided.per_unit) == (4, 8)
    assert plan.too_large == ()  # every shipped gang and training job fits a 32-GPU queue whole
    assert plan.explain() == ("32 GPUs: " + str(REPO / "features" / "gang_submission.feature")
                              + " 'A gang that fits is placed whole' asks for 4 nodes x 8 free GPUs")


def test_the_sentence_tables_name_registered_sentences_and_their_placeholders() -> None:
    fields = {s.name: {name for name, _ in s.fields} for s in SENTENCES}
    for table in (CAPACITY_SENTENCES, WORKLOAD_SENTENCES):
        for name, (units, per_unit) in table.items():
            assert name in fields, f"{name} is no registered sentence: a step was renamed; update drills/bdd/queues.py"
            assert {units, per_unit} <= fields[name], (name, fields[name])


def test_the_largest_stated_capacity_decides_and_a_wider_workload_is_named(tmp_path: Path) -> None:
    folder = feature_dir(tmp_path, a_gangs=SMALL_GANGS, b_training=BIG_TRAINING)
    plan = quota_for(load_features(folder))
    assert plan.gpus == 12  # 3 nodes x 4 free GPUs beats the Background's 2 x 4
    assert plan.decided_by is not None and plan.decided_by.scenario == "A wider cluster"
    assert [(d.kind, d.scenario, d.gpus) for d in plan.too_large] == [
        (DemandKind.WORKLOAD, "A training job wider than the gang cluster", 32)]
    warning, = plan.warnings()
    assert "submits a workload of 4 workers x 8 GPUs (32 GPUs at once): more than the quota of 12" in warning


def test_without_a_capacity_sentence_the_largest_single_workload_decides(tmp_path: Path) -> None:
    plan = quota_for(load_features(feature_dir(tmp_path, training=TRAINING_ONLY)))
    assert plan.gpus == 8
    assert plan.decided_by is not None and plan.decided_by.kind is DemandKind.WORKLOAD
    assert plan.decided_by.scenario == "Two ranks"  # 2 x 4 and 1 x 8 tie: the first written decides
    assert plan.too_large == ()


def test_features_that_ask_for_no_gpus_cannot_size_a_quota(tmp_path: Path) -> None:
    with pytest.raises(QuotaError, match="give --gpus N"):
        quota_for(load_features(feature_dir(tmp_path, cp=NO_GPUS)))


# --- the command -------------------------------------------------------------------------------------------


def docs_of(output: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(output) if d is not None]


def test_kueue_objects_for_the_shipped_features(tmp_path: Path) -> None:
    result = runner.invoke(app, ["queues", "--profile", str(profile_file(tmp_path, "kueue")),
                                 "--features", str(REPO / "features")])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].startswith("# 32 GPUs: ") and "'A gang that fits is placed whole' asks for 4 nodes x 8" in lines[1]
    docs = docs_of(result.stdout)
    assert [d["kind"] for d in docs] == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    _, cq, lq = docs
    resources = {r["name"]: r["nominalQuota"] for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert resources["nvidia.com/gpu"] == 32
    assert lq["metadata"] == {"name": "lq-train", "namespace": "team-gpu"}
    assert lq["spec"]["clusterQueue"] == cq["metadata"]["name"]
    assert all(RUN_LABEL not in (d["metadata"].get("labels") or {}) for d in docs), "queues outlive runs"


def test_gpus_overrides_the_features_and_the_profile_names_the_gpu_resource(tmp_path: Path) -> None:
    mig = "nvidia.com/mig-1g.10gb"
    profile = profile_file(tmp_path, "kueue", gpu_resource=mig)
    result = runner.invoke(app, ["queues", "--profile", str(profile), "--gpus", "12",
                                 "--features", str(tmp_path / "absent")])  # with --gpus the features are not read
    assert result.exit_code == 0, result.stderr
    assert "# 12 GPUs: set by --gpus" in result.stdout
    cq = next(d for d in docs_of(result.stdout) if d["kind"] == "ClusterQueue")
    group = cq["spec"]["resourceGroups"][0]
    assert mig in group["coveredResources"]
    assert {"name": mig, "nominalQuota": 12} in group["flavors"][0]["resources"]


def test_volcano_queue(tmp_path: Path) -> None:
    result = runner.invoke(app, ["queues", "--profile", str(profile_file(tmp_path, "volcano")),
                                 "--features", str(REPO / "features")])
    assert result.exit_code == 0, result.stderr
    queue, = docs_of(result.stdout)
    assert (queue["apiVersion"], queue["kind"]) == ("scheduling.volcano.sh/v1beta1", "Queue")
    assert queue["metadata"] == {"name": "lq-train"}
    assert queue["spec"]["capability"] == {"nvidia.com/gpu": "32"}


def test_kai_queues_are_plain_yaml(tmp_path: Path) -> None:
    result = runner.invoke(app, ["queues", "--profile", str(profile_file(tmp_path, "kai")),
                                 "--features", str(REPO / "features")])
    assert result.exit_code == 0, result.stderr
    assert "&id" not in result.stdout and "*id" not in result.stdout  # no anchors for the shared settings
    parent, leaf = docs_of(result.stdout)
    assert (parent["apiVersion"], parent["kind"], leaf["kind"]) == ("scheduling.run.ai/v2", "Queue", "Queue")
    assert leaf["metadata"]["name"] == "lq-train" and leaf["spec"]["parentQueue"] == parent["metadata"]["name"]
    assert leaf["spec"]["resources"]["gpu"] == {"quota": 32, "limit": 32, "overQuotaWeight": 1}


def test_native_needs_no_queue(tmp_path: Path) -> None:
    result = runner.invoke(app, ["queues", "--profile", str(profile_file(tmp_path, "native"))])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("# ") and "needs no queue objects" in result.stdout
    assert docs_of(result.stdout) == []


def test_a_workload_the_quota_never_admits_is_a_warning_in_the_yaml(tmp_path: Path) -> None:
    folder = feature_dir(tmp_path, a_gangs=SMALL_GANGS, b_training=BIG_TRAINING)
    result = runner.invoke(app, ["queues", "--profile", str(profile_file(tmp_path, "volcano")),
                                 "--features", str(folder)])
    assert result.exit_code == 0, result.stderr
    assert "# warning: " in result.stdout and "never admits it" in result.stdout
    assert docs_of(result.stdout)[0]["spec"]["capability"] == {"nvidia.com/gpu": "12"}


@pytest.mark.parametrize("args, message", [
    (["--apply"], "--apply needs --kubeconfig"),
    (["--kubeconfig", "k.yaml"], "used only with --apply"),
    (["--gpus", "0"], "--gpus"),
])
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["queues", "--profile", str(profile_file(tmp_path, "kueue")), *args])
    assert result.exit_code == 2
    assert message in result.stderr, result.stderr


def test_a_bad_profile_lists_its_problems(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "flavor": "slurm", "namespace": "ns", "queue": "q"}))
    result = runner.invoke(app, ["queues", "--profile", str(path)])
    assert result.exit_code == 2
    assert "error: target profile" in result.stderr and "flavor" in result.stderr
    assert "canary_image" in result.stderr, result.stderr


def test_bad_features_are_a_usage_error(tmp_path: Path) -> None:
    folder = feature_dir(tmp_path, bad="Feature: Bad\n  Scenario: x\n    Given the cluster is on fire\n")
    result = runner.invoke(app, ["queues", "--profile", str(profile_file(tmp_path, "kueue")),
                                 "--features", str(folder)])
    assert result.exit_code == 2
    assert "unknown step" in result.stderr


def test_features_that_size_nothing_ask_for_gpus(tmp_path: Path) -> None:
    result = runner.invoke(app, ["queues", "--profile", str(profile_file(tmp_path, "kueue")),
                                 "--features", str(feature_dir(tmp_path, cp=NO_GPUS))])
    assert result.exit_code == 2
    assert "give --gpus N" in result.stderr


# --- --apply -----------------------------------------------------------------------------------------------


class FakeDriver:
    def __init__(self, existing: set[str], refuse: dict[str, int] | None = None) -> None:
        self.existing, self.refuse = existing, refuse or {}
        self.created: list[str] = []

    def create(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in self.refuse:
            raise KubeError(f"POST {name}: {self.refuse[name]}", self.refuse[name], "NotFound")
        if name in self.existing:
            raise KubeError(f"POST {name}: 409 AlreadyExists", 409, "AlreadyExists")
        self.created.append(name)
        return obj


def test_apply_reports_an_existing_object_as_unchanged() -> None:
    from drills.kube.flavors import GangFlavor, queue_manifests

    manifests = queue_manifests(GangFlavor.KUEUE, queue="lq", namespace="ns", gpus=32)
    driver = FakeDriver(existing={"firedrill-gpu"})
    done = apply_manifests(driver, manifests)
    assert [(a.kind, a.name, a.outcome) for a in done] == [
        ("ResourceFlavor", "firedrill-gpu", ApplyOutcome.EXISTS), ("ClusterQueue", "firedrill-cq", ApplyOutcome.CREATED),
        ("LocalQueue", "lq", ApplyOutcome.CREATED)]
    assert done[0].line() == "ResourceFlavor firedrill-gpu: unchanged (exists)"
    assert done[2].line() == "LocalQueue lq in namespace ns: created"
    with pytest.raises(KubeError):
        apply_manifests(FakeDriver(set(), refuse={"firedrill-cq": 404}), manifests)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_apply_to_an_unreachable_cluster_names_the_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "nowhere.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    result = runner.invoke(app, ["queues", "--profile", str(profile_file(tmp_path, "volcano")), "--gpus", "8",
                                 "--apply", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 4, result.stderr
    assert f"error: cannot reach the cluster of kubeconfig {kubeconfig}" in result.stderr


def test_quota_plan_from_gpus_alone() -> None:
    assert QuotaPlan(7, None).explain() == "7 GPUs: set by --gpus" and QuotaPlan(7, None).warnings() == []
