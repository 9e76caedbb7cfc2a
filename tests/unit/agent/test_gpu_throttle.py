"""A slow GPU and a slow input pipeline on the simulated node (issue 26, straggler): the Node's
``firedrill.dev/inject-throttle`` entries stand for as long as they are there; the agent writes them to the clocks
file its containers read (``FIREDRILL_DEVICE_CLOCKS``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from refplatform.agent.clock import VirtualClock
from refplatform.agent.device import Device
from refplatform.agent.logs import LogStore
from refplatform.agent.pods import PodSync
from refplatform.gpu.identity import gpu_uuid
from refplatform.gpu.throttle import THROTTLE_ANNOTATION, Throttle, clocks_document, parse_throttle

from .fakeapi import FakeApi

NODE = "gpu-node-0"


@pytest.mark.parametrize("raw, throttle, problems", [
    (None, Throttle(), 0),
    ("[]", Throttle(), 0),
    ('[{"id":"a","gpu":3,"speed":0.25}]', Throttle({3: 0.25}), 0),
    ('[{"id":"a","gpu":3,"speed":0.5},{"id":"b","gpu":3,"speed":0.25}]', Throttle({3: 0.25}), 0),
    ('[{"id":"a","input_delay_s":0.2},{"id":"b","input_delay_s":0.1}]', Throttle({}, 0.30000000000000004), 0),
    ('[{"id":"a","gpu":8,"speed":0.5}]', Throttle(), 1),
    ('[{"id":"a","gpu":1,"speed":0}]', Throttle(), 1),
    ('[{"id":"a","gpu":1,"speed":1.5}]', Throttle(), 1),
    ('[{"id":"a","gpu":true,"speed":0.5}]', Throttle(), 1),
    ('[{"gpu":1,"speed":0.5}]', Throttle(), 1),
    ('[{"id":"a","input_delay_s":-1}]', Throttle(), 1),
    ("{", Throttle(), 1),
    ('{"id":"a"}', Throttle(), 1),
])
def test_parse(raw: str | None, throttle: Throttle, problems: int) -> None:
    got, found = parse_throttle(raw, 8)
    assert got == throttle and len(found) == problems


def test_clocks_document_names_gpus_by_uuid() -> None:
    doc = clocks_document(Throttle({2: 0.25}, 0.1), lambda g: f"GPU-{g}")
    assert doc == {"gpus": {"GPU-2": 0.25}, "input_delay_s": 0.1}


class Driver:
    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    def write_clocks(self, document: dict[str, Any]) -> None:
        self.written.append(document)


def test_the_agent_writes_what_stands_and_clears_it_when_removed(tmp_path: Path) -> None:
    driver = Driver()
    sync = PodSync(FakeApi(), NODE, LogStore(tmp_path / "logs"), VirtualClock(), gpu_count=8,  # type: ignore[arg-type]
                   driver=driver)  # type: ignore[arg-type]

    def note(annotations: dict[str, str]) -> None:
        sync.note_node({"metadata": {"name": NODE, "uid": "u", "annotations": annotations}})

    note({THROTTLE_ANNOTATION: json.dumps([{"id": "x", "gpu": 5, "speed": 0.25}])})
    note({THROTTLE_ANNOTATION: json.dumps([{"id": "x", "gpu": 5, "speed": 0.25}])})  # unchanged: not rewritten
    assert driver.written == [{"gpus": {gpu_uuid(NODE, 5): 0.25}, "input_delay_s": 0.0}]
    note({})
    assert driver.written[-1] == {"gpus": {}, "input_delay_s": 0.0} and len(driver.written) == 2


def test_the_device_replaces_its_clocks_file_atomically(tmp_path: Path) -> None:
    device = Device(tmp_path / "device.sock", VirtualClock())
    device.write_clocks({"gpus": {"GPU-a": 0.5}, "input_delay_s": 0.0})
    assert json.loads(device.clocks_path.read_text()) == {"gpus": {"GPU-a": 0.5}, "input_delay_s": 0.0}
    assert device.clocks_path == tmp_path / "clocks.json" and not list(tmp_path.glob("*.tmp"))
