"""Target profiles: the examples load, and every mistake is reported with the file, the field and the fix."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.kube.flavors import GangFlavor
from drills.target.profile import (
    FaultMethod, FaultSettings, FaultUnavailable, ProfileError, SafetySettings, TargetProfile, load_profile,
    reference_profile,
)

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples").glob("profile-*.yaml"))

MINIMAL: dict[str, Any] = {"name": "staging", "flavor": "volcano", "namespace": "firedrill", "queue": "default",
                           "canary_image": "registry.k8s.io/pause:3.10", "fault": {"method": "kubelet-stop"}}


def write(tmp_path: Path, doc: Any, name: str = "profile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def problems_of(tmp_path: Path, doc: Any) -> list[str]:
    path = write(tmp_path, doc)
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    message = str(caught.value)
    assert str(path) in message, "the error must name the file"
    assert "docs/PROFILE.md" in message
    return caught.value.problems


def test_the_examples_exist_for_every_flavor_and_for_slurm_and_ray() -> None:
    assert {p.name for p in EXAMPLES} == {f"profile-{flavor.value}.yaml" for flavor in GangFlavor} | \
        {"profile-slurm.yaml", "profile-ray.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_loads(path: Path) -> None:
    profile = load_profile(path)
    assert path.name == f"profile-{profile.flavor.value if profile.on_kubernetes else profile.platform.value}.yaml"
    assert not profile.fault.method.reference_only  # examples are for real clusters


def test_the_volcano_example_sets_every_field() -> None:
    raw = yaml.safe_load((REPO / "examples/profile-volcano.yaml").read_text())
    profile = load_profile(REPO / "examples/profile-volcano.yaml")
    assert raw == profile.to_dict(), "the complete example must spell out every field"
    assert profile.fault.command_for("gpu-7") == "ipmitool -I lanplus -H gpu-7-bmc -U firedrill -E chassis power off"


def test_the_docs_carry_the_complete_example() -> None:
    docs = (REPO / "docs/PROFILE.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", docs, re.S)]
    example = yaml.safe_load((REPO / "examples/profile-volcano.yaml").read_text())
    assert example in blocks, "docs/PROFILE.md must show examples/profile-volcano.yaml"
    for key in [*example, *(f"fault.{k}" for k in example["fault"]), *(f"safety.{k}" for k in example["safety"])]:
        assert f"`{key}`" in docs, f"docs/PROFILE.md does not document {key}"


def test_minimal_profile_takes_the_defaults(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, MINIMAL))
    assert profile == TargetProfile(name="staging", flavor=GangFlavor.VOLCANO, namespace="firedrill",
                                    queue="default", canary_image="registry.k8s.io/pause:3.10",
                                    fault=FaultSettings(FaultMethod.KUBELET_STOP))
    assert profile.safety == SafetySettings("firedrill.dev/chaos=allowed", 1, 0.25, True, True)
    assert profile.fault.timeout_seconds == 60.0 and profile.gpu_resource == "nvidia.com/gpu"
    assert profile.safety.allow_label_key == "firedrill.dev/chaos"
    assert profile.safety.allow_label_value == "allowed"


def test_reference_profile() -> None:
    ref = reference_profile()
    assert ref.flavor is GangFlavor.VOLCANO and ref.fault.method is FaultMethod.KILL
    assert ref.fault.method.reference_only and ref.safety.max_nodes == 1
    assert ref.to_dict()["fault"] == {"method": "kill", "timeout_seconds": 10.0}


def test_profiles_are_frozen() -> None:
    with pytest.raises(AttributeError):
        reference_profile().name = "x"  # type: ignore[misc]


def with_(**changes: Any) -> dict[str, Any]:
    doc = {**MINIMAL}
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


ERRORS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("missing required field", with_(queue=None), ["queue: required field is missing"]),
    ("missing fault section", with_(fault=None), ["fault: required section is missing; it takes method"]),
    ("missing fault method", with_(fault={"timeout_seconds": 5}), ["fault.method: required field is missing; "
                                                                   "expected one of kill | hang"]),
    ("unknown top-level field", with_(namspace="x"), ["namspace: unknown field; did you mean 'namespace'?"]),
    ("unknown nested field", with_(safety={"max_node": 2}), ["safety.max_node: unknown field; did you mean "
                                                             "'max_nodes'? known fields here: allow_label"]),
    ("unknown field, no close match", with_(colour="red"), ["colour: unknown field; known fields here: apiVersion"]),
    ("wrong type: string for integer", with_(safety={"max_nodes": "two"}),
     ["safety.max_nodes: expected an integer >= 1, got a string ('two')"]),
    ("wrong type: boolean for integer", with_(safety={"max_nodes": True}),
     ["safety.max_nodes: expected an integer >= 1, got a boolean (True)"]),
    ("wrong type: string for boolean", with_(safety={"require_healthy": "yes please"}),
     ["safety.require_healthy: expected true or false, got a string"]),
    ("wrong type: number for string", with_(queue=7), ["queue: expected a string, got an integer (7)"]),
    ("null value", {**MINIMAL, "name": None}, ["name: expected a string, got nothing (null)"]),
    ("wrong type: section is a list", with_(safety=["max_nodes"]), ["safety: expected a mapping of allow_label"]),
    ("unknown flavor", with_(flavor="volcan"),
     ["flavor: 'volcan' is not allowed (did you mean 'volcano'?); allowed: volcano | kueue | kai"]),
    ("unknown fault method", with_(fault={"method": "reboot"}),
     ["fault.method: 'reboot' is not allowed; allowed: kill | hang | partition | kubelet-stop | delete-node | "
      "command"]),
    ("command without template", with_(fault={"method": "command"}),
     ["fault.command_template: required when fault.method is command"]),
    ("command template without {node}", with_(fault={"method": "command", "command_template": "reboot-all"}),
     ["fault.command_template: 'reboot-all' has no {node} placeholder"]),
    ("command template with another placeholder",
     with_(fault={"method": "command", "command_template": "ssh {node} --zone {zone}"}),
     ["fault.command_template: unknown placeholder(s) {zone}"]),
    ("command template with a stray brace", with_(fault={"method": "command", "command_template": "x {node"}),
     ["fault.command_template: 'x {node' is not a valid template"]),
    ("template with another method", with_(fault={"method": "kill", "command_template": "x {node}"}),
     ["fault.command_template: set, but neither fault.method (kill) nor a stand-in is command"]),
    ("stand-in that is a reference method", with_(fault={"method": "kubelet-stop", "stand_ins": {"kill": "hang"}}),
     ["fault.stand_ins.kill: hang acts on the reference platform too; a stand-in is one of kubelet-stop"]),
    ("stand-in for a real-cluster method", with_(fault={"method": "kubelet-stop",
                                                        "stand_ins": {"command": "kubelet-stop"}}),
     ["fault.stand_ins.command: unknown field; known fields here: kill, hang, partition"]),
    ("command stand-in without a template", with_(fault={"method": "kubelet-stop", "stand_ins": {"kill": "command"}}),
     ["fault.command_template: required when fault.method is command"]),
    ("non-positive timeout", with_(fault={"method": "kill", "timeout_seconds": 0}),
     ["fault.timeout_seconds: 0 must be above 0"]),
    ("share above one", with_(safety={"max_gpu_share": 1.5}), ["safety.max_gpu_share: 1.5 must be above 0 and at "
                                                               "most 1"]),
    ("zero nodes", with_(safety={"max_nodes": 0}), ["safety.max_nodes: 0 is below the minimum 1"]),
    ("allow label without value", with_(safety={"allow_label": "firedrill.dev/chaos"}),
     ["safety.allow_label: 'firedrill.dev/chaos' must be key=value"]),
    ("bad namespace", with_(namespace="Team_A"), ["namespace: 'Team_A' is not a namespace name"]),
    ("empty image", with_(canary_image=" "), ["canary_image: is empty"]),
    ("wrong kind", with_(kind="Profile"), ["kind: 'Profile' is not 'TargetProfile'"]),
    ("several problems at once", with_(flavor="slurm", queue=None, safety={"max_nodes": -1}),
     ["flavor: 'slurm' is not allowed", "queue: required field is missing", "safety.max_nodes: -1 is below"]),
]


@pytest.mark.parametrize(("doc", "expected"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_errors_name_the_field_and_what_is_allowed(tmp_path: Path, doc: dict[str, Any],
                                                    expected: list[str]) -> None:
    problems = problems_of(tmp_path, doc)
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start), problem


@pytest.mark.parametrize(("text", "message"), [
    ("name: [unclosed\n", r"is not valid YAML at line 2, column 1"),
    ("- just\n- a list\n", r"must be a YAML mapping of fields .* got a list"),
    ("", r"must be a YAML mapping of fields .* got nothing \(null\)"),
])
def test_unreadable_files(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProfileError, match=message) as caught:
        load_profile(path)
    assert str(path) in str(caught.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"does not exist; pass the path of a YAML profile"):
        load_profile(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("build", "message"), [
    (lambda: FaultSettings(FaultMethod.COMMAND), "required when fault.method is command"),
    (lambda: FaultSettings(FaultMethod.COMMAND, "poweroff"), "has no {node} placeholder"),
    (lambda: SafetySettings(max_gpu_share=0), "max_gpu_share: 0 must be above 0"),
    (lambda: SafetySettings(allow_label="=x"), "must be key=value"),
])
def test_settings_check_themselves(build: Any, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)):
        build()


def test_command_for_needs_a_template() -> None:
    with pytest.raises(ProfileError, match="no command template"):
        FaultSettings(FaultMethod.KILL).command_for("n")


def test_the_inference_section_reads_its_command_image_and_url(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, {**MINIMAL, "inference": {
        "image": "registry.example.com/firedrill-inference:0.1.0", "url": "https://infer.example/"}}))
    assert profile.inference.command == ("firedrill-inference",)
    assert profile.inference.image == "registry.example.com/firedrill-inference:0.1.0"
    assert profile.inference.url == "https://infer.example/"
    assert profile.to_dict()["inference"] == {"command": ["firedrill-inference"], "image": profile.inference.image,
                                              "url": "https://infer.example/"}
    assert load_profile(write(tmp_path, MINIMAL, "min.yaml")).inference.image is None


@pytest.mark.parametrize(("section", "problem"), [
    ({"url": "infer.example:8000"}, "inference.url: 'infer.example:8000' is not an absolute http(s) URL"),
    ({"command": "firedrill-inference"}, "inference.command: expected a non-empty list of strings"),
    ({"image": ""}, "inference.image: expected a container image reference"),
    ({"port": 8000}, "inference"),
])
def test_a_bad_inference_section_names_the_field(tmp_path: Path, section: dict[str, Any], problem: str) -> None:
    found = problems_of(tmp_path, {**MINIMAL, "inference": section})
    assert any(problem in p for p in found), found


def test_stand_ins_map_the_reference_faults_a_feature_names_onto_the_cluster(tmp_path: Path) -> None:
    """Issue 32: the shipped features say `with kill` or `with partition`; a profile maps them to what the cluster
    supports, and a fault with no stand-in is a reason (INCONCLUSIVE), never a harness error."""
    profile = load_profile(write(tmp_path, with_(fault={
        "method": "kubelet-stop", "command_template": "ipmitool -H {node}-bmc chassis power off",
        "stand_ins": {"kill": "command", "partition": "kubelet-stop"}})))
    fault = profile.fault
    assert fault.method_for(FaultMethod.KILL, reference=False) is FaultMethod.COMMAND
    assert fault.method_for(FaultMethod.PARTITION, reference=False) is FaultMethod.KUBELET_STOP
    assert fault.method_for(None, reference=False) is FaultMethod.KUBELET_STOP
    assert fault.method_for(FaultMethod.DELETE_NODE, reference=False) is FaultMethod.DELETE_NODE
    with pytest.raises(FaultUnavailable, match=r"with hang, .* set fault.stand_ins.hang to one of kubelet-stop"):
        fault.method_for(FaultMethod.HANG, reference=False)
    assert profile.to_dict()["fault"]["stand_ins"] == {"kill": "command", "partition": "kubelet-stop"}
    # the reference platform pulls its own nodes with its own signals, whatever the stand-ins say
    assert fault.method_for(FaultMethod.KILL, reference=True) is FaultMethod.KILL
    with pytest.raises(FaultUnavailable, match=r"the configured fault method \(kubelet-stop\), which acts on real"):
        fault.method_for(None, reference=True)
    assert reference_profile().fault.method_for(None, reference=True) is FaultMethod.KILL
