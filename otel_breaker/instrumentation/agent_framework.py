"""Microsoft Agent Framework (``agent-framework-core``): a breaker where a tool function runs.

Every tool call (the function-invocation loop, with or without middleware, or a
program calling ``FunctionTool.invoke``) runs the function in
``FunctionTool._invoke_function``, guarded, inside the framework's own
``execute_tool`` span. A tool that raises is a failure (the loop still answers
"Error: Function failed." and counts it towards ``max_consecutive_errors_per_request``).
A pause for user input, a middleware termination or abort, and the tool's own
invocation limits are control flow. Invalid arguments (``invoke`` refuses them) and
a name no tool has (``_auto_invoke_function`` answers it) are the model's mistakes:
the loop guard counts them, not the breaker. A rejection is the function's return
value, the text the model reads. ``invoke`` gives the model's tool-call id, and
``RawAgent._prepare_run_context`` marks the agent for its run (its run identity).
An agent's ``run`` is a run of ours too: awaited, or pulled from its ``ResponseStream``
(each pull inside it; it ends with the stream's cleanup); an agent run inside it joins.
``BaseChatClient.get_response`` gets the status block in its instructions and loses
the agent's open tools from ``options["tools"]`` (the loop keeps its own map).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Iterator
from functools import partial
from typing import Any

from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.mistakes import Refusals, arun_invalid, arun_unknown
from otel_breaker.instrumentation.patches import argument, prompt_patch, tool_patch
from otel_breaker.instrumentation.run_results import awaited_in_run
from otel_breaker.instrumentation.spec import SpecAdapter, status_text
from otel_breaker.menu import visible_tools
from otel_breaker.runs import Run, close_run, enter, leave, open_run, run_closed
from otel_breaker.toolcall import ToolCall

# Raised from inside a tool for a reason other than a broken tool; the tool's own refusals to run.
_NEUTRAL = frozenset({"UserInputRequiredException", "MiddlewareTermination", "MiddlewareFailure"})
_REFUSALS = ("declaration only", "maximum invocation limit", "maximum exception limit")

# (run identity, agent) of the agent run in this context; the tool-call id of the invoke in progress.
_agent: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar("otel_breaker_af_agent", default=None)
_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_breaker_af_call_id", default=None)


def _invalid(exc: BaseException) -> bool:
    """The framework's refusal of arguments that fail the tool's schema."""
    return type(exc).__name__ == "_FunctionArgumentValidationError"


def _run_identity() -> Any:
    """The framework's identity of the agent run in progress (None outside one, or if it moved)."""
    try:
        from agent_framework._sessions import _CURRENT_RUN_IDENTITY
    except ImportError:
        return None
    return _CURRENT_RUN_IDENTITY.get()


def _current_agent() -> Any:
    """The agent marked for the run in progress (None outside one, or for another run)."""
    marked = _agent.get()
    if marked is None:
        return None
    run_identity, agent = marked
    return agent if run_identity is _run_identity() else None


def _exception_of(result: Any) -> Any:
    """The error of the loop's answer to a name no tool has."""
    return getattr(result, "exception", None)


def _agent_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``Agent.run``: a coroutine (awaited inside the run) or a ``ResponseStream`` (each
    pull inside it, the run ending with the stream's cleanup); joins a run open already."""
    opened, token = open_run(framework="agent_framework")
    if token is None:
        return wrapped(*args, **kwargs)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException:
        close_run(token)
        raise
    token.var.reset(token)
    if inspect.iscoroutine(result):
        return awaited_in_run(result, opened)
    if callable(getattr(result, "with_pull_context_manager", None)):
        result.with_pull_context_manager(partial(_pulled_in, opened))
        result.with_cleanup_hook(partial(run_closed, opened))
        return result
    run_closed(opened)
    return result


@contextlib.contextmanager
def _pulled_in(opened: Run) -> Iterator[None]:
    """One pull of a streamed run, inside it."""
    token = enter(opened)
    try:
        yield
    finally:
        leave(token)


class AgentFrameworkAdapter(SpecAdapter):
    name = "agent_framework"
    patches = (
        tool_patch("agent_framework._tools", "FunctionTool._invoke_function", "async"),
        prompt_patch("agent_framework._clients", "BaseChatClient.get_response", "sync"),
    )

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget("agent_framework._tools", "FunctionTool.invoke", self._invoke),
            PatchTarget("agent_framework._tools", "_auto_invoke_function", self._auto_invoke),
            PatchTarget("agent_framework._agents", "RawAgent._prepare_run_context", self._mark_agent),
            # The layered ``Agent.run`` (middleware, telemetry) and the raw one, for an agent
            # built on ``RawAgent``: the raw one joins the layered one's run.
            PatchTarget("agent_framework._agents", "Agent.run", _agent_run),
            PatchTarget("agent_framework._agents", "RawAgent.run", _agent_run),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        agent = _current_agent()
        return ToolCall(
            instance.name,
            self.name,
            agent,
            agent_display_name(agent),
            call_id=_call_id.get(),
            arguments=argument(args, kwargs, 0, "call_kwargs"),
            origin=origin_of(instance, "agent_framework"),
        )

    def is_neutral(self, exc: BaseException) -> bool:
        kind = type(exc).__name__
        return kind in _NEUTRAL or (kind == "ToolException" and any(t in str(exc) for t in _REFUSALS))

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return info.message  # parsed by invoke into the text content the model reads

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """``get_response(messages, *, options=...)``: the instructions of this one model call."""
        options = kwargs.get("options") or {}
        instructions = options.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            return None  # provider-native structured instructions: left alone
        text = status_text(instructions, _current_agent())
        return None if text is None else (args, {**kwargs, "options": {**options, "instructions": text}})

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """``get_response(messages, *, options=...)``: the tools this one model call offers."""
        options = kwargs.get("options") or {}
        tools = options.get("tools")
        choice = options.get("tool_choice")
        forced = choice.get("required_function_name") if isinstance(choice, dict) else None
        if not isinstance(tools, list | tuple):
            return None

        def breaker_name(tool: Any) -> str | None:
            # A tool the model is forced to call stays on the menu.
            name = getattr(tool, "name", None)
            if isinstance(name, str) and name != forced:
                return name
            return None

        kept = visible_tools(tools, breaker_name, agent=_current_agent())
        if kept is tools:
            return None
        return args, {**kwargs, "options": {**options, "tools": kept}}

    async def _invoke(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call_id = kwargs.get("tool_call_id")
        token = _call_id.set(call_id if isinstance(call_id, str) else None)
        try:
            call = self.call_of(instance, (kwargs.get("arguments"),), {})
            if call is None:
                return await wrapped(*args, **kwargs)
            # Arguments the tool's schema refuses raise here, before the function: the loop guard counts them.
            return await arun_invalid(self, call, Refusals(self, raised=_invalid), wrapped, args, kwargs)
        finally:
            _call_id.reset(token)

    async def _auto_invoke(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The loop's call of a function; one of a name no tool has is answered here."""
        content = args[0] if args else kwargs["function_call_content"]
        if not self.enabled or content.type != "function_call" or content.name in kwargs.get("tool_map", {}):
            return await wrapped(*args, **kwargs)
        name = agent_display_name(_current_agent())
        call = ToolCall(str(content.name), self.name, agent_name=name, call_id=content.call_id)

        def reject(text: str) -> Any:
            from agent_framework import Content

            extra = content.additional_properties
            return Content.from_function_result(call_id=content.call_id, result=text, additional_properties=extra)

        return await arun_unknown(call, reject, _exception_of, wrapped, args, kwargs)

    async def _mark_agent(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        context = await wrapped(*args, **kwargs)
        # Awaited in the run's own context: the mark holds while this run's identity does.
        _agent.set((_run_identity(), instance))
        return context
