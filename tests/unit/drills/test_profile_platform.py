"""A target profile names the kind of cluster it drills (issue 47): Kubernetes (the default) or Slurm.  A Slurm
profile has its own fields (the partition, account and QOS, the canary's command and shared directory, a node
feature as the allow mark) and is refused with a line per mistake; `firedrill run --dry-run` plans it, saying for
every shipped scenario why it cannot run there yet or at all."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from drills.cli import app
from drills.scenario.drill import KINDS, discover
from drills.target.profile import FaultMethod, Platform, ProfileError, SlurmGovernance, load_profile

REPO = Path(__file__).resolve().parents[3]
NATIVE = REPO / "examples" / "profile-native.yaml"
SLURM = REPO / "examples" / "profile-slurm.yaml"
runner = CliRunner()


def slurm_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": "lab", "platform": "slurm", "slurm": {"partition": "gpu"},
                           "fault": {"method": "command", "command_template": "power-off {node}"}}
    doc.update(changes)
    return doc


def load(tmp_path: Path, doc: dict[str, Any]) -> Any:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_profile(path)


def test_platform_kubernetes_is_the_default_and_may_be_written(tmp_path: Path) -> None:
    written = tmp_path / "k8s.yaml"
    written.write_text("platform: kubernetes\n" + NATIVE.read_text())
    assert load_profile(written) == load_profile(NATIVE)
    assert load_profile(NATIVE).platform is Platform.KUBERNETES and load_profile(NATIVE).slurm is None


def test_an_unknown_platform_is_refused_naming_the_ones_there_are(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"platform 'pbs' is not one Firedrill drills; write one of "
                                           r"kubernetes \| slurm"):
        load(tmp_path, slurm_doc(platform="pbs"))


def test_the_shipped_slurm_example_loads_and_records_only_slurm_fields() -> None:
    profile = load_profile(SLURM)
    assert profile.on_slurm and profile.slurm is not None
    assert profile.slurm.sbatch_options() == ("--partition=gpu", "--account=acceptance", "--qos=normal",
                                              "--requeue")
    assert profile.slurm.shared_dir == "/shared/firedrill" and profile.slurm.allow_feature == "firedrill"
    assert profile.fault.method is FaultMethod.COMMAND
    recorded = profile.to_dict()
    assert recorded["platform"] == "slurm" and recorded["slurm"]["partition"] == "gpu"
    assert not {"flavor", "namespace", "queue", "canary_image"} & recorded.keys(), recorded
    assert recorded["safety"] == {"allow_feature": "firedrill", "max_nodes": 1, "max_gpu_share": 0.25,
                                  "require_healthy": True}


def test_a_minimal_slurm_profile_takes_the_defaults(tmp_path: Path) -> None:
    profile = load(tmp_path, slurm_doc())
    assert profile.slurm.sbatch_options() == ("--partition=gpu",)
    assert profile.slurm.gres == "gpu" and profile.slurm.shared_dir is None and profile.slurm.conf is None


def test_every_mistake_of_a_slurm_profile_is_named_at_once(tmp_path: Path) -> None:
    doc = slurm_doc(flavor="volcano", slurm={"shared_dir": "relative", "canary_comand": ["x"]},
                    fault={"method": "kubelet-stop"}, safety={"allow_label": "a=b"})
    with pytest.raises(ProfileError) as caught:
        load(tmp_path, doc)
    problems = caught.value.problems
    assert any(p.startswith("flavor: a Kubernetes field; a Slurm profile") for p in problems), problems
    assert any(p.startswith("slurm.partition: required field is missing") for p in problems), problems
    assert any("slurm.canary_comand: unknown field; did you mean 'canary_command'?" in p for p in problems)
    assert any(p.startswith("slurm.shared_dir: 'relative' is not an absolute path") for p in problems)
    assert any(p.startswith("fault.method: kubelet-stop acts on Kubernetes") for p in problems), problems
    assert any(p.startswith("safety.allow_label: unknown field") for p in problems), problems


def test_sbatch_args_are_long_options_the_drills_do_not_set_themselves(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"slurm.sbatch_args: --nodes=2, --partition=x set by the drills"):
        load(tmp_path, slurm_doc(slurm={"partition": "gpu", "sbatch_args": ["--requeue", "--nodes=2",
                                                                            "--partition=x"]}))
    with pytest.raises(ProfileError, match=r"slurm.sbatch_args: expected a list of sbatch long options"):
        load(tmp_path, slurm_doc(slurm={"partition": "gpu", "sbatch_args": "--requeue"}))
    assert load(tmp_path, slurm_doc(slurm={"partition": "gpu", "sbatch_args": ["--requeue"]})).slurm.sbatch_args \
        == ("--requeue",)


def test_a_stand_in_on_slurm_must_be_a_command(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"fault.stand_ins.kill: delete-node acts on Kubernetes"):
        load(tmp_path, slurm_doc(fault={"method": "command", "command_template": "off {node}",
                                        "stand_ins": {"kill": "delete-node"}}))


def test_every_kind_says_why_it_cannot_run_on_slurm_and_serving_that_slurm_has_no_such_promise() -> None:
    discover()
    profile = load_profile(SLURM)
    reasons = {name: kind.unsupported_on_slurm(profile) for name, kind in KINDS.items()}
    assert reasons["serving"] is not None and reasons["serving"].startswith("Slurm has no such promise: Slurm runs "
                                                                            "batch jobs")
    assert reasons.pop("node-pull") is None  # its Slurm side is written (tests/realslurm/test_nodepull.py)
    assert reasons.pop("gang-submission") is None  # and the gang's (tests/realslurm/test_gang.py)
    assert reasons.pop("campaign") is None  # and the campaign's (tests/realslurm/test_campaign.py)
    assert reasons.pop("accelerator-access") is None  # and access's (tests/realslurm/test_access.py)
    assert reasons.pop("governance") is None  # and governance's, the profile naming a tenant (test_governance.py)
    bare = replace(profile, slurm=replace(profile.slurm, governance=SlurmGovernance()))
    assert "slurm.governance.tenant_command" in (KINDS["governance"].unsupported_on_slurm(bare) or "")
    assert all(r for r in reasons.values()), reasons


def test_node_pull_on_slurm_needs_the_shared_directory(tmp_path: Path) -> None:
    discover()
    assert KINDS["node-pull"].unsupported_on_slurm(load(tmp_path, slurm_doc())) == (
        "the training canary on Slurm needs a directory every node sees at the same path for its checkpoints, "
        "rendezvous and output: set slurm.shared_dir in the target profile (docs/SLURM.md)")


def test_the_dry_run_plans_a_slurm_cluster_and_flags_what_cannot_run_there() -> None:
    result = runner.invoke(app, ["run", "--dry-run", "--profile", str(SLURM), "--features", str(REPO / "features")])
    assert result.exit_code == 3, result.output
    assert "target: Slurm cluster lab-slurm (/etc/slurm/slurm.conf), partition gpu" in result.output
    assert "partition gpu, account acceptance, QOS normal, GPUs as GRES gpu" in result.output
    assert "only nodes with feature firedrill" in result.output
    assert "WOULD BE INCONCLUSIVE here: Slurm has no such promise: Slurm runs batch jobs" in result.output


@pytest.mark.parametrize("flags", [["--kubeconfig", "/nonexistent"], ["--defect", "lose-checkpoint"],
                                   ["--parallel", "2"], ["--namespace", "x"]])
def test_options_of_a_kubernetes_target_are_refused_with_a_slurm_profile(flags: list[str]) -> None:
    result = runner.invoke(app, ["run", "--dry-run", "--profile", str(SLURM), "--features", str(REPO / "features"),
                                 *flags])
    assert result.exit_code == 2, result.output
    assert f"error: {flags[0]}: the profile drills a Slurm cluster (platform: slurm)" in result.output


def test_a_fault_without_a_stand_in_on_slurm_says_the_one_that_can_stand_in() -> None:
    from drills.target.profile import FaultUnavailable

    with pytest.raises(FaultUnavailable, match=r"set fault.stand_ins.partition to command \(docs/PROFILE.md"):
        load_profile(SLURM).fault.method_for(FaultMethod.PARTITION, reference=False)
    assert load_profile(SLURM).fault.method_for(FaultMethod.KILL, reference=False) is FaultMethod.COMMAND


def test_slurm_rest_names_slurmrestd_the_tokens_user_and_where_the_token_is(tmp_path: Path) -> None:
    profile = load(tmp_path, slurm_doc(slurm={"partition": "gpu", "rest": {"url": "http://slurm-head:6820/",
                                                                            "user": "firedrill"}}))
    rest = profile.slurm.rest
    assert (rest.url, rest.user, rest.token_env, rest.api) == ("http://slurm-head:6820", "firedrill",
                                                               "FIREDRILL_SLURM_JWT", "v0.0.38")
    assert profile.to_dict()["slurm"]["rest"] == {"url": "http://slurm-head:6820", "user": "firedrill",
                                                  "token_env": "FIREDRILL_SLURM_JWT", "api": "v0.0.38"}
    assert load(tmp_path, slurm_doc()).slurm.rest is None  # the commands' --json is the read path


def test_every_mistake_of_slurm_rest_is_named(tmp_path: Path) -> None:
    doc = slurm_doc(slurm={"partition": "gpu", "rest": {"url": "slurm-head:6820", "user": "root", "token_env": "1X",
                                                        "api": "v38", "token": "eyJ..."}})
    with pytest.raises(ProfileError) as caught:
        load(tmp_path, doc)
    said = "\n".join(caught.value.problems)
    assert "slurm.rest.url: 'slurm-head:6820' is not slurmrestd's http(s) URL" in said, said
    assert "slurm.rest.user: 'root' is not an ordinary user for the token (slurmrestd refuses tokens of root)" in said
    assert "slurm.rest.token_env: '1X' is not the name of the environment variable" in said, said
    assert "slurm.rest.api: 'v38' is not an openapi plugin version such as v0.0.38" in said, said
    assert "slurm.rest.token: unknown field" in said, said  # the token itself never goes in the profile


def test_a_slurm_rest_token_missing_from_the_environment_says_how_to_mint_one(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from drills.slurm.state import SlurmError
    from drills.target.slurmtarget import slurm_driver

    profile = load(tmp_path, slurm_doc(slurm={"partition": "gpu", "rest": {"url": "http://127.0.0.1:6820",
                                                                           "user": "alice", "token_env": "LAB_JWT"}}))
    monkeypatch.delenv("LAB_JWT", raising=False)
    with pytest.raises(SlurmError, match=r"\$LAB_JWT holds no token: mint one \(scontrol token username=alice "
                                         r"lifespan=SECONDS\) and export LAB_JWT=<the token>"):
        slurm_driver(profile)
    monkeypatch.setenv("LAB_JWT", "SLURM_JWT=eyJabc")  # scontrol token's line as it prints it
    driver = slurm_driver(profile)
    assert driver.rest is not None and driver.rest.token == "eyJabc" and driver.rest.user == "alice"
    assert slurm_driver(load(tmp_path, slurm_doc())).rest is None


def test_a_token_for_another_user_in_slurm_jwt_is_refused_before_slurms_commands_speak_as_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm's commands read SLURM_JWT themselves: a token there for a user other than the harness's own would make
    sbatch submit as that user, which slurmctld refuses ("Invalid user id", found on the real Slurm)."""
    import getpass

    from drills.slurm.state import SlurmError
    from drills.target.slurmtarget import slurm_driver

    other = "nobody" if getpass.getuser() != "nobody" else "daemon"
    profile = load(tmp_path, slurm_doc(slurm={"partition": "gpu", "rest": {"url": "http://127.0.0.1:6820",
                                                                           "user": other, "token_env": "SLURM_JWT"}}))
    monkeypatch.setenv("SLURM_JWT", "eyJabc")
    with pytest.raises(SlurmError, match=rf"slurm.rest.token_env is SLURM_JWT, which Slurm's own commands read too: "
                                         rf"sbatch would then speak as {other}, not as {getpass.getuser()}"):
        slurm_driver(profile)
