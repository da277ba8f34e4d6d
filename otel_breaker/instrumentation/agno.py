"""Breakers for Agno (``agno``) agents and teams.

Every tool call of a run, sync or async, streamed or not, is run by
``FunctionCall.execute`` / ``FunctionCall.aexecute``: the model's run loop
builds one ``FunctionCall`` per call the model asked for and executes it.

Failures: ``execute`` catches what the tool raises and returns a
``FunctionExecutionResult`` with ``status="failure"``: counted as a failure.
``RetryAgentRun`` / ``StopAgentRun`` (the tool steering the run) and
``RunCancelledException`` are control flow: neither failure nor success. Model
mistakes pass through uncounted: an unknown tool never reaches ``execute`` (the
loop guard counts it where ``Model.get_function_calls_to_run`` answers it),
arguments that did not decode leave ``FunctionCall.error`` set, and argument
names the tool does not take are caught before the body runs, and arguments of a
wrong type that pydantic's ``validate_call`` rejects (the failure text "N
validation error(s) for <function>") count neither way.

Rejection: a ``FunctionExecutionResult`` with ``status="failure"`` and the
rejection text as the call's error, which the loop sends to the model as a tool
message flagged ``tool_call_error``, exactly as for a tool that raised.

Status block: added to the system message of every model request
(``Model._invoke_with_retry`` and its async and streaming forms), for the agent
that owns the request's tools. OpenInference's Agno tool spans nest inside ours
and are not counted again.

Open tools: with ``OTEL_BREAKER_HIDE_OPEN_TOOLS=true`` the same model requests'
``tools`` (the function definitions the model is offered) lose the running
agent's open tools, except one ``tool_choice`` forces. The run keeps its
functions, so a call the model makes anyway gets the rejection.
"""

from __future__ import annotations

import contextvars
import re
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.mistakes import run_unknown
from otel_breaker.instrumentation.spec import (
    MessageDialect,
    SpecAdapter,
    argument,
    insert_status_block,
    prompt_patch,
    tool_patch,
)
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_FUNCTION = "agno.tools.function"
# The run's answer to a tool name no tool has.
_UNKNOWN = "Error: The requested tool does not exist or is not available."
_MODEL = "agno.models.base"

# The rejection value last built in this context, told apart from a failure the tool returned.
_rejected: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_agno_rejected", default=None)

# The FunctionCall being guarded in this context (its entrypoint names pydantic's argument errors).
_current: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_agno_call", default=None)


def _is_argument_error(function_call: Any, error: Any) -> bool:
    """True when ``error`` is the text of pydantic's ``validate_call`` rejecting the model's
    arguments: "N validation error(s) for <entrypoint name>" as its first line."""
    entrypoint = getattr(getattr(function_call, "function", None), "entrypoint", None)
    if not isinstance(error, str):
        return False
    for name in {getattr(entrypoint, "__qualname__", None), getattr(entrypoint, "__name__", None)}:
        if isinstance(name, str) and re.match(rf"\d+ validation errors? for {re.escape(name)}\n", error):
            return True
    return False


_DIALECT = MessageDialect(
    is_system=lambda m: m.role in ("system", "developer"),
    text=lambda m: m.content if isinstance(m.content, str) else None,
    with_text=lambda m, text: m.model_copy(update={"content": text}),
    system=lambda text: _message("system", text),
)


def _message(role: str, text: str) -> Any:
    from agno.models.message import Message

    return Message(role=role, content=text)


class AgnoAdapter(SpecAdapter):
    name = "agno"
    requires = "agno>=3.1,<3.2"
    patches = (
        tool_patch(_FUNCTION, "FunctionCall.execute", "sync"),
        tool_patch(_FUNCTION, "FunctionCall.aexecute", "async"),
        prompt_patch(_MODEL, "Model._invoke_with_retry", "sync"),
        prompt_patch(_MODEL, "Model._ainvoke_with_retry", "async"),
        prompt_patch(_MODEL, "Model._invoke_stream_with_retry", "sync"),
        prompt_patch(_MODEL, "Model._ainvoke_stream_with_retry", "asyncgen"),
    )

    def targets(self) -> list[PatchTarget]:
        # Where the run answers a tool name no tool has (it never reaches ``execute``).
        return [*super().targets(), PatchTarget(_MODEL, "Model.get_function_calls_to_run", self._calls_to_run)]

    def _calls_to_run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        messages = argument(args, kwargs, 1, "messages")
        start = len(messages)
        calls = wrapped(*args, **kwargs)
        if not self._enabled:
            return calls
        functions = argument(args, kwargs, 2, "functions") or {}
        owner = next((f._agent or f._team for f in functions.values()), None)
        name = agent_display_name(owner) if owner is not None else None
        for i in range(start, len(messages)):
            message = messages[i]
            if message.content == _UNKNOWN and message.tool_name is not None:
                call = ToolCall(
                    str(message.tool_name), framework=self.name, agent_name=name, call_id=message.tool_call_id
                )
                reject = lambda text, m=message: m.model_copy(update={"content": text})  # noqa: E731
                messages[i] = run_unknown(call, reject, lambda m: m.content, lambda m: m, (message,), {})
        return calls

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        if instance.error is not None:
            return None  # arguments that did not decode: the model's mistake
        function = instance.function
        arguments = instance.arguments or {}
        properties = (function.parameters or {}).get("properties")
        if isinstance(properties, dict) and properties and any(key not in properties for key in arguments):
            return None  # an argument the tool does not take
        agent = function._agent or function._team
        return ToolCall(
            tool=function.name,
            framework=self.name,
            agent=agent,
            agent_name=agent_display_name(agent) if agent is not None else None,
            call_id=instance.call_id,
            arguments=arguments,
            origin=origin_of(function, "agno"),
        )

    def _tool_sync(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = _current.set(instance)
        try:
            return _settle(instance, super()._tool_sync(wrapped, instance, args, kwargs))
        finally:
            _current.reset(token)

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = _current.set(instance)
        try:
            return _settle(instance, await super()._tool_async(wrapped, instance, args, kwargs))
        finally:
            _current.reset(token)

    def is_neutral(self, exc: BaseException) -> bool:
        """``RetryAgentRun`` / ``StopAgentRun`` (the tool steering the run) and cancellation."""
        from agno.exceptions import AgentRunException, RunCancelledException

        return isinstance(exc, AgentRunException | RunCancelledException)

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        if getattr(result, "status", None) != "failure":
            return None
        if _is_argument_error(_current.get(), getattr(result, "error", None)):
            return IGNORED_RESULT  # pydantic rejected the model's arguments before the body ran
        return "tool_error"

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        if getattr(result, "status", None) == "failure" and _is_argument_error(
            _current.get(), getattr(result, "error", None)
        ):
            return MISTAKE
        return None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from agno.tools.function import FunctionExecutionResult

        result = FunctionExecutionResult(status="failure", error=info.message)
        _rejected.set(result)
        return result

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        messages = kwargs.get("messages")
        if not messages:
            return None
        amended = insert_status_block(messages, _DIALECT, _requesting_agent(kwargs))
        return None if amended is None else (args, {**kwargs, "messages": amended})

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        tools, choice = kwargs.get("tools"), kwargs.get("tool_choice")
        forced = _function_name(choice) if isinstance(choice, dict) else None
        kept = visible_tools(
            tools, lambda t: None if _function_name(t) == forced else _function_name(t), agent=_requesting_agent(kwargs)
        )
        return None if kept is tools else (args, {**kwargs, "tools": kept})


def _requesting_agent(kwargs: dict) -> Any:
    """The agent (or team) a model request is made for: the owner of a tool it carries
    as a ``Function``, else the name on its run output (tools usually arrive as plain
    function definitions, which carry none)."""
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


def _settle(function_call: Any, result: Any) -> Any:
    """Give a rejection its error text for the model."""
    if result is not None and result is _rejected.get():
        _rejected.set(None)
        function_call.error = result.error
    return result
