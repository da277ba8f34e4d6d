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

Failures: a tool that fails on the server comes back as a normal
``CallToolResult`` with ``isError`` set, which is counted as a failure;
protocol errors and timeouts raise and are counted by the guard.

Rejection: a ``CallToolResult`` with ``isError`` set and the rejection text,
exactly what a failing server tool returns, so every MCP client loop already
knows how to show it to the model.
"""

from __future__ import annotations

from typing import Any

from otel_breaker.degrade import Rejection
from otel_breaker.instrumentation.base import FrameworkAdapter, PatchTarget, active_call
from otel_breaker.toolcall import ToolCall

_SESSION_MODULE = "mcp.client.session"
_CLIENT_MODULE = "mcp.client.client"


def _name_and_arguments(args: tuple, kwargs: dict) -> tuple[Any, Any]:
    name = args[0] if args else kwargs.get("name")
    arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
    return name, arguments


class MCPAdapter(FrameworkAdapter):
    """Guards the tool calls an MCP client session sends."""

    name = "mcp"
    distribution = "mcp"
    version_range = ">=2.3,<3"
    modules = (_SESSION_MODULE, _CLIENT_MODULE)

    def targets(self) -> list[PatchTarget]:
        return [
            PatchTarget(_CLIENT_MODULE, "Client.call_tool", self._call_tool),
            PatchTarget(_SESSION_MODULE, "ClientSession.call_tool", self._call_tool),
        ]

    def _describe(self, args: tuple, kwargs: dict) -> ToolCall | None:
        def build() -> ToolCall | None:
            name, arguments = _name_and_arguments(args, kwargs)
            if not isinstance(name, str) or not name:
                return None
            # MCP has no agent and never sees the model's call id; when another
            # framework's guarded call is in progress, the MCP call is made for its agent.
            outer = active_call()
            return ToolCall(
                tool=name,
                framework=self.name,
                agent=outer.agent if outer is not None else None,
                agent_name=outer.agent_name if outer is not None else None,
                session_id=outer.session_id if outer is not None else None,
                tool_type="extension",
                arguments=arguments,
            )

        return self.safe_tool_call(build)

    async def _call_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self._describe(args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        return await self.run_async(call, wrapped, args, kwargs)

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        # InputRequiredResult and other non-final results are neither success nor failure
        # of the tool; only a CallToolResult flagged as an error is a failure.
        if type(result).__name__ != "CallToolResult":
            return None
        flagged = getattr(result, "is_error", None)
        if flagged is None:
            flagged = getattr(result, "isError", False)
        return "tool_error" if flagged else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from mcp.types import CallToolResult, TextContent

        return CallToolResult(content=[TextContent(type="text", text=info.message)], is_error=True)
