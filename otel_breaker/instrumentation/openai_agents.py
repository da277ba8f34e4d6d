"""Breakers for the OpenAI Agents SDK (``openai-agents``).

Every function tool call of the Runner and of realtime sessions goes through
``_invoke_function_tool_with_metadata``, defined in ``agents.tool`` and imported by
name into ``agents.run_internal.tool_execution``: wrapped in both (a call is counted
once either way). The SDK turns a tool's exception into text for the model inside
the invocation; its failure formatter (``maybe_invoke_function_tool_failure_error_function``)
is wrapped to note the failure on the attempt in progress. A rejection is the SDK's
own "SDK-generated error" result. These names are private: the range is pinned.
Status block: the instructions ``Agent.get_system_prompt`` returns. Menu: the
``all_tools`` of ``get_new_response``, or for a streamed turn the ``get_stream``
closure given to ``stream_response_with_retry``, rebuilt over the visible tools; the
turn still resolves calls against every tool, so a hidden tool's call is rejected.
"""

from __future__ import annotations

import contextvars
import logging
import types
import weakref
from dataclasses import dataclass
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.mcp_identity import bounded_source, implementation_identity, server_identity
from otel_breaker.instrumentation.patches import context_patch, menu_patch, prompt_patch, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter, argument, status_text, with_argument
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_INVOKE = "_invoke_function_tool_with_metadata"
_FAILURE_HOOK = "maybe_invoke_function_tool_failure_error_function"
_INVALID_ARGUMENTS_PREFIX = "Invalid JSON input for tool"
_MCP_UTIL = "agents.mcp.util"
_RUN_LOOP = "agents.run_internal.run_loop"
_TOOLS_ARG = 4  # get_new_response's all_tools
_STREAM_TOOLS = "all_tools"  # the streamed turn's get_stream closes over it
_SERVER_ATTRIBUTE = "_otel_breaker_mcp_server"

logger = logging.getLogger("otel_breaker")


@dataclass
class _Attempt:
    """The guarded invocation in progress; the failure hook fills in ``error`` (mutable: the
    hook sees it even when the SDK runs the tool in a task of its own, with a copied context)."""

    tool: str
    call_id: str | None
    error: str | None = None
    handled: bool = False


_attempt: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar("otel_breaker_openai_agents", default=None)
#: The agent of the streamed turn in progress (its breakers decide what is hidden).
_streamed_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_streamed_agent", default=None)


@dataclass(frozen=True)
class _FallbackInvocationResult:
    """Same shape as the SDK's result, should its private class ever move."""

    output: Any
    is_sdk_generated_error: bool = True


def _turn_agent(instance: Any, args: tuple, kwargs: dict) -> Any:
    """``run_single_turn_streamed(streamed_result, bindings, ...)``: the turn's agent."""
    return getattr(argument(args, kwargs, 1, "bindings"), "public_agent", None)


class OpenAIAgentsAdapter(SpecAdapter):
    name = "openai_agents"
    requires = "openai-agents>=0.24,<0.25"
    patches = (
        tool_patch("agents.run_internal.tool_execution", _INVOKE),
        tool_patch("agents.tool", _INVOKE),
        prompt_patch("agents.agent", "Agent.get_system_prompt", "async", "system_prompt", after=True),
        menu_patch(_RUN_LOOP, "get_new_response", "async", "turn_menu"),
        context_patch(_RUN_LOOP, "run_single_turn_streamed", _streamed_agent, _turn_agent),
        menu_patch(_RUN_LOOP, "stream_response_with_retry", "sync", "streamed_menu"),
    )
    modules = ("agents.tool", "agents.run_internal.tool_execution", "agents.agent", _MCP_UTIL, _RUN_LOOP)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            # Looked up in agents.tool by the tool's own failure-handling invoker.
            PatchTarget("agents.tool", _FAILURE_HOOK, self._failure_hook),
            # Which MCP server each MCP function tool calls (its breaker key's source).
            PatchTarget(_MCP_UTIL, "MCPUtil.to_function_tool", self._mcp_tool),
        ]

    def turn_menu(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """``get_new_response(bindings, system_prompt, input, output_schema, all_tools, ...)``
        with the open function tools left out of the model's copy of ``all_tools``."""
        agent = getattr(argument(args, kwargs, 0, "bindings"), "public_agent", None)
        tools = argument(args, kwargs, _TOOLS_ARG, "all_tools")
        kept = visible_tools(tools, _function_tool_name, lambda tool: mcp_source(tool, agent), agent=agent)
        return None if kept is tools else with_argument(args, kwargs, _TOOLS_ARG, "all_tools", list(kept))

    def streamed_menu(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """``stream_response_with_retry(get_stream=...)`` with ``get_stream`` over the visible tools."""
        get_stream, agent = kwargs.get("get_stream"), _streamed_agent.get()
        if get_stream is None or agent is None:
            return None
        return args, {**kwargs, "get_stream": _stream_without_open_tools(get_stream, agent)}

    def system_prompt(self, instance: Any, args: tuple, kwargs: dict, prompt: Any) -> Any:
        """The instructions with the status block of the agent the program created
        (tools run with it, not with the Runner's execution copy)."""
        return status_text(prompt, _public_agent(instance)) if prompt is None or isinstance(prompt, str) else None

    def _mcp_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Remember the server an MCP tool was built for, on the ``FunctionTool`` itself."""
        function_tool = wrapped(*args, **kwargs)
        try:
            server = kwargs.get("server") or next(a for a in args if hasattr(a, "call_tool") and hasattr(a, "name"))
            setattr(function_tool, _SERVER_ATTRIBUTE, weakref.ref(server))
        except Exception:
            logger.debug("otel-breaker: openai_agents: could not tell an MCP tool's server", exc_info=True)
        return function_tool

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The spec's async tool wrapper, with the attempt the failure hook fills in."""
        call = self._call_of(instance, args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        outer = _attempt.get()
        if outer is not None and outer.tool == call.tool and outer.call_id == call.call_id:
            # A nested binding of the same invocation (the function was
            # imported by name after it was wrapped): the outer layer guards it.
            return await self.run_async(call, wrapped, args, kwargs)
        token = _attempt.set(_Attempt(call.tool, call.call_id))
        try:
            return await self.run_async(call, wrapped, args, kwargs)
        finally:
            _attempt.reset(token)

    async def _failure_hook(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Record the exception the SDK is about to turn into text for the model."""
        try:
            attempt = _attempt.get()
            if attempt is not None and not attempt.handled:
                error, context = kwargs.get("error"), kwargs.get("context")
                same_tool = getattr(kwargs.get("function_tool"), "name", None) == attempt.tool
                same_call = attempt.call_id is None or getattr(context, "tool_call_id", None) == attempt.call_id
                if same_tool and same_call:
                    attempt.handled = True
                    if isinstance(error, Exception):
                        # Arguments the schema refuses: the model's mistake, neither outcome.
                        attempt.error = IGNORED_RESULT if _invalid_arguments(error) else type(error).__name__
        except Exception:  # bookkeeping must never disturb the SDK's error handling
            pass
        return await wrapped(*args, **kwargs)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        function_tool, context = kwargs["function_tool"], kwargs.get("context")
        agent = getattr(context, "agent", None)
        return ToolCall(
            tool=function_tool.name,
            framework=self.name,
            agent=agent,
            agent_name=agent_display_name(agent) if agent is not None else None,
            session_id=_session_id(context),
            call_id=getattr(context, "tool_call_id", None),
            tool_type="function",
            arguments=kwargs.get("arguments"),
            source=mcp_source(function_tool, agent),
            origin=origin_of(function_tool, "agents"),
        )

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        attempt = _attempt.get()
        if attempt is not None and attempt.handled:
            return attempt.error
        # The SDK's default texts: a tool timeout, or a failure formatted before our hook saw it.
        return "tool_error" if getattr(result, "is_sdk_generated_error", False) else None

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        """The SDK's text for arguments the schema refused (the failure hook saw them)."""
        attempt = _attempt.get()
        return MISTAKE if attempt is not None and attempt.handled and attempt.error == IGNORED_RESULT else None

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """Bad arguments raised (a tool without a failure-error function): the model's mistake."""
        return MISTAKE if isinstance(exc, Exception) and _invalid_arguments(exc) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        try:
            import agents.tool as agents_tool

            result_class = getattr(agents_tool, "_FunctionToolInvocationResult", None)
            if result_class is not None:
                # is_sdk_generated_error: the text bypasses the tool's output schema.
                return result_class(info.message, is_sdk_generated_error=True)
        except Exception:
            pass
        return _FallbackInvocationResult(info.message)


def _invalid_arguments(error: Exception) -> bool:
    """The model sent arguments the tool's schema refuses: the tool never ran,
    so this says nothing about its health."""
    return type(error).__name__ == "ModelBehaviorError" and str(error).startswith(_INVALID_ARGUMENTS_PREFIX)


def _stream_without_open_tools(get_stream: Any, agent: Any) -> Any:
    """``get_stream`` itself when nothing is hidden; else the same function over a copy
    of its closure whose ``all_tools`` cell holds the visible tools only."""
    index = get_stream.__code__.co_freevars.index(_STREAM_TOOLS)
    tools = get_stream.__closure__[index].cell_contents
    kept = visible_tools(tools, _function_tool_name, lambda tool: mcp_source(tool, agent), agent=agent)
    if kept is tools:
        return get_stream
    closure = list(get_stream.__closure__)
    closure[index] = types.CellType(list(kept))
    return types.FunctionType(
        get_stream.__code__, get_stream.__globals__, get_stream.__name__, get_stream.__defaults__, tuple(closure)
    )


def _function_tool_name(tool: Any) -> str | None:
    """Only function tools are guarded, so only they can leave the menu."""
    name = getattr(tool, "name", None) if type(tool).__name__ == "FunctionTool" else None
    return name if isinstance(name, str) else None


def mcp_source(function_tool: Any, agent: Any = None) -> str | None:
    """The MCP server an MCP function tool calls (``name@version`` from its ``initialize``),
    or None for a tool that is not an MCP server's. The server is the one recorded when
    the SDK built the tool; else the agent's ``mcp_servers`` entry the tool's binding names."""
    binding = getattr(function_tool, "_mcp_tool_binding", None)
    if binding is None:
        return None
    ref = getattr(function_tool, _SERVER_ATTRIBUTE, None)
    server = ref() if ref is not None else None
    if server is None:
        named = [s for s in getattr(agent, "mcp_servers", None) or () if _log_name(s) == binding[0]]
        server = named[0] if len(named) == 1 else None
    if server is None:
        return None
    initialized = getattr(server, "server_initialize_result", None)
    identity = server_identity(getattr(server, "session", None)) or implementation_identity(
        getattr(initialized, "server_info", None)
    )
    return identity if identity is not None else bounded_source(f"mcp:{binding[0]}")


def _log_name(server: Any) -> str | None:
    try:
        from agents.mcp.util import get_mcp_server_log_name

        return get_mcp_server_log_name(server.name)
    except Exception:
        return None


def _public_agent(agent: Any) -> Any:
    """The agent tool calls report (``context.agent``) for the one whose prompt is built."""
    try:
        from agents._public_agent import get_public_agent

        return get_public_agent(agent)
    except Exception:
        return agent


def _session_id(context: Any) -> str | None:
    """The conversation the call belongs to: the run's ``group_id`` when the
    program set one, else the id of the current trace (one per run)."""
    group_id = getattr(getattr(context, "run_config", None), "group_id", None)
    if isinstance(group_id, str) and group_id:
        return group_id
    try:
        from agents.tracing import get_current_trace

        trace = get_current_trace()
    except Exception:
        return None
    trace_id = getattr(trace, "trace_id", None)
    return trace_id if isinstance(trace_id, str) and trace_id and trace_id != "no-op" else None
