"""The platform's log pipeline: canary JSON lines -> step, checkpoint, step-seconds, the Resumed Event (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from refplatform.agent.canarylog import TrainingLog, parse_line, parse_ts, stalled_ranks

RECEIVED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def line(event: str, seq: int, ts: str = "2026-11-30T10:00:00.123456Z", **fields: object) -> str:
    return json.dumps({"seq": seq, "ts": ts, "event": event, "rank": 0, "world_size": 2, "generation": "0", **fields})


def test_lines_that_are_not_canary_json_are_skipped() -> None:
    assert parse_line("Traceback (most recent call last):") is None
    assert parse_line("[1, 2]") is None
    assert parse_line('{"no": "event"}') is None
    assert parse_line("{not json") is None
    got = parse_line(line("step", 3, step=7))
    assert got is not None and got.event == "step" and got.int_field("step") == 7
    assert got.ts == datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC)
    assert parse_ts("garbage") is None and parse_ts(None) is None


def test_step_checkpoint_and_the_resumed_event_at_the_first_step_lines_ts() -> None:
    log = TrainingLog()
    assert log.annotations(with_step_seconds=True) == {}
    for text in [
        line("start", 1, pid=4242, config={}),
        "some non-JSON noise",
        line("rendezvous", 2, master="127.10.0.2:29500", seconds=0.2),
        line("resumed", 3, from_step=40, checkpoint="ckpt-0000000040.json", skipped=[]),
    ]:
        log.feed(text, RECEIVED)
    assert log.annotations(with_step_seconds=True) == {"firedrill.dev/step": "40", "firedrill.dev/checkpoint-step": "40"}
    assert log.take_events() == []  # the event waits for the first step
    log.feed(line("step", 4, "2026-11-30T10:00:01.500000Z", step=41, input_s=0, compute_s=0.05, comm_s=0, wall_s=0.06),
             RECEIVED)
    log.feed(line("step", 5, step=42, wall_s=0.08), RECEIVED)
    log.feed(line("step", 6, step=43, wall_s=0.07), RECEIVED)
    log.feed(line("checkpoint", 7, step=43, file="ckpt-0000000043.json", digest="sha256:00"), RECEIVED)
    (ev,) = log.take_events()
    assert (ev.type, ev.reason, ev.message) == ("Normal", "Resumed", "Resumed training at step 41 beyond checkpoint 40")
    assert ev.at == datetime(2026, 11, 30, 10, 0, 1, 500000, tzinfo=UTC)
    assert log.annotations(with_step_seconds=True) == {
        "firedrill.dev/step": "43", "firedrill.dev/checkpoint-step": "43", "firedrill.dev/step-seconds": "0.07",
        "firedrill.dev/compute-seconds": "0.05"}  # the median of the steps that said their compute time
    assert "firedrill.dev/step-seconds" not in log.annotations(with_step_seconds=False)
    assert log.take_events() == []  # once per resumed line


def test_a_fresh_job_resumes_from_zero_and_a_step_without_ts_is_stamped_at_receipt() -> None:
    log = TrainingLog()
    log.feed(line("resumed", 1, from_step=0, checkpoint=None, skipped=[]), RECEIVED)
    log.feed(json.dumps({"seq": 2, "event": "step", "step": 1, "wall_s": 0.5}), RECEIVED)
    (ev,) = log.take_events()
    assert ev.message == "Resumed training at step 1 beyond checkpoint 0" and ev.at == RECEIVED


def test_step_seconds_is_the_median_of_recent_steps() -> None:
    log = TrainingLog(recent=3)
    for i, wall in enumerate([10.0, 0.1, 0.2, 0.3]):
        log.feed(line("step", i, step=i + 1, wall_s=wall), RECEIVED)
    assert log.step_seconds == 0.2


def test_compute_seconds_is_the_median_of_the_last_few_steps() -> None:
    log = TrainingLog()
    for step, compute in enumerate([0.1, 0.1, 0.1, 0.1, 0.1, 0.4, 0.4, 0.4], start=1):
        log.feed(line("step", step, step=step, compute_s=compute, wall_s=0.5), RECEIVED)
        if step == 7:
            assert log.annotations(with_step_seconds=False)["firedrill.dev/compute-seconds"] == "0.1"
    assert log.annotations(with_step_seconds=False)["firedrill.dev/compute-seconds"] == "0.4"


def test_a_checkpoint_being_written_is_declared_until_its_complete_line() -> None:
    log = TrainingLog()
    log.feed(line("step", 1, step=5, wall_s=0.1), RECEIVED)
    assert "firedrill.dev/activity" not in log.annotations(with_step_seconds=False)
    log.feed(line("checkpoint-begin", 2, step=5, file="ckpt-0000000005.json"), RECEIVED)
    assert log.annotations(with_step_seconds=False)["firedrill.dev/activity"] == "checkpoint"
    log.feed(line("stalled", 3, step=6, waited_s=1.0, on="master"), RECEIVED)  # other lines do not end it
    assert log.annotations(with_step_seconds=False)["firedrill.dev/activity"] == "checkpoint"
    log.feed(line("checkpoint", 4, step=5, file="ckpt-0000000005.json", digest="sha256:00"), RECEIVED)
    anns = log.annotations(with_step_seconds=False)
    assert "firedrill.dev/activity" not in anns and anns["firedrill.dev/checkpoint-step"] == "5"


def test_a_stalled_collective_names_the_ranks_it_waits_on_until_it_completes_or_a_step_follows() -> None:
    log = TrainingLog()
    log.feed(line("step", 1, step=5, wall_s=0.1), RECEIVED)
    log.feed(json.dumps({"event": "stalled", "rank": 0, "world_size": 3, "step": 6, "waited_s": 1.0, "on": "peers"}),
             RECEIVED)
    assert log.annotations(with_step_seconds=False)["firedrill.dev/stalled-on"] == "1,2"
    log.feed(line("unstalled", 2, step=6, stalled_s=0.5), RECEIVED)
    assert "firedrill.dev/stalled-on" not in log.annotations(with_step_seconds=False)
    log.feed(json.dumps({"event": "stalled", "rank": 1, "world_size": 3, "step": 7, "on": "master"}), RECEIVED)
    assert log.annotations(with_step_seconds=False)["firedrill.dev/stalled-on"] == "0"
    log.feed(line("step", 3, step=7, wall_s=0.1), RECEIVED)
    assert "firedrill.dev/stalled-on" not in log.annotations(with_step_seconds=False)


def test_the_ranks_a_stalled_line_waits_on() -> None:
    def on(value: object, rank: int = 0, world: int = 4) -> tuple[int, ...]:
        got = parse_line(json.dumps({"event": "stalled", "rank": rank, "world_size": world, "on": value}))
        assert got is not None
        return stalled_ranks(got)

    assert on("master", rank=2) == (0,)
    assert on("peers") == (1, 2, 3)
    assert on(2) == (2,) and on([3, 1, 3]) == (1, 3) and on("3,1") == (1, 3)
    assert on(None) == () and on(True) == ()
