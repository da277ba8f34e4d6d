"""FastMCP clients: ``fastmcp.Client.call_tool`` / ``call_tool_mcp`` as one logical call.

FastMCP's ``Client`` sends ``tools/call`` through the ``mcp`` SDK's
``ClientSession.call_tool`` (guarded by the mcp adapter), but one logical call may
send it more than once: a server that needs input answers with an
``InputRequiredResult`` and the client sends the call again with the answers.
Guarded here, at ``ClientToolsMixin.call_tool_mcp`` (which ``call_tool`` goes
through), the logical call is judged once on its final result and the inner sends
pass through. Outcomes and the rejection are MCP's (:mod:`.mcp_results`);
``call_tool`` turns a rejection into FastMCP's ``ToolError`` (or returns it flagged
``is_error`` with ``raise_on_error=False``), exactly as for a failing server tool.

Open tools: breakers live in the calling process, so hiding is client-side:
``Client.list_tools`` (the list agent integrations build their menu from) leaves
out the tools open here; ``list_tools_mcp`` still returns the server's answer. A
FastMCP *server* keeps its ``tools/list`` whole: it answers many clients, each
with breakers of its own. The listing is noted (:data:`.mcp_identity.LISTINGS`) so
that a listed tool answering "Tool not found" is not taken for an unknown tool.

A run (the loop guard's and the waste budget's scope) is the client's session, one
per connection, unless the call names one in ``meta`` (:mod:`.mcp_runs`); a listing is
made in its session's run, so a tool the run spent its budget on leaves it.
"""

from __future__ import annotations

from typing import Any

from otel_breaker import runs
from otel_breaker.instrumentation.base import active_call
from otel_breaker.instrumentation.mcp_identity import LISTINGS, implementation_identity, mcp_call, note_effects
from otel_breaker.instrumentation.mcp_results import MCPAnswers
from otel_breaker.instrumentation.mcp_runs import call_run, listing_run
from otel_breaker.instrumentation.spec import (
    SpecAdapter,
    argument,
    context_patch,
    menu_patch,
    observe_patch,
    tool_patch,
)
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_TOOLS = "fastmcp.client.mixins.tools"


class FastMCPAdapter(MCPAnswers, SpecAdapter):
    """The logical call of a FastMCP client, judged with MCP's answers (:class:`.mcp_results.MCPAnswers`)."""

    name = "fastmcp"
    patches = (
        tool_patch(_TOOLS, "ClientToolsMixin.call_tool_mcp"),
        # Applied first, so inside the menu patch: the listing is noted whole, before any hiding.
        observe_patch(_TOOLS, "ClientToolsMixin.list_tools", "note_listing", "async"),
        menu_patch(_TOOLS, "ClientToolsMixin.list_tools", "async", "visible", after=True),
        # Outermost: a listing is made in its session's run, so the tools that run hid leave it.
        context_patch(_TOOLS, "ClientToolsMixin.list_tools", runs.RUN_VARIABLE, listing_run),
    )

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The guarded call, in its run (:func:`.mcp_runs.call_run`) unless a framework's run
        is open around it."""
        found = call_run(instance, kwargs)
        token = None if found is None else runs.enter(found)
        try:
            return await super()._tool_async(wrapped, instance, args, kwargs)
        finally:
            runs.leave(token)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = argument(args, kwargs, 0, "name")
        if not isinstance(name, str) or not name:
            return None
        # The server's name@version, as the mcp session below keys it: a new client per
        # request finds the same breaker, and same-named tools of two servers never share one.
        return mcp_call(name, self.name, argument(args, kwargs, 1, "arguments"), _server_of(instance))

    def visible(self, instance: Any, args: tuple, kwargs: dict, tools: Any) -> Any:
        """The listing without the tools open here (None: nothing hidden)."""
        outer, source = active_call(), _server_of(instance)
        kept = visible_tools(tools, lambda t: t.name, lambda t: source, agent=outer.agent if outer else None)
        return None if kept is tools else kept

    def note_listing(self, instance: Any, args: tuple, kwargs: dict, tools: Any) -> None:
        """Note the server's whole listing (``list_tools`` reads every page): a listed
        tool answering "Tool not found" is then no unknown tool."""
        if isinstance(tools, list):
            source = _server_of(instance)
            LISTINGS.note(source, (getattr(t, "name", None) for t in tools), first_page=True)
            note_effects(source, tools)


def _server_of(client: Any) -> str | None:
    """``name@version`` of the server a FastMCP ``Client`` is connected to (None before it is)."""
    try:
        return implementation_identity(getattr(client, "server_info", None))
    except Exception:
        return None
