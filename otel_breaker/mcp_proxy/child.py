"""A stdio server's process, its stdout and stdin served to the session by the event loop.

The SDK's ``stdio_client`` relays every message through a reader and a writer
task and two memory streams: two task hand-offs per message, each way, for a
proxy that already pays one process hop. Here the session's reads parse the
server's stdout line by line and its sends write to the server's stdin, with no
task in between; the wire format is the SDK's own (one JSON-RPC message per
line, the same models).

The process is started and stopped as the SDK does it: in its own session
(process group), with the safe part of the environment plus the configured
variables; stopped by closing its stdin, then, if it has not exited after a
grace period, by terminating its process group (the SDK's own helper), its
stdout drained meanwhile so a server blocked on a full pipe can still exit.
On Windows the SDK's ``stdio_client`` is used as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any, TextIO

import anyio
import mcp.types as types
from mcp.client.stdio import (
    FORCE_KILL_TIMEOUT,
    PROCESS_TERMINATION_TIMEOUT,
    StdioServerParameters,
    get_default_environment,
    stdio_client,
)
from mcp.shared.message import SessionMessage

from otel_breaker.mcp_proxy.stdio import LineReadStream, LineWriteStream, edge_members, message_id

logger = logging.getLogger("otel_breaker")

#: The longest message line read from a server; a longer one is dropped (memory stays bounded).
MAX_LINE_BYTES = 64 * 1024 * 1024
#: The key of an error answer's ``data`` that marks an answer the proxy dropped for its size.
TOO_LARGE = "otel_breaker.answer_over_bytes"
_EXIT_POLL = 0.01


class _ServerOutput(LineReadStream):
    """The server's messages, one per line of its stdout, parsed when the session reads.

    A line that is not a JSON-RPC message is handed on as its parse error (the
    session drops it), as with the SDK's transport."""

    expected = types.JSONRPCResponse

    def __init__(self, stdout: asyncio.StreamReader, to_server: _ServerInput) -> None:
        super().__init__(stdout)
        self._to_server = to_server

    def _text(self, line: bytes) -> bytes | str:
        return line

    async def _overlong(self, head: bytes, tail: bytes) -> SessionMessage | None:
        """An answer over MAX_LINE_BYTES becomes an error answer to its request (its id read
        off the line's edges), so the request is answered and its call counts for the
        server's upstream (see :func:`too_large`); a request of the server's that long is
        answered "invalid request" on the server's stdin, so the server is not left waiting;
        a notification that long is dropped."""
        members, large = edge_members(head, tail)
        request_id = message_id(members.get("id"))
        if request_id is not None and isinstance(members.get("method"), str):
            logger.warning("otel-breaker: mcp-proxy: refused a server request over %d bytes", MAX_LINE_BYTES)
            await self._refuse(request_id)
            return None
        answer = "method" not in members and large in ("result", "error", None)
        if request_id is None or not answer:
            logger.warning("otel-breaker: mcp-proxy: dropped a message line over %d bytes", MAX_LINE_BYTES)
            return None
        logger.warning(
            "otel-breaker: mcp-proxy: dropped an answer over %d bytes; its request is answered with an error",
            MAX_LINE_BYTES,
        )
        error = types.ErrorData(
            code=types.INTERNAL_ERROR,
            message=f"The server's answer was over {MAX_LINE_BYTES} bytes; the proxy dropped it",
            data={TOO_LARGE: MAX_LINE_BYTES},
        )
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))

    async def _refuse(self, request_id: int | str) -> None:
        error = types.ErrorData(
            code=types.INVALID_REQUEST, message=f"Invalid request: a message over {MAX_LINE_BYTES} bytes"
        )
        try:
            await self._to_server.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass


def too_large(exc: BaseException) -> bool:
    """Whether ``exc`` is the error answer that stands for a server's answer over the limit."""
    data = getattr(getattr(exc, "error", None), "data", None)
    return isinstance(data, dict) and TOO_LARGE in data


class _ServerInput(LineWriteStream):
    """Messages to the server, each written to its stdin as one JSON line when sent.

    When its stdin is gone (the server closed it, or died) the session is told the
    connection ended: its stdout is ended too, as the SDK's transport does."""

    def __init__(self, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader) -> None:
        super().__init__(stdin)
        self._stdout = stdout

    def _broken(self) -> None:
        self._stdout.feed_eof()


@contextlib.asynccontextmanager
async def server_stdio(params: StdioServerParameters, errlog: TextIO = sys.stderr) -> AsyncIterator[tuple[Any, Any]]:
    """``(read_stream, write_stream)`` of a started stdio server, as ``stdio_client`` yields them.

    Raises ``OSError`` when the command cannot be started."""
    if sys.platform == "win32":  # pragma: no cover - job objects and handles: the SDK's own way
        async with stdio_client(params, errlog) as streams:
            yield streams
        return
    process = await asyncio.create_subprocess_exec(
        params.command,
        *params.args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=errlog,
        env=get_default_environment() | (params.env or {}),
        cwd=params.cwd,
        start_new_session=True,
        limit=MAX_LINE_BYTES,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        to_server = _ServerInput(process.stdin, process.stdout)
        yield _ServerOutput(process.stdout, to_server), to_server
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Close the server's stdin, give it the SDK's grace period to exit, then terminate
    its process group; its stdout is drained meanwhile. Every wait is bounded."""
    from mcp.os.posix.utilities import terminate_posix_process_tree

    assert process.stdin is not None and process.stdout is not None
    stdout = process.stdout
    async with anyio.create_task_group() as group:
        group.start_soon(_drain, stdout)
        with contextlib.suppress(OSError, RuntimeError):
            process.stdin.close()
        if not await _exited(process, PROCESS_TERMINATION_TIMEOUT):
            await terminate_posix_process_tree(process, FORCE_KILL_TIMEOUT)  # type: ignore[arg-type]
            if not await _exited(process, FORCE_KILL_TIMEOUT):
                logger.warning("otel-breaker: mcp-proxy: server process %d survived the kill", process.pid)
        group.cancel_scope.cancel()
    stdout.feed_eof()


async def _drain(stdout: asyncio.StreamReader) -> None:
    with contextlib.suppress(Exception):
        while await stdout.read(65536):
            pass


async def _exited(process: asyncio.subprocess.Process, timeout: float) -> bool:
    """Whether the process exited within ``timeout`` seconds (polled: waiting on the
    process also waits for its pipes, which a child it left behind may hold open)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(_EXIT_POLL)
        return True
    return process.returncode is not None
