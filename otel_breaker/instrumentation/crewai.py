"""CrewAI: every tool call of a crew, on both of CrewAI's tool paths (crewai 1.15).

* Native function calling: the executor runs the tool's ``run``/``arun`` (``BaseTool``,
  ``Tool``), guarded; ``_execute_single_native_tool_call`` (and the planner's
  ``_execute_native_tool_calls``) say who calls, and answer a name no tool has
  (``Tool not found``): the loop guard counts it.
* ReAct text: ``ToolUsage._use``/``_ause`` invokes ``CrewStructuredTool.invoke`` and
  retries through ``use``, up to six invocations for one action: the outermost is one
  logical call, its outcome CrewAI's own ``ToolUsage.last_failure``.

CrewAI swallows a tool's exception into text, but it passes our wrapper (native) or
shows in ``last_failure`` (ReAct). Arguments the schema rejects (``_validate_kwargs``,
``_parse_args``) are the model's mistake. A rejection is a ``ToolFailure(code=
"circuit_open")``, on the ReAct path handed to ``ToolUsage`` in place of the tool's
result; plain text under ``tool_failure_policy="raise"``, so a breaker never ends a
crew. The status block is in the system message while each model call runs
(``_prepare_llm_call``); the native menu (``get_llm_response``) loses the agent's open
tools. Breakers are per ``Agent``, named by its role.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Iterator
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.chat_messages import DICT_MESSAGES, schema_name, status_during
from otel_breaker.instrumentation.current_call import HoldsCurrentCall
from otel_breaker.instrumentation.mistakes import run_unknown
from otel_breaker.instrumentation.patches import argument, context_patch, menu_patch, prompt_patch, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

_BASE, _STRUCTURED = "crewai.tools.base_tool", "crewai.tools.structured_tool"
_USAGE, _EXECUTOR = "crewai.tools.tool_usage", "crewai.agents.agent_executor"

_Var = contextvars.ContextVar
# The native path's caller: (its executor, the model's tool call id).
_native: _Var[tuple[Any, str | None] | None] = _Var("otel_breaker_crewai_native", default=None)
# The ReAct logical call in progress (one outermost ToolUsage._use).
_react: _Var[dict[str, Any] | None] = _Var("otel_breaker_crewai_react", default=None)
# The last error CrewAI's argument validation raised in this context: the model's mistake.
_argument_error: _Var[BaseException | None] = _Var("otel_breaker_crewai_argument_error", default=None)
# The tool object of the native or direct call being guarded (for its tool_failure_policy).
_tool: _Var[Any] = _Var("otel_breaker_crewai_tool", default=None)


def _call(name: str, owner: Any, call_id: str | None = None, **more: Any) -> ToolCall:
    """A call by ``owner``'s agent (an executor or ``ToolUsage``); its crew is the session."""
    agent, crew_id = getattr(owner, "agent", None), getattr(getattr(owner, "crew", None), "id", None)
    session = None if crew_id is None else str(crew_id)
    return ToolCall(name, "crewai", agent, agent_display_name(agent), session, call_id, **more)


def _structured(tool: Any) -> bool:
    from crewai.tools.structured_tool import CrewStructuredTool

    return isinstance(tool, CrewStructuredTool)


def _planner(executor: Any, args: tuple, kwargs: dict) -> tuple[Any, None]:
    return executor, None


def _in_react(tool: Any) -> dict[str, Any] | None:
    """The ReAct call ``tool``'s call belongs to: CrewAI's own invocation (the outer
    ``_use`` counts it), or any call once that was rejected (the rejection answers)."""
    frame = _react.get()
    return frame if frame is not None and (frame["reject"] or _structured(tool)) else None


def _failure_type(failure: Any) -> str | None:
    """``error.type`` of a ``ToolFailure``; None for a usage limit and our own rejection."""
    reason, code = getattr(failure, "reason", None), getattr(failure, "code", None)
    if failure is None or getattr(reason, "value", reason) == "usage_limit" or code == "circuit_open":
        return None
    return str(code) if code else "tool_error"


def _policy_raises(tool: Any, owner: Any) -> bool:
    """True when CrewAI would end the run on a reported ``ToolFailure`` of this call."""
    try:
        from crewai.tools.tool_failure import ToolFailurePolicy, resolve_tool_failure_policy

        who = {name: getattr(owner, name, None) for name in ("agent", "task", "crew")}
        return resolve_tool_failure_policy(tool=tool, **who) is ToolFailurePolicy.RAISE
    except Exception:
        return False


class CrewAIAdapter(HoldsCurrentCall, SpecAdapter):
    name = "crewai"
    current = _tool
    modules = (_BASE, _STRUCTURED, _USAGE, _EXECUTOR, "crewai.agents.step_executor", "crewai.utilities.agent_utils")
    patches = (
        *(tool_patch(_BASE, f"{owner}.run", "sync") for owner in ("BaseTool", "Tool")),
        *(tool_patch(_BASE, f"{owner}.arun", "async") for owner in ("BaseTool", "Tool")),
        tool_patch(_STRUCTURED, "CrewStructuredTool.invoke", "sync"),
        tool_patch(_STRUCTURED, "CrewStructuredTool.ainvoke", "async"),
        menu_patch(_EXECUTOR, "get_llm_response"),
        context_patch(
            "crewai.agents.step_executor", "StepExecutor._execute_native_tool_calls", _native, _planner, "sync"
        ),
        prompt_patch("crewai.utilities.agent_utils", "_prepare_llm_call", "sync", "_status_during", after=True),
    )

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_EXECUTOR, "AgentExecutor._execute_single_native_tool_call", self._native_call),
            PatchTarget(_USAGE, "ToolUsage._use", self._use),
            PatchTarget(_USAGE, "ToolUsage._ause", self._ause),
            PatchTarget(_BASE, "BaseTool._validate_kwargs", self._validating),
            PatchTarget(_STRUCTURED, "CrewStructuredTool._parse_args", self._validating),
        ]

    # -- native path and direct calls ------------------------------------------------------

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        if not isinstance(name := instance.name, str) or not name:
            return None
        owner, call_id = _native.get() or (None, None)
        # CrewStructuredTool.invoke(input, ...); BaseTool.run(*args, **kwargs)
        arguments = argument(args, kwargs, 0, "input") if _structured(instance) else kwargs or args
        return _call(name, owner, call_id, arguments=arguments, origin=origin_of(instance, "crewai"))

    def _tool_sync(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if (frame := _in_react(instance)) is None:
            return super()._tool_sync(wrapped, instance, args, kwargs)
        return frame["reject"] or wrapped(*args, **kwargs)

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if (frame := _in_react(instance)) is None:
            return await super()._tool_async(wrapped, instance, args, kwargs)
        return frame["reject"] or await wrapped(*args, **kwargs)

    def _native_call(self, wrapped: Any, executor: Any, args: tuple, kwargs: dict) -> Any:
        """A native tool call, with its caller known below; a name no tool has is answered
        by the executor itself (``Tool not found``), through the loop guard."""
        tool_call = argument(args, kwargs, 0, "tool_call")
        call_id = getattr(tool_call, "id", None) or (tool_call.get("id") if isinstance(tool_call, dict) else None)
        token = _native.set((executor, None if call_id is None else str(call_id)))
        try:
            call = self.safe_tool_call(lambda: _unknown_call(executor, tool_call))
            if call is None:
                return wrapped(*args, **kwargs)
            reject = lambda text: {"from_cache": False, **_answer(call, text)}  # noqa: E731
            return run_unknown(call, reject, _not_found, wrapped, args, kwargs)
        finally:
            _native.reset(token)

    def _validating(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """CrewAI checking the model's arguments against the tool's schema: what it raises
        is remembered, so the guard and the ReAct outcome read it as the model's mistake."""
        try:
            return wrapped(*args, **kwargs)
        except ValueError as exc:
            _argument_error.set(exc)
            if (frame := _react.get()) is not None:
                frame["argument_error"] = True
            raise

    # -- ReAct path: one logical call = one outermost ToolUsage._use ------------------------

    def _react_frame(self, usage: Any, args: tuple, kwargs: dict) -> dict[str, Any] | None:
        def build() -> Any:
            tool, calling = argument(args, kwargs, 1, "tool"), argument(args, kwargs, 2, "calling")
            if _react.get() is not None or usage._check_tool_repeated_usage(calling=calling):
                return None  # CrewAI's own retry of this call, or a repeat it refuses unrun
            call = _call(tool.name, usage, arguments=calling.arguments, origin=origin_of(tool, "crewai"))
            return {"call": call, "usage": usage, "tool": tool, "before": usage.last_failure, "reject": None}

        return self.safe_tool_call(build)  # type: ignore[return-value]

    def _use(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if (frame := self._react_frame(instance, args, kwargs)) is None:
            return wrapped(*args, **kwargs)
        frame["rerun"] = lambda: wrapped(*args, **kwargs)
        token = _react.set(frame)
        try:
            return self.run_sync(frame["call"], wrapped, args, kwargs)
        finally:
            _react.reset(token)

    async def _ause(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if (frame := self._react_frame(instance, args, kwargs)) is None:
            return await wrapped(*args, **kwargs)
        frame["rerun"] = lambda: wrapped(*args, **kwargs)
        token = _react.set(frame)
        try:
            result = await self.run_async(frame["call"], wrapped, args, kwargs)
            return await result if inspect.iscoroutine(result) else result  # a rejection, through _ause
        finally:
            _react.reset(token)

    # -- the model's view: status block and menu --------------------------------------------

    def _status_during(self, instance: Any, args: tuple, kwargs: dict, manager: Any) -> Any:
        """``_prepare_llm_call``'s context, with the status block in the yielded messages."""
        executor = argument(args, kwargs, 0, "executor_context")
        return _status_in_prompt(manager, getattr(executor, "agent", None) or executor)

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

    # -- outcomes and rejections ----------------------------------------------------------

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if exc is _argument_error.get() else None

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        if (frame := _react.get()) is not None and frame["call"] is call:
            if (failure := frame["usage"].last_failure) is frame["before"]:
                return None
            return IGNORED_RESULT if frame.get("argument_error") else _failure_type(failure)
        from crewai.tools import ToolFailure

        return _failure_type(result) if isinstance(result, ToolFailure) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from crewai.tools import ToolFailure

        if (frame := _react.get()) is not None and frame["call"] is not call:
            frame = None  # a different tool called from inside a ReAct tool's body
        tool, owner = (frame["tool"], frame["usage"]) if frame else (_tool.get(), (_native.get() or (None,))[0])
        if _policy_raises(tool, owner):
            return info.message
        failure = ToolFailure(message=info.message, code="circuit_open", retryable=True)
        if frame is None:
            return failure
        # CrewAI's _use runs again, the rejection in place of the tool's result: the model
        # reads an ordinary observation and CrewAI records the failure.
        frame["reject"] = failure
        try:
            answer = frame["rerun"]()
        except Exception:
            return info.message
        return _or_text(answer, info.message) if inspect.iscoroutine(answer) else answer


def _unknown_call(executor: Any, tool_call: Any) -> ToolCall | None:
    """The native tool call about to be made, when no tool of the executor has its name."""
    from crewai.utilities.agent_utils import extract_tool_call_info

    info = extract_tool_call_info(tool_call)
    if info is None or info[1] in (getattr(executor, "_available_functions", None) or {}):
        return None
    return _call(info[1], executor, _native.get()[1])  # type: ignore[index]


def _answer(call: ToolCall, text: str) -> dict[str, Any]:
    return {"call_id": call.call_id, "func_name": call.tool, "result": text, "original_tool": None}


def _not_found(result: Any) -> str | None:
    """The executor's answer to a name no tool has, else None."""
    failure = result.get("tool_failure") if isinstance(result, dict) else None
    return (
        str(result.get("result"))
        if getattr(getattr(failure, "reason", None), "value", None) == "unknown_tool"
        else None
    )


async def _or_text(answer: Any, text: str) -> Any:
    try:
        return await answer
    except Exception:
        return text


@contextlib.contextmanager
def _status_in_prompt(manager: Any, agent: Any) -> Iterator[Any]:
    with manager as messages, status_during(messages, DICT_MESSAGES, agent):
        yield messages
