"""What an MCP answer means for a breaker, for every adapter that speaks MCP.

A tool that fails on the server comes back as a normal ``CallToolResult`` with
``isError`` set: a failure. Protocol errors and timeouts raise and are counted
by the guard. The model's mistakes are neutral: an unknown tool name
(``Unknown tool: ...`` or the JSON-RPC invalid-params / method-not-found
errors) and arguments the server's schema rejects. So is the
URL-elicitation-required error (-32042), an auth gate. Results that are not
final (``InputRequiredResult``: the logical call goes on) are neither outcome.

A rejection is a ``CallToolResult`` with ``isError`` set and the rejection
text, exactly what a failing server tool returns, so every MCP client loop
already knows how to show it to the model.
"""

from __future__ import annotations

import re
from typing import Any

from otel_breaker.classify import (
    CONTROL,
    FAILURE,
    IGNORED,
    IGNORED_RESULT,
    MISTAKE,
    SUCCESS,
    classify_exception,
    error_type,
)
from otel_breaker.degrade import Rejection
from otel_breaker.semconv import ERROR_TOOL
from otel_breaker.toolcall import ToolCall

# JSON-RPC codes that mean the caller got it wrong, and MCP's auth gate.
_INVALID_PARAMS = -32602
_METHOD_NOT_FOUND = -32601
_URL_ELICITATION_REQUIRED = -32042
# What servers answer for a name they do not have, and for arguments their schema
# rejects (MCPServer's argument model is ``<tool>Arguments``; FastMCP validates ``call[<tool>]``).
_UNKNOWN_TOOL = re.compile(r"^\s*(Unknown tool|Tool not found)\b", re.IGNORECASE)
_BAD_ARGUMENTS = re.compile(r"validation errors? for (\w*Arguments\b|call\[)")


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


def is_unknown_tool_result(result: Any) -> bool:
    """The server's answer to a tool name it does not have."""
    return (
        type(result).__name__ == "CallToolResult"
        and bool(getattr(result, "is_error", False))
        and bool(_UNKNOWN_TOOL.match(result_text(result)))
    )


def _is_mistake(result: Any) -> bool:
    text = result_text(result)
    return bool(_UNKNOWN_TOOL.match(text) or _BAD_ARGUMENTS.search(text))


def result_error(result: Any) -> str | None:
    """``error.type`` of a failed tool result; ``IGNORED_RESULT`` for what is neither outcome."""
    if type(result).__name__ != "CallToolResult":
        return IGNORED_RESULT  # not final: the logical call goes on
    if not _flagged(result):
        return None
    return IGNORED_RESULT if _is_mistake(result) else ERROR_TOOL


def result_hint(result: Any) -> str | None:
    """``MISTAKE`` for the server's answer to an unknown name or refused arguments."""
    if type(result).__name__ != "CallToolResult" or not _flagged(result):
        return None
    return MISTAKE if _is_mistake(result) else None


def exception_hint(exc: BaseException) -> str | None:
    """``CONTROL`` for the auth gate, ``MISTAKE`` for JSON-RPC invalid params / unknown method."""
    code = getattr(getattr(exc, "error", None), "code", None)
    if not isinstance(code, int):
        return None
    if code == _URL_ELICITATION_REQUIRED:
        return CONTROL
    if code in (_INVALID_PARAMS, _METHOD_NOT_FOUND):
        return MISTAKE
    return None


def rejection(message: str) -> Any:
    """A failed ``CallToolResult`` carrying ``message``."""
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


class MCPAnswers:
    """What an MCP answer means, as adapter methods: mixed in (before the adapter base)
    by every adapter that judges MCP's own results."""

    error_results_are_answers = True  # an isError result: the server answered

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return exception_hint(exc)

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return result_error(result)

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        return result_hint(result)

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return rejection(info.message)


def past_outcome(config: Any, err: str | None, exc: BaseException | None) -> tuple[int, str | None]:
    """``(outcome, error.type)`` of a call that already ran (an MCP name its server first
    had to confirm), from the exception it raised or :func:`result_error` of its result."""
    if exc is not None:
        outcome = classify_exception(exc, config)
        return outcome, (error_type(exc) if outcome == FAILURE else None)
    if err == IGNORED_RESULT:
        return IGNORED, None
    return (SUCCESS, None) if err is None else (FAILURE, err)
