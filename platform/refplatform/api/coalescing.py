"""One socket write per answer: uvicorn's HTTP protocols with their writes coalesced.

uvicorn writes an answer's status line and headers, then its body, as separate ``transport.write``
calls.  Over TLS each call becomes its own record and its own ``send``, and on loopback each send
also runs the receiver's side of TCP and wakes it: in the end-to-end benchmark a third of the API
server's event loop went to those sends (docs/SCHEDULER.md, "End-to-end throughput").

:class:`CoalescingTransport` keeps the writes made within one turn of the event loop and hands them
to the real transport as one, at the end of that turn (``loop.call_soon``): the same bytes, in the
same order, never later than the loop's next iteration.  Closing flushes first; aborting drops what
is held, as the transport itself would.  Everything else is the real transport's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


class CoalescingTransport:
    """A transport proxy whose writes within one loop turn go out as one write."""

    __slots__ = ("_transport", "_loop", "_held", "_scheduled")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._scheduled = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self._held.append(bytes(data))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Hand what is held to the real transport now (one write)."""
        self._scheduled = False
        if not self._held:
            return
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held.clear()
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._held))

    def is_closing(self) -> bool:  # asked before every write: spared the __getattr__ detour
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:  # get_extra_info, pause/resume_reading, set_protocol, ...
        return getattr(self._transport, name)


class CoalescingH11Protocol(H11Protocol):
    """uvicorn's h11 protocol over a :class:`CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]


def httptools_protocol() -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol over a :class:`CoalescingTransport` (imported only when asked for: the
    httptools package is optional)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class CoalescingHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]

    return CoalescingHttpToolsProtocol
