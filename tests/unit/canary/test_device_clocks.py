"""The driver's clocks file slows the canary as a throttled GPU or a slow input pipeline would (docs/WORKLOAD.md)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from drills.canary.config import parse_config
from drills.canary.device import Device
from drills.canary.log import EventLog
from drills.canary.train import Trainer


def clocks(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "clocks.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("doc, speed", [
    ({"gpus": {"GPU-b": 0.25}, "input_delay_s": 0.0}, (0.25, 0.0)),
    ({"gpus": {"GPU-a": 0.5, "GPU-b": 0.25}, "input_delay_s": 0.2}, (0.25, 0.2)),
    ({"gpus": {"GPU-z": 0.1}, "input_delay_s": 0}, (1.0, 0.0)),  # another process's GPU
    ({"gpus": {"GPU-a": 0}, "input_delay_s": -1}, (1.0, 0.0)),  # nonsense is ignored
    ([1, 2], (1.0, 0.0)),
])
def test_speed_is_the_slowest_own_gpu(tmp_path: Path, doc: object, speed: tuple[float, float]) -> None:
    assert Device(None, clocks(tmp_path, doc), ("GPU-a", "GPU-b")).speed() == speed


def test_no_file_is_full_speed(tmp_path: Path) -> None:
    assert Device(None, str(tmp_path / "absent"), ("GPU-a",)).speed() == (1.0, 0.0)
    assert Device(None).speed() == (1.0, 0.0)


def test_the_environment_names_the_file() -> None:
    cfg = parse_config(["train"], {"FIREDRILL_DEVICE_CLOCKS": "/x/clocks.json"})
    assert cfg.device_clocks == "/x/clocks.json" and cfg.as_log()["device_clocks"] == "/x/clocks.json"


class Sleeps:
    """Interrupts that only record the waits (one rank: no collective waits)."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))

    compute = pause = sleep

    def check(self) -> None:
        pass


def test_a_step_stretches_compute_by_the_speed_and_input_by_the_delay(tmp_path: Path) -> None:
    cfg = parse_config(["train", "--steps-total", "1", "--compute-seconds", "0.1", "--input-seconds", "0.05",
                        "--comm-seconds", "0"],
                       {"NVIDIA_VISIBLE_DEVICES": "GPU-a", "FIREDRILL_DEVICE_CLOCKS":
                        clocks(tmp_path, {"gpus": {"GPU-a": 0.25}, "input_delay_s": 0.2})})
    sleeps = Sleeps()
    device = Device(None, cfg.device_clocks, cfg.gpus)
    Trainer(cfg, EventLog(io.StringIO(), 0, 1, "g"), device, sleeps).run()  # type: ignore[arg-type]
    assert sleeps.slept[:2] == [0.25, 0.4]
