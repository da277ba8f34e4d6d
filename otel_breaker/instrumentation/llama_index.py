"""LlamaIndex: agent workflows run tools in ``_call_tool``; LLM helpers in ``tools.calling``.

``BaseWorkflowAgent._call_tool`` (agents on their own) and ``AgentWorkflow._call_tool``
(multi-agent workflows) run each tool call of an agent loop; the ``call_tool`` steps
that call them pass the model's ``ev.tool_id`` down. ``tools.calling.call_tool`` /
``acall_tool`` serve ``predict_and_call`` (they may call a tool twice for one request:
guarded as a whole). All of them return ``ToolOutput(is_error=True)`` for a failure,
which is also the rejection; a workflow's ``WaitingForEvent`` (a pause for a person)
is never counted. Menu: within a ``run_agent_step``, ``get_tools`` leaves out open
tools. Status block: the system message of ``setup_agent``'s ``AgentSetup.input``.
"""

from __future__ import annotations

import contextvars
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import STATUS_HEADER, Rejection, augment_instructions
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.spec import (
    SKIP,
    MessageDialect,
    SpecAdapter,
    argument,
    context_patch,
    insert_status_block,
    menu_patch,
    prompt_patch,
    tool_patch,
)
from otel_breaker.menu import hide_open_tools_enabled, visible_tools
from otel_breaker.toolcall import ToolCall

_AGENT = "llama_index.core.agent.workflow.base_agent"
_WORKFLOW = "llama_index.core.agent.workflow.multi_agent_workflow"
_CALLING = "llama_index.core.tools.calling"
_NO_STEP = object()
#: The agent whose model step is prepared (its menu loses open tools); unset elsewhere.
_menu_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_llama_index_menu", default=_NO_STEP)
#: The model's id for the tool call being run, from the step that knows it.
_tool_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_breaker_llama_index_tool_id", default=None)


def _id_of(index: int, name: str) -> Any:
    return lambda instance, args, kwargs: getattr(argument(args, kwargs, index, name), "tool_id", None)


def _step_agent(instance: Any, args: tuple, kwargs: dict) -> Any:
    if not hide_open_tools_enabled():
        return SKIP
    return _agent_in(instance, getattr(argument(args, kwargs, 1, "ev"), "current_agent_name", None))


class CallDeferred(Exception):
    """Carries a workflow's ``WaitingForEvent`` through the guard (never counted)."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


class LlamaIndexAdapter(SpecAdapter):
    """Guards LlamaIndex agent workflows and the function-calling helpers."""

    name = "llama_index"
    requires = "llama-index-core>=0.14,<0.15"
    patches = (
        tool_patch(_AGENT, "BaseWorkflowAgent._call_tool"),
        tool_patch(_CALLING, "call_tool", "sync"),
        tool_patch(_CALLING, "acall_tool"),
        context_patch(_AGENT, "BaseWorkflowAgent.call_tool", _tool_id, _id_of(1, "ev")),
        context_patch(_WORKFLOW, "AgentWorkflow.call_tool", _tool_id, _id_of(1, "ev")),
        context_patch(_CALLING, "call_tool_with_selection", _tool_id, _id_of(0, "tool_call"), "sync"),
        context_patch(_CALLING, "acall_tool_with_selection", _tool_id, _id_of(0, "tool_call")),
        context_patch(_AGENT, "BaseWorkflowAgent.run_agent_step", _menu_agent, _step_agent),
        context_patch(_WORKFLOW, "AgentWorkflow.run_agent_step", _menu_agent, _step_agent),
        menu_patch(_AGENT, "BaseWorkflowAgent.get_tools", "async", "visible", after=True),
        menu_patch(_WORKFLOW, "AgentWorkflow.get_tools", "async", "visible", after=True),
        prompt_patch(_AGENT, "BaseWorkflowAgent.setup_agent", "async", "setup_block", after=True),
        prompt_patch(_WORKFLOW, "AgentWorkflow.setup_agent", "async", "setup_block", after=True),
    )

    def targets(self) -> list[PatchTarget]:
        return [*super().targets(), PatchTarget(_WORKFLOW, "AgentWorkflow._call_tool", self._workflow_call_tool)]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        if instance is None:  # tools.calling.call_tool(tool, arguments)
            tool, arguments = argument(args, kwargs, 0, "tool"), argument(args, kwargs, 1, "arguments")
            return self._call(tool, arguments, None, None)
        # BaseWorkflowAgent._call_tool(ctx, tool, tool_input)
        tool, tool_input = argument(args, kwargs, 1, "tool"), argument(args, kwargs, 2, "tool_input")
        return self._call(tool, tool_input, instance, agent_display_name(instance))

    def _call(self, tool: Any, tool_input: Any, agent: Any, agent_name: str | None) -> ToolCall | None:
        name, call_id = _tool_name(tool), _tool_id.get()
        if name is None:
            return None
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
        """``AgentWorkflow._call_tool(ctx, tool, tool_input)``: the active agent is in the context's store."""
        try:
            agent_name = await argument(args, kwargs, 0, "ctx").store.get("current_agent_name", default=None)
            agent = (getattr(instance, "agents", None) or {}).get(agent_name)
        except Exception:
            agent_name, agent = None, None
        tool, tool_input = argument(args, kwargs, 1, "tool"), argument(args, kwargs, 2, "tool_input")
        owner = agent if agent is not None else instance  # else the workflow owns the breaker
        call = self.safe_tool_call(lambda: self._call(tool, tool_input, owner, agent_name))
        return await (wrapped(*args, **kwargs) if call is None else self.run_async(call, wrapped, args, kwargs))

    async def run_async(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        async def invoke(*a: Any, **k: Any) -> Any:
            try:
                return await wrapped(*a, **k)
            except Exception as exc:
                if any(klass.__name__ == "WaitingForEvent" for klass in type(exc).__mro__):
                    raise CallDeferred(exc) from exc
                raise

        try:
            return await super().run_async(call, invoke, args, kwargs)
        except CallDeferred as deferred:
            raise deferred.original from None

    def visible(self, instance: Any, args: tuple, kwargs: dict, tools: Any) -> Any:
        agent = _menu_agent.get()
        if agent is _NO_STEP or not isinstance(tools, list):
            return None
        kept = visible_tools(tools, _tool_name, agent=agent)
        return None if kept is tools else kept

    def setup_block(self, instance: Any, args: tuple, kwargs: dict, setup: Any) -> Any:
        """The ``AgentSetup`` event with the status block in its leading system message."""
        messages = getattr(setup, "input", None)
        if isinstance(messages, list):
            updated = _status_messages(messages, _agent_in(instance, getattr(setup, "current_agent_name", None)))
            if updated is not None:
                setup.input = updated
        return setup

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
        exception = getattr(result, "exception", None) if getattr(result, "is_error", False) is True else None
        return MISTAKE if exception is not None and _wrong_arguments(exception) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from llama_index.core.tools import ToolOutput

        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        return ToolOutput(
            content=info.message, tool_name=call.tool, raw_input=arguments, raw_output=info.message, is_error=True
        )


def _agent_in(instance: Any, name: Any) -> Any:
    """The agent about to run: a multi-agent workflow's named agent (else the workflow), or the agent itself."""
    agents = getattr(instance, "agents", None)
    return agents.get(name, instance) if isinstance(agents, dict) else instance


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


def _wrong_arguments(exc: BaseException) -> bool:
    """A ``TypeError`` raised where ``FunctionTool`` hands the model's arguments to the
    function: arguments it does not take, before its body ran."""
    if not isinstance(exc, TypeError) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith("llama_index/core/tools/function_tool.py")


def _status_messages(messages: list, agent: Any) -> list | None:
    """``messages`` with the block in the leading system message (None: unchanged)."""
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock

    dialect = MessageDialect(
        is_system=lambda m: m.role == MessageRole.SYSTEM,
        text=lambda m: m.blocks[0].text if len(m.blocks) == 1 and isinstance(m.blocks[0], TextBlock) else None,
        with_text=lambda m, new: m.model_copy(update={"blocks": [TextBlock(text=new)] if new else []}),
        system=lambda block: ChatMessage(role=MessageRole.SYSTEM, content=block),
    )
    first = messages[0] if messages else None
    if first is None or first.role != MessageRole.SYSTEM:
        added = insert_status_block([], dialect, agent)  # a system message put first
        return None if added is None else [*added, *messages]
    if dialect.text(first) is not None:
        return insert_status_block(messages, dialect, agent)
    blocks = list(first.blocks)  # several blocks: drop an earlier turn's, append the current one
    updated = [b for b in blocks if not (isinstance(b, TextBlock) and b.text.startswith(STATUS_HEADER))]
    block = augment_instructions(None, agent)
    updated += [TextBlock(text=block)] if block else []
    return None if updated == blocks else [first.model_copy(update={"blocks": updated}), *messages[1:]]
