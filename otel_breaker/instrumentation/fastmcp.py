"""FastMCP clients: ``fastmcp.Client.call_tool`` / ``call_tool_mcp`` as one logical call.

FastMCP's ``Client`` sends ``tools/call`` through the ``mcp`` SDK's
``ClientSession.call_tool``, which the mcp adapter guards, so its calls are
guarded with the mcp adapter alone. But one logical call may send it more than
once: a server that needs input answers with an ``InputRequiredResult`` and the
client sends the call again with the answers. Guarded per send, each round
would be judged on its own (the first as a success). This adapter guards
``ClientToolsMixin.call_tool_mcp``, which ``call_tool`` goes through, so the
logical call is judged once on its final result and the inner sends pass
through (same tool, same context).

Failures and rejection are the mcp adapter's: a ``CallToolResult`` with
``isError`` set counts as a failure, and a rejection is such a result carrying
the rejection text; ``call_tool`` turns it into FastMCP's ``ToolError`` (or
returns it flagged ``is_error`` with ``raise_on_error=False``), exactly as for
a failing server tool. FastMCP's own ``tools/call`` client span is an MCP span,
not a GenAI tool span, so nothing is counted twice.

Open tools: breakers live in the calling process, so hiding is client-side.
With ``OTEL_BREAKER_HIDE_OPEN_TOOLS=true``, ``Client.list_tools`` (the list agent
integrations build their menu from) leaves out the tools whose breaker is open
here; ``list_tools_mcp`` still returns the server's protocol answer untouched. A
FastMCP *server* does not drop open tools from its ``tools/list``: one server
answers many clients, each with breakers of its own, and it has none of ours
for the tools it serves (a failing server tool is the client's failure to see).
"""

from __future__ import annotations

from typing import Any

from otel_breaker.degrade import Rejection
from otel_breaker.instrumentation import mcp_results
from otel_breaker.instrumentation.base import PatchTarget, active_call
from otel_breaker.instrumentation.mcp_identity import implementation_identity
from otel_breaker.instrumentation.spec import SpecAdapter, tool_patch
from otel_breaker.menu import hide_open_tools_enabled, visible_tools
from otel_breaker.toolcall import ToolCall

_TOOLS = "fastmcp.client.mixins.tools"


class FastMCPAdapter(SpecAdapter):
    name = "fastmcp"
    requires = "fastmcp>=4.1,<4.2"
    error_results_are_answers = True  # an isError result: the server answered
    patches = (tool_patch(_TOOLS, "ClientToolsMixin.call_tool_mcp", "async"),)

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return mcp_results.result_error(result)

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return mcp_results.rejection(info.message)

    def targets(self) -> list[PatchTarget]:
        return [*super().targets(), PatchTarget(_TOOLS, "ClientToolsMixin.list_tools", self._list_tools)]

    async def _list_tools(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        tools = await wrapped(*args, **kwargs)
        if not hide_open_tools_enabled():
            return tools
        outer = active_call()
        source = _server_of(instance)
        return visible_tools(
            tools, lambda t: t.name, lambda t: source, agent=outer.agent if outer is not None else None
        )

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = args[0] if args else kwargs.get("name")
        if not isinstance(name, str) or not name:
            return None
        outer = active_call()  # a FastMCP tool inside another framework's guarded call is made for its agent
        return ToolCall(
            tool=name,
            framework=self.name,
            agent=outer.agent if outer is not None else None,
            agent_name=outer.agent_name if outer is not None else None,
            session_id=outer.session_id if outer is not None else None,
            tool_type="extension",
            arguments=args[1] if len(args) > 1 else kwargs.get("arguments"),
            # The server's name@version, as the mcp session below keys it: a new client per
            # request finds the same breaker, and same-named tools of two servers never share one.
            source=_server_of(instance),
        )


def _server_of(client: Any) -> str | None:
    """``name@version`` of the server a FastMCP ``Client`` is connected to (None before it is)."""
    try:
        return implementation_identity(getattr(client, "server_info", None))
    except Exception:
        return None
