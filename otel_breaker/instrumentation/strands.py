"""AWS Strands Agents: every tool call runs in the tool executor's ``_run_tool``.

``ToolExecutor._stream`` (both executors, direct ``agent.tool.x()`` calls) sends each
call through its middleware chain to the module function ``_run_tool``, an async
generator, once per attempt: guarded, its last event (the ``ToolResultEvent``)
judged. Tools never raise out of it: a failing tool is a result with status
``"error"`` carrying the exception (a failure, unless it is argument validation:
the model's mistake, which the loop guard counts); an interrupt counts neither way.
A name no tool has reaches it with no tool: the loop guard counts that too.
Rejection: an error ``ToolResultEvent`` with the rejection text. A loop stop is
held past the concurrent executor (its tasks drop a ``BaseException``): the agent
is cancelled after the current tools and ``Agent.stream_async`` raises it.

``stream_messages`` (once per model call) gets the status block on its system
prompt (string and content blocks) and loses the agent's open tools from
``tool_specs``, except one ``tool_choice`` forces.
"""

from __future__ import annotations

from typing import Any

from otel_breaker import loops
from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import STATUS_HEADER, Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.held_stop import hold, raising_held
from otel_breaker.instrumentation.patches import argument, prompt_patch, tool_patch, with_argument
from otel_breaker.instrumentation.spec import SpecAdapter, status_text
from otel_breaker.loops import ToolLoopError
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_EXECUTOR = "strands.tools.executors._executor"


def _error(result: Any) -> BaseException | str | None:
    """What an error result carries: ``MISTAKE`` for a decorated tool's input validation
    (a ValueError raised from pydantic's ValidationError), else the exception or "tool_error"."""
    tool_result = getattr(result, "tool_result", None)
    if not isinstance(tool_result, dict) or tool_result.get("status") != "error":
        return None
    exception = getattr(result, "exception", None)
    if any(type(e).__name__ == "ValidationError" for e in (exception, getattr(exception, "__cause__", None))):
        return MISTAKE
    return exception or "tool_error"


def _call(ctx: Any, **more: Any) -> ToolCall:
    """The call ``ctx`` (the executor's tool context) makes."""
    tool_use, name = ctx.tool_use, getattr(ctx.agent, "name", None)
    call_id = None if tool_use.get("toolUseId") is None else str(tool_use.get("toolUseId"))
    name = name if isinstance(name, str) else None
    return ToolCall(str(tool_use.get("name")), "strands", agent_name=name, call_id=call_id, **more)


class StrandsAdapter(SpecAdapter):
    name = "strands"
    patches = (
        tool_patch(_EXECUTOR, "_run_tool", "asyncgen"),
        prompt_patch("strands.event_loop.event_loop", "stream_messages", "asyncgen"),
    )

    def targets(self) -> list[PatchTarget]:
        # The run's boundary, where a loop stop (ToolLoopError) is raised to the caller.
        boundary = lambda wrapped, agent, args, kwargs: raising_held(wrapped(*args, **kwargs), agent)  # noqa: E731
        return [*super().targets(), PatchTarget("strands.agent.agent", "Agent.stream_async", boundary)]

    def _tool_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        ctx = args[0] if args else kwargs.get("ctx")
        if self._enabled and ctx is not None and getattr(ctx, "tool", None) is None:
            stream = self._unknown(ctx, wrapped, args, kwargs)
        else:
            stream = super()._tool_stream(wrapped, instance, args, kwargs)
        return stream if ctx is None else _stopping(stream, ctx)

    async def _unknown(self, ctx: Any, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """A name no tool has: no breaker; the loop guard keyed by the name."""
        answer = loops.check_unknown(call := _call(ctx), self)
        if answer is not loops.RUN:
            yield answer
            return
        async for event in wrapped(*args, **kwargs):
            if _error(event) is not None:
                loops.unknown_tool_called(call, str(getattr(event, "exception", "")) or None)
            yield event

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        ctx = args[0] if args else kwargs["ctx"]
        if ctx.tool is None:
            return None  # unknown tool: the framework answers the model itself
        return _call(ctx, agent=ctx.agent, arguments=ctx.tool_use.get("input"), origin=origin_of(ctx.tool, "strands"))

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        if type(result).__name__ == "ToolInterruptEvent":
            return IGNORED_RESULT
        error = _error(result)
        if error is None or isinstance(error, str):
            return IGNORED_RESULT if error == MISTAKE else error
        return type(error).__name__

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        return MISTAKE if _error(result) == MISTAKE else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return _result(call.call_id, info.message)

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
        return with_argument(args, kwargs, 1, "system_prompt", text)

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        specs = argument(args, kwargs, 3, "tool_specs")
        forced = choice.get("tool", {}).get("name") if isinstance(choice := kwargs.get("tool_choice"), dict) else None
        agent = (kwargs.get("invocation_state") or {}).get("agent")
        kept = visible_tools(specs, lambda s: None if s["name"] == forced else s["name"], agent=agent)
        return None if kept is specs else with_argument(args, kwargs, 3, "tool_specs", kept)


async def _stopping(stream: Any, ctx: Any) -> Any:
    """The call's events; a ``ToolLoopError`` becomes the call's error result, held for
    the run's boundary while the agent is cancelled after the current tools."""
    try:
        async for event in stream:
            yield event
    except ToolLoopError as error:
        try:
            hold(ctx.agent, error)
            ctx.agent.cancel(after_current_tools=True)
        except Exception:
            raise error from None  # no way to hold it for the boundary: as raised
        yield _result(ctx.tool_use.get("toolUseId"), str(error))


def _result(call_id: Any, text: str) -> Any:
    from strands.types._events import ToolResultEvent

    return ToolResultEvent({"toolUseId": str(call_id or ""), "status": "error", "content": [{"text": text}]})
