"""What keeps a customer's cluster safe beyond the blast radius (docs/SAFETY.md), its pure parts: the abort guard
(which node change is a breach, what ABORTED does to a scenario's verdict and to the run's exit code, how a profile
names the conditions) and a fault command that schedules its own undo (``fault.expire_seconds``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.bdd.plugin import ScenarioOutcome, scenario_verdict
from drills.bdd.run import ExitCode, counts_line, exit_code
from drills.records.verdict import DrillResult, ScenarioHalted, Verdict
from drills.scenario.guard import NodeGuard
from drills.target.faults import CONTROL_PLANE
from drills.target.profile import AbortCondition, FaultMethod, ProfileError, TargetProfile, load_profile
from drills.target.safety import is_ready as node_ready


def ready(status: str) -> dict:
    return {"status": {"conditions": [{"type": "Ready", "status": status}]}}


def test_node_ready_is_the_ready_condition_alone() -> None:
    assert node_ready(ready("True")) and not node_ready(ready("Unknown")) and not node_ready(ready("False"))
    assert not node_ready({})


@pytest.mark.parametrize(("seen", "radius", "breach"), [
    ([True, False], set(), True),                  # Ready, then not: outside a radius that is empty
    ([True, False], {"n1"}, False),                # the faulted node itself
    ([True, False], {"n9", CONTROL_PLANE}, False),  # a control-plane fault makes every heartbeat late
    ([False, False], set(), False),                # NotReady when the scenario began: the pre-flight's business
    ([True, True, False], {"n9"}, True),           # outside the radius
    ([True, False, True, False], set(), True),     # each fall counts (the first one stops the run anyway)
])
def test_a_breach_is_a_node_outside_the_radius_leaving_ready(seen: list[bool], radius: set[str],
                                                            breach: bool) -> None:
    guard = NodeGuard()
    found = [guard.see("n1", state, radius) for state in seen]
    assert bool(found[-1]) is breach
    if breach:
        assert found[-1] is not None and "node n1 went NotReady" in found[-1]
        assert "safety.abort_when: node-outside-blast-radius-not-ready" in found[-1]


def test_aborted_outranks_every_verdict_and_a_later_fail_keeps_it() -> None:
    result = DrillResult("gang")
    result.abort("node n1 went NotReady")
    result.fail("a promise broken while it stopped")
    assert result.verdict is Verdict.ABORTED and result.halted == "node n1 went NotReady"
    with pytest.raises(ScenarioHalted):
        result.raise_if_halted()
    assert Verdict.worst([Verdict.FAIL, Verdict.ABORTED, Verdict.INCONCLUSIVE]) is Verdict.ABORTED
    assert scenario_verdict(False, False, ScenarioHalted("x"), result) is Verdict.ABORTED
    assert scenario_verdict(True, False, None, result) is Verdict.ABORTED


def _outcome(verdict: Verdict | None) -> ScenarioOutcome:
    return ScenarioOutcome("id", "f", "f.feature", "s", [], verdict=verdict)


def test_an_aborted_run_has_its_own_exit_code_and_says_so() -> None:
    outcomes = [_outcome(Verdict.FAIL), _outcome(None), _outcome(Verdict.ABORTED)]
    assert exit_code(outcomes) == ExitCode.ABORTED == 5
    assert counts_line(outcomes) == "0 passed, 1 failed, 0 inconclusive, 1 harness errors, 1 ABORTED"
    assert counts_line([_outcome(Verdict.PASS)]) == "1 passed, 0 failed, 0 inconclusive, 0 harness errors"


PROFILE = """\
apiVersion: firedrill.dev/v1alpha1
kind: TargetProfile
name: guarded
flavor: volcano
namespace: default
queue: default
canary_image: firedrill-canary:local
fault:
  method: kubelet-stop
safety:
  abort_when: {value}
"""


def parse_profile(text: str, tmp_path: Path) -> TargetProfile:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return load_profile(path)


def test_a_profile_names_its_abort_conditions_and_a_wrong_name_is_refused(tmp_path: Path) -> None:
    guarded = parse_profile(PROFILE.format(value="[node-outside-blast-radius-not-ready]"), tmp_path)
    assert guarded.safety.abort_when == (AbortCondition.OUTSIDE_NODE_NOT_READY,)
    assert guarded.to_dict()["safety"]["abort_when"] == ["node-outside-blast-radius-not-ready"]
    assert "abort_when" not in parse_profile(PROFILE.replace("safety:\n  abort_when: {value}\n", ""),
                                             tmp_path).to_dict()["safety"]
    with pytest.raises(ProfileError, match="safety.abort_when: 'node-down' is no abort condition; allowed: "
                                           "node-outside-blast-radius-not-ready"):
        parse_profile(PROFILE.format(value="[node-down]"), tmp_path)
    with pytest.raises(ProfileError, match="safety.abort_when: expected a list of condition names"):
        parse_profile(PROFILE.format(value="yes"), tmp_path)


def test_a_fault_command_may_schedule_its_own_undo_and_the_profile_says_when(tmp_path: Path) -> None:
    base = PROFILE.replace("fault:\n  method: kubelet-stop\n",
                           "fault:\n  method: command\n  command_template: {t}\n{x}")
    text = base.format(value="[]", t="'systemd-run --on-active={expire_seconds} ipmitool -H {node}-bmc power on'",
                       x="  expire_seconds: 300\n")
    fault = parse_profile(text, tmp_path).fault
    assert fault.expire_seconds == 300.0
    assert fault.command_for("gpu-3") == "systemd-run --on-active=300 ipmitool -H gpu-3-bmc power on"
    assert parse_profile(text, tmp_path).to_dict()["fault"]["expire_seconds"] == 300.0
    with pytest.raises(ProfileError, match=r"uses \{expire_seconds\}, but fault.expire_seconds is not set"):
        parse_profile(base.format(value="[]", t="'at now + {expire_seconds} sec {node}'", x=""), tmp_path)
    restore = "  restore_template: 'at +{expire_seconds} {node}'\n"
    with pytest.raises(ProfileError, match=r"fault.restore_template uses \{expire_seconds\}, but fault.expire_sec"):
        parse_profile(base.format(value="[]", t="'power off {node}'", x=restore), tmp_path)
    with pytest.raises(ProfileError, match="unknown placeholder.*only {node}, {fault} and {expire_seconds} are "
                                           "replaced"):
        parse_profile(base.format(value="[]", t="'power off {node} {when}'", x=""), tmp_path)


def test_one_fault_command_is_told_which_fault_the_scenario_asked_for(tmp_path: Path) -> None:
    """A site's one command tells a host crash from a node cut off from its controller: ``{fault}`` is the fault the
    scenario names (the stand-in's reference method), ``pull`` where it names the configured method."""
    fault_section = ("fault:\n  method: command\n  command_template: 'chaos {fault} {node}'\n"
                     "  restore_template: 'chaos heal-{fault} {node}'\n  stand_ins: {kill: command, partition: command}\n")
    text = PROFILE.replace("fault:\n  method: kubelet-stop\n", fault_section.replace("{", "{{").replace("}", "}}"))
    text = text.format(value="[]")
    fault = parse_profile(text, tmp_path).fault
    asked = fault.method_for(FaultMethod.PARTITION, reference=False)
    assert asked is FaultMethod.COMMAND
    assert fault.command_for("gpu-3", FaultMethod.PARTITION) == "chaos partition gpu-3"
    assert fault.restore_for("gpu-3", FaultMethod.PARTITION) == "chaos heal-partition gpu-3"
    assert fault.command_for("gpu-3", FaultMethod.KILL) == "chaos kill gpu-3"
    assert fault.command_for("gpu-3") == "chaos pull gpu-3"
