"""Breakers for PydanticAI (``pydantic-ai-slim``).

Every tool call of an agent run is executed by ``ToolManager.execute_tool_call``.
``ToolFailed`` surfaces as ``ToolFailedError`` (a failure); ``ModelRetry`` as
``ToolRetryError``, the model's retry request (neutral unless counted); any other
exception ends the run and is counted. Once open, a call is answered with
``ToolFailedError`` carrying a failed ``ToolReturnPart``, the run's own "tool
failed", which costs no retry budget. Calls whose arguments failed validation, and
deferred or approval-gated calls, do not run the body: the breaker counts none of
them; the loop guard counts the invalid ones and unknown names. Status block: a
dynamic ``InstructionPart`` from ``_get_instructions``, only while
``ModelRequestNode._prepare_request`` prepares a request (the same function also
decides whether a resumed run has anything new to send). Menu: the
``function_tools`` of ``_prepare_request_parameters``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
from typing import Any

from otel_breaker import loops
from otel_breaker.classify import MISTAKE, RETRY_REQUEST
from otel_breaker.degrade import STATUS_HEADER, Rejection, status_in_prompt_enabled
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import agent_display_name, nested_failure
from otel_breaker.instrumentation.mcp_identity import implementation_identity
from otel_breaker.instrumentation.patches import SKIP, argument, context_patch, menu_patch, prompt_patch, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter, status_text
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

# (ToolCallPart, wrap_validation_errors) of the call being guarded, so a rejection
# answers it with its own id and kind, in the form its caller expects.
_part: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_pydantic_ai_part", default=None)

# True while ModelRequestNode prepares a model request in this context.
_preparing: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_breaker_pydantic_ai_request", default=False)

_GRAPH = "pydantic_ai._agent_graph"


def _preparing_value() -> Any:
    return True if status_in_prompt_enabled() else SKIP


_MAX_WRAPPERS = 16

logger = logging.getLogger("otel_breaker")


class PydanticAIAdapter(SpecAdapter):
    name = "pydantic_ai"
    patches = (
        tool_patch("pydantic_ai.tool_manager", "ToolManager.execute_tool_call"),
        context_patch(_GRAPH, "ModelRequestNode._prepare_request", _preparing, lambda *_: _preparing_value()),
        prompt_patch(_GRAPH, "_get_instructions", "async", "instructions", after=True),
        # From 2.78 a request resolves its instructions in this method instead.
        prompt_patch(_GRAPH, "ModelRequestNode._resolve_step_instructions", "async", "instructions", after=True),
        menu_patch(_GRAPH, "_prepare_request_parameters", "async", "request_parameters", after=True),
    )

    def request_parameters(self, instance: Any, args: tuple, kwargs: dict, parameters: Any) -> Any:
        """The request's ``function_tools`` without the open ones; the run's tool manager
        keeps them, so a call the model makes anyway still reaches the guard."""
        manager = argument(args, kwargs, 0, "ctx").deps.tool_manager
        tools = manager.tools or {}
        kept = visible_tools(
            parameters.function_tools,
            lambda tool_def: tool_def.name,
            lambda tool_def: toolset_source(getattr(tools.get(tool_def.name), "toolset", None)),
            agent=getattr(manager.ctx, "agent", None),
        )
        return None if kept is parameters.function_tools else dataclasses.replace(parameters, function_tools=list(kept))

    def instructions(self, instance: Any, args: tuple, kwargs: dict, parts: Any) -> Any:
        """``_get_instructions(ctx, run_context)``: its ``InstructionPart`` list with the block."""
        if not _preparing.get() or any(STATUS_HEADER in (part.content or "") for part in parts or ()):
            return None  # not a request, or a nested resolution already added the block
        block = status_text(None, getattr(argument(args, kwargs, 1, "run_context"), "agent", None))
        if not block:
            # None would let the model fall back to the history's instructions (an earlier
            # request's block): an empty list means no instructions.
            return [] if parts is None and _block_in_force(argument(args, kwargs, 0, "ctx")) else None
        from pydantic_ai.messages import InstructionPart

        # Dynamic: it changes between requests, so it goes after the static parts a provider may cache.
        return [*(parts or ()), InstructionPart(block, dynamic=True)]

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The spec's tool wrapper, with the call's part at hand for :meth:`rejection`. A call
        whose arguments failed validation (or of a name no tool has) runs no body and the
        breaker counts nothing; the loop guard counts the retry PydanticAI raises for it."""
        call = self._call_of(instance, args, kwargs)
        mistake = None if call is not None or not self._enabled else _invalid_call(self.name, args, kwargs)
        if call is None and mistake is None:
            return await wrapped(*args, **kwargs)
        validated = argument(args, kwargs, 0, "validated")
        token = _part.set((validated.call, kwargs.get("wrap_validation_errors", True) is not False))
        try:
            if call is not None:
                return await self.run_async(call, wrapped, args, kwargs)
            if getattr(validated, "tool", None) is None:  # no breaker: the loop guard keys it by the name
                answer = loops.check_unknown(mistake, self)
                if answer is not loops.RUN:
                    return answer
                try:
                    return await wrapped(*args, **kwargs)
                except Exception as exc:
                    if type(exc).__name__ == "ToolRetryError":
                        loops.unknown_tool_called(mistake, str(exc))
                    raise
            breaker = self.guard.breaker_for(mistake)
            if breaker is None:
                return await wrapped(*args, **kwargs)
            return await loops.arun_mistake(breaker, mistake, _InvalidArguments(self), wrapped, args, kwargs)
        finally:
            _part.reset(token)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        validated = argument(args, kwargs, 0, "validated")
        if validated.args_valid is False or getattr(validated, "deferral", None) is not None:
            return None  # the tool body will not run: nothing to guard or count
        return _tool_call(validated, self.name, origin_of(validated.tool, "pydantic_ai"))

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        if type(exc).__name__ != "ToolRetryError":
            return None
        if nested_failure():
            # An MCP toolset's default ``tool_error_behavior="retry"`` turns the server's
            # error result into ModelRetry: the MCP session below saw the tool fail.
            return None
        return RETRY_REQUEST

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        """Raise the run's own "tool failed" signal; returning a value would read as success."""
        from pydantic_ai.exceptions import ToolFailed, ToolFailedError
        from pydantic_ai.messages import ToolReturnPart

        part, wrap = _part.get() or (None, True)
        if not wrap:
            # handle_call(wrap_validation_errors=False) callers expect the raw exception.
            raise ToolFailed(info.message)
        if getattr(part, "tool_name", None) != call.tool:
            part = None
        return_part = ToolReturnPart(
            tool_name=call.tool,
            content=info.message,
            tool_call_id=getattr(part, "tool_call_id", None) or call.call_id,
            tool_kind=getattr(part, "tool_kind", None),
            outcome="failed",
        )
        raise ToolFailedError(return_part)


class _InvalidArguments(loops.Mistakes):
    """A call whose arguments failed validation: the retry PydanticAI raises is the mistake."""

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if type(exc).__name__ == "ToolRetryError" else None


def _invalid_call(framework: str, args: tuple, kwargs: dict) -> ToolCall | None:
    """The call whose arguments failed validation, for the loop guard; None for any other."""
    try:
        validated = argument(args, kwargs, 0, "validated")
        if validated.args_valid is not False or getattr(validated, "deferral", None) is not None:
            return None
        return _tool_call(validated, framework)
    except Exception:
        return None


def _tool_call(validated: Any, framework: str, origin: str | None = None) -> ToolCall:
    part, ctx = validated.call, validated.ctx
    agent = getattr(ctx, "agent", None)
    session = getattr(ctx, "conversation_id", None) or getattr(ctx, "run_id", None)
    return ToolCall(
        tool=part.tool_name,
        framework=framework,
        agent=agent,
        agent_name=agent_display_name(agent) if agent is not None else None,
        session_id=session if isinstance(session, str) else None,
        call_id=part.tool_call_id,
        arguments=part.args,
        source=toolset_source(getattr(validated.tool, "toolset", None)),
        origin=origin,
    )


def toolset_source(toolset: Any) -> str | None:
    """The MCP server behind a tool's toolset (``name@version`` from its ``initialize``),
    looking through wrapper toolsets (prefixed, renamed, filtered...) by their
    ``wrapped``; None for a toolset that is not an MCP server's."""
    for _ in range(_MAX_WRAPPERS):
        if toolset is None:
            return None
        info = getattr(toolset, "_server_info", None)
        if info is not None:
            return implementation_identity(info)
        toolset = getattr(toolset, "wrapped", None)
    return None


def _block_in_force(ctx: Any) -> bool:
    """Whether the instructions the history holds for this request carry a status block."""
    from pydantic_ai._instrumentation import get_instructions_source

    source = get_instructions_source(ctx.state.message_history)
    return source is not None and STATUS_HEADER in (source.instructions or "")
