"""Breakers for PydanticAI (``pydantic-ai-slim``).

Every tool call of an agent run (``run``, ``run_sync``, ``run_stream``,
``iter``) is executed by one async method, ``ToolManager.execute_tool_call``,
so that is the one patch point; ``run_sync`` drives its own event loop
through it too.

What comes out of it decides the outcome. A tool that raises ``ToolFailed``
surfaces as ``ToolFailedError``, which the run turns into a failed tool result
for the model: a failure. ``ModelRetry`` surfaces as ``ToolRetryError``: the
tool asks the model to try again, within the tool's own ``retries`` budget,
so it is neutral (the model's mistake) unless the breaker's
``count_model_retry`` option (``OTEL_BREAKER_COUNT_MODEL_RETRY``) counts it.
Any other exception ends the run; it is counted and re-raised unchanged,
since the run's error handling is the program's business. Once the
breaker is open, that same tool no longer ends the run: the call is answered
with ``ToolFailedError`` carrying a failed ``ToolReturnPart``, the run's own
way of telling the model a tool failed, which costs no retry budget.

``execute_tool_call`` is also used for calls whose arguments failed
validation (to raise the prepared retry inside a span) and for deferred or
approval-gated calls: the tool body runs in neither, so they pass through
uncounted.

Tool status in the prompt (``OTEL_BREAKER_STATUS_IN_PROMPT``): before every
model request, ``ModelRequestNode`` gathers the run's instructions (the agent's,
its capabilities', its toolsets') through the module function
``_get_instructions``; what it returns is what the model request carries. When the
setting is on, a dynamic instruction part holding the status block of the
tools open or half-open for the run's agent is added there. It is added only
while a model request is being prepared (a wrapper on
``ModelRequestNode._prepare_request`` marks that), since the same function also
decides whether a resumed run has anything new to send. With the setting off
nothing changes.
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
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name, nested_failure
from otel_breaker.instrumentation.mcp_identity import implementation_identity
from otel_breaker.instrumentation.spec import SpecAdapter, status_text, tool_patch
from otel_breaker.menu import hide_open_tools_enabled, visible_tools
from otel_breaker.toolcall import ToolCall

# (ToolCallPart, wrap_validation_errors) of the call being guarded, so a rejection
# answers it with its own id and kind, in the form its caller expects.
_part: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_pydantic_ai_part", default=None)

# True while ModelRequestNode prepares a model request in this context.
_preparing: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_breaker_pydantic_ai_request", default=False)

_GRAPH = "pydantic_ai._agent_graph"
_MAX_WRAPPERS = 16

logger = logging.getLogger("otel_breaker")


class PydanticAIAdapter(SpecAdapter):
    name = "pydantic_ai"
    requires = "pydantic-ai-slim>=2.68,<3"
    patches = (tool_patch("pydantic_ai.tool_manager", "ToolManager.execute_tool_call", "async"),)
    modules = ("pydantic_ai.tool_manager", _GRAPH)  # the extra targets below live in the graph module

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            # The tool-status block, in the instructions of every model request.
            PatchTarget(_GRAPH, "ModelRequestNode._prepare_request", self._prepare_request),
            PatchTarget(_GRAPH, "_get_instructions", self._instructions),
            # The tool definitions of every model request: open tools leave it (opt-in).
            PatchTarget(_GRAPH, "_prepare_request_parameters", self._request_parameters),
        ]

    async def _request_parameters(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_prepare_request_parameters(ctx, ...)``: the request's ``function_tools`` without
        the open ones when ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` is on. The run's tool manager
        keeps them, so a call the model makes anyway still reaches the guard."""
        parameters = await wrapped(*args, **kwargs)
        if not hide_open_tools_enabled():
            return parameters
        try:
            manager = (args[0] if args else kwargs["ctx"]).deps.tool_manager
            tools = manager.tools or {}
            kept = visible_tools(
                parameters.function_tools,
                lambda tool_def: tool_def.name,
                lambda tool_def: toolset_source(getattr(tools.get(tool_def.name), "toolset", None)),
                agent=getattr(manager.ctx, "agent", None),
            )
            if kept is parameters.function_tools:
                return parameters
            return dataclasses.replace(parameters, function_tools=list(kept))
        except Exception:
            logger.debug("otel-breaker: pydantic_ai: could not hide open tools", exc_info=True)
            return parameters

    async def _prepare_request(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if not status_in_prompt_enabled():
            return await wrapped(*args, **kwargs)
        token = _preparing.set(True)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _preparing.reset(token)

    async def _instructions(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_get_instructions(ctx, run_context)``: a list of ``InstructionPart`` or None."""
        parts = await wrapped(*args, **kwargs)
        if not _preparing.get() or not status_in_prompt_enabled():
            return parts
        try:
            run_context = args[1] if len(args) > 1 else kwargs["run_context"]
            block = status_text(None, getattr(run_context, "agent", None))
            if not block:
                if parts is None and _block_in_force(args[0] if args else kwargs["ctx"]):
                    # None would let the model fall back to the history's instructions,
                    # an earlier request's block: an empty list means no instructions.
                    return []
                return parts
            from pydantic_ai.messages import InstructionPart

            # Dynamic: it changes between requests, so it goes after the static parts a provider may cache.
            return [*(parts or ()), InstructionPart(block, dynamic=True)]
        except Exception:
            logger.debug("otel-breaker: pydantic_ai: could not add the tool-status block", exc_info=True)
            return parts

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The spec's async tool wrapper, with the call's part at hand for :meth:`rejection`."""
        call = self._call_of(instance, args, kwargs)
        if call is None:
            if self._enabled:
                mistake = _invalid_call(self.name, args, kwargs)
                if mistake is not None:
                    return await self._invalid(mistake, wrapped, args, kwargs)
            return await wrapped(*args, **kwargs)
        validated = args[0] if args else kwargs["validated"]
        token = _part.set((validated.call, kwargs.get("wrap_validation_errors", True) is not False))
        try:
            return await self.run_async(call, wrapped, args, kwargs)
        finally:
            _part.reset(token)

    async def _unknown(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """A call of a name no tool has: no breaker, the loop guard keyed by the name."""
        return await _unknown_call(self, call, wrapped, args, kwargs)

    async def _invalid(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """A call whose arguments failed validation: the tool body does not run and the
        breaker counts nothing, but the loop guard counts the model's mistake (the retry
        PydanticAI raises for it), and answers an identical repeat past the limit."""
        validated = args[0] if args else kwargs["validated"]
        if getattr(validated, "tool", None) is None:
            return await self._unknown(call, wrapped, args, kwargs)
        breaker = self.guard.breaker_for(call)
        if breaker is None:
            return await wrapped(*args, **kwargs)
        token = _part.set((validated.call, kwargs.get("wrap_validation_errors", True) is not False))
        try:
            answer, watch = loops.enter(call, breaker, _InvalidArguments(self), args, kwargs)
            if answer is not loops.RUN:
                return answer
            if watch is None:
                return await wrapped(*args, **kwargs)
            return await watch.wrap(wrapped)(*args, **kwargs)
        finally:
            _part.reset(token)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        validated = args[0] if args else kwargs["validated"]
        if validated.args_valid is False or getattr(validated, "deferral", None) is not None:
            return None  # the tool body will not run: nothing to guard or count
        part = validated.call
        ctx = validated.ctx
        agent = getattr(ctx, "agent", None)
        session = getattr(ctx, "conversation_id", None) or getattr(ctx, "run_id", None)
        return ToolCall(
            tool=part.tool_name,
            framework=self.name,
            agent=agent,
            agent_name=agent_display_name(agent) if agent is not None else None,
            session_id=session if isinstance(session, str) else None,
            call_id=part.tool_call_id,
            tool_type="function",
            arguments=part.args,
            source=toolset_source(getattr(validated.tool, "toolset", None)),
            origin=origin_of(validated.tool, "pydantic_ai"),
        )

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


async def _unknown_call(adapter: PydanticAIAdapter, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
    validated = args[0] if args else kwargs["validated"]
    token = _part.set((validated.call, kwargs.get("wrap_validation_errors", True) is not False))
    try:
        answer = loops.check_unknown(call, adapter)
        if answer is not loops.RUN:
            return answer
        try:
            return await wrapped(*args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ == "ToolRetryError":
                loops.unknown_tool_called(call, str(exc))
            raise
    finally:
        _part.reset(token)


class _InvalidArguments:
    """The adapter as the loop guard sees a call whose arguments failed validation:
    the retry PydanticAI raises for it is the model's mistake."""

    def __init__(self, adapter: PydanticAIAdapter) -> None:
        self.adapter = adapter

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if type(exc).__name__ == "ToolRetryError" else None

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return self.adapter.rejection(call, info)


def _invalid_call(framework: str, args: tuple, kwargs: dict) -> ToolCall | None:
    """The call whose arguments failed validation, for the loop guard; None for any other."""
    try:
        validated = args[0] if args else kwargs["validated"]
        if validated.args_valid is not False or getattr(validated, "deferral", None) is not None:
            return None
        part = validated.call
        ctx = validated.ctx
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
        )
    except Exception:
        return None


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
