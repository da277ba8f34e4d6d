"""Breakers for the OpenAI Agents SDK (``openai-agents``).

Every function tool call of the Runner (``run``, ``run_sync``,
``run_streamed``) and of realtime sessions goes through one async module
function, ``_invoke_function_tool_with_metadata``. It is defined in
``agents.tool`` and imported by name into ``agents.run_internal.tool_execution``,
where the Runner looks it up: so it is wrapped in both modules. A Runner call
only reaches the ``tool_execution`` binding, a realtime call only the
``agents.tool`` one, and the re-entrancy guard counts a call once either way.

The SDK catches a tool's exception inside the invocation and hands the model
the text of the tool's ``failure_error_function``: the wrapped function then
*returns* normally. To still count the failure, the failure formatter
(``maybe_invoke_function_tool_failure_error_function``) is wrapped too; it
marks the guarded call in progress as failed, and :meth:`result_error`
reports it. A call rejected by an open breaker returns the SDK's own
"SDK-generated error" result, so the Runner goes on and the model reads the
rejection text.

All three names are private to the SDK: they are looked up with ``hasattr``
and the version range is pinned to the one tested.

Tool status in the prompt (``OTEL_BREAKER_STATUS_IN_PROMPT``): the Runner asks
``Agent.get_system_prompt`` for the instructions of every model call (each turn,
streamed or not, after every handoff), so that public method is wrapped. When the
setting is on, the instructions it returns get the status block of the tools open
or half-open for that agent; with the setting off they pass through untouched.

Open tools leave the menu (``OTEL_BREAKER_HIDE_OPEN_TOOLS``): a ``Runner.run`` turn
hands the model its tools through ``get_new_response(..., all_tools, ...)``, which is
wrapped. A ``Runner.run_streamed`` turn builds its request inline, as a
``get_stream`` closure over the turn's ``all_tools`` passed to
``stream_response_with_retry``; that call is wrapped too and the closure is rebuilt
with the visible tools in place of ``all_tools``. Either way only the model's copy
changes: the turn still resolves the model's calls against every tool, so a call to
a hidden tool reaches the guard and gets the rejection.
"""

from __future__ import annotations

import contextvars
import logging
import types
import weakref
from dataclasses import dataclass
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection, status_in_prompt_enabled
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.mcp_identity import bounded_source as _bounded_source
from otel_breaker.instrumentation.mcp_identity import implementation_identity, server_identity
from otel_breaker.instrumentation.spec import SpecAdapter, status_text, tool_patch
from otel_breaker.menu import hide_open_tools_enabled, visible_tools
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
    """The guarded invocation in progress; the failure hook fills in ``error``.

    Mutable and shared through a context variable, so the hook sees it even
    when the SDK runs the tool in a task of its own (timeouts), whose context
    is a copy.
    """

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


class OpenAIAgentsAdapter(SpecAdapter):
    name = "openai_agents"
    requires = "openai-agents>=0.24,<0.25"
    patches = (
        tool_patch("agents.run_internal.tool_execution", _INVOKE, "async"),
        tool_patch("agents.tool", _INVOKE, "async"),
    )
    modules = ("agents.tool", "agents.run_internal.tool_execution", "agents.agent", _MCP_UTIL, _RUN_LOOP)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            # Looked up in agents.tool by the tool's own failure-handling invoker.
            PatchTarget("agents.tool", _FAILURE_HOOK, self._failure_hook),
            # The tool-status block, on the instructions of every model call.
            PatchTarget("agents.agent", "Agent.get_system_prompt", self._system_prompt),
            # Which MCP server each MCP function tool calls (its breaker key's source).
            PatchTarget(_MCP_UTIL, "MCPUtil.to_function_tool", self._mcp_tool),
            # The tools a (non-streamed) model call is sent: open ones leave it (opt-in).
            PatchTarget(_RUN_LOOP, "get_new_response", self._new_response),
            # The same for a streamed turn: its agent, then the tools its request closes over.
            PatchTarget(_RUN_LOOP, "run_single_turn_streamed", self._streamed_turn),
            PatchTarget(_RUN_LOOP, "stream_response_with_retry", self._stream_with_retry),
        ]

    async def _streamed_turn(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``run_single_turn_streamed(streamed_result, bindings, ...)``: remembers the turn's
        agent for :meth:`_stream_with_retry`."""
        bindings = args[1] if len(args) > 1 else kwargs.get("bindings")
        token = _streamed_agent.set(getattr(bindings, "public_agent", None))
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _streamed_agent.reset(token)

    def _stream_with_retry(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``stream_response_with_retry(get_stream=lambda: model.stream_response(..., all_tools,
        ...), ...)`` with ``get_stream`` rebuilt to send the model only the visible tools,
        when ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` is on. Any surprise in its shape leaves it as is."""
        get_stream = kwargs.get("get_stream")
        agent = _streamed_agent.get()
        if get_stream is not None and agent is not None and hide_open_tools_enabled():
            try:
                kwargs = {**kwargs, "get_stream": _stream_without_open_tools(get_stream, agent)}
            except Exception:
                logger.debug("otel-breaker: openai_agents: could not hide open tools (streamed)", exc_info=True)
        return wrapped(*args, **kwargs)

    async def _new_response(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``get_new_response(bindings, system_prompt, input, output_schema, all_tools, ...)``
        with the open function tools left out of ``all_tools`` when
        ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` is on. Only the model's copy changes: the turn
        still runs the model's calls against every tool, so a call to a hidden tool
        reaches the guard and gets the rejection."""
        if hide_open_tools_enabled():
            try:
                args, kwargs = _without_open_tools(args, kwargs)
            except Exception:
                logger.debug("otel-breaker: openai_agents: could not hide open tools", exc_info=True)
        return await wrapped(*args, **kwargs)

    def _mcp_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Remember the server an MCP tool was built for, on the ``FunctionTool`` itself."""
        function_tool = wrapped(*args, **kwargs)
        try:
            server = kwargs.get("server") or next(a for a in args if hasattr(a, "call_tool") and hasattr(a, "name"))
            setattr(function_tool, _SERVER_ATTRIBUTE, weakref.ref(server))
        except Exception:
            logger.debug("otel-breaker: openai_agents: could not tell an MCP tool's server", exc_info=True)
        return function_tool

    # -- wrappers ----------------------------------------------------------------------

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
                function_tool = kwargs.get("function_tool")
                context = kwargs.get("context")
                error = kwargs.get("error")
                same_tool = getattr(function_tool, "name", None) == attempt.tool
                same_call = attempt.call_id is None or getattr(context, "tool_call_id", None) == attempt.call_id
                if same_tool and same_call:
                    attempt.handled = True
                    if isinstance(error, Exception):
                        # Arguments the schema refuses: the model's mistake, neither outcome.
                        attempt.error = IGNORED_RESULT if _invalid_arguments(error) else type(error).__name__
        except Exception:  # bookkeeping must never disturb the SDK's error handling
            pass
        return await wrapped(*args, **kwargs)

    async def _system_prompt(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if not status_in_prompt_enabled():
            return await wrapped(*args, **kwargs)
        prompt = await wrapped(*args, **kwargs)
        if prompt is not None and not isinstance(prompt, str):
            return prompt
        try:
            # Tools run with the agent the program created, not the Runner's execution copy.
            amended = status_text(prompt, _public_agent(instance))
            return prompt if amended is None else amended
        except Exception:
            logger.debug("otel-breaker: openai_agents: could not add the tool-status block", exc_info=True)
            return prompt

    # -- describing a call -----------------------------------------------------------------

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        function_tool = kwargs["function_tool"]
        context = kwargs.get("context")
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

    # -- adapter protocol --------------------------------------------------------------------

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        attempt = _attempt.get()
        if attempt is not None and attempt.handled:
            return attempt.error
        if getattr(result, "is_sdk_generated_error", False):
            # The SDK's default texts: a tool timeout, or a failure formatted
            # before our hook could see it.
            return "tool_error"
        return None

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        """The SDK's text for arguments the schema refused (the failure hook saw them)."""
        attempt = _attempt.get()
        if attempt is not None and attempt.handled and attempt.error == IGNORED_RESULT:
            return MISTAKE
        return None

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


def _without_open_tools(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    bindings = args[0] if args else kwargs["bindings"]
    agent = getattr(bindings, "public_agent", None)
    in_args = len(args) > _TOOLS_ARG
    tools = args[_TOOLS_ARG] if in_args else kwargs["all_tools"]
    kept = visible_tools(tools, _function_tool_name, lambda tool: mcp_source(tool, agent), agent=agent)
    if kept is tools:
        return args, kwargs
    if in_args:
        return (*args[:_TOOLS_ARG], list(kept), *args[_TOOLS_ARG + 1 :]), kwargs
    return args, {**kwargs, "all_tools": list(kept)}


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
    if type(tool).__name__ != "FunctionTool":
        return None
    name = getattr(tool, "name", None)
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
    identity = server_identity(getattr(server, "session", None))
    if identity is None:
        identity = implementation_identity(
            getattr(getattr(server, "server_initialize_result", None), "server_info", None)
        )
    return identity if identity is not None else _bounded_source(f"mcp:{binding[0]}")


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
    run_config = getattr(context, "run_config", None)
    group_id = getattr(run_config, "group_id", None)
    if isinstance(group_id, str) and group_id:
        return group_id
    try:
        from agents.tracing import get_current_trace

        trace = get_current_trace()
    except Exception:
        return None
    trace_id = getattr(trace, "trace_id", None)
    if isinstance(trace_id, str) and trace_id and trace_id != "no-op":
        return trace_id
    return None
