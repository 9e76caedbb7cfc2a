"""When a node pull acts and what it counts from, on a virtual clock (the drills run against the real engines in
tests/realslurm and tests/realray, and the embedded platform in tests/integration):

- on Slurm and Ray the harness learns what the platform did by polling: a platform that noticed the pulled node
  before the fault command returned (Ray Train's controller polls its workers every 0.5 s when tuned; the command
  is a process of its own that must start, kill and exit) is detected 0 s after the fault, never before it, in a
  node pull and in each fault of a campaign;
- a pull "in the middle of a checkpoint write" lands a third of the way into the write time the scenario gave,
  not at the write's first line (where it could come before the writer had created any file)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from drills.kinds.campaign.drill import CampaignFault
from drills.kube.flavors import GangSpec
from drills.records.verdict import DrillInconclusive, DrillResult
from drills.target.faultmix import FaultKind, MixFault, ScheduledFault
from drills.target.profile import FaultMethod
from drills.workloads.canarylog import CanaryEvent, CanaryLine
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


@dataclass
class TickingClock(VirtualClock):
    """Every reading moves it on by ``tick`` seconds: the drill's wait sees time pass with no real sleep."""

    tick: float = 0.01

    def mono(self) -> float:
        self.t += self.tick
        return self.t


def begin_line(step: int, at: float, event: CanaryEvent = CanaryEvent.CHECKPOINT_BEGIN) -> CanaryLine:
    return CanaryLine(pod="canary-0", uid="u0", node="w1", seq=step * 10 + (event is CanaryEvent.CHECKPOINT),
                      ts=at, event=event, rank=0, generation="0", fields={"step": step, "file": f"ckpt-{step}"},
                      mono=at, wall=at)


class PullRecorder(RayTrainingRun):
    """The run with its pull replaced by a note of when it came (the pull itself runs in tests/realray)."""

    pulled_at: float | None = None

    def pull(self, rank: int, method: FaultMethod, asked: FaultMethod | None = None) -> None:
        self.pulled_at = self.target.timeline.clock.t

    def _live_ranks(self) -> set[str]:
        return {"u0"}


@pytest.mark.parametrize(("write_seconds", "after"), [(3.0, 1.0), (0.0, 0.0)])
def test_a_pull_mid_checkpoint_lands_a_third_of_the_way_into_the_write_it_was_given(write_seconds: float,
                                                                                    after: float) -> None:
    clock = TickingClock(t=100.0, tick=0.1)
    run = PullRecorder(target=Target(Timeline(clock)), result=DrillResult("nodepull"),  # type: ignore[arg-type]
                       run_id="fd0a1b2c", spec=GangSpec(name="canary-fd0a1b2c", run_id="fd0a1b2c", workers=2,
                                                        gpus_per_worker=4, image="canary"))
    run.write_seconds = write_seconds
    run.canary.add(begin_line(5, 100.2))
    run.canary.add(begin_line(5, 100.3, CanaryEvent.CHECKPOINT))  # a write that completed is passed over
    run.canary.add(begin_line(10, 100.4))
    run.pull_during_checkpoint(0, FaultMethod.KILL, timeout=10)
    assert run.torn is not None and run.torn.step == 10
    assert run.pulled_at is not None and after <= run.pulled_at - 100.4 <= after + 0.3


def test_a_write_that_always_completes_before_the_pull_point_is_inconclusive_naming_it() -> None:
    clock = TickingClock(t=100.0, tick=0.5)
    run = PullRecorder(target=Target(Timeline(clock)), result=DrillResult("nodepull"),  # type: ignore[arg-type]
                       run_id="fd0a1b2c", spec=GangSpec(name="canary-fd0a1b2c", run_id="fd0a1b2c", workers=2,
                                                        gpus_per_worker=4, image="canary"))
    run.write_seconds = 3.0
    run.canary.add(begin_line(5, 100.5))
    run.canary.add(begin_line(5, 100.6, CanaryEvent.CHECKPOINT))
    with pytest.raises(DrillInconclusive, match=r"still under way 1\.0 s after it began \(a third of the 3 s asked\)"):
        run.pull_during_checkpoint(0, FaultMethod.KILL, timeout=5)
    assert run.pulled_at is None


def test_each_instant_of_a_campaign_fault_is_never_before_the_one_it_follows() -> None:
    fault = CampaignFault(ScheduledFault(0, 10.0, MixFault(FaultKind.NODE_KILL, 1.0)))
    fault.stamp("fault", Instant(100.0, 100.0))
    fault.stamp("detect", Instant(99.6, 99.6))  # Ray noticed while the kill command still ran
    fault.stamp("replace", Instant(103.0, 103.0))
    fault.stamp("resume", Instant(102.5, 102.5))  # a rank stepped before the last one of the group started
    fault.stamp("detect", Instant(101.0, 101.0))  # the first record stands
    assert {k: v.mono for k, v in fault.instants.items()} == {"fault": 100.0, "detect": 100.0, "replace": 103.0,
                                                              "resume": 103.0}
    assert fault.seconds("fault", "detect") == 0.0 and fault.recovery == 3.0
