"""AutoGen (autogen-core / autogen-agentchat 0.7): a breaker on every ``BaseTool.run_json``.

Every caller of a tool ends in ``BaseTool.run_json`` (``AssistantAgent``'s workbench,
``ToolAgent``, handoffs) or ``BaseStreamTool.run_json_stream``; both are async. The
agent is not an argument: ``AssistantAgent.on_messages_stream`` marks it for each
step, ``_execute_tool_call`` tells which calls are handoffs (never guarded), and
inside a runtime ``MessageHandlerContext.agent_id()`` names the caller. Arguments
the tool's args model rejects are the model's mistake. The workbench turns a
tool's exception into ``ToolResult(is_error=True)``, so the rejection is raised
(``CircuitOpenError`` with the sanitized text). Status block: the first
``SystemMessage`` of ``AssistantAgent._get_compatible_context``; menu: the
static workbench's ``list_tools`` inside ``_call_llm``.

``loop_action=stop``: ``AssistantAgent`` runs a turn's tool calls in a task that
feeds a queue and only signals its end when every call returns, so an exception
leaving a call would leave the turn waiting forever. ``_execute_tool_call`` closes
the queue before ``ToolLoopError`` leaves it: the turn ends and the error reaches
the caller of ``run``/``run_stream``.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any

from opentelemetry import trace as trace_api

from otel_breaker import loops
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, active_call, agent_display_name
from otel_breaker.instrumentation.patches import (
    SKIP,
    argument,
    context_patch,
    menu_patch,
    prompt_patch,
    tool_patch,
    with_argument,
)
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

_TOOLS = "autogen_core.tools._base"
_ASSISTANT = "autogen_agentchat.agents._assistant_agent"
_WORKBENCH = "autogen_core.tools._static_workbench"

# The agentchat agent whose turn is running in this context.
_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_autogen_agent", default=None)
# (agent name, names of the handoff tools) of the ``_execute_tool_call`` in progress.
_tool_call: contextvars.ContextVar[tuple[str | None, frozenset[str]] | None] = contextvars.ContextVar(
    "otel_breaker_autogen_tool_call", default=None
)
# Set while ``_call_llm`` gathers the tool definitions it sends the model.
_menu: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_breaker_autogen_menu", default=False)


def _system_message(text: str) -> Any:
    from autogen_core.models import SystemMessage

    return SystemMessage(content=text)


DIALECT = MessageDialect(
    is_system=lambda m: type(m).__name__ == "SystemMessage",
    text=lambda m: m.content if isinstance(m.content, str) else None,
    with_text=lambda m, text: m.model_copy(update={"content": text}),
    system=_system_message,
)


def _runtime_agent() -> str | None:
    """The runtime's id of the agent handling the current message, if inside one."""
    try:
        from autogen_core import MessageHandlerContext

        return str(MessageHandlerContext.agent_id())
    except Exception:  # RuntimeError outside a message handler
        return None


def _is_handoff(tool: Any, name: str) -> bool:
    current = _tool_call.get()
    if current is not None and name in current[1]:
        return True
    # ``Handoff.handoff_tool`` wraps a local function of this name.
    return getattr(getattr(tool, "_func", None), "__name__", None) == "_handoff_tool"


class AutoGenAdapter(SpecAdapter):
    name = "autogen"
    requires = "autogen-core>=0.4,<0.8"
    patches = (
        tool_patch(_TOOLS, "BaseTool.run_json", "async"),
        tool_patch(_TOOLS, "BaseStreamTool.run_json_stream", "asyncgen"),
        prompt_patch(_ASSISTANT, "AssistantAgent._get_compatible_context", "sync"),
        context_patch(
            _ASSISTANT, "AssistantAgent.on_messages_stream", _agent, lambda a, *_: SKIP if a is None else a, "asyncgen"
        ),
        context_patch(_ASSISTANT, "AssistantAgent._call_llm", _menu, lambda *_: True, "asyncgen"),
        menu_patch(_WORKBENCH, "StaticWorkbench.list_tools", "async", "visible", after=True),
    )
    modules = (_TOOLS, _ASSISTANT, _WORKBENCH)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_ASSISTANT, "AssistantAgent._execute_tool_call", _execute_call),
            # The tool's own execute_tool span opens inside our guarded call: ours stands for it.
            PatchTarget(_TOOLS, "trace_tool_span", self._tool_span),
        ]

    @staticmethod
    def _tool_span(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """AutoGen's ``trace_tool_span`` for a call we guard: our span, already current,
        is the call's one ``execute_tool`` span (the conventions ask for no second one)."""
        active = active_call()
        name = kwargs.get("tool_name", args[0] if args else None)
        if active is not None and active.framework == "autogen" and active.tool == name:
            return contextlib.nullcontext(trace_api.get_current_span())
        return wrapped(*args, **kwargs)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = instance.name
        if not isinstance(name, str) or not name or _is_handoff(instance, name):
            return None
        # run_json(args, cancellation_token, call_id=None)
        arguments, call_id = argument(args, kwargs, 0, "args"), argument(args, kwargs, 2, "call_id")
        instance.args_type().model_validate(arguments)  # raises on the model's mistakes: run unguarded
        agent, current = _agent.get(), _tool_call.get()
        agent_name = agent_display_name(agent) if agent is not None else None
        agent_name = current[0] if agent_name is None and current is not None else agent_name
        return ToolCall(
            name,
            framework=self.name,
            agent=agent,
            agent_name=agent_name or _runtime_agent(),
            call_id=call_id if isinstance(call_id, str) else None,
            arguments=dict(arguments) if arguments is not None else None,
            origin=origin_of(instance, "autogen_core"),
        )

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self._call_of(instance, args, kwargs)
        if call is not None:
            return await self.run_async(call, wrapped, args, kwargs)
        mistake = self._mistake(instance, args, kwargs) if self._enabled else None
        breaker = self.guard.breaker_for(mistake) if mistake is not None else None
        if breaker is None:
            return await wrapped(*args, **kwargs)
        # Arguments the tool's schema refuses: the breaker counts nothing, the loop guard does.
        return await loops.arun_mistake(breaker, mistake, loops.Mistakes(self), wrapped, args, kwargs)

    def _mistake(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        """The call, when its arguments fail the tool's schema (the model's mistake); else None."""
        try:
            name = instance.name
            if not isinstance(name, str) or not name or _is_handoff(instance, name):
                return None
            arguments = argument(args, kwargs, 0, "args")
            try:
                instance.args_type().model_validate(arguments)
            except Exception:
                agent = _agent.get()
                agent_name = agent_display_name(agent) if agent is not None else None
                return ToolCall(
                    name,
                    framework=self.name,
                    agent=agent,
                    agent_name=agent_name or _runtime_agent(),
                    arguments=dict(arguments) if isinstance(arguments, dict) else arguments,
                )
        except Exception:
            pass
        return None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        # The workbench hands the exception's text to the model as an error result.
        raise info.error()

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        # _get_compatible_context(model_client, messages)
        messages = insert_status_block(argument(args, kwargs, 1, "messages"), DIALECT, _agent.get())
        return None if messages is None else with_argument(args, kwargs, 1, "messages", messages)

    def visible(self, instance: Any, args: tuple, kwargs: dict, tools: Any) -> Any:
        """Within ``_call_llm`` only: the tool definitions without the agent's open tools."""
        if not _menu.get():
            return None
        kept = visible_tools(tools, lambda t: t.get("name"), agent=_agent.get())
        return None if kept is tools else kept


async def _execute_call(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``_execute_tool_call(tool_call, workbench, handoff_tools, agent_name, cancellation_token, stream)``:
    marks the handoff tools and the agent's name; closes the turn's event queue when
    ``ToolLoopError`` leaves the call, so the turn ends and the error reaches the caller."""
    try:
        handoffs = frozenset(
            n
            for t in argument(args, kwargs, 2, "handoff_tools") or ()
            if isinstance(n := getattr(t, "name", None), str)
        )
        agent_name = argument(args, kwargs, 3, "agent_name")
        token = _tool_call.set((agent_name if isinstance(agent_name, str) else None, handoffs))
    except Exception:
        return await wrapped(*args, **kwargs)
    try:
        return await wrapped(*args, **kwargs)
    except loops.ToolLoopError:
        stream = argument(args, kwargs, 5, "stream")
        if stream is not None:
            stream.put_nowait(None)  # the end of the turn's events: the turn awaits the error
        raise
    finally:
        _tool_call.reset(token)
