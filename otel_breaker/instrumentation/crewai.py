"""CrewAI: every tool call of a crew, on both of CrewAI's tool paths (crewai 1.15).

* Native function calling: the executor calls the tool's ``run``/``arun``
  (``BaseTool``, ``Tool``), guarded; ``_execute_single_native_tool_call`` (and the
  planner's ``_execute_native_tool_calls``) tell who is calling. A name no tool has
  is answered there (``Tool not found``): the loop guard counts it.
* ReAct text: ``ToolUsage.use``/``ause`` invokes ``CrewStructuredTool.invoke`` and
  retries it, up to six invocations for one action. One outermost ``use`` is one
  logical call; its outcome is CrewAI's own ``ToolUsage.last_failure``.

CrewAI swallows a tool's exception into text, but it passes our wrapper (native) or
shows in ``last_failure`` (ReAct). Arguments the schema rejects (``_validate_kwargs``,
``_parse_args``) are the model's mistake. The rejection is a ``ToolFailure(code=
"circuit_open")``, handed on the ReAct path to ``ToolUsage`` in place of the tool's
result; under ``tool_failure_policy="raise"`` it is the plain text, so a breaker never
ends a crew. The status block is in the system message while each model call runs
(``agent_utils._prepare_llm_call``); the native menu (``get_llm_response``) loses the
agent's open tools. Breakers are per ``Agent``, named by its role.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection, status_in_prompt_enabled
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation import refusals
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.chat_messages import DICT_MESSAGES, schema_name, status_during
from otel_breaker.instrumentation.spec import SpecAdapter, context_patch, menu_patch, tool_patch
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

_BASE = "crewai.tools.base_tool"
_STRUCTURED = "crewai.tools.structured_tool"
_USAGE = "crewai.tools.tool_usage"
_EXECUTOR = "crewai.agents.agent_executor"

_Var = contextvars.ContextVar
# Who is calling on the native path: (agent, task, crew, tool call id).
_native: _Var[tuple[Any, Any, Any, str | None] | None] = _Var("otel_breaker_crewai_native", default=None)
# The ReAct logical call in progress (one outermost ToolUsage.use).
_react: _Var[dict[str, Any] | None] = _Var("otel_breaker_crewai_react", default=None)
# The last error CrewAI's argument validation raised in this context: the model's mistake.
_argument_error: _Var[BaseException | None] = _Var("otel_breaker_crewai_argument_error", default=None)
# The tool object of the native or direct call being guarded (for its tool_failure_policy).
_tool: _Var[Any] = _Var("otel_breaker_crewai_tool", default=None)


def _breaker_name_of(agent: Any) -> Callable[[Any], str | None]:
    """A schema's tool name as its breaker knows it: the schema carries CrewAI's
    sanitised name (``weather_lookup``), the breaker the tool's own (``Weather Lookup``)."""
    from crewai.utilities.string_utils import sanitize_tool_name

    names = {sanitize_tool_name(t.name): t.name for t in getattr(agent, "tools", None) or ()}

    def name_of(tool: Any) -> str | None:
        name = schema_name(tool)
        return names.get(name, name) if name is not None else None

    return name_of


def _who(executor: Any, args: tuple, kwargs: dict, call_id: str | None = None) -> tuple:
    """Who is calling on the native path: (agent, task, crew, tool call id)."""
    return (getattr(executor, "agent", None), getattr(executor, "task", None), getattr(executor, "crew", None), call_id)


def _structured(tool: Any) -> bool:
    """Whether ``tool`` is a ``CrewStructuredTool`` (what ``ToolUsage`` invokes)."""
    from crewai.tools.structured_tool import CrewStructuredTool

    return isinstance(tool, CrewStructuredTool)


def _text_id(value: Any) -> str | None:
    return None if value is None else str(value)


def _failure_type(failure: Any) -> str | None:
    """``error.type`` for a CrewAI ``ToolFailure``, or None when it is not the tool's fault."""
    if failure is None:
        return None
    reason = getattr(getattr(failure, "reason", None), "value", getattr(failure, "reason", None))
    if reason == "usage_limit":
        return None
    code = getattr(failure, "code", None)
    if code == "circuit_open":
        return None
    return str(code) if code else "tool_error"


class CrewAIAdapter(SpecAdapter):
    """Guards CrewAI tool calls on the native and ReAct paths, sync and async."""

    name = "crewai"
    patches = (
        tool_patch(_BASE, "BaseTool.run", "sync"),
        tool_patch(_BASE, "Tool.run", "sync"),
        tool_patch(_BASE, "BaseTool.arun", "async"),
        tool_patch(_BASE, "Tool.arun", "async"),
        tool_patch(_STRUCTURED, "CrewStructuredTool.invoke", "sync"),
        tool_patch(_STRUCTURED, "CrewStructuredTool.ainvoke", "async"),
        menu_patch(_EXECUTOR, "get_llm_response"),
        context_patch("crewai.agents.step_executor", "StepExecutor._execute_native_tool_calls", _native, _who, "sync"),
    )
    modules = (_BASE, _STRUCTURED, _USAGE, _EXECUTOR, "crewai.agents.step_executor", "crewai.utilities.agent_utils")

    def targets(self) -> list[PatchTarget]:
        return [
            PatchTarget(_EXECUTOR, "AgentExecutor._execute_single_native_tool_call", self._native_identity),
            *super().targets(),
            PatchTarget(_USAGE, "ToolUsage.use", self._use),
            PatchTarget(_USAGE, "ToolUsage.ause", self._ause),
            PatchTarget("crewai.utilities.agent_utils", "_prepare_llm_call", self._prepare_llm_call),
            PatchTarget(_BASE, "BaseTool._validate_kwargs", self._validating),
            PatchTarget(_STRUCTURED, "CrewStructuredTool._parse_args", self._validating),
        ]

    # -- native path and direct calls ------------------------------------------------------

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = instance.name
        if not isinstance(name, str) or not name:
            return None
        agent, _task, crew, call_id = _native.get() or (None, None, None, None)
        arguments = kwargs or args  # BaseTool.run(*args, **kwargs)
        if _structured(instance):  # CrewStructuredTool.invoke(input, ...)
            arguments = args[0] if args else kwargs.get("input")
        return ToolCall(
            name,
            framework=self.name,
            agent=agent,
            agent_name=agent_display_name(agent) if agent is not None else None,
            session_id=_text_id(getattr(crew, "id", None)),
            call_id=call_id,
            arguments=arguments,
            origin=origin_of(instance, "crewai"),
        )

    def _tool_sync(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        frame = _react.get()
        if frame is not None and (frame.get("reject") is not None or _structured(instance)):
            # Inside a ReAct action: the rejection in place of the tool's result, or
            # CrewAI's own invocation of the tool, which the outer ToolUsage.use counts.
            return frame["reject"] if frame.get("reject") is not None else wrapped(*args, **kwargs)
        token = _tool.set(instance)
        try:
            return super()._tool_sync(wrapped, instance, args, kwargs)
        finally:
            _tool.reset(token)

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        frame = _react.get()
        if frame is not None and (frame.get("reject") is not None or _structured(instance)):
            return frame["reject"] if frame.get("reject") is not None else await wrapped(*args, **kwargs)
        token = _tool.set(instance)
        try:
            return await super()._tool_async(wrapped, instance, args, kwargs)
        finally:
            _tool.reset(token)

    def _native_identity(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        tool_call = args[0] if args else kwargs.get("tool_call")
        call_id = getattr(tool_call, "id", None) or (tool_call.get("id") if isinstance(tool_call, dict) else None)
        identity = _who(instance, args, kwargs, _text_id(call_id))
        token = _native.set(identity)
        try:
            return self._native_call(wrapped, instance, args, kwargs, identity)
        finally:
            _native.reset(token)

    def _native_call(self, wrapped: Any, executor: Any, args: tuple, kwargs: dict, identity: tuple) -> Any:
        """A native tool call; one to a name no tool has is answered by the executor
        itself (``Tool not found``), which the loop guard counts."""
        call = self.safe_tool_call(lambda: _unknown_call(executor, args, kwargs, identity))
        if call is None:
            return wrapped(*args, **kwargs)

        def reject(text: str) -> dict[str, Any]:
            return {"call_id": identity[3], "func_name": call.tool, "result": text, "original_tool": None}

        answer = refusals.check(self.guard, call, reject, unknown=True)
        if answer is not refusals.RUN:
            return {"from_cache": False, **answer}
        result = wrapped(*args, **kwargs)
        failure = result.get("tool_failure") if isinstance(result, dict) else None
        if getattr(getattr(failure, "reason", None), "value", None) == "unknown_tool":
            refusals.count(self.guard, call, str(result.get("result")), unknown=True)
        return result

    # -- argument validation: the model's mistake -----------------------------------------

    def _validating(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """CrewAI checking the model's arguments against the tool's schema: what it raises
        is remembered, so the guard and the ReAct outcome read it as the model's mistake."""
        try:
            return wrapped(*args, **kwargs)
        except ValueError as exc:
            _argument_error.set(exc)
            frame = _react.get()
            if frame is not None:
                frame["argument_error"] = True
            raise

    # -- ReAct path: one logical call = one outermost ToolUsage.use ---------------------

    def _react_call(self, usage: Any, args: tuple, kwargs: dict) -> tuple[ToolCall, dict[str, Any]] | None:
        def build() -> tuple[ToolCall, dict[str, Any]] | None:
            calling = args[0] if args else kwargs.get("calling")
            tool_name = getattr(calling, "tool_name", None)
            if not isinstance(tool_name, str):
                return None  # a parsing error: CrewAI answers it without running a tool
            from crewai.utilities.string_utils import sanitize_tool_name

            wanted = sanitize_tool_name(tool_name)
            tool = next((t for t in usage.tools if sanitize_tool_name(t.name) == wanted), None)
            if tool is None:
                return None  # an unknown tool: the model's mistake, not a tool failure
            repeated = getattr(usage, "_check_tool_repeated_usage", None)
            if repeated is not None and repeated(calling=calling):
                return None  # CrewAI refuses a repeated action without running the tool
            agent = getattr(usage, "agent", None)
            crew = getattr(usage, "crew", None)
            call = ToolCall(
                tool.name,
                framework=self.name,
                agent=agent,
                agent_name=agent_display_name(agent) if agent is not None else None,
                session_id=_text_id(getattr(crew, "id", None)),
                arguments=getattr(calling, "arguments", None),
                origin=origin_of(tool, "crewai"),
            )
            before = getattr(usage, "last_failure", None)
            return call, {"call": call, "usage": usage, "tool": tool, "before": before, "reject": None}

        return self.safe_tool_call(build)

    def _use(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if _react.get() is not None:
            return wrapped(*args, **kwargs)  # CrewAI's own retry of the same logical call
        described = self._react_call(instance, args, kwargs)
        if described is None:
            return wrapped(*args, **kwargs)
        call, frame = described
        frame["rerun"] = lambda: wrapped(*args, **kwargs)
        token = _react.set(frame)
        try:
            return self.run_sync(call, wrapped, args, kwargs)
        finally:
            _react.reset(token)

    async def _ause(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if _react.get() is not None:
            return await wrapped(*args, **kwargs)
        described = self._react_call(instance, args, kwargs)
        if described is None:
            return await wrapped(*args, **kwargs)
        call, frame = described
        frame["arerun"] = lambda: wrapped(*args, **kwargs)
        token = _react.set(frame)
        try:
            result = await self.run_async(call, wrapped, args, kwargs)
            if inspect.iscoroutine(result):  # a rejection answered through CrewAI's own ause
                result = await result
            return result
        finally:
            _react.reset(token)

    # -- the tool-status block in the system prompt ---------------------------------------

    def _prepare_llm_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        manager = wrapped(*args, **kwargs)
        try:
            if not status_in_prompt_enabled():
                return manager
            executor = args[0] if args else kwargs.get("executor_context")
            agent = getattr(executor, "agent", None) or executor
        except Exception:
            return manager
        return _status_in_prompt(manager, agent)

    # -- open tools leave the model's menu ---------------------------------------------

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """A native model call of ``AgentExecutor`` (tools by keyword) without the agent's open tools."""
        tools, agent = kwargs.get("tools"), kwargs.get("from_agent")
        if not isinstance(tools, list) or not tools:
            return None
        visible = visible_tools(tools, _breaker_name_of(agent), agent=agent)
        return None if visible is tools else (args, {**kwargs, "tools": list(visible) or None})

    # -- the adapter protocol ------------------------------------------------------------

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if exc is _argument_error.get() else None

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        frame = _react.get()
        if frame is not None and frame["call"] is call:
            failure = getattr(frame["usage"], "last_failure", None)
            if failure is frame["before"]:
                return None
            if frame.get("argument_error"):
                return IGNORED_RESULT  # the schema rejected the model's arguments; the tool never ran
            return _failure_type(failure)
        from crewai.tools import ToolFailure

        return _failure_type(result) if isinstance(result, ToolFailure) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from crewai.tools import ToolFailure

        failure = ToolFailure(message=info.message, code="circuit_open", retryable=True)
        frame = _react.get()
        if frame is not None and frame["call"] is not call:
            frame = None  # a different tool called from inside a ReAct tool's body
        if self._policy_raises(frame):
            return info.message
        if frame is None:
            return failure
        # Hand the rejection to CrewAI's ToolUsage in place of the tool's result, so
        # the model gets an ordinary observation and CrewAI records the failure.
        frame["reject"] = failure
        if "arerun" in frame:
            return self._arerun(frame, info)
        try:
            return frame["rerun"]()
        except Exception:
            return info.message

    async def _arerun(self, frame: dict[str, Any], info: Rejection) -> Any:
        try:
            return await frame["arerun"]()
        except Exception:
            return info.message

    def _policy_raises(self, frame: dict[str, Any] | None) -> bool:
        """True when CrewAI would end the run on a reported ToolFailure for this call."""
        if frame is not None:
            usage, tool = frame["usage"], frame["tool"]
            agent, task, crew = (getattr(usage, name, None) for name in ("agent", "task", "crew"))
        else:
            tool = _tool.get()
            agent, task, crew, _ = _native.get() or (None, None, None, None)
        try:
            from crewai.tools.tool_failure import ToolFailurePolicy, resolve_tool_failure_policy

            return resolve_tool_failure_policy(tool=tool, agent=agent, task=task, crew=crew) is ToolFailurePolicy.RAISE
        except Exception:
            return False


def _unknown_call(executor: Any, args: tuple, kwargs: dict, identity: tuple) -> ToolCall | None:
    """The native tool call about to be made, when no tool of the executor has its name."""
    from crewai.utilities.agent_utils import extract_tool_call_info

    info = extract_tool_call_info(args[0] if args else kwargs.get("tool_call"))
    if info is None or info[1] in (getattr(executor, "_available_functions", None) or {}):
        return None
    agent, _task, crew, call_id = identity
    return ToolCall(
        info[1],
        framework="crewai",
        agent=agent,
        agent_name=agent_display_name(agent) if agent is not None else None,
        session_id=_text_id(getattr(crew, "id", None)),
        call_id=call_id,
    )


@contextlib.contextmanager
def _status_in_prompt(manager: Any, agent: Any) -> Iterator[Any]:
    """CrewAI's ``_prepare_llm_call`` context, with the status block in the system message
    of the yielded messages for the duration of the call."""
    with manager as messages, status_during(messages, DICT_MESSAGES, agent):
        yield messages
