"""PraisonAI agents (``praisonaiagents``): guard every tool call an ``Agent`` makes.

Why these patch points: every tool call of an ``Agent`` goes through one of
two methods, whatever the entry point (``chat``/``start`` with or without
streaming go through the sync one, ``achat``/``astart`` through the async
one). They are looked up on the instance per call, so patching the mixin
classes reaches agents created before instrumentation too.

* ``ToolExecutionMixin.execute_tool(self, function_name, arguments, tool_call_id=None)``
* ``ExecutionMixin.execute_tool_async(self, function_name, arguments, tool_call_id=None, tools_override=None)``

How failures show: on the sync path a tool that raises is retried by
praisonaiagents and then surfaces as ``ToolExecutionError``, which ends
``agent.chat()``. That is the framework's documented contract (a raising tool
fails the run), so the exception is counted and re-raised unchanged. On the
async path the same failure comes back as ``{"error": ...}``; any error dict
is counted through :meth:`PraisonAIAdapter.result_error`, except the
framework's own policy decisions (approval/permission/guardrail denials, loop
guard blocks) and the model's mistakes (unknown tool, bad arguments), which
say nothing about the tool's health.

What a rejection looks like: a plain ``{"error": text}``, the shape the loop
already feeds back to the model for tool errors. No marker keys are added:
praisonaiagents reads keys such as ``circuit_open`` to retry or abort.

praisonaiagents has a circuit breaker of its own inside ``execute_tool``
(per agent and tool, 5 failed attempts in 60 s, counting its own retries). Ours
sits outside it and counts logical calls: one ``execute_tool`` call is one
call however often the framework retried the body. When ours is open the
framework's is never reached; when the framework's opens first, its refusal
(``circuit_open``) is counted as a failure here, because it only opens on real
failures of the tool. Keep ``failure_threshold`` at or below
``5 / retry attempts`` to have ours decide first.

The tool-status block (``OTEL_BREAKER_STATUS_IN_PROMPT=true``): the system
prompt is built once per chat, but the tool loop calls the model several times
within it, so the block goes into each request instead. Every Chat
Completions request of ``OpenAIClient`` (sync and async, streaming or not,
with or without tools) passes its parameters through the module function
``praisonaiagents.llm.openai_client._normalize_chat_params``, and every
LiteLLM request of ``LLM`` through ``LLM._build_completion_params``; the
request's ``messages`` are replaced by a copy whose system message carries the
block (a system message holding only the block is put first when there is
none). The conversation the agent keeps is never changed. ``ChatMixin.chat``
and ``achat`` mark the agent whose chat is running, so its own breakers are
listed. Requests that bypass both (the Responses API path, the agent's own
direct streaming calls of ``start(stream=True)``) get no block.

Hidden tools (``OTEL_BREAKER_HIDE_OPEN_TOOLS``): the same two functions build
each request's ``tools``; the copy sent leaves out the running agent's open
tools. The agent keeps its tools, so a call to a hidden one still reaches the
guard and gets the rejection.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation import refusals
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block, tool_patch
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall, active_call

logger = logging.getLogger("otel_breaker")

_CHAT = "praisonaiagents.agent.chat_mixin"

# The agent whose chat is running in this context (for the status block and the menu).
_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_praisonai_agent", default=None)

# Meta-tools of praisonaiagents' tool search: ``tool_call`` re-enters
# ``execute_tool`` with the real tool's name, which is the call we count.
_BRIDGE_TOOLS = frozenset({"tool_search", "tool_describe", "tool_call"})

# Error dicts that are decisions, not tool failures: a denial or a loop-guard
# block must not open a breaker.
_DECISION_KEYS = (
    "approval_denied",
    "approval_error",
    "permission_denied",
    "policy_denied",
    "guardrail_denied",
    "loop_blocked",
)

# Error dicts caused by the model (a tool name that does not exist, arguments
# that do not fit the schema); the tool itself is fine.
_UNKNOWN_TOOL = "available_tools"
_INVALID_ARGUMENTS = "expected_parameters"

# Chat Completions messages are plain dicts.
DIALECT = MessageDialect(
    is_system=lambda m: isinstance(m, dict) and m.get("role") == "system",
    text=lambda m: m.get("content") if isinstance(m.get("content"), str) else None,
    with_text=lambda m, text: {**m, "content": text},
    system=lambda text: {"role": "system", "content": text},
)


def _error(text: str) -> dict[str, str]:
    return {"error": text}


def _invalid_arguments(call: ToolCall, result: dict) -> bool:
    """Whether an error dict answers arguments the tool cannot take: the sync path says
    so, the async path only flattens the ``TypeError`` of the call, which the agent's
    own binding check recognises (the tool body never ran)."""
    if _INVALID_ARGUMENTS in result:
        return True
    call = call or active_call()
    agent = getattr(call, "agent", None)
    check = getattr(agent, "_is_argument_binding_error", None)
    tool = _praison_tool(agent, call.tool) if call is not None else None
    try:
        return bool(check is not None and tool is not None and check(tool, call.arguments))
    except Exception:
        return False


def _argument(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _tool_name(tool: Any) -> str | None:
    """The name of one Chat Completions tool definition."""
    return (tool.get("function") or {}).get("name") if isinstance(tool, dict) else None


def _praison_tool(agent: Any, name: str) -> Any:
    """The agent's tool called ``name`` (a function or a tool object), or None."""
    for tool in getattr(agent, "tools", None) or ():
        if getattr(tool, "__name__", None) == name or getattr(tool, "name", None) == name:
            return tool
    return None


class PraisonAIAdapter(SpecAdapter):
    """Guards ``Agent.execute_tool`` and ``Agent.execute_tool_async``."""

    name = "praisonai"
    requires = "praisonaiagents>=1.7,<2"
    patches = (
        tool_patch("praisonaiagents.agent.tool_execution", "ToolExecutionMixin.execute_tool", "sync"),
        tool_patch("praisonaiagents.agent.execution_mixin", "ExecutionMixin.execute_tool_async", "async"),
    )
    modules = (
        "praisonaiagents.agent.tool_execution",
        "praisonaiagents.agent.execution_mixin",
        _CHAT,
        "praisonaiagents.llm.openai_client",
        "praisonaiagents.llm.llm",
    )

    def targets(self) -> list[PatchTarget]:
        # Request parameters are amended after they are built (the status block,
        # the menu), so these are plain targets rather than prompt patches.
        return [
            *super().targets(),
            PatchTarget(_CHAT, "ChatMixin.chat", self._chat),
            PatchTarget(_CHAT, "ChatMixin.achat", self._achat),
            PatchTarget("praisonaiagents.llm.openai_client", "_normalize_chat_params", self._request_params),
            PatchTarget("praisonaiagents.llm.llm", "LLM._build_completion_params", self._request_params),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        function_name = _argument(args, kwargs, 0, "function_name")
        if instance is None or not isinstance(function_name, str) or not function_name:
            return None
        if function_name in _BRIDGE_TOOLS and getattr(instance, "_tool_search_config", None) is not None:
            return None
        call_id = _argument(args, kwargs, 2, "tool_call_id")
        session_id = getattr(instance, "_session_id", None)
        return ToolCall(
            function_name,
            framework=self.name,
            agent=instance,
            agent_name=agent_display_name(instance),
            session_id=session_id if isinstance(session_id, str) else None,
            call_id=call_id if isinstance(call_id, str) else None,
            arguments=_argument(args, kwargs, 1, "arguments"),
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
            return "circuit_open"
        if result.get("timeout"):
            return "timeout"
        return "tool_error"

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        """Arguments the tool cannot take: the loop guard counts the model's mistake."""
        mistake = isinstance(result, dict) and result.get("error") and _invalid_arguments(call, result)
        return MISTAKE if mistake else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return {"error": info.message}

    # -- a name no tool has: answered by the agent itself, kept by the loop guard --------------

    def run_sync(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        unknown = _praison_tool(call.agent, call.tool) is None
        answer = refusals.check(self.guard, call, _error, unknown=True) if unknown else refusals.RUN
        if answer is not refusals.RUN:
            return answer
        return self._unknown_counted(call, super().run_sync(call, wrapped, args, kwargs), unknown)

    async def run_async(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        unknown = _praison_tool(call.agent, call.tool) is None
        answer = refusals.check(self.guard, call, _error, unknown=True) if unknown else refusals.RUN
        if answer is not refusals.RUN:
            return answer
        return self._unknown_counted(call, await super().run_async(call, wrapped, args, kwargs), unknown)

    def _unknown_counted(self, call: ToolCall, result: Any, unknown: bool) -> Any:
        if unknown and isinstance(result, dict) and _UNKNOWN_TOOL in result:
            refusals.count(self.guard, call, str(result.get("error")), unknown=True)
        return result

    # -- the running agent, and each request it sends --------------------------------------

    def _chat(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = _agent.set(instance)
        try:
            return wrapped(*args, **kwargs)
        finally:
            _agent.reset(token)

    async def _achat(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = _agent.set(instance)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _agent.reset(token)

    def _request_params(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        params = wrapped(*args, **kwargs)
        try:
            return _amended(params, _agent.get())
        except Exception:
            logger.debug("otel-breaker: praisonai: request left as built", exc_info=True)
            return params


def _amended(params: Any, agent: Any) -> Any:
    """Request ``params`` with the status block and without open tools (a new dict),
    or ``params`` itself when neither applies."""
    if not isinstance(params, dict):
        return params
    amended = params
    if isinstance(params.get("messages"), list):
        messages = insert_status_block(params["messages"], DIALECT, agent)
        if messages is not None:
            amended = {**amended, "messages": messages}
    tools = params.get("tools")
    if isinstance(tools, list):
        visible = visible_tools(tools, _tool_name, agent=agent)
        if visible is not tools:
            amended = {**amended, "tools": list(visible)} if visible else _without_tools(amended)
    return amended


def _without_tools(params: dict) -> dict:
    """Every tool hidden: the request goes out as one without tools."""
    return {k: v for k, v in params.items() if k not in ("tools", "tool_choice")}
