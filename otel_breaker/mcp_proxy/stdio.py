"""The client's stdin and stdout, read and written on the event loop.

The SDK's ``stdio_server`` reads and writes the standard streams through worker
threads: three thread hand-offs per message, a large share of the proxy's cost
per ``tools/call``. When stdin and stdout are pipes (as every MCP client starts
a server), the proxy gives the SDK line streams served by the event loop
instead. As the SDK does, it first moves the wire off descriptors 0 and 1
(stdin reads the null device, stdout writes to stderr), so nothing printed by
accident can corrupt the protocol. Anything else (a terminal, a file) uses the
SDK's own threaded streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.stdio import stdio_server

#: The longest message line read from the client; a longer one is dropped (memory stays bounded).
MAX_LINE_BYTES = 64 * 1024 * 1024


class _Lines:
    """Text lines of a pipe, as the SDK iterates a file."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                line = await self._reader.readline()
            except ValueError:  # longer than MAX_LINE_BYTES: dropped, the rest reads as a bad message
                continue
            if not line:
                raise StopAsyncIteration
            return line.decode("utf-8", "replace")


class _Writer:
    """``write`` and ``flush`` of a pipe, as the SDK uses a file."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


@contextlib.asynccontextmanager
async def client_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """``(read_stream, write_stream)`` of the proxy's client, as ``stdio_server`` yields them."""
    opened = await _open_pipes()
    if opened is None:
        async with stdio_server() as streams:
            yield streams
        return
    lines, writer, restore = opened
    try:
        async with stdio_server(stdin=lines, stdout=writer) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        restore()


async def _open_pipes() -> tuple[_Lines, _Writer, Any] | None:
    """Event-loop streams on private copies of fds 0 and 1, which are then diverted; None
    when they are not pipes (or anything fails: the SDK's streams are used instead)."""
    try:
        loop = asyncio.get_running_loop()
        in_fd, out_fd = os.dup(0), os.dup(1)
    except (RuntimeError, OSError):
        return None
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    try:
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(in_fd, "rb", buffering=0)
        )
    except (ValueError, OSError):
        os.close(in_fd)
        os.close(out_fd)
        return None
    try:
        write_transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(out_fd, "wb", buffering=0)
        )
    except (ValueError, OSError):
        read_transport.close()
        os.close(out_fd)
        return None
    writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
    _divert()

    def restore() -> None:
        # fds 0 and 1 stay diverted: the proxy ends after its client, and what is written
        # at exit (the telemetry's last export to a console exporter) belongs on stderr.
        read_transport.close()
        write_transport.close()

    return _Lines(reader), _Writer(writer), restore


def _divert() -> None:
    """Point fd 0 at the null device and fd 1 at stderr (the wire is on private copies)."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    with contextlib.suppress(OSError):
        os.dup2(2, 1)
