"""The canary's links: a connection paced to the slower end's ``FIREDRILL_LINK_BANDWIDTH``, and every frame's
arrival timed as it came (or not at all, when it was already there), so a rank logs the bandwidth it really got."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from drills.canary.config import parse_config
from drills.canary.errors import UsageError
from drills.canary.wire import HEADER, PACE_CHUNK, Arrival, Conn, Kind, encode, paced_rate

REPO = Path(__file__).resolve().parents[3]


class Clock:
    def __init__(self) -> None:
        self.t = 10.0

    def __call__(self) -> float:
        return self.t


def pair(clock: Clock) -> tuple[Conn, Conn]:
    a, b = socket.socketpair()
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    return Conn(a, "master", clock), Conn(b, 1, clock)


def drain(conn: Conn) -> None:
    conn.sock.setblocking(True)
    conn.sock.settimeout(5)
    conn.fill()
    conn.sock.setblocking(False)


def test_a_paced_connection_lets_out_one_piece_ahead_then_no_faster_than_its_rate() -> None:
    clock = Clock()
    sender, receiver = pair(clock)
    sender.rate = PACE_CHUNK * 4.0  # four pieces a second
    payload = b"x" * (4 * PACE_CHUNK - HEADER.size)  # a frame of four pieces
    sender.queue(encode(Kind.CONTRIBUTION, 1, payload))
    assert not sender.flush()  # one piece out at once; the rest is not due yet
    assert sender.pace_delay() == pytest.approx(0.25)
    clock.t += 0.1
    assert not sender.flush() and sender.pace_delay() == pytest.approx(0.15)
    clock.t += 0.4  # two pieces due: both go
    assert not sender.flush() and sender.pace_delay() == pytest.approx(0.25)
    clock.t += 0.25
    assert sender.flush() and sender.pace_delay() == 0.0
    got = None
    while got is None:
        drain(receiver)
        got = receiver.frame()
    assert got.payload == payload
    sender.close()
    receiver.close()


def test_an_unpaced_connection_sends_at_once() -> None:
    clock = Clock()
    sender, receiver = pair(clock)
    sender.queue(encode(Kind.RESULT, 2, b"y" * (3 * PACE_CHUNK)))
    assert sender.flush() and sender.pace_delay() == 0.0
    sender.close()
    receiver.close()


def arrival(waits_first: bool) -> Arrival | None:
    """A 100 kB frame whose first 20 kB arrive at 11.0 and the rest at 11.5, its rank waiting for it from before
    its first byte (``waits_first``) or only once the first 20 kB were there."""
    clock = Clock()
    sender, receiver = pair(clock)
    frame = encode(Kind.RESULT, 3, b"z" * 100_000)
    if waits_first:
        receiver.begin_receive()
    sender.sock.sendall(frame[:20_000])
    clock.t = 11.0
    if waits_first:
        drain(receiver)
    else:
        receiver.begin_receive()
    sender.sock.sendall(frame[20_000:])
    clock.t = 11.5
    while receiver.frame() is None:
        drain(receiver)
    sender.close()
    receiver.close()
    return receiver.last_arrival


def test_a_frame_is_timed_from_its_first_read_to_the_read_that_completes_it() -> None:
    assert arrival(waits_first=True) == Arrival(HEADER.size + 100_000 - 20_000, 0.5)


def test_a_frame_that_was_there_before_its_rank_waited_is_not_timed() -> None:
    assert arrival(waits_first=False) == Arrival(0, 0.0)


def test_the_pace_is_the_slower_end_and_none_without_a_stated_link() -> None:
    assert paced_rate(10e6, 2.5e6) == 2.5e6 and paced_rate(None, 3e6) == 3e6 and paced_rate(None, None) is None
    assert paced_rate(True, "fast") is None


def test_the_link_comes_from_the_environment_and_a_bad_one_is_a_usage_error() -> None:
    assert parse_config(["train"], {"FIREDRILL_LINK_BANDWIDTH": "1e7"}).link_bandwidth == 10e6
    assert parse_config(["train"], {}).link_bandwidth is None
    with pytest.raises(UsageError, match="FIREDRILL_LINK_BANDWIDTH: expected bytes per second > 0, got '-3'"):
        parse_config(["train"], {"FIREDRILL_LINK_BANDWIDTH": "-3"})


def test_three_ranks_log_the_bandwidth_of_each_link_and_the_slow_one_shows(tmp_path: Path) -> None:
    """Three real ranks over TCP on this machine, rank 2's node on a link a quarter as fast: every rank's step lines
    time its peers' frames at the slower end of their link."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "WORLD_SIZE": "3"}
    links = {0: 1e6, 1: 1e6, 2: 0.25e6}
    ranks = [subprocess.Popen([sys.executable, "-m", "drills.canary", "train", "--rendezvous-dir", str(tmp_path),
                               "--steps-total", "6", "--payload-bytes", str(48 << 10), "--compute-seconds", "0.01",
                               "--checkpoint-every", "0", "--rendezvous-timeout", "30"],
                              env={**env, "RANK": str(r), "FIREDRILL_LINK_BANDWIDTH": f"{links[r]:g}"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(3)]
    timed: dict[tuple[int, int], list[float]] = {}
    for r, proc in enumerate(ranks):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        for line in out.splitlines():
            doc = json.loads(line)
            if doc["event"] == "step" and doc["step"] > 2:
                for peer, (nbytes, seconds) in doc["recv"].items():
                    if nbytes:
                        timed.setdefault((r, int(peer)), []).append(nbytes / seconds)
    assert set(timed) >= {(1, 0), (2, 0)}
    # A pace is a ceiling: no frame beats it, however busy the machine. A busy machine only slows a frame down, so
    # the fast link is judged by its median frame against the slow link's fastest (4 times apart when paced).
    fast, slow = statistics.median(timed[(1, 0)]), max(timed[(2, 0)])
    assert slow < 0.3e6 and fast > 2 * slow, timed  # rank 2's link is the slow one, seen from its own end
    assert max(timed[(1, 0)]) < 1.2e6, timed  # and no link runs faster than its pace
