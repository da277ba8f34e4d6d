"""LlamaIndex: agent workflows run tools in ``_call_tool``; LLM helpers in ``tools.calling``.

``BaseWorkflowAgent._call_tool`` and ``AgentWorkflow._call_tool`` run an agent loop's tool calls
(their ``call_tool`` step knows ``ev.tool_id``, a workflow's store the active agent);
``tools.calling.call_tool`` / ``acall_tool`` serve ``predict_and_call`` (guarded as a whole: it
may call twice). ``ToolOutput(is_error=True)`` is failure and rejection; arguments the function
does not take are the model's mistake; ``WaitingForEvent`` (a pause for a person) counts neither
way. Menu: ``get_tools`` in a ``run_agent_step``; status block: ``AgentSetup.input``.

A run (:mod:`otel_breaker.runs`) is an agent's or a multi-agent workflow's ``run``: it returns a
handler at once and runs the workflow in tasks it starts, which hold the run until the handler's
result is in. A handoff is a step of the same workflow; an agent a tool runs joins its caller's run.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import STATUS_HEADER, Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.mistakes import wrong_arguments
from otel_breaker.instrumentation.patches import (
    SKIP,
    argument,
    context_patch,
    ending_with,
    menu_patch,
    prompt_patch,
    run_in_tasks,
    tool_patch,
)
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.menu import menu_may_change, visible_tools
from otel_breaker.toolcall import ToolCall, agent_display_name

_AGENT = "llama_index.core.agent.workflow.base_agent"
_WORKFLOW = "llama_index.core.agent.workflow.multi_agent_workflow"
_CALLING = "llama_index.core.tools.calling"
#: An agent alone and a multi-agent workflow take the same steps: (module, class prefix).
_AGENT_AND_WORKFLOW = ((_AGENT, "BaseWorkflowAgent."), (_WORKFLOW, "AgentWorkflow."))

#: The agent whose model step is prepared (its menu loses open tools); unset elsewhere.
_menu_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_llama_index_menu", default=None)
#: (the model's id of the tool call being run, a workflow's active agent name), from the step.
_step: contextvars.ContextVar[tuple] = contextvars.ContextVar("otel_breaker_llama_index", default=(None, None))


def _wrong_arguments(exc: BaseException) -> bool:
    """Raised where ``FunctionTool`` hands the model's arguments to the function: the model's mistake."""
    return wrong_arguments(exc, "llama_index/core/tools/function_tool.py")


def _tool_id_of(index: int, name: str) -> Any:
    """A context patch's value: the ``tool_id`` of the argument at ``index`` (or named ``name``)."""

    def tool_id(instance: Any, args: tuple, kwargs: dict) -> tuple[Any, None]:
        return getattr(argument(args, kwargs, index, name), "tool_id", None), None

    return tool_id


async def _workflow_step(instance: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """``AgentWorkflow.call_tool(ctx, ev)``: the active agent is named in the run's store."""
    name = await argument(args, kwargs, 0, "ctx").store.get("current_agent_name", default=None)
    return getattr(argument(args, kwargs, 1, "ev"), "tool_id", None), name


def _step_agent(instance: Any, args: tuple, kwargs: dict) -> Any:
    """``run_agent_step(ctx, ev)``: the agent whose menu is prepared, while its menu may lose
    tools (open ones hidden, or the run's waste budget took some out)."""
    if not menu_may_change():
        return SKIP
    return _agent_in(instance, getattr(argument(args, kwargs, 1, "ev"), "current_agent_name", None))


def _workflow_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``run(...)`` of an agent or an ``AgentWorkflow``: the workflow's tasks, started here,
    hold the run; it ends when the handler's result task is done."""
    handler, opened = run_in_tasks(wrapped, args, kwargs, "llama_index")
    ending_with(getattr(handler, "_result_task", None), opened)
    return handler


class LlamaIndexAdapter(SpecAdapter):
    name = "llama_index"
    patches = (
        *(tool_patch(module, prefix + "_call_tool") for module, prefix in _AGENT_AND_WORKFLOW),
        tool_patch(_CALLING, "call_tool", "sync"),
        tool_patch(_CALLING, "acall_tool"),
        context_patch(_AGENT, "BaseWorkflowAgent.call_tool", _step, _tool_id_of(1, "ev")),
        context_patch(_WORKFLOW, "AgentWorkflow.call_tool", _step, _workflow_step),
        context_patch(_CALLING, "call_tool_with_selection", _step, _tool_id_of(0, "tool_call"), "sync"),
        context_patch(_CALLING, "acall_tool_with_selection", _step, _tool_id_of(0, "tool_call")),
        *(
            context_patch(module, prefix + "run_agent_step", _menu_agent, _step_agent)
            for module, prefix in _AGENT_AND_WORKFLOW
        ),
        *(
            menu_patch(module, prefix + "get_tools", "async", "visible", after=True)
            for module, prefix in _AGENT_AND_WORKFLOW
        ),
        *(
            prompt_patch(module, prefix + "setup_agent", "async", "setup_block", after=True)
            for module, prefix in _AGENT_AND_WORKFLOW
        ),
    )

    def targets(self) -> list[PatchTarget]:
        runs = [PatchTarget(module, prefix + "run", _workflow_run) for module, prefix in _AGENT_AND_WORKFLOW]
        return [*super().targets(), *runs]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        call_id, agent_name = _step.get()
        if instance is None:
            # tools.calling.call_tool(tool, arguments): no agent.
            tool = argument(args, kwargs, 0, "tool")
            arguments = argument(args, kwargs, 1, "arguments")
            agent = None
        else:
            # _call_tool(ctx, tool, tool_input): a workflow's active agent owns the breaker, else the workflow.
            tool = argument(args, kwargs, 1, "tool")
            arguments = argument(args, kwargs, 2, "tool_input")
            agent = _agent_in(instance, agent_name)
        agent_name = None if agent is None else agent_name or agent_display_name(agent)
        name = _tool_name(tool)
        if name is None:
            return None
        return ToolCall(
            name,
            self.name,
            agent,
            agent_name,
            _run_id(),
            str(call_id) if call_id else None,
            arguments=arguments,
            origin=origin_of(tool, "llama_index"),
        )

    def is_neutral(self, exc: BaseException) -> bool:
        return any(klass.__name__ == "WaitingForEvent" for klass in type(exc).__mro__)

    def visible(self, instance: Any, args: tuple, kwargs: dict, tools: Any) -> Any:
        agent = _menu_agent.get()
        if agent is None or not isinstance(tools, list):
            return None
        kept = visible_tools(tools, _tool_name, agent=agent)
        return None if kept is tools else kept

    def setup_block(self, instance: Any, args: tuple, kwargs: dict, setup: Any) -> Any:
        """``AgentSetup`` with the status block in its leading system message (an agent's prompt is first)."""
        messages = getattr(setup, "input", None)
        agent = _agent_in(instance, getattr(setup, "current_agent_name", None))
        if not isinstance(messages, list):
            return setup
        amended = insert_status_block(messages[:1], _dialect(), agent)
        if amended is not None:
            setup.input = [*amended, *messages[1:]]
        return setup

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        if getattr(result, "is_error", False) is not True:
            return None
        exception = getattr(result, "exception", None)
        if exception is None:
            return "tool_error"
        if _wrong_arguments(exception):
            return IGNORED_RESULT
        return type(exception).__name__

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        return MISTAKE if self.result_error(call, result) == IGNORED_RESULT else None

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if _wrong_arguments(exc) else super().exception_hint(call, exc)

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from llama_index.core.tools import ToolOutput

        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        text = info.message
        return ToolOutput(content=text, tool_name=call.tool, raw_input=arguments, raw_output=text, is_error=True)


def _agent_in(instance: Any, name: Any) -> Any:
    """The agent about to run: a multi-agent workflow's named agent (else the workflow), or the agent itself."""
    agents = getattr(instance, "agents", None)
    return agents.get(name, instance) if isinstance(agents, dict) else instance


def _tool_name(tool: Any) -> str | None:
    name = getattr(getattr(tool, "metadata", None), "name", None)
    return name if isinstance(name, str) and name else None


def _run_id() -> str | None:
    with contextlib.suppress(Exception):
        from llama_index.core.instrumentation.dispatcher import active_instrument_tags

        return str(active_instrument_tags.get().get("llamaindex.run_id") or "") or None
    return None


def _dialect() -> MessageDialect:
    """The text amended is a lone text block (the prompt), or beside other blocks the status block's own."""
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock

    def is_ours(message: Any, block: Any) -> bool:
        return isinstance(block, TextBlock) and (len(message.blocks) == 1 or block.text.startswith(STATUS_HEADER))

    def is_system(message: Any) -> bool:
        return message.role == MessageRole.SYSTEM

    def text(message: Any) -> str:
        return next((block.text for block in message.blocks if is_ours(message, block)), "")

    def with_text(message: Any, new: str) -> Any:
        others = [block for block in message.blocks if not is_ours(message, block)]
        ours = [TextBlock(text=new)] if new else []
        return message.model_copy(update={"blocks": others + ours})

    def system(block: str) -> Any:
        return ChatMessage(role=MessageRole.SYSTEM, content=block)

    return MessageDialect(is_system=is_system, text=text, with_text=with_text, system=system)
