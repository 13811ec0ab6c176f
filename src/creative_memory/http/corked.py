"""One send per response (docs/performance.md, "Daemon").

uvicorn writes a response's status line and headers when the app sends
``http.response.start`` and its body when it sends ``http.response.body``: two writes, and
on an idle connection each is a ``send`` system call at once. On loopback a ``send`` is
most of what answering costs — the kernel delivers the data and wakes the reader inside
it — so :class:`CorkedTransport` holds the writes of one event-loop step and sends them
together at the end of the step. Order is kept, nothing is dropped (closing sends what is
held first), and a streamed body still goes out a step at a time.

:func:`corked_protocol` is the HTTP protocol uvicorn is given: its own (httptools when
installed, else h11) over a :class:`CorkedTransport`.
"""

from __future__ import annotations

import asyncio
from typing import Any


class CorkedTransport:
    """A transport whose writes within one event-loop step are sent as one; every other
    attribute is the wrapped transport's."""

    __slots__ = ("_held", "_loop", "_scheduled", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._scheduled = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Hold ``data`` until the end of this event-loop step."""
        if not data:
            return
        self._held.append(data if isinstance(data, bytes) else bytes(data))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def writelines(self, list_of_data: Any) -> None:
        """Hold each of ``list_of_data``."""
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Send what is held, as one write."""
        self._scheduled = False
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def get_write_buffer_size(self) -> int:
        """Bytes not yet sent, held here or buffered by the transport."""
        return self._transport.get_write_buffer_size() + sum(map(len, self._held))

    def close(self) -> None:
        """Send what is held, then close."""
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        """Send what is held, then half-close."""
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        """Drop what is held and abort the connection."""
        self._held = []
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def corked_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools when installed, else h11) over a
    :class:`CorkedTransport`."""
    base: Any
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # httptools is optional: the pure-Python parser
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    class CorkedHTTP(base):  # type: ignore[misc]
        """uvicorn's protocol writing through a :class:`CorkedTransport`."""

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(CorkedTransport(transport, self.loop))

    return CorkedHTTP
