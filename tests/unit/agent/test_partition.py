"""The partition gate: every verb fails as unreachable while partitioned; open watches are cut."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from refplatform.agent.freeze import FreezeDetector
from refplatform.agent.partition import GatedClient, PartitionGate
from refplatform.client import ApiUnreachable, WatchEvent


class BlockingStream:
    """A watch stream that yields its events, then waits until stopped."""

    def __init__(self, events: list[WatchEvent]) -> None:
        self.events = events
        self.resource_version = "7"
        self._stopped = threading.Event()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> None:
        self._stopped.set()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __iter__(self) -> Iterator[WatchEvent]:
        yield from self.events
        self._stopped.wait(10)


class Recorder:
    base_url = "https://127.0.0.1:6443"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.stream = BlockingStream([WatchEvent("ADDED", {"metadata": {"name": "a"}})])

    def __getattr__(self, verb: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(verb)
            return self.stream if verb == "watch" else {}
        return call


@pytest.mark.parametrize(
    "verb, args",
    [("get", ("/p",)), ("list", ("/p",)), ("create", ("/p", {})), ("update", ("/p", {})), ("patch", ("/p", {})),
     ("delete", ("/p",)), ("get_raw", ("/p",)), ("watch", ("/p",))],
)
def test_every_verb_fails_as_unreachable_while_partitioned(verb: str, args: tuple[Any, ...]) -> None:
    gate, inner = PartitionGate(), Recorder()
    client = GatedClient(inner, gate)  # type: ignore[arg-type]
    getattr(client, verb)(*args)
    assert gate.partition() and not gate.partition()
    with pytest.raises(ApiUnreachable, match="simulated network partition"):
        getattr(client, verb)(*args)
    assert inner.calls == [verb]  # nothing reached the wire
    assert gate.heal() and not gate.heal()
    getattr(client, verb)(*args)
    assert inner.calls == [verb, verb]


def test_a_partition_cuts_open_watches_and_listeners_hear_each_transition() -> None:
    gate, inner = PartitionGate(), Recorder()
    heard: list[bool] = []
    gate.on_change(heard.append)
    stream = GatedClient(inner, gate).watch("/api/v1/pods")  # type: ignore[arg-type]
    seen: list[Any] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            with stream:
                for event in stream:
                    seen.append(event)
        except ApiUnreachable as err:
            errors.append(err)

    t = threading.Thread(target=consume)
    t.start()
    gate.partition()
    t.join(5)
    assert not t.is_alive() and len(seen) == 1 and len(errors) == 1
    assert gate.partitioned and gate.partitioned_for() >= 0
    gate.heal()
    assert heard == [True, False] and gate.partitioned_for() == 0.0


def test_a_stream_stopped_by_its_owner_ends_quietly() -> None:
    gate, inner = PartitionGate(), Recorder()
    stream = GatedClient(inner, gate).watch("/api/v1/pods")  # type: ignore[arg-type]
    stream.stop()
    assert [e.type for e in stream] == ["ADDED"] and stream.resource_version == "7"


def test_freeze_detector_reports_only_real_overruns() -> None:
    detector = FreezeDetector(threshold=2.0)
    heard: list[float] = []
    detector.on_freeze(heard.append)
    assert not detector.observe(0.5)
    assert detector.observe(12.0)
    assert heard == [12.0] and detector.freezes == 1


def test_the_client_counts_each_thread_s_wait_for_answers_the_call_in_flight_included() -> None:
    answer = threading.Event()

    class Slow(Recorder):
        def patch(self, *args: Any, **kwargs: Any) -> Any:
            assert answer.wait(10)
            return {}

    client = GatedClient(Slow(), PartitionGate())  # type: ignore[arg-type]
    caller = threading.Thread(target=client.patch, args=("/p", {}))
    caller.start()
    try:
        deadline = time.monotonic() + 10
        while client.api_seconds(caller.ident or 0) < 0.2:  # grows while the call is in flight
            assert time.monotonic() < deadline
            threading.Event().wait(0.01)
        assert client.api_seconds(threading.get_ident()) == 0.0  # another thread's wait is not ours
    finally:
        answer.set()
        caller.join(10)
    done = client.api_seconds(caller.ident or 0)
    assert done >= 0.2
    assert client.api_seconds(caller.ident or 0) == done  # answered: it stops growing
    client.get("/p")  # this thread's quick call counts for this thread only
    assert 0.0 < client.api_seconds(threading.get_ident()) < 0.2
