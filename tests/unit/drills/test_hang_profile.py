"""``fault.hang`` in a target profile: the hang drill's own injection template on a real cluster, checked at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.target.profile import HangSettings, ProfileError, load_profile

BASE: dict[str, Any] = {"name": "staging", "flavor": "native", "namespace": "firedrill", "queue": "default",
                        "canary_image": "registry.example.com/firedrill-canary:0.1.0",
                        "fault": {"method": "kubelet-stop"}}
GOOD = "kubectl exec -n {namespace} {pod} -- kill -USR2 1"


def load_with(tmp_path: Path, hang: Any) -> Any:
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump({**BASE, "fault": {**BASE["fault"], "hang": hang}}))
    return load_profile(path)


def test_the_template_is_loaded_rendered_and_recorded(tmp_path: Path) -> None:
    profile = load_with(tmp_path, {"command_template": GOOD, "restore_template": "unhang {node} {uuid}"})
    hang = profile.fault.hang
    assert isinstance(hang, HangSettings)
    values = {"node": "gpu-3", "pod": "canary-1", "namespace": "firedrill", "uuid": "GPU-1"}
    assert hang.command_for(**values) == "kubectl exec -n firedrill canary-1 -- kill -USR2 1"
    assert hang.restore_for(**values) == "unhang gpu-3 GPU-1"
    assert profile.to_dict()["fault"]["hang"] == {"command_template": GOOD, "restore_template": "unhang {node} {uuid}"}
    assert load_with(tmp_path, None).fault.hang is None


@pytest.mark.parametrize(("hang", "says"), [
    ({"command_template": "hang {node}"}, "fault.hang.command_template: 'hang {node}' has no {pod} nor {uuid}"),
    ({"command_template": "hang {pod} {rank}"}, "fault.hang.command_template: unknown placeholder(s) {rank}; the "
                                                "known ones are {node}, {pod}, {namespace}, {uuid}"),
    ({"command_template": " "}, "fault.hang.command_template: is empty"),
    ({"command_template": GOOD, "restore_template": "x {pod"}, "fault.hang.restore_template: 'x {pod' is not a "
                                                                "valid template"),
    ({"command_template": GOOD, "signal": "USR2"}, "signal"),
])
def test_a_broken_template_is_refused_naming_the_field(tmp_path: Path, hang: dict[str, Any], says: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_with(tmp_path, hang)
    assert says in str(err.value)


def test_a_slurm_profile_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "platform": "slurm", "slurm": {"partition": "gpu"},
                                    "fault": {"method": "command", "command_template": "off {node}",
                                              "hang": {"command_template": GOOD}}}))
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert "fault.hang: the Slurm target has no hang drill yet" in str(err.value)


def test_a_storage_stall_command_is_loaded_and_aimed_at_a_node(tmp_path: Path) -> None:
    path = tmp_path / "stall.yaml"
    path.write_text(yaml.safe_dump({**BASE, "fault": {**BASE["fault"], "storage_stall": {
        "command_template": "stall-nfs {node} {seconds}", "restore_template": "unstall-nfs {node}"}}}))
    stall = load_profile(path).fault.storage_stall
    assert stall is not None and stall.command_for(node="n1", seconds="8") == "stall-nfs n1 8"
    assert stall.restore_for(node="n1", seconds="8") == "unstall-nfs n1"
    path.write_text(yaml.safe_dump({**BASE, "fault": {**BASE["fault"], "storage_stall": {
        "command_template": "stall-nfs everywhere {seconds}"}}}))
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert "fault.storage_stall.command_template: 'stall-nfs everywhere {seconds}' has no {node}" in str(err.value)
