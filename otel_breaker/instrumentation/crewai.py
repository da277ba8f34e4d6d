"""CrewAI: guard every tool call of a crew, on both of CrewAI's tool paths.

Why these patch points (crewai 1.15):

* Native function calling (models that support tools): the agent executor
  calls the tool's ``run`` for each tool call, so ``BaseTool.run`` and
  ``Tool.run`` (which overrides it) are guarded, plus ``arun``. Who is calling
  is read from ``AgentExecutor._execute_single_native_tool_call`` (and the
  planner's ``StepExecutor._execute_native_tool_calls``), wrapped only to put
  the agent, task, crew and tool-call id in a context variable.
* The ReAct text path never reaches ``run``: ``ToolUsage`` calls
  ``CrewStructuredTool.invoke``, and on an exception calls it again with the
  raw arguments and then retries the whole use, up to six invocations for one
  action of the model. One logical call is therefore one outermost
  ``ToolUsage.use`` (``ause``): that is what is counted, and its outcome is
  the ``ToolFailure`` CrewAI itself records in ``ToolUsage.last_failure``.
  ``CrewStructuredTool.invoke`` is guarded on its own only when something
  other than ``ToolUsage`` calls it.

Failures: CrewAI swallows a tool's exception into "Error executing tool" text
(native) or an observation (ReAct); the exception still passes our wrapper on
the native path, and ``last_failure`` tells on the ReAct path. A tool that
returns a ``ToolFailure`` is a failure too; a spent usage limit is not.
Arguments the tool's schema rejects (``BaseTool._validate_kwargs``,
``CrewStructuredTool._parse_args``, both raising ``ValueError``) are the model's
mistake: neither failure nor success.

Rejection: ``crewai.tools.ToolFailure(message=..., code="circuit_open",
retryable=True)``, the public value a tool returns to report a failure: the
loop goes on, the model reads the message, and CrewAI lists it in
``task.output.tool_failures``. On the ReAct path the rejection is handed to
CrewAI's own ``ToolUsage`` in place of the tool's result, so the model sees an
ordinary observation and no retry happens. Under ``tool_failure_policy="raise"``
a ``ToolFailure`` would end the crew, so there the rejection is the plain
message text instead: a breaker never crashes the loop.

Hidden tools (``OTEL_BREAKER_HIDE_OPEN_TOOLS``): on the native path the
executor hands the model its tool schemas through ``get_llm_response``; the
agent's open tools are left out of that list. The ReAct path writes its tools
into the prompt once per task, so there the status block is the only hint.

Breakers are per agent object (``Agent``), named by its ``role``; CrewAI's
per-action fingerprints change on every action and are not used.

The tool-status block (``OTEL_BREAKER_STATUS_IN_PROMPT=true``): every model
call of an agent's loop (``AgentExecutor``, ``LiteAgent``; native and ReAct,
sync and async) goes through ``crewai.utilities.agent_utils._prepare_llm_call``,
the context manager that runs CrewAI's before-call hooks and yields the
messages handed to ``llm.call``. While the call runs, the system message
carries the block (a system message holding only the block is added when
there is none); when it ends the executor's messages are put back as they
were, so the block never accumulates in the conversation and each call
reflects the breakers' state at that moment. Calls that bypass it (the
planner's step executor, the forced final answer after ``max_iter``) get no
block.
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
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block, tool_patch
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

_BASE = "crewai.tools.base_tool"
_STRUCTURED = "crewai.tools.structured_tool"
_USAGE = "crewai.tools.tool_usage"
_EXECUTOR = "crewai.agents.agent_executor"

# Who is calling on the native path: (agent, task, crew, tool call id).
_native: contextvars.ContextVar[tuple[Any, Any, Any, str | None] | None] = contextvars.ContextVar(
    "otel_breaker_crewai_native", default=None
)
# The ReAct logical call in progress (one outermost ToolUsage.use).
_react: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "otel_breaker_crewai_react", default=None
)
# The last error CrewAI's argument validation raised in this context: the model's mistake.
_argument_error: contextvars.ContextVar[BaseException | None] = contextvars.ContextVar(
    "otel_breaker_crewai_argument_error", default=None
)
# The tool object of the native or direct call being guarded (for its tool_failure_policy).
_tool: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_crewai_tool", default=None)


def _schema_name(tool: Any) -> str | None:
    """The name of one OpenAI-style tool schema of the native path."""
    return (tool.get("function") or {}).get("name") if isinstance(tool, dict) else None


def _breaker_name_of(agent: Any) -> Callable[[Any], str | None]:
    """A schema's tool name as its breaker knows it: the schema carries CrewAI's
    sanitised name (``weather_lookup``), the breaker the tool's own (``Weather Lookup``)."""
    from crewai.utilities.string_utils import sanitize_tool_name

    names = {sanitize_tool_name(t.name): t.name for t in getattr(agent, "tools", None) or ()}

    def name_of(tool: Any) -> str | None:
        name = _schema_name(tool)
        return names.get(name, name) if name is not None else None

    return name_of


# CrewAI's messages are plain dicts.
DIALECT = MessageDialect(
    is_system=lambda m: isinstance(m, dict) and m.get("role") == "system",
    text=lambda m: m.get("content") if isinstance(m.get("content"), str) else None,
    with_text=lambda m, text: {**m, "content": text},
    system=lambda text: {"role": "system", "content": text},
)


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
    requires = "crewai>=1.15,<2"
    patches = (
        tool_patch(_BASE, "BaseTool.run", "sync"),
        tool_patch(_BASE, "Tool.run", "sync"),
        tool_patch(_BASE, "BaseTool.arun", "async"),
        tool_patch(_BASE, "Tool.arun", "async"),
        tool_patch(_STRUCTURED, "CrewStructuredTool.invoke", "sync"),
        tool_patch(_STRUCTURED, "CrewStructuredTool.ainvoke", "async"),
    )
    modules = (_BASE, _STRUCTURED, _USAGE, _EXECUTOR, "crewai.agents.step_executor", "crewai.utilities.agent_utils")

    def targets(self) -> list[PatchTarget]:
        return [
            PatchTarget(_EXECUTOR, "AgentExecutor._execute_single_native_tool_call", self._native_identity),
            PatchTarget(
                "crewai.agents.step_executor", "StepExecutor._execute_native_tool_calls", self._native_identity
            ),
            *super().targets(),
            PatchTarget(_USAGE, "ToolUsage.use", self._use),
            PatchTarget(_USAGE, "ToolUsage.ause", self._ause),
            PatchTarget("crewai.utilities.agent_utils", "_prepare_llm_call", self._prepare_llm_call),
            PatchTarget(_BASE, "BaseTool._validate_kwargs", self._validating),
            PatchTarget(_STRUCTURED, "CrewStructuredTool._parse_args", self._validating),
            PatchTarget(_EXECUTOR, "get_llm_response", self._menu),
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
        call_id = None
        if wrapped.__name__ == "_execute_single_native_tool_call":
            tool_call = args[0] if args else kwargs.get("tool_call")
            call_id = getattr(tool_call, "id", None) or (tool_call.get("id") if isinstance(tool_call, dict) else None)
        identity = (
            getattr(instance, "agent", None),
            getattr(instance, "task", None),
            getattr(instance, "crew", None),
            _text_id(call_id),
        )
        token = _native.set(identity)
        try:
            if wrapped.__name__ != "_execute_single_native_tool_call":
                return wrapped(*args, **kwargs)
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
            frame = {
                "call": call,
                "usage": usage,
                "tool": tool,
                "before": getattr(usage, "last_failure", None),
                "reject": None,
            }
            return call, frame

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

    def _menu(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A native model call of ``AgentExecutor`` (its ``get_llm_response``, tools passed
        by keyword; ``akickoff`` runs the same executor) sent without the agent's open tools."""
        tools = kwargs.get("tools")
        if isinstance(tools, list) and tools:
            try:
                agent = kwargs.get("from_agent")
                visible = visible_tools(tools, _breaker_name_of(agent), agent=agent)
            except Exception:
                visible = tools
                logger.debug("otel-breaker: crewai: open tools left on the menu", exc_info=True)
            if visible is not tools:
                kwargs = {**kwargs, "tools": list(visible) or None}
        return wrapped(*args, **kwargs)

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
        try:
            from crewai.tools.tool_failure import ToolFailurePolicy, resolve_tool_failure_policy
        except ImportError:
            return False
        if frame is not None:
            usage, tool = frame["usage"], frame["tool"]
            agent, task, crew = (
                getattr(usage, "agent", None),
                getattr(usage, "task", None),
                getattr(usage, "crew", None),
            )
        else:
            tool = _tool.get()
            agent, task, crew, _ = _native.get() or (None, None, None, None)
        try:
            policy = resolve_tool_failure_policy(tool=tool, agent=agent, task=task, crew=crew)
        except Exception:
            return False
        return policy is ToolFailurePolicy.RAISE


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
    """CrewAI's ``_prepare_llm_call`` context, with the status block in the
    system message of the yielded messages for the duration of the call."""
    with manager as messages:
        undo = _add_status(messages, agent)
        try:
            yield messages
        finally:
            undo()


def _nothing() -> None:
    return None


def _add_status(messages: Any, agent: Any) -> Callable[[], None]:
    """Put the status block into ``messages`` (in place); returns what takes it out again. Never raises."""
    try:
        if not isinstance(messages, list):
            return _nothing
        amended = insert_status_block(messages, DIALECT, agent)
        if amended is None:
            return _nothing
        if len(amended) > len(messages):  # a system message holding only the block, first
            original, added = None, amended[0]
            messages.insert(0, added)
        else:
            index = next(i for i, (old, new) in enumerate(zip(messages, amended, strict=True)) if old is not new)
            original, added = messages[index], amended[index]
            messages[index] = added
    except Exception:
        logger.debug("otel-breaker: crewai: tool status not added to the prompt", exc_info=True)
        return _nothing

    def undo() -> None:
        try:
            for i, message in enumerate(messages):
                if message is added:
                    if original is None:
                        del messages[i]
                    else:
                        messages[i] = original
                    return
        except Exception:
            logger.debug("otel-breaker: crewai: could not take the tool status out again", exc_info=True)

    return undo
