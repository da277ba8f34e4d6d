"""AWS Strands Agents: every tool call runs in the tool executor's ``_run_tool``.

``ToolExecutor._stream`` (both executors, direct ``agent.tool.x()`` calls) sends each
call through its middleware chain to the module function ``_run_tool``, an async
generator, once per attempt: guarded, its last event (the ``ToolResultEvent``)
judged. Tools never raise out of it: a failing tool is a result with status
``"error"`` carrying the exception (a failure, unless it is argument validation:
the model's mistake, which the loop guard counts); an interrupt counts neither way.
A name no tool has reaches it with no tool: the loop guard counts that too.
Rejection: an error ``ToolResultEvent`` with the rejection text.

A loop stop (``loop_action=stop`` raises ``ToolLoopError`` where the call runs) would
never reach the caller: the concurrent executor's tasks drop a ``BaseException``. So
the stop is held, keyed by the agent (weakly), the agent is cancelled after the
current tools, and ``Agent.stream_async``, the run's boundary, raises it.

``Agent.stream_async`` is a run (:mod:`otel_breaker.runs`): ``agent(...)`` and
``invoke_async`` run through it, each of its steps runs inside it, and it ends with the
stream. An agent a tool calls (an agent as a tool) runs inside its caller's run and joins it.

``stream_messages`` (once per model call) gets the status block on its system
prompt (string and content blocks) and loses the agent's open tools from
``tool_specs``, except one ``tool_choice`` forces.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from typing import Any

from otel_breaker import loops
from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import STATUS_HEADER, Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.patches import argument, prompt_patch, tool_patch, with_argument
from otel_breaker.instrumentation.spec import SpecAdapter, status_text
from otel_breaker.loops import ToolLoopError
from otel_breaker.menu import visible_tools
from otel_breaker.runs import async_steps_in_run, joined_or_new
from otel_breaker.toolcall import ToolCall

_EXECUTOR = "strands.tools.executors._executor"

#: Loop stops waiting for their run's boundary, by the agent whose run they end.
_held_stops: weakref.WeakKeyDictionary[Any, ToolLoopError] = weakref.WeakKeyDictionary()


def hold(owner: Any, error: ToolLoopError) -> None:
    """Keep ``error`` for ``owner``'s run boundary (raises TypeError for an owner that
    cannot be held weakly: the caller raises the error as it is then)."""
    _held_stops[owner] = error


async def raising_held(stream: AsyncIterator[Any], owner: Any) -> AsyncIterator[Any]:
    """``stream``'s events; then the loop stop held for ``owner`` during it, if any."""
    try:
        async for event in stream:
            yield event
    finally:
        try:
            error = _held_stops.pop(owner, None)
        except TypeError:
            error = None
    if error is not None:
        raise error


def _run_boundary(wrapped: Any, agent: Any, args: tuple, kwargs: dict) -> Any:
    """``Agent.stream_async``: the run's events, then the loop stop held during it; each
    step inside the run (one the caller's run already holds, else a new one)."""
    return async_steps_in_run(raising_held(wrapped(*args, **kwargs), agent), joined_or_new(framework="strands"))


def _error(result: Any) -> BaseException | str | None:
    """What an error result carries: ``MISTAKE`` for a decorated tool's input validation
    (a ValueError raised from pydantic's ValidationError), else the exception or "tool_error"."""
    tool_result = getattr(result, "tool_result", None)
    if not isinstance(tool_result, dict) or tool_result.get("status") != "error":
        return None
    exception = getattr(result, "exception", None)
    for raised in (exception, getattr(exception, "__cause__", None)):
        if type(raised).__name__ == "ValidationError":
            return MISTAKE
    return exception or "tool_error"


def _call(ctx: Any, **more: Any) -> ToolCall:
    """The call ``ctx`` (the executor's tool context) makes."""
    tool_use = ctx.tool_use
    agent_name = getattr(ctx.agent, "name", None)
    call_id = tool_use.get("toolUseId")
    return ToolCall(
        str(tool_use.get("name")),
        "strands",
        agent_name=agent_name if isinstance(agent_name, str) else None,
        call_id=None if call_id is None else str(call_id),
        **more,
    )


def _agent_of(kwargs: dict) -> Any:
    """The agent of a ``stream_messages`` call, from its invocation state."""
    return (kwargs.get("invocation_state") or {}).get("agent")


class StrandsAdapter(SpecAdapter):
    name = "strands"
    patches = (
        tool_patch(_EXECUTOR, "_run_tool", "asyncgen"),
        prompt_patch("strands.event_loop.event_loop", "stream_messages", "asyncgen"),
    )

    def targets(self) -> list[PatchTarget]:
        # The run's boundary, where a held loop stop is raised to the caller.
        return [*super().targets(), PatchTarget("strands.agent.agent", "Agent.stream_async", _run_boundary)]

    def _tool_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        ctx = args[0] if args else kwargs.get("ctx")
        if self.enabled and ctx is not None and getattr(ctx, "tool", None) is None:
            stream = self._unknown(ctx, wrapped, args, kwargs)
        else:
            stream = super()._tool_stream(wrapped, instance, args, kwargs)
        if ctx is None:
            return stream
        return _stopping(stream, ctx)

    async def _unknown(self, ctx: Any, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """A name no tool has: no breaker; the loop guard keyed by the name."""
        call = _call(ctx)
        answer = loops.check_unknown(call, self)
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
        if error == MISTAKE:
            return IGNORED_RESULT
        if error is None or isinstance(error, str):
            return error
        return type(error).__name__

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        return MISTAKE if _error(result) == MISTAKE else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return _result(call.call_id, info.message)

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        prompt = args[1] if len(args) > 1 else kwargs.get("system_prompt")
        text = status_text(prompt, _agent_of(kwargs))
        if text is None:
            return None
        content = kwargs.get("system_prompt_content")
        if content is not None:
            # The content blocks: the previous status block out, the new one (the text
            # status_text added after the prompt) in a block of its own.
            kept = [block for block in content if not str(block.get("text", "")).startswith(STATUS_HEADER)]
            added = text[len(prompt or "") :].strip() if text.startswith(prompt or "") else ""
            if added:
                kept.append({"text": added})
            kwargs = {**kwargs, "system_prompt_content": kept}
        return with_argument(args, kwargs, 1, "system_prompt", text)

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        specs = argument(args, kwargs, 3, "tool_specs")
        choice = kwargs.get("tool_choice")
        forced = choice.get("tool", {}).get("name") if isinstance(choice, dict) else None

        def breaker_name(spec: dict) -> str | None:
            # A tool the model is forced to call stays on the menu.
            return None if spec["name"] == forced else spec["name"]

        kept = visible_tools(specs, breaker_name, agent=_agent_of(kwargs))
        if kept is specs:
            return None
        return with_argument(args, kwargs, 3, "tool_specs", kept)


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
