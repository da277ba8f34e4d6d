"""Breakers for Haystack (``haystack-ai``) Agents.

Each tool call runs in a zero-argument runner that ``_make_context_bound_invoke``
(sync, in a thread pool) or ``_make_bounded_invoke_async`` builds: it is guarded.
It returns a ``ToolInvocationError`` rather than raising (a failure, and the
rejection's form). Undeclared or missing argument names, and a name no tool has
(``_resolve_tool_calls``), are the model's mistakes: the loop guard counts them.
Around each step: the Agent (its pipeline component name), the status block on the
run's system message (undone after), and its menu (``flatten_tools_or_toolsets``
without open tools; ``_run_tool`` still gets them all).
"""

from __future__ import annotations

import contextvars
from functools import partial
from typing import Any

from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.mistakes import Refusals, arun_invalid, run_invalid, run_unknown
from otel_breaker.instrumentation.patches import argument, menu_patch
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter
from otel_breaker.instrumentation.step_status import status_for_step
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_CALLING = "haystack.components.agents.tool_calling"
_AGENT = "haystack.components.agents.agent"

# The step running in this context: [its Agent, its whole tool list while some are off the menu].
_step: contextvars.ContextVar[list | None] = contextvars.ContextVar("otel_breaker_haystack_step", default=None)


def _agent() -> Any:
    return (_step.get() or (None, None))[0]


def _message(text: str, origin: Any = None) -> Any:
    from haystack.dataclasses import ChatMessage

    return ChatMessage.from_system(text) if origin is None else ChatMessage.from_tool(text, origin, error=True)


_DIALECT = MessageDialect(lambda m: m.role.value == "system", lambda m: m.text, lambda m, t: _message(t), _message)


def _refused(result: Any) -> bool:
    return type(result).__name__ == "ToolInvocationError"


def _name(agent: Any) -> str | None:
    pipeline = getattr(agent, "__haystack_added_to_pipeline__", None)
    return (pipeline.get_component_name(agent) or None) if pipeline is not None else agent_display_name(agent)


def _status(agent: Any, args: tuple, kwargs: dict) -> Any:
    state = lambda: argument(args, kwargs, 0, "exe_context").state.data  # noqa: E731
    return status_for_step(state, "messages", _DIALECT, _name(agent) or agent)


class HaystackAdapter(SpecAdapter):
    name = "haystack"
    patches = (menu_patch(_AGENT, "flatten_tools_or_toolsets", "sync", "_visible", after=True),)
    modules = (_CALLING, _AGENT)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_CALLING, "_make_context_bound_invoke", self._runner),
            PatchTarget(_CALLING, "_make_bounded_invoke_async", self._runner),
            PatchTarget(_CALLING, "_resolve_tool_calls", self._resolve),
            PatchTarget(_AGENT, "Agent._run_step", self._run_step),
            PatchTarget(_AGENT, "Agent._run_step_async", self._astep),
            PatchTarget(_AGENT, "_run_tool", self._every_tool),
            PatchTarget(_AGENT, "_run_tool_async", self._every_tool),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        tool, tool_call, agent = argument(args, kwargs, 0, "tool"), kwargs["tool_call"], _agent()
        arguments, origin = tool_call.arguments or {}, origin_of(tool, "haystack")
        return ToolCall(
            tool.name, self.name, agent, _name(agent), call_id=tool_call.id, arguments=arguments, origin=origin
        )

    def _runner(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The runner, guarded; with arguments the tool does not take, through the loop guard only."""
        runner = wrapped(*args, **kwargs)
        call = self.safe_tool_call(lambda: self.describe(None, args, kwargs))
        if call is None:
            return runner
        schema = argument(args, kwargs, 0, "tool").parameters or {}
        names, required = schema.get("properties") or {}, schema.get("required", ())
        is_async = "semaphore" in kwargs
        if any(k not in names for k in call.arguments) or any(k not in call.arguments for k in required):
            run = partial(arun_invalid if is_async else run_invalid, self, call, Refusals(self, returned=_refused))
        else:
            run = partial(self.run_async if is_async else self.run_sync, call)
        context = contextvars.copy_context()  # a sync runner goes to a worker thread
        return (lambda: run(runner, (), {})) if is_async else (lambda: context.run(run, runner, (), {}))

    def _resolve(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A name no tool has gets Haystack's error message, or past the loop guard's limit its answer."""
        calls, tools, errors = wrapped(*args, **kwargs)
        name = _name(_agent())
        for i, message in enumerate(errors):
            origin = message.tool_call_result.origin
            call = ToolCall(origin.tool_name, self.name, agent_name=name)
            answered = lambda m: str(m.tool_call_result.result) if m.tool_call_result.error else None  # noqa: E731
            errors[i] = run_unknown(call, lambda t, o=origin: _message(t, o), answered, lambda m: m, (message,), {})
        return calls, tools, errors

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return "tool_error" if _refused(result) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from haystack.tools.errors import ToolInvocationError

        return ToolInvocationError(info.message, tool_name=call.tool)

    def _run_step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token, restore = _step.set([instance, None]), _status(instance, args, kwargs)
        try:
            return wrapped(*args, **kwargs)
        finally:
            restore()
            _step.reset(token)

    async def _astep(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token, restore = _step.set([instance, None]), _status(instance, args, kwargs)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            restore()
            _step.reset(token)

    def _visible(self, instance: Any, args: tuple, kwargs: dict, tools: Any) -> Any:
        """A step's tools without the open ones (outside a step, or when none is left, unchanged)."""
        agent = _agent()
        kept = None if agent is None else visible_tools(tools, lambda t: t.name, agent=_name(agent) or agent)
        if not kept or kept is tools:
            return None
        _step.get()[1] = tools  # type: ignore[index]
        return kept

    def _every_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        every = (_step.get() or (None, None))[1]
        return wrapped(*args, **(kwargs if every is None else {**kwargs, "tools": every}))
