"""``fault.xid`` in a target profile: the isolation drill's own Xid injection template, checked at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.target.profile import FaultMethod, FaultSettings, ProfileError, XidSettings, load_profile

BASE: dict[str, Any] = {"name": "staging", "flavor": "volcano", "namespace": "firedrill", "queue": "default",
                        "canary_image": "registry.example.com/firedrill-canary:0.1.0",
                        "fault": {"method": "kubelet-stop"}}
GOOD = "inject-xid --node {node} --gpu {gpu} --instance {instance} --xid {xid}"


def load_with(tmp_path: Path, xid: Any) -> Any:
    doc = {**BASE, "fault": {**BASE["fault"], "xid": xid}}
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_profile(path)


def test_a_profile_without_xid_has_none_and_writes_none() -> None:
    settings = FaultSettings(FaultMethod.KUBELET_STOP)
    assert settings.xid is None


def test_the_template_is_loaded_rendered_and_recorded(tmp_path: Path) -> None:
    profile = load_with(tmp_path, {"command_template": GOOD, "restore_template": "reset-gpu {node} {gpu}"})
    xid = profile.fault.xid
    assert isinstance(xid, XidSettings)
    assert xid.command_for("gpu-3", 2, 5, 94) == "inject-xid --node gpu-3 --gpu 2 --instance 5 --xid 94"
    assert xid.command_for("gpu-3", 0, None, 79) == "inject-xid --node gpu-3 --gpu 0 --instance - --xid 79"
    assert xid.restore_for("gpu-3", 1, None, 79) == "reset-gpu gpu-3 1"
    assert profile.to_dict()["fault"]["xid"] == {"command_template": GOOD,
                                                 "restore_template": "reset-gpu {node} {gpu}"}


def test_xid_is_independent_of_the_node_fault_method(tmp_path: Path) -> None:
    doc = {**BASE, "fault": {"method": "command", "command_template": "power-off {node}",
                             "xid": {"command_template": "x {node} {xid}"}}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    profile = load_profile(path)
    assert profile.fault.command_for("n") == "power-off n" and profile.fault.xid is not None
    assert profile.fault.xid.restore_for("n", 0, None, 94) is None


@pytest.mark.parametrize(("xid", "says"), [
    ({"command_template": "inject {node} {gpu} {slot} {xid}"},
     "fault.xid.command_template: unknown placeholder(s) {slot}; the known ones are {node}, {gpu}, {instance}, "
     "{xid}"),
    ({"command_template": "inject --gpu {gpu} --xid {xid}"}, "fault.xid.command_template: 'inject --gpu {gpu} "
                                                             "--xid {xid}' has no {node} placeholder"),
    ({"command_template": "inject {node} {gpu}"}, "has no {xid} placeholder"),
    ({"command_template": "inject {node"}, "fault.xid.command_template: 'inject {node' is not a valid template"),
    ({"command_template": "  "}, "fault.xid.command_template: is empty"),
    ({}, "fault.xid.command_template: required field is missing"),
    ({"command_template": 7}, "fault.xid.command_template: expected a shell command with {node} and {xid}, "
                              "got an integer"),
    ({"command_template": GOOD, "restore_template": "reset {gpu}"},
     "fault.xid.restore_template: 'reset {gpu}' has no {node} placeholder"),
    ({"command_template": GOOD, "restore_template": "reset {node} {serial}"},
     "fault.xid.restore_template: unknown placeholder(s) {serial}"),
    ({"command_template": GOOD, "restore_templte": "x"}, "fault.xid.restore_templte: unknown field; did you mean 'restore_template'?"),
    ("inject {node} {xid}", "fault.xid: expected a mapping of command_template, restore_template, got a string"),
])
def test_a_bad_xid_section_is_refused_naming_the_file_and_the_key(tmp_path: Path, xid: Any, says: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_with(tmp_path, xid)
    message = str(caught.value)
    assert "staging.yaml" in message, "the error must name the file"
    assert any(says in problem for problem in caught.value.problems), caught.value.problems


def test_xid_settings_check_themselves_when_built_in_code() -> None:
    with pytest.raises(ProfileError, match=r"unknown placeholder\(s\) \{bus\}"):
        XidSettings("inject {node} {bus} {xid}")
