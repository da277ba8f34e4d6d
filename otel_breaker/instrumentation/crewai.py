"""CrewAI (1.15): every tool call of a crew, on both of its tool paths.

Native function calling: the tool's ``run``/``arun``, guarded; ``_execute_single_native_tool_call``
(the planner's ``_execute_native_tool_calls``) tells who calls, and answers a name no tool has (the
loop guard counts it). ReAct text: an action (``ToolUsage.use``) invokes ``CrewStructuredTool.invoke``
in ``_use``, retrying up to six times: one logical call, judged by CrewAI's ``last_failure``.
Arguments the schema rejects (``_validate_kwargs``, ``_parse_args``) are the model's mistake. The
rejection is a ``ToolFailure(code="circuit_open")``, plain text under ``tool_failure_policy="raise"``
(a breaker never ends a crew). Model calls get the status block (``_prepare_llm_call``); the native
menu (``get_llm_response``) loses the agent's open tools. Breakers are per agent role.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.chat_messages import DICT_MESSAGES, schema_name, status_during
from otel_breaker.instrumentation.current_call import HoldsCurrentCall
from otel_breaker.instrumentation.mistakes import run_unknown
from otel_breaker.instrumentation.patches import SKIP, argument, context_patch, menu_patch, prompt_patch, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall, agent_display_name

_BASE, _STRUCTURED, _USAGE = "crewai.tools.base_tool", "crewai.tools.structured_tool", "crewai.tools.tool_usage"
_EXECUTOR, _STEPS = "crewai.agents.agent_executor", "crewai.agents.step_executor"
_Var = contextvars.ContextVar
# A native call's (executor, tool call id); the ReAct action in progress; the error CrewAI's argument
# validation last raised (the model's mistake); the tool object being guarded (its failure policy).
_native: _Var[tuple[Any, str | None] | None] = _Var("otel_breaker_crewai_native", default=None)
_react: _Var[dict[str, Any] | None] = _Var("otel_breaker_crewai_react", default=None)
_argument_error: _Var[BaseException | None] = _Var("otel_breaker_crewai_argument_error", default=None)
_tool: _Var[Any] = _Var("otel_breaker_crewai_tool", default=None)


def _call(name: str, owner: Any, call_id: str | None = None, **more: Any) -> ToolCall:
    """A call by the agent of ``owner`` (an executor or a ``ToolUsage``); its crew is the session."""
    agent, crew_id = getattr(owner, "agent", None), getattr(getattr(owner, "crew", None), "id", None)
    return ToolCall(name, "crewai", agent, agent_display_name(agent), crew_id and str(crew_id), call_id, **more)


def _structured(tool: Any) -> bool:
    from crewai.tools.structured_tool import CrewStructuredTool

    return isinstance(tool, CrewStructuredTool)


def _action(usage: Any, args: tuple, kwargs: dict) -> Any:
    """A ReAct action: its ``ToolUsage``, its last failure before, the rejection once rejected
    (CrewAI's own retries, and any action inside one, are part of the outermost)."""
    return SKIP if _react.get() is not None else {"usage": usage, "before": usage.last_failure, "reject": None}


class CrewAIAdapter(HoldsCurrentCall, SpecAdapter):
    name, current = "crewai", _tool
    patches = (
        *(tool_patch(_BASE, f"{owner}.run", "sync") for owner in ("BaseTool", "Tool")),
        *(tool_patch(_BASE, f"{owner}.arun", "async") for owner in ("BaseTool", "Tool")),
        tool_patch(_STRUCTURED, "CrewStructuredTool.invoke", "sync"),
        tool_patch(_STRUCTURED, "CrewStructuredTool.ainvoke", "async"),
        tool_patch(_USAGE, "ToolUsage._use", "sync"),
        tool_patch(_USAGE, "ToolUsage._ause", "async"),
        context_patch(_USAGE, "ToolUsage.use", _react, _action, "sync"),
        context_patch(_USAGE, "ToolUsage.ause", _react, _action),
        context_patch(_STEPS, "StepExecutor._execute_native_tool_calls", _native, lambda ex, a, k: (ex, None), "sync"),
        menu_patch(_EXECUTOR, "get_llm_response"),
        prompt_patch("crewai.utilities.agent_utils", "_prepare_llm_call", "sync", "_status_during", after=True),
    )

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_EXECUTOR, "AgentExecutor._execute_single_native_tool_call", self._native_call),
            PatchTarget(_BASE, "BaseTool._validate_kwargs", self._validating),
            PatchTarget(_STRUCTURED, "CrewStructuredTool._parse_args", self._validating),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        from crewai.tools.tool_usage import ToolUsage

        if isinstance(instance, ToolUsage):
            return self._action_call(instance, args, kwargs)
        if not isinstance(name := instance.name, str) or not name:
            return None
        owner, call_id = _native.get() or (None, None)
        # CrewStructuredTool.invoke(input, ...); BaseTool.run(*args, **kwargs)
        arguments = argument(args, kwargs, 0, "input") if _structured(instance) else kwargs or args
        return _call(name, owner, call_id, arguments=arguments, origin=origin_of(instance, "crewai"))

    # In a guarded ReAct action CrewAI's own invocations pass (the action counts them) and, once it
    # is rejected, every tool call gets the rejection: the action (``wrapped``, CrewAI's ``_use``)
    # runs again so, with the rejection as the tool's result, CrewAI records it its own way.
    def _tool_sync(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if "call" in (frame := _react.get() or {}) and (frame["reject"] or _structured(instance)):
            return frame["reject"] or wrapped(*args, **kwargs)
        result = super()._tool_sync(wrapped, instance, args, kwargs)
        if result is None or result is not frame.get("reject"):
            return result
        with contextlib.suppress(Exception):
            return wrapped(*args, **kwargs)
        return result.message

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if "call" in (frame := _react.get() or {}) and (frame["reject"] or _structured(instance)):
            return frame["reject"] or await wrapped(*args, **kwargs)
        result = await super()._tool_async(wrapped, instance, args, kwargs)
        if result is None or result is not frame.get("reject"):
            return result
        with contextlib.suppress(Exception):
            return await wrapped(*args, **kwargs)
        return result.message

    def _native_call(self, wrapped: Any, executor: Any, args: tuple, kwargs: dict) -> Any:
        """A native call, its caller known below; to a name no tool has, the executor's answer via the loop guard."""
        from crewai.utilities.agent_utils import extract_tool_call_info

        tool_call = argument(args, kwargs, 0, "tool_call")
        call_id = getattr(tool_call, "id", None) or (tool_call.get("id") if isinstance(tool_call, dict) else None)
        token = _native.set((executor, None if call_id is None else str(call_id)))
        try:
            info = self.safe_tool_call(lambda: extract_tool_call_info(tool_call))
            if info is None or info[1] in (getattr(executor, "_available_functions", None) or {}):
                return wrapped(*args, **kwargs)
            call = _call(info[1], executor, _native.get()[1])  # type: ignore[index]
            answer = {"call_id": call.call_id, "func_name": call.tool, "from_cache": False, "original_tool": None}
            unknown = lambda r: r["result"] if r["tool_failure"].reason.value == "unknown_tool" else None  # noqa: E731
            return run_unknown(call, lambda text: {**answer, "result": text}, unknown, wrapped, args, kwargs)
        finally:
            _native.reset(token)

    def _validating(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """CrewAI checking the model's arguments: what it raises is the model's mistake (both paths)."""
        try:
            return wrapped(*args, **kwargs)
        except ValueError as exc:
            _argument_error.set(exc)
            if (frame := _react.get()) is not None:
                frame["argument_error"] = True
            raise

    def _action_call(self, usage: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        """The ReAct action's call, at its first ``_use`` (not CrewAI's retries, nor a repeat it refuses)."""
        frame, tool, calling = _react.get(), argument(args, kwargs, 1, "tool"), argument(args, kwargs, 2, "calling")
        if frame is None or "call" in frame or usage._check_tool_repeated_usage(calling=calling):
            return None
        call = _call(tool.name, usage, arguments=calling.arguments, origin=origin_of(tool, "crewai"))
        frame.update(call=call, tool=tool)
        return call

    @contextlib.contextmanager
    def _status_during(self, instance: Any, args: tuple, kwargs: dict, manager: Any) -> Any:
        """``_prepare_llm_call``'s context, with the status block in the messages it yields."""
        agent = getattr(executor := argument(args, kwargs, 0, "executor_context"), "agent", None) or executor
        with manager as messages, status_during(messages, DICT_MESSAGES, agent):
            yield messages

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
        return MISTAKE if exc is _argument_error.get() else None

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        """A ``ToolFailure`` (the action's, on the ReAct path) is a failure, except a spent usage
        limit, our own rejection and (ReAct) arguments the schema rejected: the tool never ran."""
        from crewai.tools import ToolFailure

        if (frame := _react.get()) is not None and frame.get("call") is call:
            if (result := frame["usage"].last_failure) is frame["before"]:
                return None
            if frame.get("argument_error"):
                return IGNORED_RESULT
        if not isinstance(result, ToolFailure) or getattr(result.reason, "value", None) == "usage_limit":
            return None
        return None if result.code == "circuit_open" else str(result.code or "tool_error")

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from crewai.tools import ToolFailure
        from crewai.tools.tool_failure import ToolFailurePolicy, resolve_tool_failure_policy

        if (frame := _react.get()) is not None and frame.get("call") is not call:
            frame = None  # a different tool called from inside a ReAct tool's body
        tool, owner = (frame["tool"], frame["usage"]) if frame else (_tool.get(), (_native.get() or (None,))[0])
        who = {name: getattr(owner, name, None) for name in ("agent", "task", "crew")}
        with contextlib.suppress(Exception):  # under "raise" CrewAI would end the run on a ToolFailure
            if resolve_tool_failure_policy(tool=tool, **who) is ToolFailurePolicy.RAISE:
                return info.message
        failure = ToolFailure(message=info.message, code="circuit_open", retryable=True)
        if frame is not None:
            frame["reject"] = failure  # the action runs again with it (see _tool_sync)
        return failure
