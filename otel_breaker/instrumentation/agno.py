"""Breakers for Agno (``agno``) agents and teams.

A run executes each tool call as a ``FunctionCall`` (``execute`` / ``aexecute``,
guarded), which returns ``status="failure"`` for what the tool raised: a failure,
and with the rejection text as its error, the rejection's form. ``RetryAgentRun``,
``StopAgentRun`` and cancellation are control flow. Undecodable arguments, names the
tool does not take, types pydantic's ``validate_call`` refuses, and a name no tool
has (``Model.get_function_calls_to_run``) are the model's mistakes; the loop guard
counts the last two. Each model request gets the status block and loses the open
tools of the agent owning its tools (except one ``tool_choice`` forces).
"""

from __future__ import annotations

import contextvars
import re
from typing import Any

from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.current_call import HoldsCurrentCall
from otel_breaker.instrumentation.mistakes import run_unknown
from otel_breaker.instrumentation.patches import argument, prompt_patch, tool_patch
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_FUNCTION = "agno.tools.function"
_MODEL = "agno.models.base"
# The run's answer to a tool name no tool has.
_UNKNOWN = "Error: The requested tool does not exist or is not available."

# The FunctionCall being guarded in this context.
_current: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_agno_call", default=None)


def _message(text: str) -> Any:
    from agno.models.message import Message

    return Message(role="system", content=text)


_DIALECT = MessageDialect(
    lambda m: m.role in ("system", "developer"),
    lambda m: m.content if isinstance(m.content, str) else None,
    lambda m, text: m.model_copy(update={"content": text}),
    _message,
)


def _failure(result: Any) -> str | None:
    """None, "tool_error", or ``MISTAKE``: "N validation error(s) for <the entrypoint>" first."""
    error = getattr(result, "error", None)
    if getattr(result, "status", None) != "failure":
        return None
    entrypoint = getattr(getattr(_current.get(), "function", None), "entrypoint", None)
    names = {getattr(entrypoint, "__qualname__", None), getattr(entrypoint, "__name__", None)} - {None}
    found = re.match(r"\d+ validation errors? for (.+)\n", error) if isinstance(error, str) else None
    return MISTAKE if found and found.group(1) in names else "tool_error"


def _requesting_agent(kwargs: dict) -> Any:
    """The owner of a ``Function`` among a request's tools, else the agent (team) its run names."""
    for tool in kwargs.get("tools") or ():
        owner = getattr(tool, "_agent", None) or getattr(tool, "_team", None)
        if owner is not None:
            return owner
    run = kwargs.get("run_response")
    return getattr(run, "agent_name", None) or getattr(run, "team_name", None)


def _function_name(tool: Any) -> str | None:
    """The name in an OpenAI-style function definition ``{"type": "function", "function": {...}}``."""
    function = tool.get("function") if isinstance(tool, dict) else None
    return function.get("name") if isinstance(function, dict) else None


class AgnoAdapter(HoldsCurrentCall, SpecAdapter):
    name = "agno"
    current = _current
    patches = (
        tool_patch(_FUNCTION, "FunctionCall.execute", "sync"),
        tool_patch(_FUNCTION, "FunctionCall.aexecute", "async"),
        prompt_patch(_MODEL, "Model._invoke_with_retry", "sync"),
        prompt_patch(_MODEL, "Model._ainvoke_with_retry", "async"),
        prompt_patch(_MODEL, "Model._invoke_stream_with_retry", "sync"),
        prompt_patch(_MODEL, "Model._ainvoke_stream_with_retry", "asyncgen"),
    )

    def targets(self) -> list[PatchTarget]:
        return [*super().targets(), PatchTarget(_MODEL, "Model.get_function_calls_to_run", self._calls_to_run)]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        function, arguments = instance.function, instance.arguments or {}
        properties = (function.parameters or {}).get("properties")
        if instance.error is not None or (properties and any(key not in properties for key in arguments)):
            return None  # arguments that did not decode, or one the tool does not take
        agent, call_id, origin = function._agent or function._team, instance.call_id, origin_of(function, "agno")
        name = agent_display_name(agent)
        return ToolCall(function.name, self.name, agent, name, call_id=call_id, arguments=arguments, origin=origin)

    def _calls_to_run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The run's tool messages for names no tool has, through the loop guard."""
        messages = argument(args, kwargs, 1, "messages")
        start, calls = len(messages), wrapped(*args, **kwargs)
        if not self._enabled:
            return calls
        functions = (argument(args, kwargs, 2, "functions") or {}).values()
        name = agent_display_name(next((f._agent or f._team for f in functions), None))
        for i, m in enumerate(messages[start:], start):
            if m.content == _UNKNOWN and m.tool_name is not None:
                call = ToolCall(str(m.tool_name), self.name, agent_name=name, call_id=m.tool_call_id)
                reject = lambda text, m=m: m.model_copy(update={"content": text})  # noqa: E731
                messages[i] = run_unknown(call, reject, lambda m: m.content, lambda m: m, (m,), {})
        return calls

    def is_neutral(self, exc: BaseException) -> bool:
        from agno.exceptions import AgentRunException, RunCancelledException

        return isinstance(exc, AgentRunException | RunCancelledException)

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        failure = _failure(result)
        return IGNORED_RESULT if failure == MISTAKE else failure

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        return MISTAKE if _failure(result) == MISTAKE else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from agno.tools.function import FunctionExecutionResult

        if (function_call := _current.get()) is not None:
            function_call.error = info.message  # what the loop sends the model
        return FunctionExecutionResult(status="failure", error=info.message)

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        messages = kwargs.get("messages")
        amended = insert_status_block(messages, _DIALECT, _requesting_agent(kwargs)) if messages else None
        return None if amended is None else (args, {**kwargs, "messages": amended})

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        tools, choice = kwargs.get("tools"), kwargs.get("tool_choice")
        forced = _function_name(choice) if isinstance(choice, dict) else None
        name_of = lambda t: None if _function_name(t) == forced else _function_name(t)  # noqa: E731
        kept = visible_tools(tools, name_of, agent=_requesting_agent(kwargs))
        return None if kept is tools else (args, {**kwargs, "tools": kept})
