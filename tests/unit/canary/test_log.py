"""The canary's log line: numbered, stamped in UTC microseconds, flushed, one JSON object per line."""

from __future__ import annotations

import io
import json
import re

from drills.canary.log import Event, EventLog, rfc3339

T0 = 1_800_000_000.25  # 2027-01-15T08:00:00.250000Z


class Flushes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushed_at: list[int] = []

    def flush(self) -> None:
        self.flushed_at.append(len(self.getvalue()))


def test_every_line_has_seq_ts_event_and_identity_then_its_fields() -> None:
    now = iter([T0, T0 + 0.000001])
    out = Flushes()
    log = EventLog(out, rank=1, world_size=2, generation="g3", wall=lambda: next(now))
    log.emit(Event.START, pid=42, config={"a": 1})
    log.emit(Event.PEER_LOST, peer="master", reason="eof")
    lines = out.getvalue().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first == {"seq": 1, "ts": "2027-01-15T08:00:00.250000Z", "event": "start", "rank": 1, "world_size": 2,
                     "generation": "g3", "pid": 42, "config": {"a": 1}}
    assert second["seq"] == 2 and second["ts"] == "2027-01-15T08:00:00.250001Z"
    assert (second["event"], second["peer"], second["reason"]) == ("peer_lost", "master", "eof")
    assert list(first)[:6] == ["seq", "ts", "event", "rank", "world_size", "generation"]
    assert out.flushed_at == [len(lines[0]) + 1, len(out.getvalue())]  # flushed after each whole line


def test_rfc3339_is_utc_with_microseconds_and_z() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", rfc3339(0.5))
    assert rfc3339(0.5) == "1970-01-01T00:00:00.500000Z"


def test_the_event_names_are_the_contract() -> None:
    assert [e.value for e in Event] == ["start", "rendezvous", "resumed", "step", "checkpoint-begin",
                                        "checkpoint", "stalled", "unstalled", "peer_lost", "exit"]


class GoneReader(io.StringIO):
    def flush(self) -> None:
        raise BrokenPipeError("the reader closed the pipe")


def test_a_log_reader_that_went_away_does_not_stop_the_job() -> None:
    log = EventLog(GoneReader(), rank=0, world_size=1, generation="0", wall=lambda: T0)
    log.emit(Event.STEP, step=1)
    assert log.broken
    assert log.emit(Event.STEP, step=2)["seq"] == 2  # still numbered, no longer written
