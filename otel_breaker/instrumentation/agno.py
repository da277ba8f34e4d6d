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
from functools import partial
from typing import Any

from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.current_call import HoldsCurrentCall
from otel_breaker.instrumentation.mistakes import run_unknown
from otel_breaker.instrumentation.patches import argument, prompt_patch, tool_patch
from otel_breaker.instrumentation.run_results import as_run
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_FUNCTION = "agno.tools.function"
_MODEL = "agno.models.base"
_AGENT = "agno.agent.agent"
_TEAM = "agno.team.team"
#: An agent's or a team's invocation: a run (a team's members, and an agent a tool runs, join it).
#: Each returns a value, a coroutine or a stream depending on ``stream``: ``as_run`` follows it.
_RUNS = (
    "Agent.run",
    "Agent.arun",
    "Agent.continue_run",
    "Agent.acontinue_run",
)
_TEAM_RUNS = ("Team.run", "Team.arun", "Team.continue_run", "Team.acontinue_run")
# The run's answer to a tool name no tool has.
_UNKNOWN = "Error: The requested tool does not exist or is not available."

# The FunctionCall being guarded in this context.
_current: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_agno_call", default=None)


def _message(text: str) -> Any:
    from agno.models.message import Message

    return Message(role="system", content=text)


def _is_system(message: Any) -> bool:
    return message.role in ("system", "developer")


def _text(message: Any) -> str | None:
    return message.content if isinstance(message.content, str) else None


def _with_text(message: Any, text: str) -> Any:
    return message.model_copy(update={"content": text})


_DIALECT = MessageDialect(is_system=_is_system, text=_text, with_text=_with_text, system=_message)


#: How pydantic's ``validate_call`` error starts: "N validation error(s) for <the function>".
_VALIDATION_ERROR = re.compile(r"\d+ validation errors? for (.+)\n")


def _failure(result: Any) -> str | None:
    """None, "tool_error", or ``MISTAKE``: pydantic refused the arguments of the very
    function the guarded ``FunctionCall`` runs (its validation error names it first)."""
    error = getattr(result, "error", None)
    if getattr(result, "status", None) != "failure":
        return None
    if not isinstance(error, str):
        return "tool_error"
    entrypoint = getattr(getattr(_current.get(), "function", None), "entrypoint", None)
    names = {getattr(entrypoint, "__qualname__", None), getattr(entrypoint, "__name__", None)} - {None}
    found = _VALIDATION_ERROR.match(error)
    if found is not None and found.group(1) in names:
        return MISTAKE
    return "tool_error"


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
        runs = [PatchTarget(_AGENT, qualname, as_run(self.name)) for qualname in _RUNS]
        team_runs = [PatchTarget(_TEAM, qualname, as_run(self.name)) for qualname in _TEAM_RUNS]
        return [
            *super().targets(),
            PatchTarget(_MODEL, "Model.get_function_calls_to_run", self._calls_to_run),
            *runs,
            *team_runs,
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        function = instance.function
        arguments = instance.arguments or {}
        properties = (function.parameters or {}).get("properties")
        if instance.error is not None:
            return None  # arguments that did not decode
        if properties and any(key not in properties for key in arguments):
            return None  # an argument the tool does not take
        # agno's own private (3.1, ``Function._agent`` / ``_team``): the agent or team the
        # tool was given to, which breakers are keyed by; ``Function`` has no public owner.
        agent = function._agent or function._team
        return ToolCall(
            function.name,
            self.name,
            agent,
            agent_display_name(agent),
            call_id=instance.call_id,
            arguments=arguments,
            origin=origin_of(function, "agno"),
        )

    def _calls_to_run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The run's tool messages for names no tool has, through the loop guard."""
        messages = argument(args, kwargs, 1, "messages")
        start = len(messages)  # the messages this call adds come after
        calls = wrapped(*args, **kwargs)
        if not self.enabled:
            return calls
        functions = (argument(args, kwargs, 2, "functions") or {}).values()
        # agno's own private (3.1, ``Function._agent`` / ``_team``): the run's agent or team,
        # for the loop guard's key; ``Function`` has no public owner.
        agent_name = agent_display_name(next((f._agent or f._team for f in functions), None))
        for i, message in enumerate(messages[start:], start):
            if message.content == _UNKNOWN and message.tool_name is not None:
                call = ToolCall(str(message.tool_name), self.name, agent_name=agent_name, call_id=message.tool_call_id)
                reject = partial(_with_text, message)
                messages[i] = run_unknown(call, reject, _content, _as_is, (message,), {})
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

        function_call = _current.get()
        if function_call is not None:
            function_call.error = info.message  # what the loop sends the model
        return FunctionExecutionResult(status="failure", error=info.message)

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        messages = kwargs.get("messages")
        if not messages:
            return None
        amended = insert_status_block(messages, _DIALECT, _requesting_agent(kwargs))
        if amended is None:
            return None
        return args, {**kwargs, "messages": amended}

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        tools = kwargs.get("tools")
        choice = kwargs.get("tool_choice")
        forced = _function_name(choice) if isinstance(choice, dict) else None

        def breaker_name(tool: Any) -> str | None:
            # A tool the model is forced to call stays on the menu.
            name = _function_name(tool)
            return None if name == forced else name

        kept = visible_tools(tools, breaker_name, agent=_requesting_agent(kwargs))
        if kept is tools:
            return None
        return args, {**kwargs, "tools": kept}


def _content(message: Any) -> Any:
    """The text of Agno's answer to a name no tool has."""
    return message.content


def _as_is(message: Any) -> Any:
    return message
