"""Microsoft Agent Framework (``agent-framework-core``): a breaker on every ``FunctionTool.invoke``.

The function-invocation layer runs every tool call of a chat client or agent
through ``FunctionTool.invoke`` (async; sync tool functions go to a worker
thread inside it), with or without function middleware, and so does a program
that invokes a tool itself. That is the breaker point.

* A tool that raises is counted. The loop turns the exception into a function
  result the model reads ("Error: Function failed.") and counts it towards its
  own ``max_consecutive_errors_per_request``; neither changes.
* Model mistakes and control flow pass uncounted: arguments that fail
  validation, a pause for user input (``UserInputRequiredException``), a
  middleware termination or fail-closed abort, arguments changed after
  approval, the framework's own per-tool invocation limits. Approval requests
  and unknown tools never reach ``invoke``.
* A rejected call returns the text as the tool's result (``list[Content]``, or
  the plain text when the caller asked for the raw value): the loop wraps it in
  the function-result content the model reads and goes on. Its own
  ``execute_tool`` span is not started for a call that did not run.
* With observability on, the framework's ``execute_tool`` span of a guarded
  call is a child of ours; the span processor does not count it again.

``RawAgent._prepare_run_context`` tells the breaker point which agent runs
(the mark holds only within that run) and, with
``OTEL_BREAKER_STATUS_IN_PROMPT=true``, appends the tool-status block to the
run's instructions, which the chat client sends as its system message.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from otel_breaker.degrade import Rejection, augment_instructions, status_in_prompt_enabled
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.instrumentation.base import FrameworkAdapter, PatchTarget, agent_display_name
from otel_breaker.toolcall import ToolCall

FRAMEWORK = "agent_framework"
logger = logging.getLogger("otel_breaker")

# Raised by the framework for a reason other than a broken tool.
_NEUTRAL = frozenset(
    {
        "_FunctionArgumentValidationError",
        "_FunctionArgumentsChangedAfterApproval",
        "UserInputRequiredException",
        "MiddlewareTermination",
        "MiddlewareFailure",
    }
)

# (run identity, agent) of the agent run in this context.
_agent: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar(
    "otel_breaker_agent_framework_agent", default=None
)


class _Neutral:
    """An exception the framework raised for control flow, carried past the breaker."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


# The framework's own refusals to run a tool (``ToolException`` texts): the body did not run.
_REFUSALS = ("declaration only", "maximum invocation limit", "maximum exception limit")


def _is_neutral(exc: BaseException) -> bool:
    kind = type(exc).__name__
    if kind in _NEUTRAL:
        return True
    return kind == "ToolException" and any(text in str(exc) for text in _REFUSALS)


def _run_identity() -> Any:
    try:
        from agent_framework._sessions import _CURRENT_RUN_IDENTITY
    except ImportError:
        return None
    return _CURRENT_RUN_IDENTITY.get()


class AgentFrameworkAdapter(FrameworkAdapter):
    name = FRAMEWORK
    distribution = "agent-framework-core"
    version_range = ">=1.23,<2"

    def targets(self) -> list[PatchTarget]:
        return [
            PatchTarget("agent_framework._tools", "FunctionTool.invoke", self._invoke),
            PatchTarget("agent_framework._agents", "RawAgent._prepare_run_context", self._prepare_run),
        ]

    # -- the breaker point ---------------------------------------------------------------

    async def _invoke(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self.safe_tool_call(lambda: self._describe(instance, kwargs))
        if call is None:
            return await wrapped(*args, **kwargs)

        async def run() -> Any:
            try:
                return await wrapped(*args, **kwargs)
            except Exception as exc:
                if _is_neutral(exc):
                    return _Neutral(exc)
                raise

        raw = bool(kwargs.get("skip_parsing")) or _skips_parsing(instance)
        token = _raw.set(raw)
        try:
            result = await self.run_async(call, run, (), {})
        finally:
            _raw.reset(token)
        if isinstance(result, _Neutral):
            raise result.exc
        return result

    def _describe(self, tool: Any, kwargs: dict) -> ToolCall | None:
        name = getattr(tool, "name", None)
        if not isinstance(name, str) or not name or getattr(tool, "declaration_only", False):
            return None
        agent = None
        marked = _agent.get()
        if marked is not None and marked[0] is _run_identity():
            agent = marked[1]
        call_id = kwargs.get("tool_call_id")
        return ToolCall(
            name,
            framework=FRAMEWORK,
            agent=agent,
            agent_name=agent_display_name(agent) if agent is not None else None,
            call_id=call_id if isinstance(call_id, str) else None,
            arguments=kwargs.get("arguments"),
        )

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return IGNORED_RESULT if isinstance(result, _Neutral) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        if _raw.get():
            return info.message
        from agent_framework import Content

        return [Content.from_text(info.message)]

    # -- who runs, and the tool-status block -------------------------------------------------

    async def _prepare_run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        context = await wrapped(*args, **kwargs)
        try:
            # Awaited in the run's own context: the mark lasts as long as this run's identity.
            _agent.set((_run_identity(), instance))
            if status_in_prompt_enabled():
                options = context["chat_options"]
                instructions = options.get("instructions")
                if instructions is None or isinstance(instructions, str):
                    text = augment_instructions(instructions, instance)
                    if text != instructions:
                        context["chat_options"] = {**options, "instructions": text}
        except Exception:
            logger.debug("otel-breaker: agent_framework: run context not annotated", exc_info=True)
        return context


_raw: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_breaker_agent_framework_raw", default=False)


def _skips_parsing(tool: Any) -> bool:
    try:
        from agent_framework._tools import SKIP_PARSING
    except ImportError:
        return False
    return getattr(tool, "result_parser", None) is SKIP_PARSING
