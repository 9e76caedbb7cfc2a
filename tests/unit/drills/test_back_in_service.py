"""The back-in-service phase (drills.scenario.back_in_service): undo, then time until the touched nodes serve as
before; the nodes are read through a stand-in for the driver's list (the judging, not the API, is under test;
the node-pull feature runs it against the embedded platform and the real control plane)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drills.records.verdict import DrillResult, Verdict
from drills.scenario.back_in_service import judge_back_in_service
from drills.target.faults import CONTROL_PLANE, FaultRecord
from drills.target.profile import FaultMethod
from drills.target.service import snapshot
from tests.unit.drills.test_service import GPU, node

Obj = dict[str, Any]


@dataclass
class VirtualClock:
    t: float = 100.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t


@dataclass
class Nodes:
    """The cluster's nodes as each list answers them: ``states[i]`` from the i-th list on (the last one stays)."""

    states: list[list[Obj]]
    clock: VirtualClock
    lists: int = 0

    def list(self, res: Any) -> list[Obj]:
        self.lists += 1
        return self.states[min(self.lists - 1, len(self.states) - 1)]


@dataclass
class Timeline:
    clock: VirtualClock
    actions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def action(self, name: str, **details: Any) -> None:
        self.actions.append((name, details))


@dataclass
class Profile:
    gpu_resource: str = GPU


@dataclass
class Target:
    driver: Nodes
    timeline: Timeline
    service_before: dict[str, Any]
    touched: set[str]
    faults_done: list[FaultRecord] = field(default_factory=list)
    profile: Profile = field(default_factory=Profile)
    undone: list[str] = field(default_factory=list)

    def service_now(self) -> dict[str, Any]:
        return snapshot(self.driver.list(None), self.profile.gpu_resource)

    def restore_all(self, how: str = "") -> None:
        while self.faults_done:
            record = self.faults_done.pop()
            if record.undo is not None:
                record.undo()
                self.undone.append(record.node)


def target(states: list[list[Obj]], touched: set[str], *, undo: bool = True) -> Target:
    clock = VirtualClock()
    before = snapshot([node("a"), node("b"), node("c", ready="False")], GPU)
    records = [FaultRecord(n, FaultMethod.KILL, True, undo=(lambda: None) if undo else None)
               for n in sorted(touched) if n != CONTROL_PLANE]
    return Target(Nodes(states, clock), Timeline(clock), before, touched, records)


def judge(t: Target, limit: float = 10.0) -> DrillResult:
    result = DrillResult("node-pull")

    def wait(seconds: float) -> None:
        t.driver.clock.t += 1.0  # one second of the virtual clock between two reads

    judge_back_in_service(t, result, limit, wait=wait)  # type: ignore[arg-type]
    return result


def test_a_node_back_after_its_undo_passes_with_the_time_it_took() -> None:
    down = [node("a", ready="Unknown", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
            node("b")]
    t = target([down, down, down, [node("a"), node("b")]], {"a"})
    result = judge(t)
    assert result.verdict is Verdict.PASS, result.findings
    assert result.measurements["back in service"].value == 3.0 and t.undone == ["a"]


def test_a_node_left_cordoned_fails_naming_it_and_why() -> None:
    t = target([[node("a", cordoned=True), node("b")]], {"a"})
    result = judge(t, limit=5.0)
    assert result.verdict is Verdict.FAIL
    assert result.findings == ["not back in service 5 s after the fault was undone: a: cordoned (spec.unschedulable)"]
    assert result.measurements["back in service"].value is None


def test_a_fault_with_no_undo_is_not_judged_and_says_how_to_make_it_so() -> None:
    t = target([[node("a", ready="Unknown"), node("b")]], {"a"}, undo=False)
    result = judge(t)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "set fault.restore_template" in result.findings[0] and t.driver.lists == 0


def test_the_control_plane_touches_every_node_that_served() -> None:
    t = target([[node("a"), node("b", gpus="4"), node("c", ready="False")]], {CONTROL_PLANE})
    result = judge(t, limit=2.0)
    assert result.details["back_in_service"]["nodes"] == ["a", "b"]  # c was not serving when the scenario began
    assert result.findings == ["not back in service 2 s after the fault was undone: b: 4 of its 8 GPUs allocatable"]


def test_no_node_touched_is_inconclusive() -> None:
    result = judge(target([[node("a")]], {"c"}))  # c did not serve before the fault
    assert result.verdict is Verdict.INCONCLUSIVE and "none had to come back" in result.findings[0]
