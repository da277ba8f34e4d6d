"""LlamaIndex: agent workflows run tools in ``_call_tool``; LLM helpers in ``tools.calling``.

Why these points:

* ``BaseWorkflowAgent._call_tool`` (FunctionAgent, ReActAgent, CodeActAgent run
  on their own) and ``AgentWorkflow._call_tool`` (multi-agent workflows, which
  do not go through the agent's method) run each tool call of an agent loop.
  They do not receive the model's tool call id, so the ``call_tool`` workflow
  steps that call them are wrapped too, only to pass ``ev.tool_id`` down.
* ``tools.calling.call_tool``/``acall_tool`` serve ``predict_and_call`` and the
  function-calling LLM helpers. They may call a tool twice for one request
  (positional, then keyword arguments after any exception), so they are
  guarded as a whole and a logical call counts once.

Failures: every one of these catches the tool's exception and returns
``ToolOutput(is_error=True)``; that result is counted as a failure. The
workflow's ``WaitingForEvent`` (a tool pausing for human input) is control
flow, not an outcome, and is never counted.

Rejection: ``ToolOutput(is_error=True)`` with the rejection text, the same
shape a failing tool produces, so the loop goes on and the model reads it.

Open tools off the menu (``OTEL_BREAKER_HIDE_OPEN_TOOLS``): the ``run_agent_step``
workflow step asks ``get_tools`` for the tools it hands the model in
``take_step``; within that step, an open tool is left out of the list (back once
half-open). The ``call_tool`` step looks tools up through the same method,
outside a model step, so a call to a hidden tool still finds it and gets the
rejection.

Tool status in the prompt (``OTEL_BREAKER_STATUS_IN_PROMPT``): before every
model call of an agent loop, the ``setup_agent`` workflow step
(``BaseWorkflowAgent`` on its own, ``AgentWorkflow`` for multi-agent workflows)
puts the agent's system prompt in front of the messages from memory and hands
them to ``run_agent_step`` as ``AgentSetup.input``, the ``llm_input`` of
``take_step`` (FunctionAgent, ReActAgent, CodeActAgent and custom agents alike).
When the setting is on, the system message there gets the status block of the
tools open or half-open for the active agent (a system message is put first when
there is none). Memory is left alone; with the setting off nothing changes.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import STATUS_HEADER, Rejection, augment_instructions, status_in_prompt_enabled
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block, tool_patch
from otel_breaker.menu import hide_open_tools_enabled, visible_tools
from otel_breaker.toolcall import ToolCall

_AGENT_MODULE = "llama_index.core.agent.workflow.base_agent"
_WORKFLOW_MODULE = "llama_index.core.agent.workflow.multi_agent_workflow"
_CALLING_MODULE = "llama_index.core.tools.calling"

logger = logging.getLogger("otel_breaker")

# The agent whose model step is being prepared (``run_agent_step``); its tool list
# leaves out open tools. Unset elsewhere: the ``call_tool`` step still finds a hidden tool.
_NO_STEP = object()
_menu_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_llama_index_menu", default=_NO_STEP)

# The model's id for the tool call being run, set by the step / selection helper
# that knows it, read by the wrapper of the call that does not.
_tool_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_breaker_llama_index_tool_id", default=None)


class CallDeferred(Exception):
    """A tool paused its workflow to wait for an event (human in the loop).

    Carries the workflow's own exception through the guard, whose classifier
    never counts a deferred call, and is turned back into it afterwards.
    """

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


def _is_waiting_for_event(exc: BaseException) -> bool:
    return any(klass.__name__ == "WaitingForEvent" for klass in type(exc).__mro__)


def _tool_name(tool: Any) -> str | None:
    metadata = getattr(tool, "metadata", None)
    get_name = getattr(metadata, "get_name", None)
    name = get_name() if callable(get_name) else getattr(metadata, "name", None)
    return name if isinstance(name, str) and name else None


def _run_id() -> str | None:
    try:
        from llama_index.core.instrumentation.dispatcher import active_instrument_tags

        value = active_instrument_tags.get().get("llamaindex.run_id")
    except Exception:
        return None
    return str(value) if value else None


class LlamaIndexAdapter(SpecAdapter):
    """Guards LlamaIndex agent workflows and the function-calling helpers."""

    name = "llama_index"
    patches = (
        tool_patch(_AGENT_MODULE, "BaseWorkflowAgent._call_tool", "async"),
        tool_patch(_CALLING_MODULE, "call_tool", "sync"),
        tool_patch(_CALLING_MODULE, "acall_tool", "async"),
    )
    modules = (_AGENT_MODULE, _WORKFLOW_MODULE, _CALLING_MODULE)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            # Multi-agent workflows: the active agent is read from the context (async).
            PatchTarget(_WORKFLOW_MODULE, "AgentWorkflow._call_tool", self._workflow_call_tool),
            # The model's tool call id, passed down to the calls that do not receive it.
            PatchTarget(_AGENT_MODULE, "BaseWorkflowAgent.call_tool", self._step),
            PatchTarget(_WORKFLOW_MODULE, "AgentWorkflow.call_tool", self._step),
            PatchTarget(_CALLING_MODULE, "call_tool_with_selection", self._with_selection),
            PatchTarget(_CALLING_MODULE, "acall_tool_with_selection", self._awith_selection),
            # Open tools off the menu: the tool list of each model step.
            PatchTarget(_AGENT_MODULE, "BaseWorkflowAgent.run_agent_step", self._agent_step),
            PatchTarget(_WORKFLOW_MODULE, "AgentWorkflow.run_agent_step", self._workflow_step),
            PatchTarget(_AGENT_MODULE, "BaseWorkflowAgent.get_tools", self._get_tools),
            PatchTarget(_WORKFLOW_MODULE, "AgentWorkflow.get_tools", self._get_tools),
            # The tool-status block, on the system prompt of every model call.
            PatchTarget(_AGENT_MODULE, "BaseWorkflowAgent.setup_agent", self._agent_setup),
            PatchTarget(_WORKFLOW_MODULE, "AgentWorkflow.setup_agent", self._workflow_setup),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        if instance is None:  # tools.calling.call_tool(tool, arguments)
            tool = args[0] if args else kwargs.get("tool")
            arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
            return self._call(tool, arguments, None, None)
        # BaseWorkflowAgent._call_tool(ctx, tool, tool_input)
        tool = args[1] if len(args) > 1 else kwargs.get("tool")
        tool_input = args[2] if len(args) > 2 else kwargs.get("tool_input")
        return self._call(tool, tool_input, instance, agent_display_name(instance))

    def _call(self, tool: Any, tool_input: Any, agent: Any, agent_name: str | None) -> ToolCall | None:
        name = _tool_name(tool)
        if name is None:
            return None
        call_id = _tool_id.get()
        return ToolCall(
            tool=name,
            framework=self.name,
            agent=agent,
            agent_name=agent_name,
            session_id=_run_id(),
            call_id=str(call_id) if call_id else None,
            arguments=tool_input,
            origin=origin_of(tool, "llama_index"),
        )

    async def _workflow_call_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        ctx = args[0] if args else kwargs.get("ctx")
        tool = args[1] if len(args) > 1 else kwargs.get("tool")
        tool_input = args[2] if len(args) > 2 else kwargs.get("tool_input")
        agent, agent_name = None, None
        try:
            agent_name = await ctx.store.get("current_agent_name", default=None)
            agent = (getattr(instance, "agents", None) or {}).get(agent_name)
        except Exception:
            agent_name = None
        # Without the active agent, the workflow is the best owner of the breaker.
        owner = agent if agent is not None else instance
        call = self.safe_tool_call(lambda: self._call(tool, tool_input, owner, agent_name))
        if call is None:
            return await wrapped(*args, **kwargs)
        return await self.run_async(call, wrapped, args, kwargs)

    async def run_async(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """The guarded call, with a workflow's ``WaitingForEvent`` carried through as
        :class:`CallDeferred` (never counted) and raised again as itself."""

        async def invoke(*a: Any, **k: Any) -> Any:
            try:
                return await wrapped(*a, **k)
            except Exception as exc:
                if _is_waiting_for_event(exc):
                    raise CallDeferred(exc) from exc
                raise

        try:
            return await super().run_async(call, invoke, args, kwargs)
        except CallDeferred as deferred:
            raise deferred.original from None

    # -- carrying the tool call id -------------------------------------------------------

    async def _step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        event = args[1] if len(args) > 1 else kwargs.get("ev")
        token = _tool_id.set(getattr(event, "tool_id", None))
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _tool_id.reset(token)

    def _with_selection(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        selection = args[0] if args else kwargs.get("tool_call")
        token = _tool_id.set(getattr(selection, "tool_id", None))
        try:
            return wrapped(*args, **kwargs)
        finally:
            _tool_id.reset(token)

    async def _awith_selection(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        selection = args[0] if args else kwargs.get("tool_call")
        token = _tool_id.set(getattr(selection, "tool_id", None))
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _tool_id.reset(token)

    # -- open tools off the menu (OTEL_BREAKER_HIDE_OPEN_TOOLS) ---------------------------------

    async def _agent_step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return await self._with_menu(instance, wrapped, args, kwargs)

    async def _workflow_step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        event = args[1] if len(args) > 1 else kwargs.get("ev")
        agents = getattr(instance, "agents", None) or {}
        # The breakers of the agent about to run (as _workflow_call_tool keys them).
        return await self._with_menu(
            agents.get(getattr(event, "current_agent_name", None), instance), wrapped, args, kwargs
        )

    async def _with_menu(self, agent: Any, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        if not hide_open_tools_enabled():
            return await wrapped(*args, **kwargs)
        token = _menu_agent.set(agent)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _menu_agent.reset(token)

    async def _get_tools(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Inside a model step: the agent's tools without the open ones."""
        tools = await wrapped(*args, **kwargs)
        agent = _menu_agent.get()
        if agent is _NO_STEP or not isinstance(tools, list):
            return tools
        try:
            return visible_tools(tools, _tool_name, agent=agent)
        except Exception:
            logger.debug("otel-breaker: llama_index: could not hide open tools", exc_info=True)
            return tools

    # -- the tool-status block in the system prompt -------------------------------------------

    async def _agent_setup(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if not status_in_prompt_enabled():
            return await wrapped(*args, **kwargs)
        return _with_status_block(await wrapped(*args, **kwargs), lambda name: instance)

    async def _workflow_setup(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if not status_in_prompt_enabled():
            return await wrapped(*args, **kwargs)
        # The breakers of the agent about to run (as _workflow_call_tool keys them).
        return _with_status_block(
            await wrapped(*args, **kwargs), lambda name: (getattr(instance, "agents", None) or {}).get(name, instance)
        )

    # -- the adapter protocol -----------------------------------------------------------------

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        if getattr(result, "is_error", False) is not True:
            return None
        exception = getattr(result, "exception", None)
        if exception is not None and _wrong_arguments(exception):
            return IGNORED_RESULT  # the model's mistake: the tool body never ran
        return type(exception).__name__ if exception is not None else "tool_error"

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if _wrong_arguments(exc) else None

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        if getattr(result, "is_error", False) is not True:
            return None
        exception = getattr(result, "exception", None)
        return MISTAKE if exception is not None and _wrong_arguments(exception) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from llama_index.core.tools import ToolOutput

        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        return ToolOutput(
            content=info.message, tool_name=call.tool, raw_input=arguments, raw_output=info.message, is_error=True
        )


def _wrong_arguments(exc: BaseException) -> bool:
    """A ``TypeError`` raised where ``FunctionTool`` hands the model's arguments to the
    function (``call``/``acall``): arguments it does not take, before its body ran."""
    if not isinstance(exc, TypeError) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith("llama_index/core/tools/function_tool.py")


def _with_status_block(setup: Any, agent_for: Any) -> Any:
    """The ``AgentSetup`` event with the status block in its system message;
    unchanged when there is nothing to add or on any problem."""
    try:
        messages = getattr(setup, "input", None)
        if not isinstance(messages, list):
            return setup
        updated = _status_messages(messages, agent_for(getattr(setup, "current_agent_name", None)))
        if updated is not None:
            setup.input = updated
    except Exception:
        logger.debug("otel-breaker: llama_index: could not add the tool-status block", exc_info=True)
    return setup


def _dialect() -> MessageDialect:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock

    def text(message: Any) -> str | None:
        blocks = message.blocks
        return blocks[0].text if len(blocks) == 1 and isinstance(blocks[0], TextBlock) else None

    return MessageDialect(
        is_system=lambda m: m.role == MessageRole.SYSTEM,
        text=text,
        with_text=lambda m, new: m.model_copy(update={"blocks": [TextBlock(text=new)] if new else []}),
        system=lambda block: ChatMessage(role=MessageRole.SYSTEM, content=block),
    )


def _status_messages(messages: list, agent: Any) -> list | None:
    """``messages`` with the block in the leading system message, or None when they would not change."""
    from llama_index.core.base.llms.types import MessageRole, TextBlock

    first = messages[0] if messages else None
    if first is None or first.role != MessageRole.SYSTEM:
        added = insert_status_block([], _dialect(), agent)  # a system message put first
        return None if added is None else [*added, *messages]
    if _dialect().text(first) is not None:
        return insert_status_block(messages, _dialect(), agent)
    # Several blocks: drop the block of an earlier turn, append the current one.
    blocks = list(first.blocks)
    updated = [b for b in blocks if not (isinstance(b, TextBlock) and b.text.startswith(STATUS_HEADER))]
    block = augment_instructions(None, agent)
    if block:
        updated.append(TextBlock(text=block))
    if updated == blocks:
        return None
    return [first.model_copy(update={"blocks": updated}), *messages[1:]]
