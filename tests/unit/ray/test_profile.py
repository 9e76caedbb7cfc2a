"""A Ray profile (issue 50): ``platform: ray`` names the head's dashboard, the canary's command, Ray Train's
storage and ``max_failures``, how the site's jobs ask for gangs, and a custom resource as the allow mark; each
mistake is named at once.  ``firedrill run --dry-run`` plans it, saying for every shipped scenario that cannot run
there why, and Kubernetes options are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from drills.cli import app
from drills.scenario.drill import KINDS, discover
from drills.target.profile import FaultMethod, GangForm, Platform, ProfileError, load_profile

REPO = Path(__file__).resolve().parents[3]
RAY = REPO / "examples" / "profile-ray.yaml"
runner = CliRunner()


def ray_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": "lab", "platform": "ray", "ray": {"dashboard": "http://127.0.0.1:8265"},
                           "fault": {"method": "command", "command_template": "kill-node {node}"}}
    doc.update(changes)
    return doc


def load(tmp_path: Path, doc: dict[str, Any]) -> Any:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_profile(path)


def test_the_shipped_ray_example_loads_and_records_only_ray_fields() -> None:
    profile = load_profile(RAY)
    assert profile.on_ray and not profile.on_kubernetes and profile.platform is Platform.RAY
    assert profile.ray is not None and profile.ray.dashboard == "http://ray-head.lab.example:8265"
    assert profile.ray.storage_path == "/shared/firedrill" and profile.ray.max_failures == 2
    assert profile.ray.gang_form is GangForm.PLACEMENT_GROUP and profile.ray.allow_resource == "firedrill"
    recorded = profile.to_dict()
    assert recorded["platform"] == "ray" and recorded["safety"]["allow_resource"] == "firedrill"
    assert "flavor" not in recorded and "namespace" not in recorded


def test_a_minimal_ray_profile_takes_the_defaults(tmp_path: Path) -> None:
    profile = load(tmp_path, ray_doc())
    assert profile.ray.canary_command == ("python3", "-m", "drills.canary.raytrain")
    assert profile.ray.storage_path is None and profile.ray.cpus_per_worker == 1.0 and profile.ray.runtime_env() == {}
    assert profile.safety.max_nodes == 1 and profile.fault.method is FaultMethod.COMMAND


def test_every_mistake_of_a_ray_profile_is_named_at_once(tmp_path: Path) -> None:
    doc = ray_doc(flavor="volcano", ray={"dashboard": "ray-head:8265", "storage_path": "shared", "max_failures": -1,
                                         "gang_form": "one-by-one", "env_vars": {"A": 1}, "cpus_per_worker": -2})
    with pytest.raises(ProfileError) as raised:
        load(tmp_path, doc)
    text = str(raised.value)
    for expected in ("flavor: a Kubernetes field; a Ray profile (platform: ray)",
                     "ray.dashboard: 'ray-head:8265' is not the head's dashboard URL",
                     "ray.storage_path: 'shared' is not an absolute path",
                     "ray.max_failures: -1 is below the minimum 0",
                     "ray.gang_form: 'one-by-one' is not allowed",
                     "ray.env_vars: expected a mapping of names to quoted strings",
                     "ray.cpus_per_worker: -2 is below 0"):
        assert expected in text, text


def test_a_ray_node_is_pulled_with_a_command_only(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"fault.method: kill acts on Kubernetes; a Ray node is pulled with "
                                           r"command"):
        load(tmp_path, ray_doc(fault={"method": "kill"}))


def test_gang_node_pull_and_campaign_run_on_ray_and_the_rest_say_why_not(tmp_path: Path) -> None:
    discover()
    profile = load_profile(RAY)
    reasons = {name: kind.unsupported_on_ray(profile) for name, kind in KINDS.items()}
    assert reasons.pop("node-pull") is None and reasons.pop("campaign") is None
    assert reasons.pop("gang-submission") is None
    assert reasons["governance"].startswith("Ray has no such promise: Ray has no tenants")
    assert reasons["accelerator-access"].startswith("Ray has no such promise: Ray only tells a worker its GPU ids")
    assert all(r for r in reasons.values()), reasons
    bare = load(tmp_path, ray_doc())
    assert KINDS["node-pull"].unsupported_on_ray(bare) == (
        "the training canary on Ray needs a directory every node sees at the same path for Ray Train's "
        "checkpoints: set ray.storage_path in the target profile (docs/RAY.md)")
    assert KINDS["gang-submission"].unsupported_on_ray(bare) is None  # a gang logs through its job alone


def test_the_dry_run_plans_a_ray_cluster_and_flags_what_cannot_run_there(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--dry-run", "--profile", str(RAY), "--features", str(REPO / "features")],
                           env={"FIREDRILL_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 3, result.output
    assert "target: Ray cluster lab-ray (dashboard http://ray-head.lab.example:8265)" in result.output
    assert "max_failures 2, gangs as placement-group" in result.output
    assert "only nodes declaring resource firedrill, never the head" in result.output
    assert "WOULD BE INCONCLUSIVE here: Ray has no such promise: Ray has no tenants" in result.output
    # 5.2's partition has no stand-in in this profile: the fault, not the kind, is what cannot run
    assert "set fault.stand_ins.partition to command" in result.output


@pytest.mark.parametrize("flags", [["--kubeconfig", "/nonexistent"], ["--defect", "lose-checkpoint"],
                                   ["--parallel", "2"]])
def test_options_of_a_kubernetes_target_are_refused_with_a_ray_profile(flags: list[str]) -> None:
    result = runner.invoke(app, ["run", "--dry-run", "--profile", str(RAY), "--features", str(REPO / "features"),
                                 *flags])
    assert result.exit_code == 2, result.output
    assert f"error: {flags[0]}: the profile drills a Ray cluster (platform: ray)" in result.output
