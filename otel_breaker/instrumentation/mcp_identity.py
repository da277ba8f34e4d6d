"""How an MCP server is named, wherever its tools are called from.

A tool is identified by its server and its name: the breaker key and the
``otel_breaker.tool.source`` attribute carry the server's identity, so a
``search`` that is down on one server never rejects the ``search`` of another,
and the same server reached through two stacks (the ``mcp`` session, FastMCP,
an agent framework's MCP toolset, the proxy) finds the same breaker.

The identity is, in this order of preference:

* ``name@version`` of the server's ``Implementation`` (``serverInfo`` from
  ``initialize``): :func:`implementation_identity`, :func:`server_identity`;
* the transport a client was made with: the URL without its query string (it
  may carry a token), or the stdio command and its arguments
  (:func:`connection_identity` for a connection described as a mapping);
* a name the program gave the server (:func:`configured_name`).

Every identity is printable and at most :data:`MAX_SOURCE_CHARS` long
(:func:`bounded_source`). :class:`ToolSources` remembers the server of tools a
framework made from MCP tools, for frameworks whose tool objects forget it
(:meth:`ToolSources.remembering` wraps the function that makes them), or links
such a tool to its server object (:func:`link_server`), and
:func:`noting_initialize` keeps ``serverInfo`` for sessions that drop it.
:data:`LISTINGS` remembers the tool names each server last listed, so an answer
"Tool not found" is read as the model's unknown tool only for a name its server
does not list.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from otel_breaker.effects import announce, from_annotations
from otel_breaker.loglines import logger
from otel_breaker.toolcall import ToolCall, active_call, named_agent

#: The longest identity kept (past it: head, tail and a digest of the whole).
MAX_SOURCE_CHARS = 128


def bounded_source(text: str) -> str | None:
    """``text`` printable and at most ``MAX_SOURCE_CHARS`` long, still telling servers apart.

    A long stdio command (an interpreter's and a script's full paths, then the
    arguments that pick the server) must not be cut at the end: two servers would
    share a breaker. Past the limit it keeps the head, the tail and a digest of the whole.
    """
    text = "".join(ch for ch in text if ch.isprintable())
    if len(text) <= MAX_SOURCE_CHARS:
        return text or None
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    keep = MAX_SOURCE_CHARS - len(digest) - 2
    head = keep // 3
    return f"{text[:head]}…{text[len(text) - (keep - head) :]}#{digest}"


def configured_name(name: Any) -> str | None:
    """A server name the program configured (``server_name``, an MCP server's ``name``),
    printable and bounded; None when it is no name."""
    if not isinstance(name, str) or not name:
        return None
    return "".join(ch for ch in name if ch.isprintable())[:MAX_SOURCE_CHARS] or None


def _url_or_command(url: Any, command: Any, args: Any) -> str | None:
    if isinstance(url, str) and url:
        return bounded_source(url.split("?", 1)[0])  # no query string: it may carry a token
    if isinstance(command, str) and command:
        return bounded_source(" ".join([command, *(str(a) for a in args or ())]))
    return None


def transport_identity(client: Any) -> str | None:
    """The URL, or stdio command and arguments, an ``mcp`` ``Client`` was made with; None when unknown."""
    server = getattr(client, "server", None)
    if isinstance(server, str):
        return _url_or_command(server, None, None)
    return _url_or_command(None, getattr(server, "command", None), getattr(server, "args", None))


def connection_identity(connection: Any) -> str | None:
    """The URL, or stdio command and arguments, of a connection described as a mapping
    (``{"transport": "stdio", "command": ..., "args": [...]}`` or ``{"url": ...}``,
    as langchain-mcp-adapters takes them); None when it names neither."""
    if not isinstance(connection, Mapping):
        return None
    return _url_or_command(connection.get("url"), connection.get("command"), connection.get("args"))


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


async def noting_initialize(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """Patch wrapper for ``mcp.ClientSession.initialize``, for an adapter whose framework
    binds tools to sessions: the answer is noted (:func:`note_initialized`)."""
    result = await wrapped(*args, **kwargs)
    note_initialized(instance, result)
    return result


def implementation_identity(info: Any) -> str | None:
    """``name@version`` of an MCP ``Implementation`` (the ``serverInfo`` of ``initialize``),
    bounded and printable; None when it has no name. Frameworks that hold the server's
    info themselves (PydanticAI's MCP toolsets, OpenAI Agents' MCP servers) key their
    MCP tools with it, so they agree with the session's own calls."""
    name = getattr(info, "name", None)
    if not isinstance(name, str) or not name:
        return None
    version = getattr(info, "version", None)
    return bounded_source(f"{name}@{version}" if isinstance(version, str) and version else name)


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
    return identity if identity is not None else transport_identity(session)


def binding_identity(session: Any = None, connection: Any = None, name: Any = None) -> str | None:
    """The server a tool is bound to: its session's identity, else its connection's
    (a new session per call), else the name it was configured under."""
    identity = server_identity(session) if session is not None else None
    return identity or connection_identity(connection) or configured_name(name)


def mcp_call(tool: str, framework: str, arguments: Any, source: str | None) -> ToolCall:
    """The call of an MCP server's ``tool``, keyed by the server's identity ``source``.

    MCP has no agent and never sees the model's call id: made inside another
    framework's guarded call (an agent's MCP toolset), the call is for that call's agent
    and session."""
    outer = active_call()
    return ToolCall(
        tool=tool,
        framework=framework,
        agent=outer.agent if outer is not None else None,
        agent_name=outer.agent_name if outer is not None else named_agent(),
        session_id=outer.session_id if outer is not None else None,
        tool_type="extension",
        arguments=arguments,
        source=source,
    )


_SERVER_LINK = "_otel_breaker_mcp_server"


def link_server(tool: Any, server: Any) -> None:
    """Link a framework's tool made from an MCP tool to its server object, weakly, for
    frameworks whose tools forget it: the identity is read when the tool is called (the
    server may have connected, or reconnected, since), and the link never keeps it alive."""
    setattr(tool, _SERVER_LINK, weakref.ref(server))


def linked_server(tool: Any) -> Any:
    """The live server :func:`link_server` linked ``tool`` to, else None."""
    ref = getattr(tool, _SERVER_LINK, None)
    return ref() if ref is not None else None


class ToolSources:
    """The server of each tool a framework made from an MCP tool, for as long as the tool lives.

    For frameworks whose tool objects do not keep their server (their tools are
    keyed by object identity, weakly: the entry leaves with the tool).
    """

    def __init__(self) -> None:
        #: id(tool) -> (a weak reference to it, its server): empty until a tool is made from an MCP server.
        self.sources: dict[int, tuple[weakref.ref, str]] = {}
        self._lock = threading.Lock()
        _LOCK_HOLDERS.add(self)

    def remember(self, tool: Any, source: str) -> None:
        """Note ``tool``'s server identity."""
        key = id(tool)

        def forget(_: weakref.ref, key: int = key) -> None:
            with self._lock:
                self.sources.pop(key, None)

        with self._lock:
            self.sources[key] = (weakref.ref(tool, forget), source)

    def remembering(self, server_of: Callable[[tuple, dict], str | None]) -> Callable[..., Any]:
        """Patch wrapper for the framework function that makes a tool from an MCP tool:
        the tool it returns is remembered with ``server_of(args, kwargs)``, the server
        its arguments name (one it cannot tell is logged at debug level). The MCP tool
        annotations the framework copies into its tool's ``metadata`` (langchain-mcp-adapters
        does) say what it does: noted for that server (``effects.py``)."""

        def made(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            tool = wrapped(*args, **kwargs)
            try:
                if (source := server_of(args, kwargs)) is not None:
                    self.remember(tool, source)
                    note_marks(source, tool)
            except Exception:
                logger.debug("otel-breaker: could not tell an MCP tool's server", exc_info=True)
            return tool

        return made

    def source_of(self, tool: Any) -> str | None:
        """The server identity of a tool made from an MCP tool, else None."""
        if not self.sources:
            return None  # no tool made from an MCP server yet: one check per call
        entry = self.sources.get(id(tool))
        if entry is None or entry[0]() is not tool:
            return None
        return entry[1]


class ToolListings:
    """The tool names each server last listed, by server identity.

    A server that answers ``Tool not found`` for a name it lists is a tool reporting
    a missing thing of its own (a job, a record): the answer is judged like any other
    error text, never as the model asking for a tool that does not exist. Bounded: the
    most recently listed :attr:`max_servers` servers, :attr:`max_tools` names each.
    """

    max_servers = 256
    max_tools = 10_000
    #: A longer name is no tool name a model could send back: not kept.
    max_name_chars = 256

    def __init__(self) -> None:
        self._names: OrderedDict[str, set[str]] = OrderedDict()
        self._lock = threading.Lock()
        _LOCK_HOLDERS.add(self)

    def note(self, source: str | None, names: Iterable[Any], *, first_page: bool) -> None:
        """Note a listing of ``source``'s tools: a first page replaces what was known,
        a later page (a cursor's) adds to it."""
        if source is None:
            return
        kept = [n for n in names if isinstance(n, str) and len(n) <= self.max_name_chars]
        with self._lock:
            known = self._names.get(source)
            if known is None or first_page:
                known = self._names[source] = set()
            self._names.move_to_end(source)
            for name in kept:
                if len(known) >= self.max_tools:
                    break
                known.add(name)
            while len(self._names) > self.max_servers:
                self._names.popitem(last=False)

    def lists(self, source: str | None, tool: str) -> bool | None:
        """Whether ``source`` listed ``tool``; None when no listing of it was seen."""
        if source is None:
            return None
        with self._lock:
            known = self._names.get(source)
            return None if known is None else tool in known

    def clear(self) -> None:
        """Forget every listing."""
        with self._lock:
            self._names.clear()


#: Every tool-source table and listing table made in this process, weakly: the fork
#: handler replaces their locks.
_LOCK_HOLDERS: weakref.WeakSet[ToolSources | ToolListings] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    """A thread noting a tool's server, or a server's listing, at the fork holds that
    table's lock in the child forever (the child has only the forking thread), and the
    child's next MCP tool call would wait on it: every table gets a fresh lock."""
    for holder in list(_LOCK_HOLDERS):
        holder._lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)

#: The listings every adapter that sees a ``tools/list`` answer notes.
LISTINGS = ToolListings()


def note_effects(source: str | None, tools: Iterable[Any]) -> None:
    """Note what each listed tool's annotations (``readOnlyHint``, ``idempotentHint``,
    ``destructiveHint``) announce it does (``effects.py``): whether a retry may run it
    again, and whether a timeout leaves its outcome in doubt. The user's word still wins."""
    for tool in tools:
        name = getattr(tool, "name", None)
        if isinstance(name, str) and len(name) <= ToolListings.max_name_chars:
            announce(source, name, getattr(tool, "annotations", None))


def note_marks(source: str | None, tool: Any) -> None:
    """Note the side effects a framework's tool made from an MCP tool carries in its
    ``metadata`` (the MCP annotations, copied there by the framework); nothing when it
    carries none, so what the server's listing announced stays."""
    name, metadata = getattr(tool, "name", None), getattr(tool, "metadata", None)
    if isinstance(name, str) and len(name) <= ToolListings.max_name_chars and from_annotations(metadata) is not None:
        announce(source, name, metadata)
