"""Slow, stalled and torn checkpoint storage (docs/WORKLOAD.md, "Slow, stalled and torn storage"): a write paced in
chunks over ``--checkpoint-seconds``, waiting while the driver file says the storage is stalled, and written straight
under its final name where the storage does not keep the rename promise; each one between ``checkpoint-begin`` and
``checkpoint``, device state ``checkpoint``.  Every wait here is on an injected clock: no test sleeps."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drills.canary.checkpoint import (
    CHUNKS, STALL_POLL_S, Storage, checkpoint_name, chunk_bounds, find_resume, read_checkpoint, write_checkpoint,
)
from drills.canary.config import Config, parse_config
from drills.canary.device import Device, DeviceState, StorageState
from drills.canary.errors import Terminated, UsageError
from drills.canary.log import EventLog
from drills.canary.train import Trainer

TS = "2026-11-30T10:00:00.000000Z"
T0 = 1_800_000_000.0


class Clock:
    """A wall clock (and monotonic clock) that moves only when a wait is made; ``on_sleep`` runs before each wait's
    time passes."""

    def __init__(self, on_sleep: Callable[[Clock, float], None] | None = None) -> None:
        self.now = T0
        self.slept: list[float] = []
        self.on_sleep = on_sleep

    def wall(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; a wait of none (a step's part of 0 s) is no wait at all."""
        if seconds <= 0:
            return
        self.slept.append(round(seconds, 9))
        if self.on_sleep is not None:
            self.on_sleep(self, seconds)
        self.now += seconds


def write(directory: Path, storage: Storage, step: int = 10) -> str:
    return write_checkpoint(directory, step, 2, "g1", {"accumulator": 7}, TS, storage).file


# ------------------------------------------------------------------ the writer alone
def test_no_pace_is_one_chunk_and_a_pace_is_twenty_nearly_equal_ones() -> None:
    assert chunk_bounds(250, 0.0) == [(0, 250)]
    bounds = chunk_bounds(250, 2.0)
    assert len(bounds) == CHUNKS and bounds[0][0] == 0 and bounds[-1][1] == 250
    assert all(lo < hi and hi - lo in (12, 13) for lo, hi in bounds)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert chunk_bounds(3, 1.0) == [(0, 1), (1, 2), (2, 3)]  # never an empty chunk


def test_a_paced_write_waits_its_seconds_over_its_chunks_and_ends_whole(tmp_path: Path) -> None:
    clock = Clock()
    name = write(tmp_path, Storage(seconds=2.0, sleep=clock.sleep))
    assert clock.slept == [2.0 / CHUNKS] * CHUNKS and sum(clock.slept) == pytest.approx(2.0)
    assert read_checkpoint(tmp_path / name)["step"] == 10
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temp file left


def test_an_atomic_paced_write_shows_no_file_under_the_final_name_until_it_is_whole(tmp_path: Path) -> None:
    seen: list[list[str]] = []
    clock = Clock(lambda c, s: seen.append(sorted(p.name for p in tmp_path.iterdir())))
    name = write(tmp_path, Storage(seconds=1.0, sleep=clock.sleep))
    assert seen and all(name not in names and len(names) == 1 and names[0].startswith(f".{name}.tmp-")
                        for names in seen)


def test_a_non_atomic_paced_write_grows_under_the_final_name(tmp_path: Path) -> None:
    sizes: list[int] = []
    clock = Clock(lambda c, s: sizes.append((tmp_path / checkpoint_name(10)).stat().st_size))
    name = write(tmp_path, Storage(seconds=1.0, atomic=False, sleep=clock.sleep))
    assert sizes == sorted(sizes) and sizes[0] > 0 and len(set(sizes)) == CHUNKS  # flushed chunk by chunk
    assert read_checkpoint(tmp_path / name)["step"] == 10 and [p.name for p in tmp_path.iterdir()] == [name]


def interrupt_after(waits: int) -> Clock:
    """A clock whose ``waits + 1``-th wait raises Terminated, as SIGTERM cuts an Interrupts.sleep short."""
    def on_sleep(clock: Clock, seconds: float) -> None:
        if len(clock.slept) > waits:
            raise Terminated("SIGTERM")
    return Clock(on_sleep)


def test_an_interrupted_atomic_write_leaves_nothing(tmp_path: Path) -> None:
    write(tmp_path, Storage(), step=5)
    with pytest.raises(Terminated):
        write(tmp_path, Storage(seconds=1.0, sleep=interrupt_after(7).sleep))
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint_name(5)]
    assert find_resume(tmp_path).from_step == 5 and find_resume(tmp_path).skipped == []


def test_an_interrupted_non_atomic_write_leaves_a_torn_final_file_the_next_start_skips(tmp_path: Path) -> None:
    write(tmp_path, Storage(), step=5)
    with pytest.raises(Terminated):
        write(tmp_path, Storage(seconds=1.0, atomic=False, sleep=interrupt_after(7).sleep))
    torn = tmp_path / checkpoint_name(10)
    assert 0 < torn.stat().st_size < len((tmp_path / checkpoint_name(5)).read_bytes())
    with pytest.raises(ValueError, match="torn"):
        read_checkpoint(torn)
    resume = find_resume(tmp_path)
    assert (resume.from_step, resume.checkpoint, resume.skipped) == (5, checkpoint_name(5), [checkpoint_name(10)])


def test_a_stalled_storage_gets_no_chunk_until_it_answers(tmp_path: Path) -> None:
    answers_at = T0 + 0.35
    written: list[int] = []

    def on_sleep(clock: Clock, seconds: float) -> None:
        path = tmp_path / checkpoint_name(10)
        written.append(path.stat().st_size if path.exists() else 0)
    clock = Clock(on_sleep)
    write(tmp_path, Storage(atomic=False, stall_left=lambda: max(0.0, answers_at - clock.now), sleep=clock.sleep))
    assert clock.slept == pytest.approx([STALL_POLL_S] * 3 + [0.05], abs=1e-6) and written == [0, 0, 0, 0]
    assert read_checkpoint(tmp_path / checkpoint_name(10))["step"] == 10


# ------------------------------------------------------------------ the driver file
def driver_file(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "clocks.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize(("doc", "state"), [
    ({"gpus": {}}, StorageState()),
    ({"storage_stalled_until": T0 + 5}, StorageState(stalled_until=T0 + 5)),
    ({"storage_stalled_until": 1800000005}, StorageState(stalled_until=1800000005.0)),
    ({"atomic_rename": False}, StorageState(atomic_rename=False)),
    ({"atomic_rename": True, "storage_stalled_until": None}, StorageState()),
    ({"atomic_rename": 0, "storage_stalled_until": "soon"}, StorageState()),  # nonsense is ignored
    ({"storage_stalled_until": True}, StorageState()),
    ([1, 2], StorageState()),
])
def test_the_driver_file_says_what_the_storage_does(tmp_path: Path, doc: object, state: StorageState) -> None:
    assert Device(None, driver_file(tmp_path, doc)).storage() == state


def test_no_driver_file_is_storage_that_answers_and_keeps_its_promise(tmp_path: Path) -> None:
    assert Device(None, str(tmp_path / "absent")).storage() == StorageState() == Device(None).storage()
    (tmp_path / "bad.json").write_text("{not json")
    assert Device(None, str(tmp_path / "bad.json")).storage() == StorageState()
    assert StorageState().stall_left(T0) == 0.0
    assert StorageState(stalled_until=T0 + 2).stall_left(T0 + 0.5) == 1.5
    assert StorageState(stalled_until=T0).stall_left(T0 + 1) == 0.0


def test_the_option_is_checked_and_logged() -> None:
    assert parse_config(["train"], {}).checkpoint_seconds == 0.0
    cfg = parse_config(["train", "--checkpoint-seconds", "2.5"], {})
    assert cfg.checkpoint_seconds == 2.5 and cfg.as_log()["checkpoint_seconds"] == 2.5
    for bad in ("-1", "nan", "slow"):
        with pytest.raises(UsageError, match="--checkpoint-seconds"):
            parse_config(["train", "--checkpoint-seconds", bad], {})


# ------------------------------------------------------------------ rank 0's checkpoints
class Recorder(Device):
    """A device that records the states it is told (and reads a real driver file)."""

    def __init__(self, clocks: str | None) -> None:
        super().__init__(None, clocks)
        self.states: list[DeviceState] = []

    def send(self, state: DeviceState, moved: int = 0) -> None:
        self.states.append(state)


class Waits:
    """Interrupts that only record the waits on ``clock`` (one rank: no collective waits); ``pause`` is the
    SIGTERM checkpoint's wait, which a SIGTERM does not cut short."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.paused: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    compute = sleep

    def pause(self, seconds: float) -> None:
        self.paused.append(round(seconds, 9))

    def check(self) -> None:
        pass


def run(tmp_path: Path, argv: list[str], clock: Clock, doc: object | None = None) -> tuple[list[dict[str, Any]],
                                                                                         Recorder, Waits, Config]:
    env = {} if doc is None else {"FIREDRILL_DEVICE_CLOCKS": driver_file(tmp_path, doc)}
    cfg = parse_config(["train", "--compute-seconds", "0", "--checkpoint-dir", str(tmp_path / "ck"), *argv], env)
    out = io.StringIO()
    device, waits = Recorder(cfg.device_clocks), Waits(clock)
    trainer = Trainer(cfg, EventLog(out, 0, 1, "g", wall=clock.wall), device, waits,  # type: ignore[arg-type]
                      clock=clock.wall, wall=clock.wall)
    try:
        trainer.run()
    finally:
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return lines, device, waits, cfg


def events(lines: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    return [(line["event"], line.get("step")) for line in lines if line["event"] != "start"]


def test_each_checkpoint_is_begun_paced_then_logged_durable_with_the_device_in_checkpoint(tmp_path: Path) -> None:
    clock = Clock()
    lines, device, _, _ = run(tmp_path, ["--steps-total", "2", "--checkpoint-every", "1",
                                         "--checkpoint-seconds", "1"], clock)
    assert events(lines) == [("rendezvous", None), ("resumed", None), ("step", 1), ("checkpoint-begin", 1),
                             ("checkpoint", 1), ("step", 2), ("checkpoint-begin", 2), ("checkpoint", 2)]
    begin = next(line for line in lines if line["event"] == "checkpoint-begin")
    assert begin["file"] == checkpoint_name(1) and "trigger" not in begin
    done = next(line for line in lines if line["event"] == "checkpoint")
    assert done["file"] == begin["file"] and done["ts"] >= begin["ts"]
    assert clock.slept.count(1 / CHUNKS) == 2 * CHUNKS  # every write takes its second, through Interrupts.sleep
    assert device.states == [DeviceState.IDLE, DeviceState.INPUT, DeviceState.COMPUTE, DeviceState.COMM,
                             DeviceState.CHECKPOINT, DeviceState.INPUT, DeviceState.COMPUTE, DeviceState.COMM,
                             DeviceState.CHECKPOINT]


def test_without_a_pace_a_checkpoint_is_one_write_with_no_wait(tmp_path: Path) -> None:
    clock = Clock()
    lines, _, _, _ = run(tmp_path, ["--steps-total", "1", "--checkpoint-every", "1"], clock)
    assert ("checkpoint-begin", 1) in events(lines) and ("checkpoint", 1) in events(lines)
    assert all(s == 0 for s in clock.slept)


def test_the_stall_is_read_from_the_driver_file_and_ended_by_removing_it(tmp_path: Path) -> None:
    """The stall stands far in the future; the writer asks the file again every 0.1 s and goes on the moment the
    key is gone (the platform lifted it)."""
    ck = tmp_path / "ck" / checkpoint_name(1)

    def on_sleep(clock: Clock, seconds: float) -> None:
        assert not ck.exists()  # not one chunk while the storage does not answer
        if len(clock.slept) == 5:
            driver_file(tmp_path, {"atomic_rename": False})
    clock = Clock(on_sleep)
    lines, _, _, _ = run(tmp_path, ["--steps-total", "1", "--checkpoint-every", "1"], clock,
                         {"storage_stalled_until": T0 + 3600, "atomic_rename": False})
    assert clock.slept[-5:] == [STALL_POLL_S] * 5
    assert events(lines)[-2:] == [("checkpoint-begin", 1), ("checkpoint", 1)] and read_checkpoint(ck)["step"] == 1


def test_the_stall_ends_by_itself_at_its_instant(tmp_path: Path) -> None:
    clock = Clock()
    lines, _, _, _ = run(tmp_path, ["--steps-total", "1", "--checkpoint-every", "1", "--checkpoint-seconds", "0.2"],
                         clock, {"storage_stalled_until": T0 + 0.25})
    assert clock.slept[:4] == pytest.approx([0.1, 0.1, 0.05, 0.2 / CHUNKS], abs=1e-6)
    assert events(lines)[-1] == ("checkpoint", 1)


def stop_at(waits: int) -> Callable[[Clock, float], None]:
    def on_sleep(clock: Clock, seconds: float) -> None:
        if len(clock.slept) == waits:
            raise Terminated("SIGTERM")
    return on_sleep


@pytest.mark.parametrize("atomic", [True, False])
def test_sigterm_abandons_a_paced_write(tmp_path: Path, atomic: bool) -> None:
    clock = Clock(stop_at(8))
    with pytest.raises(Terminated):
        run(tmp_path, ["--checkpoint-every", "1", "--checkpoint-seconds", "1"], clock, {"atomic_rename": atomic})
    ck = tmp_path / "ck"
    files = sorted(p.name for p in ck.iterdir())
    if atomic:
        assert files == []  # the temp file is gone
    else:
        assert files == [checkpoint_name(1)]  # torn under its final name, as the storage broke its promise
        with pytest.raises(ValueError):
            read_checkpoint(ck / files[0])
        assert find_resume(ck).skipped == files


def test_sigterm_during_a_stall_abandons_the_write(tmp_path: Path) -> None:
    clock = Clock(stop_at(3))
    with pytest.raises(Terminated):
        run(tmp_path, ["--checkpoint-every", "1"], clock, {"storage_stalled_until": T0 + 60})
    assert clock.slept == [STALL_POLL_S] * 3 and list((tmp_path / "ck").iterdir()) == []


def test_with_checkpoint_on_sigterm_an_abandoned_write_is_written_again_as_the_sigterm_checkpoint(
        tmp_path: Path) -> None:
    clock = Clock(stop_at(8))
    out = io.StringIO()
    env = {"FIREDRILL_DEVICE_CLOCKS": driver_file(tmp_path, {"atomic_rename": False})}
    cfg = parse_config(["train", "--compute-seconds", "0", "--checkpoint-dir", str(tmp_path / "ck"),
                        "--checkpoint-every", "1", "--checkpoint-seconds", "1", "--checkpoint-on-sigterm"], env)
    waits = Waits(clock)
    trainer = Trainer(cfg, EventLog(out, 0, 1, "g", wall=clock.wall), Recorder(cfg.device_clocks),
                      waits, clock=clock.wall, wall=clock.wall)  # type: ignore[arg-type]
    with pytest.raises(Terminated):
        trainer.run()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert events(lines)[-3:] == [("checkpoint-begin", 1), ("checkpoint-begin", 1), ("checkpoint", 1)]
    assert [line.get("trigger") for line in lines[-3:]] == [None, "sigterm", "sigterm"]
    assert waits.paused == [1 / CHUNKS] * CHUNKS  # paced, through the wait SIGTERM does not cut short
    assert read_checkpoint(tmp_path / "ck" / checkpoint_name(1))["step"] == 1  # whole again
