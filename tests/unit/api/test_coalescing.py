"""The API server's coalesced writes (refplatform.api.coalescing), over real loopback sockets."""

from __future__ import annotations

import asyncio
from typing import Any

from refplatform.api.coalescing import CoalescingTransport


class Counting:
    """The real transport, with its writes counted."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class Peer:
    """The accepting end: what it reads, and everything to close."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: asyncio.AbstractServer):
        self.reader, self.writer, self.server = reader, writer, server

    async def close(self) -> None:
        self.writer.close()
        self.server.close()
        await self.server.wait_closed()


async def _pair() -> tuple[Counting, Peer]:
    received: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await received.put((reader, writer))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await asyncio.get_running_loop().create_connection(asyncio.Protocol, "127.0.0.1", port)
    reader, writer = await asyncio.wait_for(received.get(), 5)
    return Counting(transport), Peer(reader, writer, server)


def test_writes_within_one_loop_turn_leave_as_one_write_in_order() -> None:
    async def scenario() -> None:
        real, peer = await _pair()
        out = CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        out.write(b"HTTP/1.1 200 OK\r\n\r\n")
        out.write(b"")
        out.write(bytearray(b"{\"kind\":"))
        out.write(memoryview(b"\"Pod\"}"))
        assert real.writes == [] and out.get_write_buffer_size() == 33  # held until the turn ends
        assert await asyncio.wait_for(peer.reader.readexactly(33), 5) == b"HTTP/1.1 200 OK\r\n\r\n{\"kind\":\"Pod\"}"
        assert real.writes == [b"HTTP/1.1 200 OK\r\n\r\n{\"kind\":\"Pod\"}"]
        out.write(b"next")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert real.writes[1:] == [b"next"]  # a later turn is a later write
        out.close()
        await peer.close()

    asyncio.run(scenario())


def test_close_sends_what_is_held_first_and_abort_drops_it() -> None:
    async def scenario() -> None:
        real, peer = await _pair()
        out = CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        out.write(b"last words")
        out.close()
        assert real.writes == [b"last words"] and out.is_closing()
        assert await asyncio.wait_for(peer.reader.read(), 5) == b"last words"  # then EOF

        real2, peer2 = await _pair()
        out2 = CoalescingTransport(real2, asyncio.get_running_loop())  # type: ignore[arg-type]
        out2.write(b"never sent")
        out2.abort()
        await asyncio.sleep(0)
        assert real2.writes == []
        assert await asyncio.wait_for(peer2.reader.read(), 5) == b""
        await peer.close()
        await peer2.close()

    asyncio.run(scenario())
