"""What an MCP answer means for a breaker, for every adapter that speaks MCP.

A tool that fails on the server comes back as a normal ``CallToolResult`` with
``isError`` set; the call path reads its text with the same rules as any error
(:mod:`otel_breaker.outcome_rules`): ``ENOENT``, "not found", "invalid ..." are the
model's mistakes, "outside allowed directories" is authorization, and a text
nothing recognises is a failure of the tool. This module adds only what MCP
itself defines:

* an unknown tool: the answer ``Unknown tool: ...`` / ``Tool not found`` (or the
  TypeScript SDK's ``Tool <name> not found``) for a name the server does not list.
  A server that answers so for a name it lists is a tool reporting a missing thing
  of its own, judged by its text like any other answer;
* arguments the server's schema rejects (the SDKs' validation texts);
* JSON-RPC errors: invalid params (-32602) and method not found (-32601) are the
  caller's mistake (whether an identical call may succeed later, "job 42 not found",
  is the outcome rules' reading of the code and message); a missing client
  capability (-32021), an unsupported protocol version (-32022) and the
  URL-elicitation auth gate (-32042) are neither outcome. Every other code (a rate
  limit, -32023, whose ``retryAfter`` opens the breaker for that long) is left to
  the outcome rules;
* results that are not final (``InputRequiredResult``: the logical call goes on)
  are neither outcome.

A rejection is a ``CallToolResult`` with ``isError`` set and the rejection
text, exactly what a failing server tool returns, so every MCP client loop
already knows how to show it to the model.
"""

from __future__ import annotations

import re
from typing import Any

from otel_breaker.classify import CONTROL, IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.instrumentation.mcp_identity import LISTINGS
from otel_breaker.semconv import ERROR_TOOL
from otel_breaker.toolcall import ToolCall

# JSON-RPC codes that mean the caller got it wrong.
_MISTAKE_CODES = frozenset({-32602, -32601})  # invalid params, method not found
# MCP's codes that are neither outcome: a missing client capability, an unsupported
# protocol version, the URL-elicitation auth gate.
_CONTROL_CODES = frozenset({-32021, -32022, -32042})
# What servers answer for a name they do not have: the Python SDK's and most servers'
# ``Unknown tool: x`` / ``Tool not found``, the TypeScript SDK's ``Tool x not found``
# (sent as text after ``MCP error -32602: ``). The name is checked apart, literally.
_UNKNOWN_TOOL = re.compile(r"^\s*(?:MCP error -32602:\s*)?(Unknown tool|Tool not found)\b", re.IGNORECASE)
_NAMED_NOT_FOUND = re.compile(r"^\s*(?:MCP error -32602:\s*)?Tool (.{1,256}?) not found\b")
# Arguments the server's schema rejects: MCPServer's argument model is ``<tool>Arguments``,
# FastMCP validates ``call[<tool>]``, the TypeScript SDK says "Invalid arguments for tool".
_BAD_ARGUMENTS = re.compile(
    r"validation errors? for (\w*Arguments\b|call\[)|Input validation error: Invalid arguments for tool\b"
)
# Characters of a result's text read for MCP's own answers (they are at its start).
_MAX_READ_CHARS = 2000


def result_text(result: Any) -> str:
    """The first text block of a tool result ("" when it has none)."""
    for block in getattr(result, "content", None) or ():
        text = getattr(block, "text", None)
        if isinstance(text, str):
            return text
    return ""


def _flagged(result: Any) -> bool:
    flagged = getattr(result, "is_error", None)
    if flagged is None:
        flagged = getattr(result, "isError", False)
    return bool(flagged)


def says_unknown_tool(text: str, tool: str | None) -> bool:
    """True when ``text`` is a server's answer to a tool name it does not have."""
    sample = text[:_MAX_READ_CHARS]
    if _UNKNOWN_TOOL.match(sample):
        return True
    match = _NAMED_NOT_FOUND.match(sample)
    return match is not None and tool is not None and match.group(1).strip("'\"`") == tool


def is_unknown_tool_result(result: Any, tool: str | None = None, listed: bool | None = None) -> bool:
    """The server's answer to a tool name it does not have: an ``isError`` result that
    says so, for a name the server does not list (``listed`` False, or None when no
    listing of the server was seen)."""
    return (
        listed is not True
        and type(result).__name__ == "CallToolResult"
        and _flagged(result)
        and says_unknown_tool(result_text(result), tool)
    )


def _is_mistake(result: Any, tool: str | None, listed: bool | None) -> bool:
    """An unknown tool, or arguments the schema rejected: the model's, whatever the text says next."""
    if _BAD_ARGUMENTS.search(result_text(result)[:_MAX_READ_CHARS]):
        return True
    return is_unknown_tool_result(result, tool, listed)


def result_error(result: Any, tool: str | None = None, listed: bool | None = None) -> str | None:
    """``error.type`` of a failed tool result (its text is then judged by the call path's
    rules); ``IGNORED_RESULT`` for what is neither outcome: a result that is not final, an
    unknown tool (``tool`` not ``listed``) or arguments the schema rejected."""
    if type(result).__name__ != "CallToolResult":
        return IGNORED_RESULT  # not final: the logical call goes on
    if not _flagged(result):
        return None
    return IGNORED_RESULT if _is_mistake(result, tool, listed) else ERROR_TOOL


def result_hint(result: Any, tool: str | None = None, listed: bool | None = None) -> str | None:
    """``MISTAKE`` for the server's answer to an unknown name or refused arguments."""
    if type(result).__name__ != "CallToolResult" or not _flagged(result):
        return None
    return MISTAKE if _is_mistake(result, tool, listed) else None


def exception_hint(exc: BaseException) -> str | None:
    """``MISTAKE`` for JSON-RPC invalid params / unknown method, ``CONTROL`` for a missing
    capability, an unsupported version and the auth gate; None for every other error."""
    code = getattr(getattr(exc, "error", None), "code", None)
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    if code in _CONTROL_CODES:
        return CONTROL
    if code in _MISTAKE_CODES:
        return MISTAKE
    return None


def rejection(message: str) -> Any:
    """A failed ``CallToolResult`` carrying ``message``."""
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def with_note(result: Any, note: str) -> Any:
    """A copy of a failed tool result whose first text block ends with ``note`` (a text
    block of its own when it has none): the SDK's ``CallToolResult`` or the wire's dict.
    None for anything else."""
    if isinstance(result, dict):
        content = result.get("content")
        if not isinstance(content, list):
            return None
        blocks = list(content)
        for i, block in enumerate(blocks):
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                blocks[i] = {**block, "text": f"{block['text']} {note}"}
                break
        else:
            blocks.append({"type": "text", "text": note})
        return {**result, "content": blocks}
    if type(result).__name__ != "CallToolResult" or not hasattr(result, "model_copy"):
        return None
    from mcp.types import TextContent

    blocks = list(getattr(result, "content", None) or ())
    for i, block in enumerate(blocks):
        if isinstance(block, TextContent):
            blocks[i] = block.model_copy(update={"text": f"{block.text} {note}"})
            break
    else:
        blocks.append(TextContent(type="text", text=note))
    return result.model_copy(update={"content": blocks})


def in_doubt(result: Any, message: str) -> Any:
    """The failed tool result a destructive tool's call in doubt answers instead of ``result``:
    ``message`` alone (the server's text is in it, bounded), in ``result``'s form (the SDK's
    ``CallToolResult`` or the wire's dict); None for anything else."""
    if isinstance(result, dict):
        return {"content": [{"type": "text", "text": message}], "isError": True}
    if type(result).__name__ != "CallToolResult" or not hasattr(result, "model_copy"):
        return None
    return rejection(message)


class MCPAnswers:
    """What an MCP answer means, as adapter methods: mixed in (before the adapter base)
    by every adapter that judges MCP's own results."""

    error_results_are_answers = True  # an isError result: the server answered

    def tool_listed(self, call: ToolCall) -> bool | None:
        """Whether ``call``'s server lists its tool (None: no listing of it was seen)."""
        return LISTINGS.lists(call.source, call.tool)

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return exception_hint(exc)

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return result_error(result, call.tool, self._listed_if_flagged(call, result))

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        return result_hint(result, call.tool, self._listed_if_flagged(call, result))

    def _listed_if_flagged(self, call: ToolCall, result: Any) -> bool | None:
        """The listing is looked up only for an ``isError`` answer: a success costs nothing."""
        return self.tool_listed(call) if _flagged(result) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return rejection(info.message)

    def unknown_outcome_result(self, call: ToolCall, result: Any, message: str) -> Any:
        """An ``isError`` answer of a destructive tool's call in doubt (a gateway timeout, a
        dropped connection behind the server): the model reads "outcome unknown"."""
        return in_doubt(result, message)

    def retried(self, call: ToolCall, failure: Any, note: str) -> Any:
        """The last ``isError`` answer of a call retried below the client, with the number
        of attempts at the end of its text (an exception: the call path's default)."""
        return None if isinstance(failure, BaseException) else with_note(failure, note)
