"""The CrewAI adapter: what is patched, how a call is described, how it is judged and refused.

Native function calling: ``BaseTool.run``/``arun`` (and ``Tool``'s), guarded.
``AgentExecutor._execute_single_native_tool_call`` tells which executor calls and with
which id, and answers a name no tool has itself: the loop guard counts that.

ReAct text: an action (``ToolUsage.use``) invokes ``CrewStructuredTool.invoke`` in
``_use``, up to six times; :mod:`.actions` makes that one call, judged by what the
action added to ``last_failure``. Arguments the tool's schema rejects are the model's
mistake (:mod:`.arguments`).

The rejection is a ``ToolFailure(code="circuit_open")``; under
``tool_failure_policy="raise"`` it is plain text instead, because CrewAI would end the
crew on a ``ToolFailure`` and a breaker never ends a crew. Model calls get the status
block in the messages ``_prepare_llm_call`` yields; a native call's menu loses the open
tools. Breakers are per agent role.

A crew's kickoff (``kickoff``, ``kickoff_async``, ``akickoff``) and an agent's own
(``Agent.kickoff``, ``kickoff_async``) are a run (:mod:`otel_breaker.runs`): a delegation
to a coworker, a task run in a thread of its own, and an agent kicked off inside the
crew join it. ``kickoff_for_each`` makes one run per input; a streamed crew's run is
the kickoff its stream's thread makes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from otel_breaker.classify import IGNORED_RESULT
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.chat_messages import DICT_MESSAGES, schema_name, status_during
from otel_breaker.instrumentation.crewai.actions import Actions, RetriedAction
from otel_breaker.instrumentation.crewai.arguments import ArgumentCheck
from otel_breaker.instrumentation.current_call import HoldsCurrentCall
from otel_breaker.instrumentation.mistakes import run_unknown
from otel_breaker.instrumentation.patches import (
    argument,
    context_patch,
    menu_patch,
    prompt_patch,
    run_patch,
    tool_patch,
)
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall, agent_display_name

_BASE_TOOL = "crewai.tools.base_tool"
_STRUCTURED_TOOL = "crewai.tools.structured_tool"
_TOOL_USAGE = "crewai.tools.tool_usage"
_AGENT_EXECUTOR = "crewai.agents.agent_executor"
_STEP_EXECUTOR = "crewai.agents.step_executor"
_CREW = "crewai.crew"
_AGENT = "crewai.agent.core"

#: A native call's (executor, CrewAI's tool call id): known where CrewAI dispatches the
#: call, not where the tool runs.
_native_caller: ContextVar[tuple[Any, str | None]] = ContextVar("otel_breaker_crewai_native", default=(None, None))
#: The tool object being guarded: the rejection reads its failure policy.
_guarded_tool: ContextVar[Any] = ContextVar("otel_breaker_crewai_tool", default=None)


def _last_failure(usage: Any) -> Any:
    """What a ``ToolUsage`` had recorded as its last failure when an action opened."""
    return usage.last_failure


#: The ReAct action in progress (a ``ToolUsage``'s).
_react_actions = Actions("otel_breaker_crewai_react", before=_last_failure)
#: CrewAI's check of the model's arguments; a refusal also marks the ReAct action in progress.
_argument_check = ArgumentCheck("otel_breaker_crewai_argument_error", then=_react_actions.mistaken)


def _executor_without_call_id(executor: Any, args: tuple, kwargs: dict) -> tuple[Any, None]:
    """A step executor's native calls: their executor, their ids not known yet."""
    return executor, None


def _call(name: str, owner: Any, call_id: str | None = None, **more: Any) -> ToolCall:
    """A call by the agent of ``owner`` (an executor or a ``ToolUsage``); its crew is the session."""
    agent = getattr(owner, "agent", None)
    crew_id = getattr(getattr(owner, "crew", None), "id", None)
    return ToolCall(
        name,
        "crewai",
        agent=agent,
        agent_name=agent_display_name(agent),
        session_id=None if crew_id is None else str(crew_id),
        call_id=call_id,
        **more,
    )


@contextlib.contextmanager
def status_while_open(manager: Any, dialect: MessageDialect, agent: Any) -> Iterator[Any]:
    """``manager`` (a context manager yielding the message list a model call sends, and keeps
    as the conversation) with ``agent``'s status block in the list while the framework's
    block runs, taken out after so it never accumulates in the conversation."""
    with manager as messages, status_during(messages, dialect, agent):
        yield messages


class CrewAIAdapter(RetriedAction, HoldsCurrentCall, SpecAdapter):
    name = "crewai"
    current = _guarded_tool
    actions = _react_actions
    patches = (
        tool_patch(_BASE_TOOL, "BaseTool.run", "sync"),
        tool_patch(_BASE_TOOL, "Tool.run", "sync"),
        tool_patch(_BASE_TOOL, "BaseTool.arun", "async"),
        tool_patch(_BASE_TOOL, "Tool.arun", "async"),
        tool_patch(_STRUCTURED_TOOL, "CrewStructuredTool.invoke", "sync"),
        tool_patch(_STRUCTURED_TOOL, "CrewStructuredTool.ainvoke", "async"),
        *_react_actions.patches(_TOOL_USAGE, "ToolUsage.use", "ToolUsage._use", "sync"),
        *_react_actions.patches(_TOOL_USAGE, "ToolUsage.ause", "ToolUsage._ause", "async"),
        context_patch(
            _STEP_EXECUTOR, "StepExecutor._execute_native_tool_calls", _native_caller, _executor_without_call_id, "sync"
        ),
        menu_patch(_AGENT_EXECUTOR, "get_llm_response"),
        prompt_patch("crewai.utilities.agent_utils", "_prepare_llm_call", "sync", "_status_during", after=True),
        run_patch(_CREW, "Crew.kickoff", "sync"),
        run_patch(_CREW, "Crew.kickoff_async", "async"),
        run_patch(_CREW, "Crew.akickoff", "async"),
        # Inside an event loop, Agent.kickoff returns kickoff_async's coroutine: a run when awaited.
        run_patch(_AGENT, "Agent.kickoff", "sync"),
        run_patch(_AGENT, "Agent.kickoff_async", "async"),
    )

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_AGENT_EXECUTOR, "AgentExecutor._execute_single_native_tool_call", self._native_call),
            PatchTarget(_BASE_TOOL, "BaseTool._validate_kwargs", _argument_check),
            PatchTarget(_STRUCTURED_TOOL, "CrewStructuredTool._parse_args", _argument_check),
        ]

    def joins_action(self, tool: Any) -> bool:
        """A ReAct action invokes a ``CrewStructuredTool``: inside a claimed action it is the action's."""
        from crewai.tools.structured_tool import CrewStructuredTool

        return isinstance(tool, CrewStructuredTool)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        from crewai.tools.tool_usage import ToolUsage

        if isinstance(instance, ToolUsage):
            return self._describe_action(instance, args, kwargs)
        name = instance.name
        if not isinstance(name, str) or not name:
            return None
        # CrewStructuredTool.invoke(input, ...); BaseTool.run(*args, **kwargs)
        arguments = argument(args, kwargs, 0, "input") if self.joins_action(instance) else kwargs or args
        executor, call_id = _native_caller.get()
        return _call(name, executor, call_id, arguments=arguments, origin=origin_of(instance, "crewai"))

    def _describe_action(self, usage: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        """``ToolUsage._use(tool_string, tool, calling)``: the action's first attempt is the
        guarded call, unless CrewAI refuses it as a repeat of the last one (no tool runs)."""
        tool = argument(args, kwargs, 1, "tool")
        calling = argument(args, kwargs, 2, "calling")
        call = _call(tool.name, usage, arguments=calling.arguments, origin=origin_of(tool, "crewai"))
        # CrewAI's own private (1.x, ``ToolUsage._check_tool_repeated_usage``): its own test
        # for a repeat of the last action, which it refuses without running the tool.
        if usage._check_tool_repeated_usage(calling=calling):
            return None
        return _react_actions.claim(call, tool)

    def _native_call(self, wrapped: Any, executor: Any, args: tuple, kwargs: dict) -> Any:
        """A native call, its caller known below; to a name no tool has, the executor's
        answer goes through the loop guard."""
        from crewai.utilities.agent_utils import extract_tool_call_info

        def read_tool_call() -> Any:
            return extract_tool_call_info(argument(args, kwargs, 0, "tool_call"))

        info = self.safe_tool_call(read_tool_call)  # (CrewAI's call id, function name, arguments)
        call_id = None if info is None or info[0] is None else str(info[0])
        token = _native_caller.set((executor, call_id))
        try:
            known_names = getattr(executor, "_available_functions", None) or {}
            if info is None or info[1] in known_names:
                return wrapped(*args, **kwargs)
            return self._unknown_name(info[1], executor, call_id, wrapped, args, kwargs)
        finally:
            _native_caller.reset(token)

    def _unknown_name(
        self, name: str, executor: Any, call_id: str | None, wrapped: Any, args: tuple, kwargs: dict
    ) -> Any:
        """A native call to a name no tool has: CrewAI's answer, or past the loop guard's limit its own."""
        call = _call(name, executor, call_id)
        answer = {"call_id": call.call_id, "func_name": call.tool, "from_cache": False, "original_tool": None}

        def reject(text: str) -> dict:
            return {**answer, "result": text}

        def unknown_tool_text(result: dict) -> str | None:
            if result["tool_failure"].reason.value == "unknown_tool":
                return result["result"]
            return None

        return run_unknown(call, reject, unknown_tool_text, wrapped, args, kwargs)

    def _status_during(self, instance: Any, args: tuple, kwargs: dict, manager: Any) -> Any:
        """``_prepare_llm_call``'s context manager, with the status block in the messages it yields."""
        executor = argument(args, kwargs, 0, "executor_context")
        agent = getattr(executor, "agent", None) or executor
        return status_while_open(manager, DICT_MESSAGES, agent)

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """A native model call's schemas (by keyword) without the agent's open tools; a schema
        has CrewAI's sanitised name (``weather_lookup``), a breaker the tool's (``Weather Lookup``)."""
        from crewai.utilities.string_utils import sanitize_tool_name

        tools = kwargs.get("tools")
        agent = kwargs.get("from_agent")
        if not isinstance(tools, list) or not tools:
            return None
        breaker_names = {sanitize_tool_name(tool.name): tool.name for tool in getattr(agent, "tools", None) or ()}

        def breaker_name(schema: Any) -> str | None:
            name = schema_name(schema)
            if name is None:
                return None
            return breaker_names.get(name, name)

        visible = visible_tools(tools, breaker_name, agent=agent)
        if visible is tools:
            return None
        return args, {**kwargs, "tools": list(visible) or None}

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return _argument_check.exception_hint(exc)

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        """A ``ToolFailure`` (the action's, on the ReAct path) is a failure, except a spent usage
        limit, our own rejection and (ReAct) arguments the schema rejected: the tool never ran."""
        from crewai.tools import ToolFailure

        action = _react_actions.of(call)
        if action is not None:
            # The action's outcome is the failure it recorded, if it recorded a new one.
            result = action.owner.last_failure
            if result is action.before:
                return None
            if action.mistake:
                return IGNORED_RESULT
        if not isinstance(result, ToolFailure):
            return None
        if getattr(result.reason, "value", None) == "usage_limit":
            return None
        if result.code == "circuit_open":
            return None
        return str(result.code or "tool_error")

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from crewai.tools import ToolFailure
        from crewai.tools.tool_failure import ToolFailurePolicy, resolve_tool_failure_policy

        # None too for a different tool called from inside a ReAct tool's body.
        action = _react_actions.of(call)
        if action is not None:
            tool, owner = action.tool, action.owner
        else:
            tool, owner = _guarded_tool.get(), _native_caller.get()[0]
        who = {name: getattr(owner, name, None) for name in ("agent", "task", "crew")}
        with contextlib.suppress(Exception):
            if resolve_tool_failure_policy(tool=tool, **who) is ToolFailurePolicy.RAISE:
                return info.message  # CrewAI would end the run on a ToolFailure
        failure = ToolFailure(message=info.message, code="circuit_open", retryable=True)
        return _react_actions.rejected(call, info, failure)
