"""Which MCP server a LangChain tool runs on (langchain-mcp-adapters).

``load_mcp_tools`` and ``MultiServerMCPClient.get_tools`` turn every MCP tool
into a LangChain ``StructuredTool`` through
``langchain_mcp_adapters.tools.convert_mcp_tool_to_langchain_tool``. Two servers
may both have a ``search``; as LangChain tools both are called ``search`` and
would share one breaker. The conversion is the one place that knows the
server, so it is wrapped to remember each tool's server identity, which the
LangChain adapter puts in ``ToolCall.source``:

* a tool bound to a session: the server's ``name@version`` from ``initialize``
  (mcp 1.x sessions do not keep it, so ``ClientSession.initialize`` is wrapped
  to note it);
* a tool bound to a connection (a new session per call, as
  ``MultiServerMCPClient`` makes them): the connection's URL or stdio command;
* else the ``server_name`` it was loaded under, if any.

The identities are :mod:`otel_breaker.instrumentation.mcp_identity`'s,
so a server is named alike wherever its tools are called from.

Counted once: the LangChain tool's ``arun`` is the guarded call. Where the MCP
adapter is active too (mcp 2.x), the session's ``call_tool`` of the same tool
runs inside it and passes through (the re-entrancy rule in ``base.py``).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.mcp_identity import connection_identity, note_initialized, server_identity

logger = logging.getLogger("otel_breaker")

TOOLS_MODULE = "langchain_mcp_adapters.tools"
SESSION_MODULE = "mcp.client.session"


class MCPToolSources:
    """Remembers the server of every LangChain tool made from an MCP tool."""

    def __init__(self) -> None:
        # id(tool) -> (weak reference to it, its server); the entry leaves with the tool.
        #: id(tool) -> (a weak reference to it, its server): empty until a tool is made from an MCP server.
        self.sources: dict[int, tuple[weakref.ref, str]] = {}
        self._lock = threading.Lock()

    def targets(self) -> list[PatchTarget]:
        return [
            PatchTarget(TOOLS_MODULE, "convert_mcp_tool_to_langchain_tool", self._converted),
            PatchTarget(SESSION_MODULE, "ClientSession.initialize", self._initialize),
        ]

    def source_of(self, tool: Any) -> str | None:
        """The server identity of a tool made from an MCP tool, else None."""
        if not self.sources:
            return None  # no tool made from an MCP server yet
        entry = self.sources.get(id(tool))
        if entry is None or entry[0]() is not tool:
            return None
        return entry[1]

    # -- wrappers -------------------------------------------------------------------------

    def _converted(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        tool = wrapped(*args, **kwargs)
        try:
            session = args[0] if args else kwargs.get("session")
            source = (
                (server_identity(session) if session is not None else None)
                or connection_identity(kwargs.get("connection"))
                or _server_name(kwargs.get("server_name"))
            )
            if source is not None:
                self._remember(tool, source)
        except Exception:
            logger.debug("otel-breaker: langchain: could not tell an MCP tool's server", exc_info=True)
        return tool

    async def _initialize(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        result = await wrapped(*args, **kwargs)
        try:
            note_initialized(instance, result)
        except Exception:
            logger.debug("otel-breaker: langchain: could not note an MCP server's identity", exc_info=True)
        return result

    def _remember(self, tool: Any, source: str) -> None:
        key = id(tool)

        def forget(_: weakref.ref, key: int = key) -> None:
            with self._lock:
                self.sources.pop(key, None)

        with self._lock:
            self.sources[key] = (weakref.ref(tool, forget), source)


def _server_name(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return None
    return "".join(ch for ch in name if ch.isprintable())[:128] or None
