"""The client's stdin and stdout, read and written on the event loop.

The SDK's ``stdio_server`` reads and writes the standard streams through worker
threads and two relay tasks: several thread and task hand-offs per message, a
large share of the proxy's cost per ``tools/call``. When stdin and stdout are
pipes (as every MCP client starts a server), the proxy gives the SDK's session
a read stream that parses each line as the session asks for it and a write
stream that writes each message to the pipe as it is sent, served by the event
loop with no task in between. The wire format is the SDK's own (the same
message models, parsed from and written as one JSON line each). As the SDK
does, it first moves the wire off descriptors 0 and 1 (stdin reads the null
device, stdout writes to stderr), so nothing printed by accident can corrupt
the protocol. Anything else (a terminal, a file) uses the SDK's own threaded
streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp.types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ValidationError

#: The longest message line read from the client; a longer one is dropped (memory stays bounded).
MAX_LINE_BYTES = 64 * 1024 * 1024


def parse_message(line: str | bytes, likely: type[BaseModel]) -> SessionMessage | Exception:
    """One line of the wire as the SDK's transports parse it, or the parse error.

    The message is read as the kind ``likely`` first (a request from a client, a
    response from a server: nearly every message), which is what the SDK's
    union of message kinds makes of such a line, at half the cost; any other
    line is read as that union."""
    try:
        return SessionMessage(likely.model_validate_json(line, by_name=False))
    except ValidationError:
        pass
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except Exception as exc:
        return exc


class LineReadStream:
    """The client's messages, one JSON-RPC message per line, parsed when the session reads.

    A line that is not a JSON-RPC message is handed on as its parse error, as the
    SDK's own stdio transport does (the session logs and drops it). The server side
    (``child.py``) reads the same way, expecting responses instead of requests."""

    expected: Any = types.JSONRPCRequest

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._closed = False

    async def receive(self) -> SessionMessage | Exception:
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                line = await self._reader.readline()
            except ValueError:  # longer than MAX_LINE_BYTES: dropped, the rest reads as a bad message
                self._overlong()
                continue
            except ConnectionError:
                raise anyio.EndOfStream from None
            if not line:
                raise anyio.EndOfStream
            if not line.strip():
                continue
            message = parse_message(self._text(line), self.expected)
            if isinstance(message, Exception) and await self._answered(line):
                continue
            return message

    async def _answered(self, line: bytes) -> bool:
        """Whether a line that is not a valid message was answered here (it is then not
        handed on); the session drops what it cannot parse without an answer."""
        return False

    def _text(self, line: bytes) -> bytes | str:
        """The line as the parser gets it."""
        return line.decode("utf-8", "replace")

    def _overlong(self) -> None:
        """A line over MAX_LINE_BYTES was dropped."""

    def __aiter__(self) -> LineReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> LineReadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class LineWriteStream:
    """Messages to the client, each written to the pipe as one JSON line when sent.

    One ``write`` per message keeps messages whole when several requests answer
    at once; waiting for the pipe to drain holds a sender back while the client
    is not reading (memory stays bounded). A client that is gone reads as the
    closed stream the session expects."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._closed = False

    async def send(self, item: SessionMessage, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        writer = self._writer
        try:
            if writer.is_closing():
                raise BrokenPipeError
            writer.write(data.encode("utf-8") + b"\n")
            await writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._broken()
            raise anyio.BrokenResourceError from exc

    def _broken(self) -> None:
        """The pipe is gone (the reader of the other side may need telling)."""

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> LineWriteStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class ClientInput(LineReadStream):
    """The client's messages; a request the SDK cannot read is answered -32600 here.

    A request whose ``params`` is a string or a list (or that is otherwise not a
    valid request) but carries an ``id`` and a ``method`` would be dropped by the
    session with no answer, leaving the client waiting; JSON-RPC answers it
    "invalid request" with its id."""

    def __init__(self, reader: asyncio.StreamReader, output: LineWriteStream) -> None:
        super().__init__(reader)
        self._output = output

    async def _answered(self, line: bytes) -> bool:
        request_id = invalid_request_id(line)
        if request_id is None:
            return False
        error = types.ErrorData(code=types.INVALID_REQUEST, message="Invalid request: params must be an object")
        answer = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        try:
            await self._output.send(SessionMessage(answer))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        return True


def invalid_request_id(line: bytes) -> int | str | None:
    """The id of a line that is a JSON-RPC request in shape (an object with a ``method``
    and an ``id``) the SDK could not read; None for anything else (a notification, a
    response, or a line that is not JSON: those have no one to answer)."""
    try:
        document = json.loads(line)
    except ValueError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("method"), str):
        return None
    request_id = document.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    return request_id


@contextlib.asynccontextmanager
async def client_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """``(read_stream, write_stream)`` of the proxy's client, as ``stdio_server`` yields them."""
    opened = await _open_pipes()
    if opened is None:
        async with stdio_server() as streams:
            yield streams
        return
    reader, writer, restore = opened
    output = LineWriteStream(writer)
    try:
        yield ClientInput(reader, output), output
    finally:
        restore()


async def _open_pipes() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Any] | None:
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

    return reader, writer, restore


def _divert() -> None:
    """Point fd 0 at the null device and fd 1 at stderr (the wire is on private copies)."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    with contextlib.suppress(OSError):
        os.dup2(2, 1)
