"""The recovery chain on Slurm and Ray, where the harness learns what the platform did by polling: a platform that
noticed the pulled node before the fault command returned (Ray Train's controller polls its workers every 0.5 s
when tuned; the command is a process of its own that must start, kill and exit) is detected 0 s after the fault,
never before it. The drills run against the real engines in tests/realslurm and tests/realray; here the instants
are set by hand on a virtual clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from drills.records.verdict import DrillResult
from drills.workloads.raytraining import RayTrainingRun
from drills.workloads.slurmtraining import SlurmTrainingRun
from drills.workloads.training import Instant, TrainingRun
from tests.unit.drills.test_back_in_service import Timeline, VirtualClock


@dataclass
class Target:
    timeline: Timeline = field(default_factory=lambda: Timeline(VirtualClock()))


def noticed(run: TrainingRun, at: Instant) -> None:
    if isinstance(run, RayTrainingRun):
        run.noticed_at, run.noticed_by = at, "Ray Train's controller found a worker gone (its log)"
    else:
        assert isinstance(run, SlurmTrainingRun)
        run.node_down_at = at


@pytest.mark.parametrize("kind", [RayTrainingRun, SlurmTrainingRun])
@pytest.mark.parametrize(("seen", "detect"), [(99.6, 0.0), (100.0, 0.0), (101.5, 1.5)])
def test_detect_is_never_before_the_fault_command_returned(kind: type[TrainingRun], seen: float,
                                                           detect: float) -> None:
    run = kind(target=Target(), result=DrillResult("nodepull"), run_id="fd0a1b2c")  # type: ignore[arg-type]
    run.pulled = "w1"
    noticed(run, Instant(seen, seen))  # the platform noticed at `seen` (the poll set it)
    run.instants["fault"] = Instant(100.0, 100.0)  # the command returned at 100
    with run._cond:
        run._advance()
    assert run.instants["detect"].mono - run.instants["fault"].mono == pytest.approx(detect)
    assert [name for name, _ in run.target.timeline.actions] == ["t_detect"]
