"""AWS Strands Agents: every tool call runs in the tool executor's ``_run_tool``.

Why there: ``ToolExecutor._stream`` (sequential and concurrent executors, direct
``agent.tool.x()`` calls and background tasks alike) sends each call through its
middleware chain, whose terminal streams the resolved tool through the module
function ``_run_tool``, once per attempt. Hook cancellations and interrupts are
decided before it (never counted); an unknown tool (the model's mistake) reaches
it with no tool and runs unguarded. ``_run_tool`` is an async generator: its
events pass through as they come and its last event, the ``ToolResultEvent``, is
judged.

Failures: tools never raise out of it. A failing tool becomes a result with
status ``"error"`` carrying the exception; that counts, unless the exception is
argument validation (the model's mistake). An interrupt event (human in the
loop) counts neither way.

Rejection: a ``ToolResultEvent`` with status ``"error"`` and the rejection text,
which the loop hands to the model like any failed tool.

Status block: the event loop calls ``stream_messages`` once per model call with
the system prompt (a string and content blocks) and the invocation state, which
holds the agent; both forms get the block.

Open tools: with ``OTEL_BREAKER_HIDE_OPEN_TOOLS=true`` the same call's
``tool_specs`` (what the model is offered) lose the agent's open tools, except
one that ``tool_choice`` forces. The agent's registry keeps them, so a call the
model makes anyway reaches ``_run_tool`` and gets the rejection.
"""

from __future__ import annotations

import weakref
from typing import Any

from otel_breaker import loops
from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import STATUS_HEADER, Rejection
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.spec import (
    SpecAdapter,
    argument,
    prompt_patch,
    status_text,
    tool_patch,
    with_argument,
)
from otel_breaker.loops import ToolLoopError
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_EXECUTOR = "strands.tools.executors._executor"


def _bad_arguments(exception: BaseException | None) -> bool:
    """A decorated tool's input validation (a ValueError raised from pydantic's ValidationError)."""
    return any(type(e).__name__ == "ValidationError" for e in (exception, getattr(exception, "__cause__", None)))


class StrandsAdapter(SpecAdapter):
    """Guards Strands Agents tools, scoped per agent."""

    name = "strands"
    patches = (
        tool_patch(_EXECUTOR, "_run_tool", "asyncgen"),
        prompt_patch("strands.event_loop.event_loop", "stream_messages", "asyncgen"),
    )

    def targets(self) -> list[PatchTarget]:
        # The run's boundary, where a loop stop (ToolLoopError) is raised to the caller.
        return [*super().targets(), PatchTarget("strands.agent.agent", "Agent.stream_async", _run_boundary)]

    def _tool_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        ctx = args[0] if args else kwargs.get("ctx")
        if self._enabled and ctx is not None and getattr(ctx, "tool", None) is None:
            stream = self._unknown(ctx, wrapped, args, kwargs)
        else:
            stream = super()._tool_stream(wrapped, instance, args, kwargs)
        return stream if ctx is None else _stopping(stream, ctx)

    async def _unknown(self, ctx: Any, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """A name no tool has: no breaker; the loop guard keyed by the name."""
        tool_use = ctx.tool_use
        name = getattr(ctx.agent, "name", None)
        call = ToolCall(
            tool=str(tool_use.get("name")),
            framework=self.name,
            agent_name=name if isinstance(name, str) else None,
            call_id=str(tool_use.get("toolUseId")) if tool_use.get("toolUseId") is not None else None,
        )
        answer = loops.check_unknown(call, self)
        if answer is not loops.RUN:
            yield answer
            return
        async for event in wrapped(*args, **kwargs):
            tool_result = getattr(event, "tool_result", None)
            if isinstance(tool_result, dict) and tool_result.get("status") == "error":
                loops.unknown_tool_called(call, str(getattr(event, "exception", "")) or None)
            yield event

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        ctx = args[0] if args else kwargs["ctx"]
        if ctx.tool is None:
            return None  # unknown tool: the framework answers the model itself
        tool_use = ctx.tool_use
        agent = ctx.agent
        name = getattr(agent, "name", None)
        return ToolCall(
            tool=str(tool_use["name"]),
            framework=self.name,
            agent=agent,
            agent_name=name if isinstance(name, str) else None,
            call_id=str(tool_use.get("toolUseId")) if tool_use.get("toolUseId") is not None else None,
            arguments=tool_use.get("input"),
            origin=origin_of(ctx.tool, "strands"),
        )

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        tool_result = getattr(result, "tool_result", None)
        if not isinstance(tool_result, dict):
            return IGNORED_RESULT if type(result).__name__ == "ToolInterruptEvent" else None
        if tool_result.get("status") != "error":
            return None
        exception = getattr(result, "exception", None)
        if _bad_arguments(exception):
            return IGNORED_RESULT  # the model's arguments did not validate
        return type(exception).__name__ if exception is not None else "tool_error"

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        tool_result = getattr(result, "tool_result", None)
        if (
            isinstance(tool_result, dict)
            and tool_result.get("status") == "error"
            and _bad_arguments(getattr(result, "exception", None))
        ):
            return MISTAKE
        return None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from strands.types._events import ToolResultEvent

        result = {"toolUseId": call.call_id or "", "status": "error", "content": [{"text": info.message}]}
        return ToolResultEvent(result)

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        agent = (kwargs.get("invocation_state") or {}).get("agent")
        prompt = args[1] if len(args) > 1 else kwargs.get("system_prompt")
        text = status_text(prompt, agent)
        if text is None:
            return None
        content = kwargs.get("system_prompt_content")
        if content is not None:
            kept = [b for b in content if not str(b.get("text", "")).startswith(STATUS_HEADER)]
            block = text[len(prompt or "") :].strip() if text.startswith(prompt or "") else ""
            kwargs = {**kwargs, "system_prompt_content": kept + ([{"text": block}] if block else [])}
        if len(args) > 1:
            return (args[0], text, *args[2:]), kwargs
        return args, {**kwargs, "system_prompt": text}

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        specs = argument(args, kwargs, 3, "tool_specs")
        choice = kwargs.get("tool_choice")
        forced = choice.get("tool", {}).get("name") if isinstance(choice, dict) else None
        agent = (kwargs.get("invocation_state") or {}).get("agent")
        kept = visible_tools(specs, lambda s: None if s["name"] == forced else s["name"], agent=agent)
        return None if kept is specs else with_argument(args, kwargs, 3, "tool_specs", kept)


# A loop stop raised inside a tool call, by agent, until the run's boundary raises it:
# the concurrent executor runs each call in a task that drops a BaseException.
_pending: weakref.WeakKeyDictionary[Any, ToolLoopError] = weakref.WeakKeyDictionary()


async def _stopping(stream: Any, ctx: Any) -> Any:
    """The call's events; a ``ToolLoopError`` becomes the call's error result, the
    agent is cancelled after the current tools, and the run's boundary raises it."""
    try:
        async for event in stream:
            yield event
    except ToolLoopError as error:
        agent = getattr(ctx, "agent", None)
        try:
            _pending[agent] = error
            agent.cancel(after_current_tools=True)
        except Exception:
            raise error from None  # no way to hold it for the boundary: as raised
        from strands.types._events import ToolResultEvent

        tool_use = ctx.tool_use
        yield ToolResultEvent(
            {"toolUseId": str(tool_use.get("toolUseId")), "status": "error", "content": [{"text": str(error)}]}
        )


def _run_boundary(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    return _raising_pending(wrapped(*args, **kwargs), instance)


async def _raising_pending(stream: Any, agent: Any) -> Any:
    """``Agent.stream_async``'s events; then the loop stop of this run, if one happened."""
    try:
        async for event in stream:
            yield event
    finally:
        try:
            error = _pending.pop(agent, None)
        except TypeError:
            error = None
    if error is not None:
        raise error
