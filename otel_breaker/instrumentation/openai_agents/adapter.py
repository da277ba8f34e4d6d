"""The OpenAI Agents SDK adapter: where tool calls run, and what the model sees.

Every function tool call (Runner and realtime) goes through ``_invoke_function_tool_with_metadata``,
defined in ``agents.tool`` and imported by name into ``run_internal.tool_execution``: guarded in both,
once per call. The SDK turns a tool's exception into text inside it: :mod:`.failures` reads it from the
SDK's failure formatter. Rejection: the SDK's own "SDK-generated error" result. Status block: what
``Agent.get_system_prompt`` returns. Menu: the ``all_tools`` a turn's model request closes over; the
turn still resolves calls against every tool, so a hidden tool's call is rejected.

A run (:mod:`otel_breaker.runs`) is ``AgentRunner.run`` (``Runner.run`` and ``run_sync`` run
through it) and ``AgentRunner.run_streamed``, whose run goes on in the task it starts and ends
with it. A handoff is a turn of the same run; an agent called as a tool runs inside its caller's
run and joins it.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.openai_agents.failures import (
    FAILURE_NOTE,
    formatting_failure,
    invalid_arguments,
    noted_failure,
)
from otel_breaker.instrumentation.openai_agents.mcp_tools import link_tool_to_server, mcp_source
from otel_breaker.instrumentation.patches import (
    closure_value,
    ending_with,
    observe_patch,
    prompt_patch,
    rebind,
    run_in_tasks,
    run_patch,
    tool_patch,
)
from otel_breaker.instrumentation.spec import SpecAdapter, argument, context_patch, menu_patch, status_text
from otel_breaker.loops import LoopRejection, RepeatedCallError
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_INVOKE = "_invoke_function_tool_with_metadata"
_TOOL = "agents.tool"
_TOOL_EXECUTION = "agents.run_internal.tool_execution"
_MCP_UTIL = "agents.mcp.util"
_RUN_LOOP = "agents.run_internal.run_loop"
_RUN = "agents.run"

#: The agent of the turn in progress (its breakers decide what is hidden).
_turn_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_oa_turn_agent", default=None)


def _agent_of_turn(args: tuple, kwargs: dict, index: int) -> Any:
    """The agent of a turn, from its ``bindings`` argument."""
    return getattr(argument(args, kwargs, index, "bindings"), "public_agent", None)


def _response_agent(instance: Any, args: tuple, kwargs: dict) -> Any:
    """``get_new_response(bindings, ...)``."""
    return _agent_of_turn(args, kwargs, 0)


def _streamed_turn_agent(instance: Any, args: tuple, kwargs: dict) -> Any:
    """``run_single_turn_streamed(streamed_result, bindings, ...)``."""
    return _agent_of_turn(args, kwargs, 1)


def _function_tool_name(tool: Any) -> str | None:
    """Only function tools are guarded, so only they leave the menu."""
    if type(tool).__name__ == "FunctionTool" and isinstance(tool.name, str):
        return tool.name
    return None


class OpenAIAgentsAdapter(SpecAdapter):
    name = "openai_agents"
    patches = (
        tool_patch(_TOOL_EXECUTION, _INVOKE),
        tool_patch(_TOOL, _INVOKE),
        prompt_patch("agents.agent", "Agent.get_system_prompt", "async", "system_prompt", after=True),
        context_patch(_RUN_LOOP, "get_new_response", _turn_agent, _response_agent),
        context_patch(_RUN_LOOP, "run_single_turn_streamed", _turn_agent, _streamed_turn_agent),
        menu_patch(_RUN_LOOP, "get_response_with_retry"),
        menu_patch(_RUN_LOOP, "stream_response_with_retry"),
        # Links an MCP tool to its server.
        observe_patch(_MCP_UTIL, "MCPUtil.to_function_tool", "_mcp_tool"),
        # A run: Runner.run and run_sync call it (run_streamed, a target below).
        run_patch(_RUN, "AgentRunner.run"),
    )
    modules = (_TOOL, _TOOL_EXECUTION, "agents.agent", _MCP_UTIL, _RUN_LOOP, _RUN)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            # The failure formatter, looked up in agents.tool.
            PatchTarget(_TOOL, "maybe_invoke_function_tool_failure_error_function", self._failure_formatter),
            PatchTarget(_RUN, "AgentRunner.run_streamed", _streamed_run),
        ]

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The model request (``get_response`` or ``get_stream``) over a copy of its closure whose
        ``all_tools`` cell holds the visible tools."""
        key = "get_stream" if "get_stream" in kwargs else "get_response"
        request = kwargs.get(key)
        agent = _turn_agent.get()
        if request is None or agent is None:
            return None

        def source(tool: Any) -> str | None:
            return mcp_source(tool, agent)

        tools = closure_value(request, "all_tools")
        kept = visible_tools(tools, _function_tool_name, source, agent=agent)
        if kept is tools:
            return None
        return args, {**kwargs, key: rebind(request, "all_tools", list(kept))}

    def system_prompt(self, instance: Any, args: tuple, kwargs: dict, prompt: Any) -> Any:
        """With the status block of the agent the program made (tools run with it, not the Runner's copy)."""
        from agents._public_agent import get_public_agent

        if prompt is not None and not isinstance(prompt, str):
            return None
        return status_text(prompt, get_public_agent(instance))

    def _mcp_tool(self, instance: Any, args: tuple, kwargs: dict, function_tool: Any) -> None:
        link_tool_to_server(function_tool, argument(args, kwargs, 1, "server"))

    async def _failure_formatter(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return await formatting_failure(self, wrapped, instance, args, kwargs)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        tool = kwargs["function_tool"]
        context = kwargs.get("context")
        agent = getattr(context, "agent", None)
        return ToolCall(
            tool.name,
            self.name,
            agent,
            agent_display_name(agent),
            session_id=_session_id(context),
            call_id=getattr(context, "tool_call_id", None),
            source=mcp_source(tool, agent),
            arguments=kwargs.get("arguments"),
            origin=origin_of(tool, "agents"),
        )

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        seen = noted_failure()
        if seen is not None:
            return seen[1]
        # The SDK's default texts the formatter did not see: a tool timeout, a failure formatted before.
        return "tool_error" if getattr(result, "is_sdk_generated_error", False) else None

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        """The SDK's text for arguments the schema refused (the failure formatter saw them)."""
        return MISTAKE if noted_failure() == (FAILURE_NOTE, IGNORED_RESULT) else None

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """Bad arguments raised (a tool without a failure-error function): the model's mistake."""
        return MISTAKE if invalid_arguments(exc) else None

    def retried(self, call: ToolCall, failure: Any, note: str) -> Any:
        """The SDK's error text of the last attempt of a call retried below the model, with
        the number of attempts at its end (an exception: the call path's default)."""
        if type(failure).__name__ != "_FunctionToolInvocationResult" or not isinstance(failure.output, str):
            return None
        return dataclasses.replace(failure, output=f"{failure.output} {note}")

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        if getattr(info, "raised", False):
            # The loop guard's answer to a call whose identical failure raised (a tool with
            # ``failure_error_function=None``): it raises too, and ends the run as that did.
            raise info.repeated_error()
        if isinstance(info, LoopRejection):
            # The SDK turned the identical call's failure into text through the tool's failure
            # function (the user's own, or the SDK's default): that function gets the loop error.
            return RepeatedFailure(info.repeated_error())
        from agents.tool import _FunctionToolInvocationResult  # its error text bypasses the output schema

        return _FunctionToolInvocationResult(info.message, is_sdk_generated_error=True)

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        answer = await super()._tool_async(wrapped, instance, args, kwargs)
        if isinstance(answer, RepeatedFailure):
            return await answer.formatted(kwargs["function_tool"], kwargs.get("context"))
        return answer


class RepeatedFailure:
    """The loop guard's answer to a call whose identical failure the SDK formatted: handed
    to the tool's failure function once the guarded call has returned, as the SDK hands a
    tool's exception."""

    def __init__(self, error: RepeatedCallError) -> None:
        self.error = error

    async def formatted(self, function_tool: Any, context: Any) -> Any:
        """The SDK's invocation result: the user's failure function's text for the loop error.
        The SDK's default function says only "an error occurred" (it hides error details), so
        with it the model reads the loop guard's own text; with no failure function (``None``)
        the error is raised as the SDK raises a tool's."""
        from agents.tool import _FunctionToolInvocationResult, maybe_invoke_function_tool_failure_error_function

        if getattr(function_tool, "_use_default_failure_error_function", True):
            return _FunctionToolInvocationResult(str(self.error), is_sdk_generated_error=True)
        text = await maybe_invoke_function_tool_failure_error_function(
            function_tool=function_tool, context=context, error=self.error
        )
        if text is None:
            raise self.error
        return _FunctionToolInvocationResult(text, is_sdk_generated_error=True)


def _streamed_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``AgentRunner.run_streamed``: returns at once, its loop running in the task it starts
    (``run_loop_task``), which holds the run until it is done."""
    result, opened = run_in_tasks(wrapped, args, kwargs, "openai_agents")
    ending_with(getattr(result, "run_loop_task", None), opened)
    return result


def _session_id(context: Any) -> str | None:
    """The run's ``group_id`` when the program set one, else the current trace's id (one per run)."""
    group_id = getattr(getattr(context, "run_config", None), "group_id", None)
    if isinstance(group_id, str) and group_id:
        return group_id
    from agents.tracing import get_current_trace

    trace_id = getattr(get_current_trace(), "trace_id", None)
    if isinstance(trace_id, str) and trace_id and trace_id != "no-op":
        return trace_id
    return None
