"""Simulated workloads, stepped on a virtual clock (no sleeps)."""

from __future__ import annotations

import pytest

from refplatform.agent.clock import VirtualClock, rfc3339_millis
from refplatform.agent.errors import WorkloadConfigError
from refplatform.agent.workload import (
    ANN_CHECKPOINT_EVERY,
    ANN_CHECKPOINT_STEP,
    ANN_EXIT_CODE,
    ANN_RUN_SECONDS,
    ANN_STEP,
    ANN_STEP_SECONDS,
    ANN_STEPS_TOTAL,
    ANN_WORKLOAD,
    IdleWorkload,
    TrainingParams,
    TrainingWorkload,
    workload_for,
)


def training(**ann: str) -> dict[str, str]:
    return {ANN_WORKLOAD: "training", **ann}


def texts(lines) -> list[str]:
    return [line.text for line in lines]


def test_no_annotation_is_an_idle_process_that_never_ends() -> None:
    clock = VirtualClock()
    w = workload_for({})
    assert isinstance(w, IdleWorkload)
    assert w.start(clock.now()) == []
    clock.advance(10 * 365 * 86400)
    assert w.advance(clock.now()) == []
    assert w.running and w.exit is None
    assert w.progress() == {}


def test_idle_with_run_seconds_exits_with_the_given_code_at_the_right_instant() -> None:
    clock = VirtualClock()
    w = workload_for({ANN_RUN_SECONDS: "2.5", ANN_EXIT_CODE: "3"})
    start = clock.now()
    w.start(start)
    clock.advance(2.4)
    w.advance(clock.now())
    assert w.running
    clock.advance(1.0)
    w.advance(clock.now())
    assert w.exit is not None
    assert (w.exit.code, w.exit.reason) == (3, "Error")
    assert (w.exit.finished_at - start).total_seconds() == pytest.approx(2.5)


def test_training_defaults() -> None:
    w = workload_for(training())
    assert isinstance(w, TrainingWorkload)
    assert w.params == TrainingParams(steps_total=0, step_seconds=0.5, checkpoint_every=10)


def test_training_steps_once_per_step_seconds_and_checkpoints() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEP_SECONDS: "0.5", ANN_CHECKPOINT_EVERY: "4"}))
    start = clock.now()
    first = texts(w.start(start))
    assert first == [f"{rfc3339_millis(start)} starting training steps_total=0 step_seconds=0.5 checkpoint_every=4"]
    assert w.progress() == {ANN_STEP: "0", ANN_CHECKPOINT_STEP: "0"}

    clock.advance(0.49)
    assert w.advance(clock.now()) == []
    clock.advance(0.01)
    (line,) = w.advance(clock.now())
    assert line.text.startswith(f"{rfc3339_millis(clock.now())} step=1 loss=")
    assert line.time == clock.now()

    clock.advance(1.6)  # t = 2.1 s: steps 2, 3 and 4 are due, 4 is a checkpoint
    lines = w.advance(clock.now())
    assert [t.split(" ", 1)[1].split(" loss=")[0] for t in texts(lines)] == [
        "step=2",
        "step=3",
        "step=4",
        "checkpoint step=4",
    ]
    # Each line carries the instant its step completed, not the instant we looked.
    assert [(ln.time - start).total_seconds() for ln in lines] == [1.0, 1.5, 2.0, 2.0]
    assert w.progress() == {ANN_STEP: "4", ANN_CHECKPOINT_STEP: "4"}
    assert w.running


def test_training_loss_decreases_and_log_line_format() -> None:
    assert TrainingWorkload.loss(1000) < TrainingWorkload.loss(10)
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEP_SECONDS: "1"}))
    w.start(clock.now())
    clock.advance(1.123)
    (line,) = w.advance(clock.now())
    assert line.text.startswith("2026-11-30T00:00:01.000Z step=1 loss=")
    float(line.text.rsplit("loss=", 1)[1])


def test_training_exits_zero_when_steps_total_is_reached() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEPS_TOTAL: "5", ANN_STEP_SECONDS: "1", ANN_CHECKPOINT_EVERY: "2"}))
    start = clock.now()
    w.start(start)
    clock.advance(60)
    lines = texts(w.advance(clock.now()))
    assert lines[-1].endswith("training complete step=5")
    assert sum(" step=" in t and "loss=" in t for t in lines) == 5
    assert w.exit is not None and (w.exit.code, w.exit.reason) == (0, "Completed")
    assert (w.exit.finished_at - start).total_seconds() == 5
    assert w.progress() == {ANN_STEP: "5", ANN_CHECKPOINT_STEP: "4"}
    assert not w.running
    clock.advance(10)
    assert w.advance(clock.now()) == []


def test_training_resumes_from_its_checkpoint() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEPS_TOTAL: "12", ANN_STEP_SECONDS: "1", ANN_CHECKPOINT_STEP: "10"}))
    lines = texts(w.start(clock.now()))
    assert lines[-1].endswith("resuming from checkpoint step=10")
    clock.advance(1)
    assert texts(w.advance(clock.now()))[0].split(" ")[1] == "step=11"
    clock.advance(1)
    w.advance(clock.now())
    assert w.exit is not None and w.exit.code == 0


def test_stop_is_sigterm() -> None:
    clock = VirtualClock()
    w = workload_for(training())
    w.start(clock.now())
    clock.advance(1.0)
    lines = texts(w.stop(clock.now()))
    assert lines[-1].endswith("received SIGTERM, exiting")
    assert sum("step=" in t for t in lines) == 2  # what was due is still logged first
    assert w.exit is not None and (w.exit.code, w.exit.reason) == (143, "Error")
    assert w.stop(clock.now()) == []


def test_a_long_stall_is_caught_up_in_bounded_batches() -> None:
    clock = VirtualClock()
    w = workload_for(training(**{ANN_STEP_SECONDS: "0.001", ANN_CHECKPOINT_EVERY: "0"}))
    w.start(clock.now())
    clock.advance(25)  # 25,000 steps due
    assert len(w.advance(clock.now())) == 10_000
    assert len(w.advance(clock.now())) == 10_000
    assert len(w.advance(clock.now())) == 5_000
    assert w.progress()[ANN_CHECKPOINT_STEP] == "0"


@pytest.mark.parametrize(
    "annotations, message",
    [
        ({ANN_WORKLOAD: "bogus"}, "unknown workload 'bogus'"),
        (training(**{ANN_STEPS_TOTAL: "ten"}), "not an integer"),
        (training(**{ANN_STEPS_TOTAL: "-1"}), "below 0"),
        (training(**{ANN_STEP_SECONDS: "0"}), "above 0"),
        (training(**{ANN_STEP_SECONDS: "nan"}), "finite"),
        (training(**{ANN_STEPS_TOTAL: "5", ANN_CHECKPOINT_STEP: "6"}), "beyond steps-total"),
    ],
)
def test_bad_annotations_are_config_errors(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(WorkloadConfigError, match=message):
        workload_for(annotations)


def test_advance_before_start_is_a_bug() -> None:
    with pytest.raises(RuntimeError):
        workload_for({}).advance(VirtualClock().now())
