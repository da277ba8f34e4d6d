"""Which MCP server an OpenAI Agents SDK function tool calls.

The SDK turns each tool an MCP server lists into a ``FunctionTool`` with an
``_mcp_tool_binding`` naming the server. Tools of the same name from different servers
must not share a breaker, so a call's ``source`` is the server's identity
(``name@version`` from its ``initialize``), linked when ``MCPUtil.to_function_tool``
builds the tool, else found among the agent's servers by the binding's name.
"""

from __future__ import annotations

from typing import Any

from otel_breaker.instrumentation import mcp_identity


def link_tool_to_server(function_tool: Any, server: Any) -> None:
    """Remember the server ``function_tool`` was built for (``MCPUtil.to_function_tool``)."""
    mcp_identity.link_server(function_tool, server)


def mcp_source(function_tool: Any, agent: Any = None) -> str | None:
    """The MCP server an MCP function tool calls (``name@version`` from its ``initialize``), None
    for other tools: the server the SDK built it for, else the agent's one its binding names."""
    binding = getattr(function_tool, "_mcp_tool_binding", None)
    if binding is None:
        return None
    server_name = binding[0]
    server = mcp_identity.linked_server(function_tool)
    if server is None:
        server = _agent_server(agent, server_name)
        if server is None:
            return None
    info = getattr(getattr(server, "server_initialize_result", None), "server_info", None)
    identity = mcp_identity.server_identity(getattr(server, "session", None))
    if identity is None:
        identity = mcp_identity.implementation_identity(info)
    if identity is None:
        return mcp_identity.bounded_source(f"mcp:{server_name}")
    return identity


def _agent_server(agent: Any, server_name: str) -> Any:
    """The one server of ``agent`` whose log name is ``server_name`` (None: none, or several)."""
    from agents.mcp.util import get_mcp_server_log_name

    named = [
        server
        for server in getattr(agent, "mcp_servers", None) or ()
        if get_mcp_server_log_name(server.name) == server_name
    ]
    if len(named) != 1:
        return None
    return named[0]
