"""Breakers for Haystack (``haystack-ai``) Agents.

Each tool call runs in a zero-argument runner that ``_make_context_bound_invoke``
(sync, in a thread pool) or ``_make_bounded_invoke_async`` builds: it is guarded.
It returns a ``ToolInvocationError`` rather than raising (a failure, and the
rejection's form). Undeclared or missing argument names, and a name no tool has
(``_resolve_tool_calls``), are the model's mistakes: the loop guard counts them.

Around each step (``Agent._run_step``): the Agent (its pipeline component name), the
status block on the run's system message, and its menu (``flatten_tools_or_toolsets``
without open tools; ``_run_tool`` still gets them all). Haystack keeps the run's
messages in a mutable state the step reads and appends to, rather than passing them
to the model call: the block goes into that list for the step, and after the step the
run's own system message replaces it again, so the history never carries it and the
next step gets a fresh one.

``Agent.run`` and ``Agent.run_async`` are a run (:mod:`otel_breaker.runs`); an agent a tool
runs (an Agent in a ``ComponentTool``) joins its caller's run. A pipeline holding agents
makes one run per agent it runs.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from functools import partial
from typing import Any

from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.mistakes import Refusals, arun_invalid, run_invalid, run_unknown
from otel_breaker.instrumentation.patches import argument, menu_patch, run_patch
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_CALLING = "haystack.components.agents.tool_calling"
_AGENT = "haystack.components.agents.agent"


class _Step:
    """The Agent step running in this context, and its whole tool list while some are off the menu."""

    __slots__ = ("agent", "all_tools")

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.all_tools: Any = None


_step: contextvars.ContextVar[_Step | None] = contextvars.ContextVar("otel_breaker_haystack_step", default=None)


def _step_agent() -> Any:
    step = _step.get()
    return None if step is None else step.agent


def _message(text: str, origin: Any = None) -> Any:
    """A system message, or with the tool call's ``origin`` an error tool result."""
    from haystack.dataclasses import ChatMessage

    if origin is None:
        return ChatMessage.from_system(text)
    return ChatMessage.from_tool(text, origin, error=True)


def _is_system(message: Any) -> bool:
    return message.role.value == "system"


def _text(message: Any) -> str | None:
    return message.text


def _with_text(message: Any, text: str) -> Any:
    return _message(text)


_DIALECT = MessageDialect(_is_system, _text, _with_text, _message)


def _refused(result: Any) -> bool:
    return type(result).__name__ == "ToolInvocationError"


def _name(agent: Any) -> str | None:
    """The Agent's component name in its pipeline, else its own display name."""
    pipeline = getattr(agent, "__haystack_added_to_pipeline__", None)
    if pipeline is None:
        return agent_display_name(agent)
    return pipeline.get_component_name(agent) or None


def _nothing_to_undo() -> None:
    return None


def status_for_step(read_state: Callable[[], Any], key: str, dialect: MessageDialect, agent: Any) -> Callable[[], None]:
    """Put the status block into ``read_state()[key]`` (a message list); returns the undo.
    A state that cannot be read or amended is left alone."""
    try:
        state = read_state()
        original = state[key]
        amended = insert_status_block(original, dialect, agent)
    except Exception:
        amended = None
    if amended is None:
        return _nothing_to_undo
    added = next(new for new, old in zip(amended, [*original, None], strict=False) if new is not old)
    state[key] = amended

    def undo() -> None:
        # The step appended its replies after the block: only the block is replaced.
        now = state[key]
        position = next((i for i, message in enumerate(now) if message is added), None)
        if position is not None:
            now[position : position + 1] = [old for old in original if dialect.is_system(old)][:1]
            state[key] = now

    return undo


def _status(agent: Any, args: tuple, kwargs: dict) -> Callable[[], None]:
    """The status block in the step's messages (``_run_step(exe_context, ...)``); returns the undo."""

    def read_state() -> Any:
        return argument(args, kwargs, 0, "exe_context").state.data

    return status_for_step(read_state, "messages", _DIALECT, _name(agent) or agent)


def _answered_text(message: Any) -> str | None:
    """The text of Haystack's answer to a name no tool has (None if it is no error)."""
    if message.tool_call_result.error:
        return str(message.tool_call_result.result)
    return None


def _as_is(message: Any) -> Any:
    return message


class HaystackAdapter(SpecAdapter):
    name = "haystack"
    patches = (
        menu_patch(_AGENT, "flatten_tools_or_toolsets", "sync", "_visible", after=True),
        run_patch(_AGENT, "Agent.run", "sync"),
        run_patch(_AGENT, "Agent.run_async", "async"),
    )
    modules = (_CALLING, _AGENT)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_CALLING, "_make_context_bound_invoke", self._runner),
            PatchTarget(_CALLING, "_make_bounded_invoke_async", self._runner),
            PatchTarget(_CALLING, "_resolve_tool_calls", self._resolve),
            PatchTarget(_AGENT, "Agent._run_step", self._run_step),
            PatchTarget(_AGENT, "Agent._run_step_async", self._run_step_async),
            PatchTarget(_AGENT, "_run_tool", self._every_tool),
            PatchTarget(_AGENT, "_run_tool_async", self._every_tool),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        tool = argument(args, kwargs, 0, "tool")
        tool_call = kwargs["tool_call"]
        agent = _step_agent()
        return ToolCall(
            tool.name,
            self.name,
            agent,
            _name(agent),
            call_id=tool_call.id,
            arguments=tool_call.arguments or {},
            origin=origin_of(tool, "haystack"),
        )

    def _runner(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The runner, guarded; with arguments the tool does not take, through the loop guard only."""
        runner = wrapped(*args, **kwargs)

        def describe() -> ToolCall | None:
            return self.describe(None, args, kwargs)

        call = self.safe_tool_call(describe)
        if call is None:
            return runner
        schema = argument(args, kwargs, 0, "tool").parameters or {}
        declared = schema.get("properties") or {}
        required = schema.get("required", ())
        is_async = "semaphore" in kwargs
        undeclared = any(name not in declared for name in call.arguments)
        missing = any(name not in call.arguments for name in required)
        if undeclared or missing:
            run_invalid_call = arun_invalid if is_async else run_invalid
            run = partial(run_invalid_call, self, call, Refusals(self, returned=_refused))
        else:
            run = partial(self.run_async if is_async else self.run_sync, call)
        if is_async:

            def guarded_async_runner() -> Any:
                return run(runner, (), {})

            return guarded_async_runner
        context = contextvars.copy_context()  # a sync runner goes to a worker thread

        def guarded_runner() -> Any:
            return context.run(run, runner, (), {})

        return guarded_runner

    def _resolve(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A name no tool has gets Haystack's error message, or past the loop guard's limit its answer."""
        calls, tools, errors = wrapped(*args, **kwargs)
        agent_name = _name(_step_agent())
        for i, message in enumerate(errors):
            origin = message.tool_call_result.origin
            call = ToolCall(origin.tool_name, self.name, agent_name=agent_name)
            reject = partial(_error_result, origin=origin)
            errors[i] = run_unknown(call, reject, _answered_text, _as_is, (message,), {})
        return calls, tools, errors

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return "tool_error" if _refused(result) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from haystack.tools.errors import ToolInvocationError

        return ToolInvocationError(info.message, tool_name=call.tool)

    def _run_step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = _step.set(_Step(instance))
        undo_status = _status(instance, args, kwargs)
        try:
            return wrapped(*args, **kwargs)
        finally:
            undo_status()
            _step.reset(token)

    async def _run_step_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = _step.set(_Step(instance))
        undo_status = _status(instance, args, kwargs)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            undo_status()
            _step.reset(token)

    def _visible(self, instance: Any, args: tuple, kwargs: dict, tools: Any) -> Any:
        """A step's tools without the open ones (outside a step, or when none is left, unchanged)."""
        step = _step.get()
        if step is None or step.agent is None:
            return None
        kept = visible_tools(tools, _tool_name, agent=_name(step.agent) or step.agent)
        if not kept or kept is tools:
            return None
        step.all_tools = tools  # _run_tool still gets every tool, for a call to a hidden one
        return kept

    def _every_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        step = _step.get()
        if step is None or step.all_tools is None:
            return wrapped(*args, **kwargs)
        return wrapped(*args, **{**kwargs, "tools": step.all_tools})


def _error_result(text: str, origin: Any) -> Any:
    return _message(text, origin)


def _tool_name(tool: Any) -> str:
    return tool.name
