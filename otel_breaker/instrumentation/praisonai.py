"""PraisonAI agents (``praisonaiagents``): a breaker on every tool call of an ``Agent``:
``ToolExecutionMixin.execute_tool`` (``chat``/``start``) and
``ExecutionMixin.execute_tool_async`` (``achat``/``astart``), looked up per call. A
raising tool fails a sync run (``ToolExecutionError``, the framework's contract:
counted and re-raised); the async path returns ``{"error": ...}``, counted unless it
is a policy decision (approval, permission, guardrail, its own loop guard) or the
model's mistake (an unknown name, arguments the tool cannot take), which the loop
guard counts. A rejection is a plain ``{"error": text}`` (no marker keys:
praisonaiagents reads ``circuit_open`` and the like to retry or abort). Its own
circuit breaker sits inside ours: keep ``failure_threshold`` at or below
``5 / retry attempts``. Every Chat Completions request (``_normalize_chat_params``,
``LLM._build_completion_params``) gets the status block and loses the running
agent's open tools, on a copy. An agent's ``chat``/``achat``/``run``/``start`` (and
their async forms) and a team's ``start``/``run`` are a run, which the agents it runs join.
"""

from __future__ import annotations

import contextvars
from typing import Any

from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation import refusals
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.chat_messages import amended_request
from otel_breaker.instrumentation.patches import context_wrapper
from otel_breaker.instrumentation.refusals import RUN
from otel_breaker.instrumentation.run_results import as_run, run_around
from otel_breaker.instrumentation.spec import SpecAdapter, argument, context_patch, tool_patch
from otel_breaker.toolcall import ToolCall, active_call

_CHAT = "praisonaiagents.agent.chat_mixin"
_OPENAI, _LLM = "praisonaiagents.llm.openai_client", "praisonaiagents.llm.llm"
_EXECUTION = "praisonaiagents.agent.execution_mixin"
_TEAM = "praisonaiagents.agents.agents"
#: An agent's or a team's invocation: a run (an agent a team or a handoff runs joins it).
#: ``start`` returns a stream when it streams: ``as_run`` follows what comes back.
_AGENT_RUNS = ("ExecutionMixin.run", "ExecutionMixin.start", "ExecutionMixin.arun", "ExecutionMixin.astart")
_TEAM_RUNS = ("AgentTeam.run", "AgentTeam.start", "AgentTeam.astart")
# The agent whose chat is running in this context (for the status block and the menu).
_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_praisonai_agent", default=None)
# Tool search's meta-tools: ``tool_call`` re-enters ``execute_tool`` with the real tool's name.
_BRIDGE_TOOLS = frozenset({"tool_search", "tool_describe", "tool_call"})
# Error dicts that are decisions, not tool failures.
_DENIALS = ("approval_denied", "approval_error", "permission_denied", "policy_denied", "guardrail_denied")
_DECISION_KEYS = (*_DENIALS, "loop_blocked")
_UNKNOWN_TOOL, _INVALID_ARGUMENTS = "available_tools", "expected_parameters"


def _praison_tool(agent: Any, name: str) -> Any:
    """The agent's tool called ``name`` (a function or a tool object), or None."""
    for tool in getattr(agent, "tools", None) or ():
        if getattr(tool, "__name__", None) == name or getattr(tool, "name", None) == name:
            return tool
    return None


def _invalid_arguments(call: ToolCall | None, result: dict) -> bool:
    """Whether an error dict answers arguments the tool cannot take: the sync path says
    so, the async path flattens the call's ``TypeError``, which the agent's own binding
    check recognises (the tool body never ran)."""
    if _INVALID_ARGUMENTS in result:
        return True
    call = call or active_call()
    check = getattr(getattr(call, "agent", None), "_is_argument_binding_error", None)
    tool = _praison_tool(call.agent, call.tool) if call is not None else None
    try:
        return bool(check is not None and tool is not None and check(tool, call.arguments))
    except Exception:
        return False


def _error(text: str) -> dict[str, str]:
    return {"error": text}


def _chatting_agent(agent: Any, args: tuple, kwargs: dict) -> Any:
    """``chat``/``achat``: the agent whose model requests follow."""
    return agent


_marked_chat = context_wrapper(context_patch(_CHAT, "ChatMixin.chat", _agent, _chatting_agent, "sync"))
_marked_achat = context_wrapper(context_patch(_CHAT, "ChatMixin.achat", _agent, _chatting_agent, "async"))


def _chat_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``chat``: the agent marked for its model requests, and a run unless one is open."""

    def marked(*call_args: Any, **call_kwargs: Any) -> Any:
        return _marked_chat(wrapped, instance, call_args, call_kwargs)

    return run_around(marked, args, kwargs, "praisonai")


def _achat_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """:func:`_chat_run` for ``achat``."""

    def marked(*call_args: Any, **call_kwargs: Any) -> Any:
        return _marked_achat(wrapped, instance, call_args, call_kwargs)

    return run_around(marked, args, kwargs, "praisonai")


class PraisonAIAdapter(SpecAdapter):
    name = "praisonai"
    patches = (
        tool_patch("praisonaiagents.agent.tool_execution", "ToolExecutionMixin.execute_tool", "sync"),
        tool_patch("praisonaiagents.agent.execution_mixin", "ExecutionMixin.execute_tool_async", "async"),
    )
    modules = (*dict.fromkeys(p.module for p in patches), _CHAT, _OPENAI, _LLM, _TEAM)

    def targets(self) -> list[PatchTarget]:
        # Request parameters are amended once built, for the status block and the menu alike.
        return [
            *super().targets(),
            PatchTarget(_OPENAI, "_normalize_chat_params", self._request_params),
            PatchTarget(_LLM, "LLM._build_completion_params", self._request_params),
            PatchTarget(_CHAT, "ChatMixin.chat", _chat_run),
            PatchTarget(_CHAT, "ChatMixin.achat", _achat_run),
            *(PatchTarget(_EXECUTION, qualname, as_run(self.name)) for qualname in _AGENT_RUNS),
            *(PatchTarget(_TEAM, qualname, as_run(self.name)) for qualname in _TEAM_RUNS),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        function_name = argument(args, kwargs, 0, "function_name")
        if instance is None or not isinstance(function_name, str) or not function_name:
            return None
        if function_name in _BRIDGE_TOOLS and getattr(instance, "_tool_search_config", None) is not None:
            return None
        call_id = argument(args, kwargs, 2, "tool_call_id")
        session_id = getattr(instance, "_session_id", None)
        return ToolCall(
            function_name,
            framework=self.name,
            agent=instance,
            agent_name=agent_display_name(instance),
            session_id=session_id if isinstance(session_id, str) else None,
            call_id=call_id if isinstance(call_id, str) else None,
            arguments=argument(args, kwargs, 1, "arguments"),
            origin=origin_of(_praison_tool(instance, function_name), "praisonaiagents"),
        )

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        if not isinstance(result, dict) or not result.get("error"):
            return None
        if any(result.get(key) for key in _DECISION_KEYS):
            return IGNORED_RESULT  # a denial or policy block: says nothing about the tool
        if _UNKNOWN_TOOL in result or _invalid_arguments(call, result):
            return IGNORED_RESULT  # the model's mistake (unknown tool, bad arguments)
        if result.get("circuit_open"):
            return "circuit_open"  # praisonaiagents' own breaker, inside ours
        if result.get("timeout"):
            return "timeout"
        return "tool_error"

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        """Arguments the tool cannot take: the loop guard counts the model's mistake."""
        mistake = isinstance(result, dict) and result.get("error") and _invalid_arguments(call, result)
        return MISTAKE if mistake else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return _error(info.message)

    # A name no tool has is answered by the agent itself; the loop guard keeps count of it.

    def run_sync(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        if _praison_tool(call.agent, call.tool) is not None:
            return super().run_sync(call, wrapped, args, kwargs)
        answer = refusals.check(self.guard, call, _error, unknown=True)
        if answer is not RUN:
            return self._counted(call, answer)
        return self._counted(call, super().run_sync(call, wrapped, args, kwargs))

    async def run_async(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        if _praison_tool(call.agent, call.tool) is not None:
            return await super().run_async(call, wrapped, args, kwargs)
        answer = refusals.check(self.guard, call, _error, unknown=True)
        if answer is not RUN:
            return self._counted(call, answer)
        return self._counted(call, await super().run_async(call, wrapped, args, kwargs))

    def _counted(self, call: ToolCall, result: Any) -> Any:
        if isinstance(result, dict) and _UNKNOWN_TOOL in result:
            refusals.count(self.guard, call, str(result.get("error")), unknown=True)
        return result

    def _request_params(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        params = wrapped(*args, **kwargs)
        try:
            return amended_request(params, _agent.get())
        except Exception:
            return params
