"""The all-reduce's arithmetic and wire framing, without sockets of a world."""

from __future__ import annotations

import random
import socket

import pytest

from drills.canary.collective import contribution, reduce_sum
from drills.canary.errors import ProtocolError
from drills.canary.wire import Conn, ConnectionLost, Kind, LossReason, encode


@pytest.mark.parametrize("length", [0, 1, 2, 7, 4096])
def test_reduce_sum_is_the_bytewise_sum_mod_256(length: int) -> None:
    rng = random.Random(length)
    buffers = [bytes(rng.randrange(256) for _ in range(length)) for _ in range(5)]
    assert reduce_sum(buffers) == bytes(sum(col) % 256 for col in zip(*buffers, strict=True))


def test_reduce_sum_refuses_unequal_buffers() -> None:
    with pytest.raises(ProtocolError, match="differ in length"):
        reduce_sum([b"ab", b"a"])


def test_contributions_differ_by_rank_and_step() -> None:
    assert len(contribution(3, 9, 1000)) == 1000
    assert contribution(0, 1, 64) != contribution(1, 1, 64) != contribution(1, 2, 64)


def test_frames_cross_a_socket_whole_and_eof_is_a_loss() -> None:
    a, b = socket.socketpair()
    left, right = Conn(a, "master"), Conn(b, 1)
    left.queue(encode(Kind.CONTRIBUTION, 12, b"x" * 70000))
    got = None
    while got is None:
        left.flush()
        right.sock.settimeout(5)
        right.sock.setblocking(True)
        right.fill()
        right.sock.setblocking(False)
        got = right.frame()
    assert (got.kind, got.step, got.payload) == (Kind.CONTRIBUTION, 12, b"x" * 70000)
    left.close()
    right.sock.setblocking(True)
    with pytest.raises(ConnectionLost) as lost:
        right.fill()
    assert (lost.value.peer, lost.value.reason) == (1, LossReason.EOF)
    right.close()
