"""Breakers for the OpenAI Agents SDK (``openai-agents``; private names, so the range is pinned).

Every function tool call (Runner and realtime) goes through ``_invoke_function_tool_with_metadata``, defined in
``agents.tool`` and imported by name into ``run_internal.tool_execution``: guarded in both, once per call. The SDK
turns a tool's exception into text inside it, so its failure formatter notes the failure on the guarded call.
Rejection: the SDK's own "SDK-generated error" result. Status block: what ``Agent.get_system_prompt`` returns.
Menu: the ``all_tools`` a turn's model request closes over; the turn still resolves calls against every tool, so
a hidden tool's call is rejected.
"""

from __future__ import annotations

import contextvars
import dataclasses
from contextlib import suppress
from typing import Any

from otel_breaker.call_steps import unknown_outcome_text
from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation import mcp_identity as mcp
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name, guarded_call, note, noted
from otel_breaker.instrumentation.patches import closure_value, observe_patch, prompt_patch, rebind, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter, argument, context_patch, menu_patch, status_text
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_INVOKE, _MCP_UTIL, _RUN_LOOP = "_invoke_function_tool_with_metadata", "agents.mcp.util", "agents.run_internal.run_loop"
_NOTE = "openai_agents.failure"  # (_NOTE, error) on the guarded call: the failure the SDK formatted
#: The agent of the turn in progress (its breakers decide what is hidden).
_turn_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_oa_turn_agent", default=None)


def _agent(args: tuple, kwargs: dict, index: int) -> Any:
    """The agent of a turn, from its ``bindings`` argument."""
    return getattr(argument(args, kwargs, index, "bindings"), "public_agent", None)


class OpenAIAgentsAdapter(SpecAdapter):
    name = "openai_agents"
    patches = (
        tool_patch("agents.run_internal.tool_execution", _INVOKE),
        tool_patch("agents.tool", _INVOKE),
        prompt_patch("agents.agent", "Agent.get_system_prompt", "async", "system_prompt", after=True),
        context_patch(_RUN_LOOP, "get_new_response", _turn_agent, lambda _, a, k: _agent(a, k, 0)),
        context_patch(_RUN_LOOP, "run_single_turn_streamed", _turn_agent, lambda _, a, k: _agent(a, k, 1)),
        menu_patch(_RUN_LOOP, "get_response_with_retry"),
        menu_patch(_RUN_LOOP, "stream_response_with_retry"),
        observe_patch(_MCP_UTIL, "MCPUtil.to_function_tool", "_mcp_tool"),  # links an MCP tool to its server
    )
    modules = ("agents.tool", "agents.run_internal.tool_execution", "agents.agent", _MCP_UTIL, _RUN_LOOP)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),  # + the failure formatter (looked up in agents.tool)
            PatchTarget("agents.tool", "maybe_invoke_function_tool_failure_error_function", self._failure_hook),
        ]

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The model request (``get_response`` or ``get_stream``) over a copy of its closure whose
        ``all_tools`` cell holds the visible tools."""
        key = "get_stream" if "get_stream" in kwargs else "get_response"
        if (fn := kwargs.get(key)) is None or (agent := _turn_agent.get()) is None:
            return None
        name_of = lambda t: t.name if type(t).__name__ == "FunctionTool" and isinstance(t.name, str) else None  # noqa: E731
        tools = closure_value(fn, "all_tools")  # only function tools are guarded, so only they leave
        if (kept := visible_tools(tools, name_of, lambda tool: mcp_source(tool, agent), agent=agent)) is tools:
            return None
        return args, {**kwargs, key: rebind(fn, "all_tools", list(kept))}

    def system_prompt(self, instance: Any, args: tuple, kwargs: dict, prompt: Any) -> Any:
        """With the status block of the agent the program made (tools run with it, not the Runner's copy)."""
        from agents._public_agent import get_public_agent

        return status_text(prompt, get_public_agent(instance)) if prompt is None or isinstance(prompt, str) else None

    def _mcp_tool(self, instance: Any, args: tuple, kwargs: dict, function_tool: Any) -> None:
        mcp.link_server(function_tool, argument(args, kwargs, 1, "server"))

    async def _failure_hook(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Note the exception the SDK is about to turn into text on the guarded call it ends (a
        mutable frame, seen from the task the SDK may run the tool in too); bad arguments: neither outcome."""
        with suppress(Exception):  # bookkeeping must never disturb the SDK's error handling
            frame = guarded_call()
            call, error = frame.call, kwargs.get("error")  # type: ignore[union-attr]
            ours = (call.framework, call.tool) == (self.name, kwargs["function_tool"].name) and noted(_NOTE) is None
            if ours and call.call_id in (None, getattr(kwargs.get("context"), "tool_call_id", None)):
                failure = IGNORED_RESULT if _invalid_arguments(error) else type(error).__name__
                note(_NOTE, failure if isinstance(error, Exception) else None)
                if isinstance(error, Exception) and failure != IGNORED_RESULT:
                    frame.swallowed = error  # the verdict reads the exception, not the SDK's text
                    unknown = self._unknown_outcome(call, error)
                    if unknown is not None:
                        return unknown  # a destructive tool's call in doubt: never "please try again"
        return await wrapped(*args, **kwargs)

    def _unknown_outcome(self, call: ToolCall, error: Exception) -> str | None:
        """The text the model reads for a destructive tool's call whose outcome is unknown."""
        breaker = self.guard.breaker_for(call)
        return None if breaker is None else unknown_outcome_text(breaker, call, error)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        tool, context = kwargs["function_tool"], kwargs.get("context")
        agent = getattr(context, "agent", None)
        return ToolCall(
            tool.name, self.name, agent, agent_display_name(agent), _session_id(context),
            getattr(context, "tool_call_id", None), "function", mcp_source(tool, agent),
            kwargs.get("arguments"), origin_of(tool, "agents"),
        )  # fmt: skip

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        # Unless the hook saw it: the SDK's default texts (a tool timeout, a failure formatted before).
        default = "tool_error" if getattr(result, "is_sdk_generated_error", False) else None
        return seen[1] if (seen := noted(_NOTE)) is not None else default

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        """The SDK's text for arguments the schema refused (the failure hook saw them)."""
        return MISTAKE if noted(_NOTE) == (_NOTE, IGNORED_RESULT) else None

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """Bad arguments raised (a tool without a failure-error function): the model's mistake."""
        return MISTAKE if _invalid_arguments(exc) else None

    def retried(self, call: ToolCall, failure: Any, note: str) -> Any:
        """The SDK's error text of the last attempt of a call retried below the model, with
        the number of attempts at its end (an exception: the call path's default)."""
        if type(failure).__name__ != "_FunctionToolInvocationResult" or not isinstance(failure.output, str):
            return None
        return dataclasses.replace(failure, output=f"{failure.output} {note}")

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from agents.tool import _FunctionToolInvocationResult  # its error text bypasses the output schema

        return _FunctionToolInvocationResult(info.message, is_sdk_generated_error=True)


def _invalid_arguments(error: Any) -> bool:
    """Arguments the tool's schema refuses: the tool never ran, so this says nothing of its health."""
    text = str(error) if type(error).__name__ == "ModelBehaviorError" and isinstance(error, Exception) else ""
    return text.startswith("Invalid JSON input for tool")


def mcp_source(function_tool: Any, agent: Any = None) -> str | None:
    """The MCP server an MCP function tool calls (``name@version`` from its ``initialize``), None
    for other tools: the server the SDK built it for, else the agent's one its binding names."""
    if (binding := getattr(function_tool, "_mcp_tool_binding", None)) is None:
        return None
    if (server := mcp.linked_server(function_tool)) is None:
        from agents.mcp.util import get_mcp_server_log_name as log_name

        named = [s for s in getattr(agent, "mcp_servers", None) or () if log_name(s.name) == binding[0]]
        if len(named) != 1:
            return None
        server = named[0]
    info = getattr(getattr(server, "server_initialize_result", None), "server_info", None)
    identity = mcp.server_identity(getattr(server, "session", None)) or mcp.implementation_identity(info)
    return identity if identity is not None else mcp.bounded_source(f"mcp:{binding[0]}")


def _session_id(context: Any) -> str | None:
    """The run's ``group_id`` when the program set one, else the current trace's id (one per run)."""
    group_id = getattr(getattr(context, "run_config", None), "group_id", None)
    if isinstance(group_id, str) and group_id:
        return group_id
    from agents.tracing import get_current_trace

    trace_id = getattr(get_current_trace(), "trace_id", None)
    return trace_id if isinstance(trace_id, str) and trace_id and trace_id != "no-op" else None
