"""AutoGen (autogen-core / autogen-agentchat 0.7): a breaker on every ``BaseTool.run_json``.

Every tool call ends in the async ``BaseTool.run_json`` (``AssistantAgent``'s workbench,
``ToolAgent``, handoffs) or ``BaseStreamTool.run_json_stream``. The agent is not an argument:
``on_messages_stream`` marks it per step, ``_execute_tool_call`` names the handoffs (never
guarded), a runtime's ``MessageHandlerContext`` the caller. Arguments the args model refuses
are the model's mistake. The workbench turns a tool's exception into an error ``ToolResult``,
so the rejection is raised. Status block: ``_get_compatible_context``'s ``SystemMessage``;
menu: ``StaticWorkbench.list_tools`` in ``_call_llm``. A loop stop ends the turn's event
queue first (it ends only when every call returns), so ``ToolLoopError`` reaches the caller.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

from opentelemetry import trace as trace_api

from otel_breaker import loops
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, active_call, agent_display_name
from otel_breaker.instrumentation.patches import (
    argument,
    context_patch,
    context_wrapper,
    prompt_patch,
    run_patch,
    with_argument,
)
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block, menu_patch, tool_patch
from otel_breaker.menu import visible_tools
from otel_breaker.runs import async_steps_in_run, joined_or_new
from otel_breaker.toolcall import ToolCall

_TOOLS = "autogen_core.tools._base"
_ASSISTANT = "autogen_agentchat.agents._assistant_agent"
_WORKBENCH = "autogen_core.tools._static_workbench"
_CHAT_AGENT = "autogen_agentchat.agents._base_chat_agent"
_GROUP_CHAT = "autogen_agentchat.teams._group_chat._base_group_chat"

#: The agentchat agent whose turn is running in this context.
_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_autogen_agent", default=None)
#: (agent name, names of the handoff tools) of the ``_execute_tool_call`` in progress.
_tool_call: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("otel_breaker_autogen_call", default=None)
#: Set while ``_call_llm`` gathers the tool definitions it sends the model.
_menu: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_breaker_autogen_menu", default=False)


def _turn(instance: Any, args: tuple, kwargs: dict) -> tuple[str | None, frozenset]:
    """``_execute_tool_call(tool_call, workbench, handoff_tools, agent_name, ...)``: its agent and handoffs."""
    name = argument(args, kwargs, 3, "agent_name")
    handoffs = argument(args, kwargs, 2, "handoff_tools") or ()
    handoff_names = frozenset(getattr(tool, "name", None) for tool in handoffs)
    return (name if isinstance(name, str) else None), handoff_names


def _the_agent(agent: Any, args: tuple, kwargs: dict) -> Any:
    """``on_messages_stream``: the agent whose turn it is."""
    return agent


def _gathering_menu(instance: Any, args: tuple, kwargs: dict) -> bool:
    """``_call_llm``: the tool definitions listed during it are the model's menu."""
    return True


_in_turn = context_wrapper(context_patch(_ASSISTANT, "AssistantAgent._execute_tool_call", _tool_call, _turn))
_agent_marked = context_wrapper(
    context_patch(_ASSISTANT, "AssistantAgent.on_messages_stream", _agent, _the_agent, "asyncgen")
)


def _agent_turn(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``on_messages_stream``: the agent's turn, marked for its steps, and a run of its own
    unless it is a step of one open already (``run``, ``run_stream``, a team's)."""
    turn = _agent_marked(wrapped, instance, args, kwargs)
    return async_steps_in_run(turn, joined_or_new(framework="autogen"))


async def _execute_call(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """The call in its turn; a ``ToolLoopError`` leaving it ends the turn's event ``stream`` first."""
    try:
        return await _in_turn(wrapped, instance, args, kwargs)
    except loops.ToolLoopError:
        stream = argument(args, kwargs, 5, "stream")
        if stream is not None:
            stream.put_nowait(None)
        raise


def _tool_span(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """In a call we guard our span, already current, is its one ``execute_tool`` span (not AutoGen's too)."""
    active = active_call()
    if active is not None and (active.framework, active.tool) == ("autogen", argument(args, kwargs, 0, "tool_name")):
        return contextlib.nullcontext(trace_api.get_current_span())
    return wrapped(*args, **kwargs)


def _guarded_name(tool: Any) -> str | None:
    """The tool's name, unless it is a handoff (``Handoff.handoff_tool`` wraps ``_handoff_tool``)."""
    name = tool.name
    current = _tool_call.get()
    if not isinstance(name, str) or not name:
        return None
    if current is not None and name in current[1]:
        return None
    if getattr(getattr(tool, "_func", None), "__name__", None) == "_handoff_tool":
        return None
    return name


def _runtime_agent() -> str | None:
    with contextlib.suppress(Exception):  # the agent handling the message; RuntimeError outside a handler
        from autogen_core import MessageHandlerContext

        return str(MessageHandlerContext.agent_id())
    return None


def _is_system(message: Any) -> bool:
    return type(message).__name__ == "SystemMessage"


def _text(message: Any) -> str | None:
    return message.content if isinstance(message.content, str) else None


def _with_text(message: Any, text: str) -> Any:
    return message.model_copy(update={"content": text})


def _system_message(text: str) -> Any:
    from autogen_core.models import SystemMessage

    return SystemMessage(content=text)


_DIALECT = MessageDialect(is_system=_is_system, text=_text, with_text=_with_text, system=_system_message)


def _definition_name(tool: dict) -> Any:
    return tool.get("name")


class AutoGenAdapter(SpecAdapter):
    name = "autogen"
    patches = (
        tool_patch(_TOOLS, "BaseTool.run_json", "async"),
        tool_patch(_TOOLS, "BaseStreamTool.run_json_stream", "asyncgen"),
        prompt_patch(_ASSISTANT, "AssistantAgent._get_compatible_context", "sync"),
        context_patch(_ASSISTANT, "AssistantAgent._call_llm", _menu, _gathering_menu, "asyncgen"),
        menu_patch(_WORKBENCH, "StaticWorkbench.list_tools", "async", "visible", after=True),
        # An agent's or a team's invocation is a run; a team's agents (its runtime's tasks
        # start inside it) and an agent called directly within one join it.
        run_patch(_CHAT_AGENT, "BaseChatAgent.run", "async"),
        run_patch(_CHAT_AGENT, "BaseChatAgent.run_stream", "asyncgen"),
        run_patch(_ASSISTANT, "AssistantAgent.on_messages", "async"),
        run_patch(_GROUP_CHAT, "BaseGroupChat.run", "async"),
        run_patch(_GROUP_CHAT, "BaseGroupChat.run_stream", "asyncgen"),
    )

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_ASSISTANT, "AssistantAgent._execute_tool_call", _execute_call),
            PatchTarget(_ASSISTANT, "AssistantAgent.on_messages_stream", _agent_turn),
            PatchTarget(_TOOLS, "trace_tool_span", _tool_span),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        # run_json(args, cancellation_token, call_id=None)
        arguments = argument(args, kwargs, 0, "args")
        call_id = argument(args, kwargs, 2, "call_id")
        name = _guarded_name(instance)
        if name is None:
            return None
        instance.args_type().model_validate(arguments)  # raises on the model's mistakes: run unguarded
        agent = _agent.get()
        current = _tool_call.get()
        agent_name = agent_display_name(agent) or (current[0] if current is not None else None) or _runtime_agent()
        return ToolCall(
            name,
            self.name,
            agent,
            agent_name,
            call_id=call_id if isinstance(call_id, str) else None,
            arguments=None if arguments is None else dict(arguments),
            origin=origin_of(instance, "autogen_core"),
        )

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self.call_of(instance, args, kwargs)
        if call is not None:
            return await self.run_async(call, wrapped, args, kwargs)
        if not self.enabled:
            return await wrapped(*args, **kwargs)

        def describe_mistake() -> ToolCall | None:
            return self._mistake(instance, args, kwargs)

        mistake = self.safe_tool_call(describe_mistake)
        breaker = self.guard.breaker_for(mistake) if mistake is not None else None
        if breaker is None:
            return await wrapped(*args, **kwargs)
        return await loops.arun_mistake(breaker, mistake, loops.Mistakes(self), wrapped, args, kwargs)

    def _mistake(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        """The call, when the tool's schema refuses its arguments: the breaker counts nothing, the loop guard does."""
        arguments = argument(args, kwargs, 0, "args")
        name = _guarded_name(instance)
        if name is None:
            return None
        with contextlib.suppress(Exception):
            instance.args_type().model_validate(arguments)
            return None
        agent = _agent.get()
        return ToolCall(
            name,
            self.name,
            agent,
            agent_display_name(agent) or _runtime_agent(),
            arguments=dict(arguments) if isinstance(arguments, dict) else arguments,
        )

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        raise info.error()  # the workbench hands the exception's text to the model as an error result

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """``_get_compatible_context(model_client, messages)``: the messages with the status block."""
        messages = insert_status_block(argument(args, kwargs, 1, "messages"), _DIALECT, _agent.get())
        if messages is None:
            return None
        return with_argument(args, kwargs, 1, "messages", messages)

    def visible(self, instance: Any, args: tuple, kwargs: dict, tools: Any) -> Any:
        """Within ``_call_llm`` only: the tool definitions without the agent's open tools."""
        if not _menu.get():
            return None
        kept = visible_tools(tools, _definition_name, agent=_agent.get())
        return None if kept is tools else kept
