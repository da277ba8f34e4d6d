"""Microsoft Agent Framework (``agent-framework-core``): a breaker on every ``FunctionTool.invoke``.

The function-invocation layer runs every tool call through ``FunctionTool.invoke``
(async; a sync tool function runs in a worker thread inside it), with or without
function middleware, and so does a program that invokes a tool itself.

* A tool that raises is counted. The loop turns the exception into the result
  "Error: Function failed." and counts it towards its own
  ``max_consecutive_errors_per_request``; neither changes.
* Model mistakes and control flow pass uncounted: arguments that fail
  validation, a pause for user input, a middleware termination or fail-closed
  abort, arguments changed after approval, the tool's own invocation limits.
  Approval requests and unknown tools never reach ``invoke``.
* A rejection is the text as the tool's result (``list[Content]``, or plain text
  when the caller asked for the raw value): the loop puts it in the
  function-result content the model reads and goes on.
* The framework's own ``execute_tool`` span (on by default) is a child of ours
  and is not started for a rejected call; the span processor does not count it.

``RawAgent._prepare_run_context`` marks the running agent for the length of its
run (the mark is tied to the framework's run identity). Every model call goes
through ``BaseChatClient.get_response``; with ``OTEL_BREAKER_STATUS_IN_PROMPT=true``
the status block is added to the instructions it sends as the system message.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from otel_breaker.degrade import Rejection
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.spec import SpecAdapter, prompt_patch, status_text, tool_patch
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

# Raised for a reason other than a broken tool; and the tool's own refusals to run (ToolException texts).
_NEUTRAL = frozenset(
    {
        "_FunctionArgumentValidationError",
        "_FunctionArgumentsChangedAfterApproval",
        "UserInputRequiredException",
        "MiddlewareTermination",
        "MiddlewareFailure",
    }
)
_REFUSALS = ("declaration only", "maximum invocation limit", "maximum exception limit")

# (run identity, agent) of the agent run in this context; whether the caller wants the raw value.
_agent: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar("otel_breaker_af_agent", default=None)
_raw: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_breaker_af_raw", default=False)


class _Neutral:
    """An exception raised for control flow or a model mistake, carried past the breaker uncounted."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _run_identity() -> Any:
    from agent_framework._sessions import _CURRENT_RUN_IDENTITY

    return _CURRENT_RUN_IDENTITY.get()


class AgentFrameworkAdapter(SpecAdapter):
    name = "agent_framework"
    requires = "agent-framework-core>=1.23,<2"
    patches = (
        tool_patch("agent_framework._tools", "FunctionTool.invoke", "async"),
        prompt_patch("agent_framework._clients", "BaseChatClient.get_response", "sync"),
    )

    def targets(self) -> list[PatchTarget]:
        mark = PatchTarget("agent_framework._agents", "RawAgent._prepare_run_context", self._mark_agent)
        return [*super().targets(), mark]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        if getattr(instance, "declaration_only", False):
            return None
        marked = _agent.get()
        agent = marked[1] if marked is not None and marked[0] is _run_identity() else None
        call_id = kwargs.get("tool_call_id")
        return ToolCall(
            instance.name,
            framework=self.name,
            agent=agent,
            agent_name=agent_display_name(agent) if agent is not None else None,
            call_id=call_id if isinstance(call_id, str) else None,
            arguments=kwargs.get("arguments"),
        )

    async def run_async(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        async def neutral_as_value(*a: Any, **k: Any) -> Any:
            try:
                return await wrapped(*a, **k)
            except Exception as exc:
                kind = type(exc).__name__
                if kind in _NEUTRAL or (kind == "ToolException" and any(t in str(exc) for t in _REFUSALS)):
                    return _Neutral(exc)
                raise

        from agent_framework._tools import SKIP_PARSING

        tool = getattr(wrapped, "__self__", None)
        token = _raw.set(bool(kwargs.get("skip_parsing")) or getattr(tool, "result_parser", None) is SKIP_PARSING)
        try:
            result = await super().run_async(call, neutral_as_value, args, kwargs)
        finally:
            _raw.reset(token)
        if isinstance(result, _Neutral):
            raise result.exc
        return result

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return IGNORED_RESULT if isinstance(result, _Neutral) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        if _raw.get():
            return info.message
        from agent_framework import Content

        return [Content.from_text(info.message)]

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """``get_response(messages, *, options=...)``: the instructions of this one model call."""
        options = kwargs.get("options") or {}
        instructions = options.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            return None  # provider-native structured instructions: left alone
        marked = _agent.get()
        agent = marked[1] if marked is not None and marked[0] is _run_identity() else None
        text = status_text(instructions, agent)
        return None if text is None else (args, {**kwargs, "options": {**options, "instructions": text}})

    async def _mark_agent(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        context = await wrapped(*args, **kwargs)
        # Awaited in the run's own context: the mark holds while this run's identity does.
        _agent.set((_run_identity(), instance))
        return context
