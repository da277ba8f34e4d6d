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
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp.types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ValidationError

#: The longest message line read from the client; a longer one is dropped (memory stays bounded).
MAX_LINE_BYTES = 64 * 1024 * 1024
#: How much of each end of a line too long to keep is looked at for its small fields (its ``id``).
EDGE_BYTES = 4096
_CHUNK_BYTES = 1 << 20
# One top-level member of a JSON object whose value is small: a number, a short string
# without escapes, or a literal. The large member of an overlong message is never one.
_MEMBER = re.compile(rb'\s*"(\w{1,32})"\s*:\s*(-?\d{1,20}|"[^"\\]{0,256}"|null|true|false)\s*')
_TRAILING_MEMBER = re.compile(rb"," + _MEMBER.pattern)
_LEADING_KEY = re.compile(rb'\s*"(\w{1,32})"\s*:')
_TRAILING = re.compile(rb'((?:,\s*"\w{1,32}"\s*:\s*(?:-?\d{1,20}|"[^"\\]{0,256}"|null|true|false)\s*)+)\}\s*$')


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
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:  # the last line, with no line end
                line = exc.partial
            except asyncio.LimitOverrunError as exc:  # longer than MAX_LINE_BYTES: skipped, by its edges
                answer = await self._overlong(*await self._skip_line(exc.consumed))
                if answer is None:
                    continue
                return answer
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

    async def _skip_line(self, pending: int) -> tuple[bytes, bytes]:
        """Read past a line too long to keep, ``pending`` bytes of which are known to hold no
        line end, in bounded chunks; its first and last :data:`EDGE_BYTES` (where a message's
        small top-level fields are, around its large one)."""
        reader = self._reader
        head = tail = b""
        while True:
            try:
                while pending > 0:
                    chunk = await reader.read(min(pending, _CHUNK_BYTES))
                    if not chunk:
                        return head, tail
                    pending -= len(chunk)
                    if len(head) < EDGE_BYTES:
                        head += chunk[: EDGE_BYTES - len(head)]
                    tail = chunk[-EDGE_BYTES:] if len(chunk) >= EDGE_BYTES else (tail + chunk)[-EDGE_BYTES:]
                rest = await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as exc:
                pending = exc.consumed
                continue
            except asyncio.IncompleteReadError as exc:
                rest = exc.partial
            except ConnectionError:
                raise anyio.EndOfStream from None
            return head, (tail + rest)[-EDGE_BYTES:]

    async def _answered(self, line: bytes) -> bool:
        """Whether a line that is not a valid message was answered here (it is then not
        handed on); the session drops what it cannot parse without an answer."""
        return False

    def _text(self, line: bytes) -> bytes | str:
        """The line as the parser gets it."""
        return line.decode("utf-8", "replace")

    async def _overlong(self, head: bytes, tail: bytes) -> SessionMessage | None:
        """A line over MAX_LINE_BYTES was skipped (``head`` and ``tail`` are its edges): the
        message to hand on in its place, if any."""
        return None

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
        await self._answer(request_id, "Invalid request: params must be an object")
        return True

    async def _overlong(self, head: bytes, tail: bytes) -> SessionMessage | None:
        """A request over MAX_LINE_BYTES is answered "invalid request" with its id (read off
        its edges); anything else that long is dropped."""
        members, _ = edge_members(head, tail)
        request_id = message_id(members.get("id"))
        if request_id is not None and isinstance(members.get("method"), str):
            await self._answer(request_id, f"Invalid request: a message over {MAX_LINE_BYTES} bytes")
        return None

    async def _answer(self, request_id: int | str, message: str) -> None:
        error = types.ErrorData(code=types.INVALID_REQUEST, message=message)
        answer = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        try:
            await self._output.send(SessionMessage(answer))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass


def edge_members(head: bytes, tail: bytes) -> tuple[dict[str, Any], str | None]:
    """The small top-level members of a JSON object too long to parse, read off its first
    and last bytes (``{"jsonrpc": "2.0", "id": 7, "result": ...}`` as most SDKs write a
    message, ``{"result": ..., "jsonrpc": "2.0", "id": 7}`` as the TypeScript SDK does),
    and the key of its first large member; nothing is guessed from inside the large value."""
    members: dict[str, Any] = {}
    large: str | None = None
    text = head.lstrip()
    if not text.startswith(b"{"):
        return members, None
    position = 1
    while True:
        member = _MEMBER.match(text, position)
        if member is None:
            key = _LEADING_KEY.match(text, position)
            large = key.group(1).decode() if key is not None else None
            break
        members[member.group(1).decode()] = json.loads(member.group(2))
        position = member.end()
        if text[position : position + 1] != b",":
            break
        position += 1
    trailing = _TRAILING.search(tail)
    if trailing is not None:
        for member in _TRAILING_MEMBER.finditer(trailing.group(1)):
            members.setdefault(member.group(1).decode(), json.loads(member.group(2)))
    return members, large


def message_id(value: Any) -> int | str | None:
    """``value`` when it is a JSON-RPC id (a number or a string), else None."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value


def malformed_request_id(body: bytes) -> int | str | None:
    """The id of a request in shape whose ``params`` is there but not an object; None for
    anything else (a valid request refused for another reason keeps that reason)."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict) or "params" not in document or isinstance(document["params"], dict):
        return None
    if not isinstance(document.get("method"), str):
        return None
    return message_id(document.get("id"))


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
    return message_id(document.get("id"))


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
