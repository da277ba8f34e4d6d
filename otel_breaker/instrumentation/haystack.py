"""Breakers for Haystack (``haystack-ai``) Agents.

An Agent step runs the tools the model asked for through
``haystack.components.agents.tool_calling``: for each tool call it builds one
zero-argument runner (``_make_context_bound_invoke`` on the sync path, run in a
thread pool; ``_make_bounded_invoke_async`` on the async path, gathered) that
invokes the tool inside Haystack's own tool span. Those two factories are the
patch points: the runner they return is replaced by one that runs it through
the breaker, once per tool call, whatever kind of ``Tool`` it is.

Failures: a runner returns the ``ToolInvocationError`` instead of raising, and
the Agent turns it into a tool message with ``error=True`` (or raises it when
``raise_on_tool_invocation_failure`` is set); that value is counted as a
failure. Arguments the tool does not declare, or required ones missing, are
the model's mistake: the breaker does not count them, the loop guard does (as
it does a name no tool has, which ``_resolve_tool_calls`` answers with an error
tool message and never gives a runner).

Rejection: a ``ToolInvocationError`` carrying the rejection text, so the Agent
answers the model with the same error tool message a failing tool gets.

Agent identity: the Agent (its component name in a pipeline, when it has one),
set around each step. Status block: appended to the run's system message for
the step's model call, and the original message restored after the step.
Haystack's ``haystack.agent.step.tool`` spans are not GenAI tool spans, so
nothing is counted twice.

Open tools: a step lists its tools once (``flatten_tools_or_toolsets``) and
passes that list both to the chat generator and to the tool runner. With
``OTEL_BREAKER_HIDE_OPEN_TOOLS=true`` the step's list (the generator's ``tools``
and the state hooks read) loses the agent's open tools, and the tool runner
(``_run_tool`` / ``_run_tool_async``) gets the whole list back, so a call the
model makes anyway gets the rejection. When every tool is open none is hidden:
a step with no tools ends the run.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.mistakes import Refusals, arun_invalid, run_invalid, run_unknown
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, argument, insert_status_block
from otel_breaker.menu import hide_open_tools_enabled, visible_tools
from otel_breaker.toolcall import ToolCall

_CALLING = "haystack.components.agents.tool_calling"
_AGENT = "haystack.components.agents.agent"

# The Agent whose step is running in this context.
_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_haystack_agent", default=None)
# The step's whole tool list while some are off the model's menu (the tool runner still gets them all).
_all_tools: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_haystack_tools", default=None)


def _system(text: str) -> Any:
    from haystack.dataclasses import ChatMessage

    return ChatMessage.from_system(text)


_DIALECT = MessageDialect(
    is_system=lambda m: m.role.value == "system",
    text=lambda m: m.text,
    with_text=lambda m, text: _system(text),
    system=_system,
)


def _refused(result: Any) -> bool:
    """A runner's answer for a tool that raised (the runner returns it, not raises)."""
    return type(result).__name__ == "ToolInvocationError"


def _tool_message(text: str, origin: Any) -> Any:
    from haystack.dataclasses import ChatMessage

    return ChatMessage.from_tool(tool_result=text, origin=origin, error=True)


def _error_text(message: Any) -> str | None:
    return str(message.tool_call_result.result) if message.tool_call_result.error else None


def _agent_name(agent: Any) -> str | None:
    pipeline = getattr(agent, "__haystack_added_to_pipeline__", None)
    if pipeline is not None:
        return pipeline.get_component_name(agent) or None
    return agent_display_name(agent)


def _who(agent: Any) -> Any:
    """The agent as its breakers are keyed: its name in the pipeline (the object when unnamed)."""
    return _agent_name(agent) or agent


class HaystackAdapter(SpecAdapter):
    """The patch points build runners rather than run tools, so the wrappers are
    written here; ``describe`` is the spec's."""

    name = "haystack"
    requires = "haystack-ai>=3.4,<3.5"
    modules = (_CALLING, _AGENT)

    def targets(self) -> list[PatchTarget]:
        return [
            PatchTarget(_CALLING, "_make_context_bound_invoke", self._runner),
            PatchTarget(_CALLING, "_make_bounded_invoke_async", self._arunner),
            PatchTarget(_AGENT, "Agent._run_step", self._step),
            PatchTarget(_AGENT, "Agent._run_step_async", self._astep),
            PatchTarget(_AGENT, "flatten_tools_or_toolsets", self._menu),
            PatchTarget(_AGENT, "_run_tool", self._every_tool),
            PatchTarget(_AGENT, "_run_tool_async", self._every_tool),
            PatchTarget(_CALLING, "_resolve_tool_calls", self._resolve),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        tool, tool_call = argument(args, kwargs, 0, "tool"), kwargs["tool_call"]
        agent = _agent.get()
        return ToolCall(
            tool=tool.name,
            framework=self.name,
            agent=agent,
            agent_name=_agent_name(agent) if agent is not None else None,
            call_id=tool_call.id,
            arguments=tool_call.arguments or {},
            origin=origin_of(tool, "haystack"),
        )

    def _guarded(self, args: tuple, kwargs: dict) -> tuple[ToolCall | None, bool]:
        """The call, and whether its arguments are the model's mistake (names the tool
        does not declare, or required ones missing): the breaker does not count those."""
        call = self.safe_tool_call(lambda: self.describe(None, args, kwargs))
        if call is None:
            return None, False
        schema = argument(args, kwargs, 0, "tool").parameters or {}
        properties, arguments = schema.get("properties") or {}, call.arguments
        invalid = any(k not in properties for k in arguments) or any(
            k not in arguments for k in schema.get("required", ())
        )
        return call, invalid

    def _runner(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        runner = wrapped(*args, **kwargs)
        call, invalid = self._guarded(args, kwargs)
        if call is None:
            return runner
        context = contextvars.copy_context()  # the runner goes to a worker thread
        if invalid:
            return lambda: context.run(run_invalid, self, call, Refusals(self, returned=_refused), runner, (), {})
        return lambda: context.run(self.run_sync, call, runner, (), {})

    def _arunner(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        runner = wrapped(*args, **kwargs)
        call, invalid = self._guarded(args, kwargs)
        if call is None:
            return runner

        async def guarded() -> Any:
            if invalid:
                return await arun_invalid(self, call, Refusals(self, returned=_refused), runner, (), {})
            return await self.run_async(call, runner, (), {})

        return guarded

    def _resolve(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The step's calls resolved to tools; a name no tool has gets Haystack's error
        message, counted by the loop guard, or past its limit the loop guard's answer."""
        calls, tools, errors = wrapped(*args, **kwargs)
        agent = _agent.get()
        for i, message in enumerate(errors):
            origin = message.tool_call_result.origin
            call = ToolCall(
                origin.tool_name, framework=self.name, agent_name=_agent_name(agent) if agent is not None else None
            )
            errors[i] = run_unknown(
                call, lambda text, o=origin: _tool_message(text, o), _error_text, lambda m: m, (message,), {}
            )
        return calls, tools, errors

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return "tool_error" if _refused(result) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from haystack.tools.errors import ToolInvocationError

        return ToolInvocationError(info.message, tool_name=call.tool)

    @contextlib.contextmanager
    def _stepping(self, agent: Any, args: tuple, kwargs: dict) -> Iterator[None]:
        """One Agent step: who runs it, its status block (undone after), its tool menu."""
        token, tools, restore = _agent.set(agent), _all_tools.set(None), self._add_status(agent, args, kwargs)
        try:
            yield
        finally:
            restore()
            _all_tools.reset(tools)
            _agent.reset(token)

    def _step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        with self._stepping(instance, args, kwargs):
            return wrapped(*args, **kwargs)

    async def _astep(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        with self._stepping(instance, args, kwargs):
            return await wrapped(*args, **kwargs)

    def _menu(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A step's tools without the open ones (outside a step, unchanged)."""
        tools = wrapped(*args, **kwargs)
        agent = _agent.get()
        if agent is None or not hide_open_tools_enabled():
            return tools
        kept = visible_tools(tools, lambda t: t.name, agent=_who(agent))
        if kept is tools or not kept:
            return tools
        _all_tools.set(tools)
        return kept

    def _every_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        every = _all_tools.get()
        return wrapped(*args, **(kwargs if every is None else {**kwargs, "tools": every}))

    def _add_status(self, agent: Any, args: tuple, kwargs: dict) -> Any:
        """The run's messages with the status block for this step's model call; returns the undo."""
        try:
            data = argument(args, kwargs, 0, "exe_context").state.data
            original = data["messages"]
            amended = insert_status_block(original, _DIALECT, _who(agent))
        except Exception:
            amended = None
        if amended is None:
            return lambda: None
        added = next(m for m, o in zip(amended, [*original, None], strict=False) if m is not o)
        data["messages"] = amended

        def restore() -> None:
            # The step appended its replies; put the run's own system message back.
            now = data["messages"]
            position = next((i for i, m in enumerate(now) if m is added), None)
            if position is not None:
                replaced = [o for o in original if _DIALECT.is_system(o)][:1]
                now[position : position + 1] = replaced
                data["messages"] = now

        return restore
