"""A ``tools/call`` result in the wire's own form: judged without being rebuilt.

The proxy forwards a ``tools/call`` as the dicts the client sent and hands the
server's result back as it came (see :meth:`.upstream.UpstreamLink.request_raw`):
parsing it into the SDK's models and writing it out again on both sides was
most of the proxy's cost per call, and a result that is passed on untouched is
exactly the server's. What the breakers need from it is one flag (``isError``)
and, for a flagged result only, its text: :class:`WireAdapter` reads those off
the dict, with MCP's own rules (the MCP adapter's too); the call path then judges
a flagged result's text with the same outcome rules as every adapter's
(:mod:`otel_breaker.outcome_rules`), and a JSON-RPC error the server answered with
through :meth:`~otel_breaker.instrumentation.mcp_results.MCPAnswers.exception_hint`.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
from mcp.types.methods import serialize_server_result

from otel_breaker.classify import IGNORED_RESULT
from otel_breaker.instrumentation.mcp_results import MCPAnswers
from otel_breaker.toolcall import ToolCall


class WireAdapter(MCPAnswers):
    """MCP's three outcomes (:mod:`~otel_breaker.instrumentation.mcp_results`, as the
    MCP adapter reads them), for results that are still the wire's dicts.

    A result without the ``isError`` flag is the tool's success, as it is for the
    adapter; a flagged one is read as the SDK's model (it is rare, and the adapter's
    rules for telling a failure from the model's mistake read its text); anything
    that is not a final tool result (a task handle) is neutral."""

    def tool_listed(self, call: ToolCall) -> bool:
        """Always: the proxy guards only the names its server listed, so a guarded tool
        answering "Tool not found" is reporting a missing thing of its own."""
        return True

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        if not isinstance(result, dict):
            return super().result_error(call, result)
        if not isinstance(result.get("content"), list):
            return IGNORED_RESULT
        if result.get("isError") is not True:
            return None
        return super().result_error(call, _as_model(result))

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        if not isinstance(result, dict):
            return super().result_hint(call, result)
        if result.get("isError") is not True or not isinstance(result.get("content"), list):
            return None
        return super().result_hint(call, _as_model(result))


def _as_model(result: dict[str, Any]) -> Any:
    try:
        return types.CallToolResult.model_validate(result, by_name=False)
    except Exception:
        return result  # not a tool result the SDK reads: neutral, as for the adapter


def for_client(result: dict[str, Any], client_version: str, server_version: str | None) -> dict[str, Any]:
    """The server's result as the client's protocol version has it.

    When the client and the server speak the same version (the usual case), the
    result is the server's as it came. Otherwise it is shaped to the client's
    version, as the SDK's server does for every result (fields that version does
    not know are left out), so an older client gets what the server would have
    answered it directly."""
    if client_version == server_version:
        return result
    try:
        return serialize_server_result("tools/call", client_version, result)
    except Exception:  # an unknown version, or a result the client will reject as it would directly
        return result
