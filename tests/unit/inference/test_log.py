"""The inference canary's log lines: the training canary's conventions, and safe under concurrent writers."""

from __future__ import annotations

import io
import json
import threading

from drills.inference.log import Event, EventLog

T0 = 1_800_000_000.25  # 2027-01-15T08:00:00.250000Z


def test_every_line_has_seq_ts_event_then_its_fields() -> None:
    out = io.StringIO()
    log = EventLog(out, wall=lambda: T0)
    log.emit(Event.LISTENING, host="127.0.0.1", port=8000)
    line = json.loads(out.getvalue())
    assert line == {"seq": 1, "ts": "2027-01-15T08:00:00.250000Z", "event": "listening", "host": "127.0.0.1",
                    "port": 8000}
    assert list(line)[:3] == ["seq", "ts", "event"]


def test_the_event_names_are_the_contract() -> None:
    assert [e.value for e in Event] == ["start", "listening", "ready", "served", "rejected", "aborted", "draining",
                                        "exit"]


def test_concurrent_writers_never_interleave_and_seq_follows_line_order() -> None:
    out = io.StringIO()
    log = EventLog(out, wall=lambda: T0)

    def write(n: int) -> None:
        for i in range(200):
            log.emit(Event.SERVED, request_id=f"{n}-{i}", tokens=i)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [json.loads(line)["seq"] for line in out.getvalue().splitlines()]
    assert seqs == list(range(1, 801))


class GoneReader(io.StringIO):
    def flush(self) -> None:
        raise BrokenPipeError("the reader closed the pipe")


def test_a_gone_reader_stops_the_lines_not_the_server() -> None:
    log = EventLog(GoneReader(), wall=lambda: T0)
    log.emit(Event.START, pid=1)
    assert log.broken
    assert log.emit(Event.EXIT, code=143)["seq"] == 2
