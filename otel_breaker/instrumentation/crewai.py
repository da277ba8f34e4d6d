"""CrewAI (1.15): every tool call of a crew, on both of its tool paths.

Native function calling: ``run``/``arun``, guarded; ``_execute_single_native_tool_call`` tells who calls and
answers a name no tool has (the loop guard counts it). ReAct text: an action (``ToolUsage.use``) invokes
``CrewStructuredTool.invoke`` in ``_use``, up to six times: one call (:mod:`.retried_action`), judged by
``last_failure``. Arguments the tool's schema rejects are the model's mistake. The rejection is a
``ToolFailure(code="circuit_open")``, plain text under ``tool_failure_policy="raise"`` (a breaker never ends
a crew). Model calls get the status block; the native menu loses open tools. Breakers are per agent role.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Any

from otel_breaker.classify import IGNORED_RESULT
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.chat_messages import DICT_MESSAGES, schema_name
from otel_breaker.instrumentation.current_call import HoldsCurrentCall
from otel_breaker.instrumentation.mistakes import run_unknown
from otel_breaker.instrumentation.patches import argument, context_patch, menu_patch, prompt_patch, tool_patch
from otel_breaker.instrumentation.retried_action import Actions, RetriedAction
from otel_breaker.instrumentation.spec import SpecAdapter
from otel_breaker.instrumentation.status_context import status_while_open
from otel_breaker.instrumentation.validator import Validator
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall, agent_display_name

_BASE, _STRUCTURED, _USAGE = "crewai.tools.base_tool", "crewai.tools.structured_tool", "crewai.tools.tool_usage"
_EXECUTOR, _STEPS = "crewai.agents.agent_executor", "crewai.agents.step_executor"
# A native call's (executor, tool call id); the tool object being guarded (its failure policy); the
# ReAct action in progress (a ToolUsage); CrewAI's argument validation, which also marks that action.
_native: ContextVar[tuple[Any, str | None]] = ContextVar("otel_breaker_crewai_native", default=(None, None))
_tool: ContextVar[Any] = ContextVar("otel_breaker_crewai_tool", default=None)
_react = Actions("otel_breaker_crewai_react", before=lambda usage: usage.last_failure)
_arguments = Validator("otel_breaker_crewai_argument_error", then=_react.mistaken)


def _call(name: str, owner: Any, call_id: str | None = None, **more: Any) -> ToolCall:
    """A call by the agent of ``owner`` (an executor or a ``ToolUsage``); its crew is the session."""
    agent, crew_id = getattr(owner, "agent", None), getattr(getattr(owner, "crew", None), "id", None)
    return ToolCall(name, "crewai", agent, agent_display_name(agent), crew_id and str(crew_id), call_id, **more)


class CrewAIAdapter(RetriedAction, HoldsCurrentCall, SpecAdapter):
    name, current, actions = "crewai", _tool, _react
    patches = (
        *(tool_patch(_BASE, f"{owner}.run", "sync") for owner in ("BaseTool", "Tool")),
        *(tool_patch(_BASE, f"{owner}.arun", "async") for owner in ("BaseTool", "Tool")),
        tool_patch(_STRUCTURED, "CrewStructuredTool.invoke", "sync"),
        tool_patch(_STRUCTURED, "CrewStructuredTool.ainvoke", "async"),
        *_react.patches(_USAGE, "ToolUsage.use", "ToolUsage._use", "sync"),
        *_react.patches(_USAGE, "ToolUsage.ause", "ToolUsage._ause", "async"),
        context_patch(_STEPS, "StepExecutor._execute_native_tool_calls", _native, lambda ex, a, k: (ex, None), "sync"),
        menu_patch(_EXECUTOR, "get_llm_response"),
        prompt_patch("crewai.utilities.agent_utils", "_prepare_llm_call", "sync", "_status_during", after=True),
    )

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_EXECUTOR, "AgentExecutor._execute_single_native_tool_call", self._native_call),
            PatchTarget(_BASE, "BaseTool._validate_kwargs", _arguments),
            PatchTarget(_STRUCTURED, "CrewStructuredTool._parse_args", _arguments),
        ]

    def joins_action(self, tool: Any) -> bool:
        from crewai.tools.structured_tool import CrewStructuredTool

        return isinstance(tool, CrewStructuredTool)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        from crewai.tools.tool_usage import ToolUsage

        if isinstance(instance, ToolUsage):  # the action's first attempt, unless CrewAI refuses a repeat
            tool, calling = argument(args, kwargs, 1, "tool"), argument(args, kwargs, 2, "calling")
            call = _call(tool.name, instance, arguments=calling.arguments, origin=origin_of(tool, "crewai"))
            return None if instance._check_tool_repeated_usage(calling=calling) else _react.claim(call, tool)
        if not isinstance(name := instance.name, str) or not name:
            return None
        # CrewStructuredTool.invoke(input, ...); BaseTool.run(*args, **kwargs)
        arguments = argument(args, kwargs, 0, "input") if self.joins_action(instance) else kwargs or args
        return _call(name, *_native.get(), arguments=arguments, origin=origin_of(instance, "crewai"))

    def _native_call(self, wrapped: Any, executor: Any, args: tuple, kwargs: dict) -> Any:
        """A native call, its caller known below; to a name no tool has, the executor's answer via the loop guard."""
        from crewai.utilities.agent_utils import extract_tool_call_info

        info = self.safe_tool_call(lambda: extract_tool_call_info(argument(args, kwargs, 0, "tool_call")))
        token = _native.set((executor, None if info is None or info[0] is None else str(info[0])))  # CrewAI's id
        try:
            if info is None or info[1] in (getattr(executor, "_available_functions", None) or {}):
                return wrapped(*args, **kwargs)
            call = _call(info[1], *_native.get())
            answer = {"call_id": call.call_id, "func_name": call.tool, "from_cache": False, "original_tool": None}
            unknown = lambda r: r["result"] if r["tool_failure"].reason.value == "unknown_tool" else None  # noqa: E731
            return run_unknown(call, lambda text: {**answer, "result": text}, unknown, wrapped, args, kwargs)
        finally:
            _native.reset(token)

    def _status_during(self, instance: Any, args: tuple, kwargs: dict, manager: Any) -> Any:
        """``_prepare_llm_call``'s context, with the status block in the messages it yields."""
        agent = getattr(executor := argument(args, kwargs, 0, "executor_context"), "agent", None) or executor
        return status_while_open(manager, DICT_MESSAGES, agent)

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """A native model call's schemas (by keyword) without the agent's open tools; a schema
        has CrewAI's sanitised name (``weather_lookup``), a breaker the tool's (``Weather Lookup``)."""
        from crewai.utilities.string_utils import sanitize_tool_name

        tools, agent = kwargs.get("tools"), kwargs.get("from_agent")
        if not isinstance(tools, list) or not tools:
            return None
        names = {sanitize_tool_name(t.name): t.name for t in getattr(agent, "tools", None) or ()}
        name_of = lambda s: None if (n := schema_name(s)) is None else names.get(n, n)  # noqa: E731
        visible = visible_tools(tools, name_of, agent=agent)
        return None if visible is tools else (args, {**kwargs, "tools": list(visible) or None})

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return _arguments.exception_hint(exc)

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        """A ``ToolFailure`` (the action's, on the ReAct path) is a failure, except a spent usage
        limit, our own rejection and (ReAct) arguments the schema rejected: the tool never ran."""
        from crewai.tools import ToolFailure

        if (action := _react.of(call)) is not None:
            if (result := action.owner.last_failure) is action.before:
                return None
            if action.mistake:
                return IGNORED_RESULT
        if not isinstance(result, ToolFailure) or getattr(result.reason, "value", None) == "usage_limit":
            return None
        return None if result.code == "circuit_open" else str(result.code or "tool_error")

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from crewai.tools import ToolFailure
        from crewai.tools.tool_failure import ToolFailurePolicy, resolve_tool_failure_policy

        action = _react.of(call)  # None too for a different tool called from inside a ReAct tool's body
        tool, owner = (action.tool, action.owner) if action else (_tool.get(), _native.get()[0])
        who = {name: getattr(owner, name, None) for name in ("agent", "task", "crew")}
        with contextlib.suppress(Exception):  # under "raise" CrewAI would end the run on a ToolFailure
            if resolve_tool_failure_policy(tool=tool, **who) is ToolFailurePolicy.RAISE:
                return info.message
        return _react.rejected(call, info, ToolFailure(message=info.message, code="circuit_open", retryable=True))
