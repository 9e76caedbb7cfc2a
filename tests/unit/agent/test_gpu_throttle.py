"""A slow GPU and a slow input pipeline on the simulated node (issue 26, straggler): the Node's
``firedrill.dev/inject-throttle`` entries stand for as long as they are there; the agent writes them to the clocks
file its containers read (``FIREDRILL_DEVICE_CLOCKS``).  Issue 48: a storage stall stands there until it expires, a
``hang`` entry sends SIGUSR2 once to the processes holding its GPU, and ``resume-torn`` tells every container that
renames are not atomic."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from refplatform.agent.clock import VirtualClock
from refplatform.agent.device import Device
from refplatform.agent.logs import LogStore
from refplatform.agent.pods import PodSync
from refplatform.agent.runtime import ProcessWorkload
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
    ('[{"id":"h","gpu":2,"hang":true}]', Throttle(hangs={"h": 2}), 0),
    ('[{"id":"h","gpu":2,"hang":false}]', Throttle(), 1),
    ('[{"id":"h","gpu":9,"hang":true}]', Throttle(), 1),
    ('[{"id":"s","storage_stall_until":20.5},{"id":"t","storage_stall_until":10}]',
     Throttle(storage_stalls=(10.0, 20.5)), 0),
    ('[{"id":"s","storage_stall_until":"later"}]', Throttle(), 1),
])
def test_parse(raw: str | None, throttle: Throttle, problems: int) -> None:
    got, found = parse_throttle(raw, 8)
    assert got == throttle and len(found) == problems


def test_clocks_document_names_gpus_by_uuid() -> None:
    doc = clocks_document(Throttle({2: 0.25}, 0.1), lambda g: f"GPU-{g}")
    assert doc == {"gpus": {"GPU-2": 0.25}, "input_delay_s": 0.1}


def test_clocks_document_carries_the_latest_standing_stall_and_a_broken_rename_promise() -> None:
    stalls = Throttle(storage_stalls=(10.0, 20.0))
    assert clocks_document(stalls, str, now=5.0)["storage_stalled_until"] == 20.0
    assert clocks_document(stalls, str, now=15.0)["storage_stalled_until"] == 20.0
    assert "storage_stalled_until" not in clocks_document(stalls, str, now=20.0)  # expired: ignored
    assert clocks_document(Throttle(hangs={"h": 1}), str) == {"gpus": {}, "input_delay_s": 0.0}  # a hang: no clock
    assert clocks_document(Throttle(), str, atomic_rename=False) == {"gpus": {}, "input_delay_s": 0.0,
                                                                     "atomic_rename": False}


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


def test_a_storage_stall_stands_in_the_clocks_file_until_it_expires(tmp_path: Path) -> None:
    driver, clock = Driver(), VirtualClock()
    sync = PodSync(FakeApi(), NODE, LogStore(tmp_path / "logs"), clock, gpu_count=8,  # type: ignore[arg-type]
                   driver=driver)  # type: ignore[arg-type]
    now = clock.now().timestamp()
    entries = [{"id": "s1", "storage_stall_until": now + 5}, {"id": "s0", "storage_stall_until": now + 3},
               {"id": "old", "storage_stall_until": now - 60}]
    sync.note_node({"metadata": {"name": NODE, "uid": "u", "annotations": {THROTTLE_ANNOTATION: json.dumps(entries)}}})
    assert driver.written == [{"gpus": {}, "input_delay_s": 0.0, "storage_stalled_until": now + 5}]
    assert sync.throttled_gpus() == ()
    clock.advance(4.9)
    sync.sync_once()
    assert len(driver.written) == 1
    clock.advance(0.1)  # expired: the file says so at the next pass, with the entry still standing
    sync.sync_once()
    assert driver.written[-1] == {"gpus": {}, "input_delay_s": 0.0} and len(driver.written) == 2


def test_resume_torn_writes_the_broken_rename_promise_with_nothing_standing(tmp_path: Path) -> None:
    for atomic, written in ((True, []), (False, [{"gpus": {}, "input_delay_s": 0.0, "atomic_rename": False}])):
        driver = Driver()
        sync = PodSync(FakeApi(), NODE, LogStore(tmp_path / "logs"),  # type: ignore[arg-type]
                       VirtualClock(), gpu_count=8, driver=driver, atomic_rename=atomic)  # type: ignore[arg-type]
        sync.sync_once()
        sync.sync_once()
        assert driver.written == written


class Hangable(ProcessWorkload):
    """A started process workload that records the signals sent to it (no process behind it)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__("uid", [], {}, clock)
        self.started_at = clock.now()
        self.signals: list[int] = []

    def signal_running(self, sig: int) -> int:
        self.signals.append(sig)
        return 1

    def _advance(self, now: Any) -> list[Any]:
        return []


def test_a_hang_entry_sends_sigusr2_once_to_the_processes_holding_its_gpu(tmp_path: Path) -> None:
    api, clock = FakeApi(), VirtualClock()
    sync = PodSync(api, NODE, LogStore(tmp_path / "logs"), clock, gpu_count=8)  # type: ignore[arg-type]
    for name, gpus in (("a", "0,1"), ("b", "2,3")):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default", "annotations": {"firedrill.dev/gpu-index": gpus}},
               "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "busybox"}]},
               "status": {"phase": "Pending"}}
        sync._apply("ADDED", api.put_object(f"/api/v1/namespaces/default/pods/{name}", pod))
    clock.advance(0.1)
    sync.sync_once()
    workloads = {}
    for worker in sync.workers.values():
        workloads[worker.name] = worker.workload = Hangable(clock)
    health = []
    sync.on_health = lambda: health.append(1)

    def note(entries: list[dict[str, Any]]) -> None:
        annotations = {THROTTLE_ANNOTATION: json.dumps(entries)}
        sync.note_node({"metadata": {"name": NODE, "uid": "u", "annotations": annotations}})
        clock.advance(0.1)
        sync.sync_once()

    note([{"id": "h1", "gpu": 3, "hang": True}])
    assert (workloads["a"].signals, workloads["b"].signals) == ([], [signal.SIGUSR2])
    note([{"id": "h1", "gpu": 3, "hang": True}])  # the same entry: once
    note([])
    note([{"id": "h1", "gpu": 3, "hang": True}, {"id": "h2", "gpu": 0, "hang": True}])
    assert (workloads["a"].signals, workloads["b"].signals) == ([signal.SIGUSR2], [signal.SIGUSR2])
    assert sync.throttled_gpus() == () and health == []  # not a clock: nothing reported
    note([{"id": "h3", "gpu": 7, "hang": True}])  # nobody holds GPU 7: nothing happens
    assert (workloads["a"].signals, workloads["b"].signals) == ([signal.SIGUSR2], [signal.SIGUSR2])
