"""How the OpenAI Agents SDK reports a tool's failure, and how the breaker reads it.

The SDK turns a tool's exception into text inside the guarded call
(``maybe_invoke_function_tool_failure_error_function``), so the guarded call returns
text and never sees the exception. The adapter wraps that formatter: it notes the
failure on the guarded call (``note``), hands the exception itself to the verdict
(``frame.swallowed``), and for a destructive tool whose outcome is unknown answers
with the call path's "outcome unknown" text instead of the SDK's "please try again".
Arguments the tool's schema refuses are neither outcome: the tool never ran.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from otel_breaker.call_steps import unknown_outcome_text
from otel_breaker.classify import IGNORED_RESULT
from otel_breaker.instrumentation.base import guarded_call, note, noted
from otel_breaker.toolcall import ToolCall

#: The note on the guarded call: ``(FAILURE_NOTE, error)``, the failure the SDK formatted.
FAILURE_NOTE = "openai_agents.failure"


def invalid_arguments(error: Any) -> bool:
    """Arguments the tool's schema refuses: the tool never ran, so this says nothing of its health."""
    if type(error).__name__ != "ModelBehaviorError" or not isinstance(error, Exception):
        return False
    return str(error).startswith("Invalid JSON input for tool")


def noted_failure() -> tuple[str, Any] | None:
    """The failure the formatter noted on the guarded call in progress, if any."""
    return noted(FAILURE_NOTE)


async def formatting_failure(adapter: Any, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """The SDK's failure formatter, after noting the exception it is about to turn into text
    on the guarded call it ends (a mutable frame, seen from the task the SDK may run the
    tool in too)."""
    with suppress(Exception):  # bookkeeping must never disturb the SDK's error handling
        unknown = _note_failure(adapter, kwargs)
        if unknown is not None:
            return unknown  # a destructive tool's call in doubt: never "please try again"
    return await wrapped(*args, **kwargs)


def _note_failure(adapter: Any, kwargs: dict) -> str | None:
    """Note the formatter's error on our guarded call; the "outcome unknown" text to answer
    with instead, for a destructive tool's call in doubt."""
    frame = guarded_call()
    call = frame.call  # type: ignore[union-attr]
    error = kwargs.get("error")
    ours = (call.framework, call.tool) == (adapter.name, kwargs["function_tool"].name) and noted_failure() is None
    same_call = call.call_id in (None, getattr(kwargs.get("context"), "tool_call_id", None))
    if not ours or not same_call:
        return None
    failure = IGNORED_RESULT if invalid_arguments(error) else type(error).__name__
    note(FAILURE_NOTE, failure if isinstance(error, Exception) else None)
    if not isinstance(error, Exception) or failure == IGNORED_RESULT:
        return None
    frame.swallowed = error  # type: ignore[union-attr]  # the verdict reads the exception, not the SDK's text
    return _unknown_outcome(adapter, call, error)


def _unknown_outcome(adapter: Any, call: ToolCall, error: Exception) -> str | None:
    """The text the model reads for a destructive tool's call whose outcome is unknown."""
    breaker = adapter.guard.breaker_for(call)
    if breaker is None:
        return None
    return unknown_outcome_text(breaker, call, error)
