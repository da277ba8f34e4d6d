"""MCP clients: every tool call goes out through ``ClientSession.call_tool``.

Why there: every MCP client stack (the SDK's own ``Client``, agent frameworks'
MCP toolsets, hand-written loops) ends in the session's ``call_tool``. The
high-level ``Client.call_tool`` is wrapped too, as the one *logical* call: it
may send ``tools/call`` more than once (input-required rounds, a resend after
a header mismatch), and the re-entrancy guard lets those inner sends pass
through so the logical call is counted once.

The tool name is the one the server reports and is called by, so a framework
that exposes the MCP tool under the same name and guards it first is not
counted twice.

A tool is identified by its server and its name: the breaker key and the
``otel_breaker.tool.source`` attribute carry the server's ``name@version``
from ``initialize``, so a ``search`` that is down on one server never rejects
the ``search`` of another. Two sessions with the same server share breakers.

Failures: a tool that fails on the server comes back as a normal
``CallToolResult`` with ``isError`` set, which is counted as a failure;
protocol errors and timeouts raise and are counted by the guard. The model's
mistakes are neutral: an unknown tool name (``Unknown tool: ...`` or the
JSON-RPC invalid-params / method-not-found errors), arguments the server's
schema rejects. So is the URL-elicitation-required error (-32042), an auth gate.

An unknown tool name never gets a breaker or a metric series: a name the
session has listed, or one this server has answered as a real tool, is
guarded; the first call of any other name runs as it would without us and,
if the server knew the tool, its outcome is then counted (without a span).

Open tools off the menu (``OTEL_BREAKER_HIDE_OPEN_TOOLS``): the listing the
client gets from ``ClientSession.list_tools`` or ``Client.list_tools`` is a copy
without this server's open tools; the session's own per-tool state and the
client's response cache keep the full listing, so a tool is back as soon as its
breaker is half-open, and a call to a hidden tool still gets the rejection.

Rejection: a ``CallToolResult`` with ``isError`` set and the rejection text,
exactly what a failing server tool returns, so every MCP client loop already
knows how to show it to the model.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import re
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

from otel_breaker import loops
from otel_breaker.breaker import REJECTED
from otel_breaker.classify import (
    CONTROL,
    FAILURE,
    IGNORED,
    MISTAKE,
    SUCCESS,
    classify_exception,
    error_type,
    is_excluded,
)
from otel_breaker.degrade import Rejection
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.instrumentation.base import GuardedCall, PatchTarget, _active_call, active_call, same_logical_call
from otel_breaker.instrumentation.spec import SpecAdapter, tool_patch
from otel_breaker.menu import hide_open_tools_enabled, visible_tools
from otel_breaker.semconv import ERROR_TOOL
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

_SESSION_MODULE = "mcp.client.session"
_CLIENT_MODULE = "mcp.client.client"


# JSON-RPC codes that mean the caller got it wrong, and MCP's auth gate.
_INVALID_PARAMS = -32602
_METHOD_NOT_FOUND = -32601
_URL_ELICITATION_REQUIRED = -32042
# What servers answer for a name they do not have, and for arguments their schema
# rejects (MCPServer's argument model is ``<tool>Arguments``).
_UNKNOWN_TOOL = re.compile(r"^\s*(Unknown tool|Tool not found)\b", re.IGNORECASE)
_BAD_ARGUMENTS = re.compile(r"validation errors? for \w*Arguments\b")
_MAX_SOURCE_CHARS = 128
_MAX_CONFIRMED = 4096


def _bounded_source(text: str) -> str | None:
    """``text`` printable and at most ``_MAX_SOURCE_CHARS`` long, still telling servers apart.

    A long stdio command (an interpreter's and a script's full paths, then the
    arguments that pick the server) must not be cut at the end: two servers would
    share a breaker. Past the limit it keeps the head, the tail and a digest of the whole.
    """
    text = "".join(ch for ch in text if ch.isprintable())
    if len(text) <= _MAX_SOURCE_CHARS:
        return text or None
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    keep = _MAX_SOURCE_CHARS - len(digest) - 2
    head = keep // 3
    return f"{text[:head]}…{text[len(text) - (keep - head) :]}#{digest}"


def _transport_identity(client: Any) -> str | None:
    """The URL, or stdio command and arguments, a ``Client`` was made with; None when unknown."""
    server = getattr(client, "server", None)
    if isinstance(server, str):
        return _bounded_source(server.split("?", 1)[0])  # no query string: it may carry a token
    command = getattr(server, "command", None)
    if isinstance(command, str) and command:
        args = getattr(server, "args", None) or ()
        return _bounded_source(" ".join([command, *(str(a) for a in args)]))
    return None


def connection_identity(connection: Any) -> str | None:
    """The URL, or stdio command and arguments, of a connection described as a mapping
    (``{"transport": "stdio", "command": ..., "args": [...]}`` or ``{"url": ...}``,
    as langchain-mcp-adapters takes them); None when it names neither."""
    if not isinstance(connection, Mapping):
        return None
    url = connection.get("url")
    if isinstance(url, str) and url:
        return _bounded_source(url.split("?", 1)[0])  # no query string: it may carry a token
    command = connection.get("command")
    if isinstance(command, str) and command:
        args = connection.get("args") or ()
        return _bounded_source(" ".join([command, *(str(a) for a in args)]))
    return None


# Server info from ``initialize`` for sessions that do not keep it (mcp 1.x), noted
# by adapters that see the handshake; weak, so a closed session leaves no trace.
_initialized: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def note_initialized(session: Any, result: Any) -> None:
    """Remember the ``serverInfo`` an ``initialize`` answered for ``session``."""
    info = getattr(result, "server_info", None) or getattr(result, "serverInfo", None)
    if info is not None:
        try:
            _initialized[session] = info
        except TypeError:  # not weak-referenceable: the identity is simply unknown
            pass


def implementation_identity(info: Any) -> str | None:
    """``name@version`` of an MCP ``Implementation`` (the ``serverInfo`` of ``initialize``),
    bounded and printable; None when it has no name. Frameworks that hold the server's
    info themselves (PydanticAI's MCP toolsets, OpenAI Agents' MCP servers) key their
    MCP tools with it, so they agree with the session's own calls."""
    name = getattr(info, "name", None)
    if not isinstance(name, str) or not name:
        return None
    version = getattr(info, "version", None)
    return _bounded_source(f"{name}@{version}" if isinstance(version, str) and version else name)


def server_identity(session: Any) -> str | None:
    """``name@version`` of the server behind a ``ClientSession`` or ``Client``, from
    ``initialize``; without ``serverInfo``, the transport a ``Client`` was made with."""
    info = getattr(session, "server_info", None)
    if info is None:
        try:
            info = _initialized.get(session)
        except TypeError:
            info = None
    identity = implementation_identity(info)
    return identity if identity is not None else _transport_identity(session)


def _listed_tools(instance: Any) -> dict | None:
    """The tool names the session has listed (its output-schema cache), if any."""
    session = getattr(instance, "_session", instance)
    listed = getattr(session, "_tool_output_schemas", None)
    return listed if isinstance(listed, dict) and listed else None


def _result_text(result: Any) -> str:
    for block in getattr(result, "content", None) or ():
        text = getattr(block, "text", None)
        if isinstance(text, str):
            return text
    return ""


def _is_unknown_tool_result(result: Any) -> bool:
    return (
        type(result).__name__ == "CallToolResult"
        and bool(getattr(result, "is_error", False))
        and bool(_UNKNOWN_TOOL.match(_result_text(result)))
    )


def _error_code(exc: BaseException) -> int | None:
    code = getattr(getattr(exc, "error", None), "code", None)
    return code if isinstance(code, int) else None


def _name_and_arguments(args: tuple, kwargs: dict) -> tuple[Any, Any]:
    name = args[0] if args else kwargs.get("name")
    arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
    return name, arguments


# Inside ``Client.list_tools``: the session's listing passes through whole (the
# client caches it, and re-absorbs a cached listing into the session's per-tool state).
_client_listing: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_breaker_mcp_listing", default=False)


class MCPAdapter(SpecAdapter):
    """Guards the tool calls an MCP client session sends."""

    name = "mcp"
    error_results_are_answers = True  # an isError result: the server answered
    patches = (
        tool_patch(_CLIENT_MODULE, "Client.call_tool", "async"),
        tool_patch(_SESSION_MODULE, "ClientSession.call_tool", "async"),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (server, tool name) pairs a server has answered as a real tool.
        self._confirmed: set[tuple[str | None, str]] = set()
        self._confirmed_lock = threading.Lock()

    def targets(self) -> list[PatchTarget]:
        return [
            # Both tool patches take the one wrapper that also handles never-listed names.
            *(PatchTarget(p.module, p.qualname, self._call_tool) for p in self.patches),
            # The model's menu (OTEL_BREAKER_HIDE_OPEN_TOOLS): the client-side tool listing.
            PatchTarget(_CLIENT_MODULE, "Client.list_tools", self._client_list_tools),
            PatchTarget(_SESSION_MODULE, "ClientSession.list_tools", self._session_list_tools),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name, arguments = _name_and_arguments(args, kwargs)
        if not isinstance(name, str) or not name:
            return None
        # MCP has no agent and never sees the model's call id; when another
        # framework's guarded call is in progress, the MCP call is made for its agent.
        outer = active_call()
        source = server_identity(instance)
        if source is None and outer is not None and outer.framework == self.name and outer.tool == name:
            source = outer.source  # a send of the Client's logical call: its server
        return ToolCall(
            tool=name,
            framework=self.name,
            agent=outer.agent if outer is not None else None,
            agent_name=outer.agent_name if outer is not None else None,
            session_id=outer.session_id if outer is not None else None,
            tool_type="extension",
            arguments=arguments,
            source=source,
        )

    async def _call_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self._call_of(instance, args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        if not same_logical_call(active_call(), call) and not self._known(instance, call):
            answer = loops.check_unknown(call, self)  # a name that already failed as unknown
            if answer is not loops.RUN:
                return answer
            return await self._first_call(call, wrapped, args, kwargs)
        return await self.run_async(call, wrapped, args, kwargs)

    # -- open tools off the listing ----------------------------------------------------------

    async def _client_list_tools(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = _client_listing.set(True)
        try:
            result = await wrapped(*args, **kwargs)
        finally:
            _client_listing.reset(token)
        return self._visible(instance, result)

    async def _session_list_tools(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        result = await wrapped(*args, **kwargs)
        return result if _client_listing.get() else self._visible(instance, result)

    def _visible(self, instance: Any, result: Any) -> Any:
        """A copy of a ``ListToolsResult`` without this server's open tools; the
        result itself when nothing is hidden (the session keeps its full state)."""
        tools = getattr(result, "tools", None)
        if not tools or not hide_open_tools_enabled():
            return result
        try:
            source = server_identity(instance)
            outer = active_call()
            kept = visible_tools(
                tools, lambda t: getattr(t, "name", None), lambda t: source, agent=outer.agent if outer else None
            )
            return result if kept is tools else result.model_copy(update={"tools": list(kept)})
        except Exception:
            logger.debug("otel-breaker: mcp: could not hide open tools", exc_info=True)
            return result

    # -- unknown tool names: no breaker, no metric series ------------------------------------

    def _known(self, instance: Any, call: ToolCall) -> bool:
        try:
            listed = _listed_tools(instance)
            if listed is not None and call.tool in listed:
                return True
            return (call.source, call.tool) in self._confirmed
        except Exception:
            return True

    def _confirm(self, call: ToolCall) -> bool:
        with self._confirmed_lock:
            if len(self._confirmed) >= _MAX_CONFIRMED:
                return False
            self._confirmed.add((call.source, call.tool))
            return True

    async def _first_call(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """A name neither listed nor answered yet: run it as without us; once the server
        has shown it is a real tool, count it and give it its span after the fact."""
        start_ns = time.time_ns()
        # An inner layer of the same call (the session's send) passes through.
        token = _active_call.set(GuardedCall(call))
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            if self.exception_hint(call, exc) is None and not is_excluded(exc):
                self._count_first(call, start_ns, exc=exc)
            raise
        finally:
            _active_call.reset(token)
        if not _is_unknown_tool_result(result):
            self._count_first(call, start_ns, err=self.result_error(call, result))
        else:
            loops.unknown_tool_called(call, _result_text(result))
        return result

    def _count_first(
        self, call: ToolCall, start_ns: int, err: str | None = None, exc: BaseException | None = None
    ) -> None:
        end_ns = time.time_ns()
        try:
            if not self._confirm(call):
                return
            breaker = self.guard.breaker_for(call)
            if breaker is None:
                return
            if exc is not None:
                outcome = classify_exception(exc, breaker.config)
                err = error_type(exc) if outcome == FAILURE else None
            elif err == IGNORED_RESULT:
                outcome, err = IGNORED, None
            else:
                outcome = SUCCESS if err is None else FAILURE
            permit = breaker.acquire()
            if permit != REJECTED:
                breaker.record(permit, outcome)
            TELEMETRY.past_call(call, breaker, start_ns, end_ns, err, exc, permit)
        except Exception:
            logger.debug("otel-breaker: mcp: could not count a first call", exc_info=True)

    # -- outcomes ------------------------------------------------------------------------------------

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        code = _error_code(exc)
        if code == _URL_ELICITATION_REQUIRED:
            return CONTROL
        if code in (_INVALID_PARAMS, _METHOD_NOT_FOUND):
            return MISTAKE
        return None

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        # InputRequiredResult and other non-final results are neither success nor failure
        # of the tool (the logical call goes on); only a CallToolResult flagged as an error is a failure.
        if type(result).__name__ != "CallToolResult":
            return IGNORED_RESULT
        flagged = getattr(result, "is_error", None)
        if flagged is None:
            flagged = getattr(result, "isError", False)
        if not flagged:
            return None
        text = _result_text(result)
        if _UNKNOWN_TOOL.match(text) or _BAD_ARGUMENTS.search(text):
            return IGNORED_RESULT  # the model's mistake, not the tool's failure
        return ERROR_TOOL

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        if type(result).__name__ != "CallToolResult" or not (
            getattr(result, "is_error", None) or getattr(result, "isError", False)
        ):
            return None
        text = _result_text(result)
        return MISTAKE if _UNKNOWN_TOOL.match(text) or _BAD_ARGUMENTS.search(text) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from mcp.types import CallToolResult, TextContent

        return CallToolResult(content=[TextContent(type="text", text=info.message)], is_error=True)
