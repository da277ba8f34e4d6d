"""AutoGen (autogen-core / autogen-agentchat 0.7): a breaker on every ``BaseTool.run_json``.

Every caller of a tool ends in ``BaseTool.run_json`` (the static workbenches of
``AssistantAgent``, ``autogen_core.tool_agent.ToolAgent``, handoffs), or in
``BaseStreamTool.run_json_stream`` for streaming tools such as ``AgentTool``.
Both are async; AutoGen has no sync tool path. The call id is an argument of
both; the agent is not, so:

* ``AssistantAgent.on_messages_stream`` marks the running agent (an async
  generator: the mark is set for each step only; the tool-call tasks it
  creates copy it);
* ``AssistantAgent._execute_tool_call`` (a staticmethod) tells which calls are
  handoffs. Inside a runtime without an agentchat agent, the runtime's
  ``MessageHandlerContext.agent_id()`` names the caller.

Arguments the tool's args model rejects are the model's mistake: they are
checked before the call (as ``run_json`` does first) and run unguarded.

The workbench turns a tool's exception into ``ToolResult(is_error=True)`` with
the exception's text, so the exception itself is the failure signal, and a
rejection is raised too (:class:`~otel_breaker.CircuitOpenError` carrying the
sanitized text): the model reads exactly that text as an error result and the
loop goes on. Handoff tools are never guarded: AutoGen runs them outside the
workbench, where an exception would abort the agent, and they do no I/O.

Status block: every model call of ``AssistantAgent`` passes its messages,
system messages first, through the staticmethod
``AssistantAgent._get_compatible_context`` right before ``create``/
``create_stream``; it is called with the block in the first ``SystemMessage``.

Hidden tools (``OTEL_BREAKER_HIDE_OPEN_TOOLS``): the tool definitions the model
is sent come from ``Workbench.list_tools`` inside ``AssistantAgent._call_llm``;
only there (not when ``_execute_tool_call`` looks a called tool up) the static
workbench's list leaves out the agent's open tools.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import AsyncGenerator
from typing import Any

from opentelemetry import trace as trace_api

from otel_breaker import loops
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, active_call, agent_display_name
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block, prompt_patch, tool_patch
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


async def _ascoped(agen: Any, var: contextvars.ContextVar, value: Any) -> AsyncGenerator:
    """Iterate ``agen`` with ``var`` set to ``value`` only while ``agen`` runs."""
    method, arg = agen.asend, None
    while True:
        token = var.set(value)
        try:
            item = await method(arg)
        except StopAsyncIteration:
            return
        finally:
            var.reset(token)
        try:
            arg = yield item
            method = agen.asend
        except GeneratorExit:
            await agen.aclose()
            raise
        except BaseException as exc:
            method, arg = agen.athrow, exc


class AutoGenAdapter(SpecAdapter):
    name = "autogen"
    patches = (
        tool_patch(_TOOLS, "BaseTool.run_json", "async"),
        tool_patch(_TOOLS, "BaseStreamTool.run_json_stream", "asyncgen"),
        prompt_patch(_ASSISTANT, "AssistantAgent._get_compatible_context", "sync"),
    )
    modules = (_TOOLS, _ASSISTANT, _WORKBENCH)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_ASSISTANT, "AssistantAgent.on_messages_stream", self._agent_turn),
            PatchTarget(_ASSISTANT, "AssistantAgent._execute_tool_call", self._execute_call),
            PatchTarget(_ASSISTANT, "AssistantAgent._call_llm", self._model_call),
            PatchTarget(_WORKBENCH, "StaticWorkbench.list_tools", self._list_tools),
            # The tool's own execute_tool span opens inside our guarded call: ours stands for it.
            PatchTarget("autogen_core.tools._base", "trace_tool_span", self._tool_span),
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
        arguments = args[0] if args else kwargs.get("args")
        call_id = args[2] if len(args) > 2 else kwargs.get("call_id")
        instance.args_type().model_validate(arguments)  # raises on the model's mistakes: run unguarded
        agent, current = _agent.get(), _tool_call.get()
        agent_name = agent_display_name(agent) if agent is not None else None
        if agent_name is None and current is not None:
            agent_name = current[0]
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
        try:
            call = self._call_of(instance, args, kwargs)
            if call is not None:
                return await self.run_async(call, wrapped, args, kwargs)
            mistake = self._mistake(instance, args, kwargs) if self._enabled else None
            breaker = self.guard.breaker_for(mistake) if mistake is not None else None
            if breaker is None:
                return await wrapped(*args, **kwargs)
            # Arguments the tool's schema refuses: the breaker counts nothing, the loop guard does.
            return await loops.arun_mistake(breaker, mistake, loops.Mistakes(self), wrapped, args, kwargs)
        except loops.ToolLoopError as error:
            # AutoGen's agent runtime does not pass a BaseException on (the run would never
            # end): ``stop`` answers like ``reject`` here, with the same text.
            raise RuntimeError(loops.loop_message(error)) from None

    def _mistake(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        """The call, when its arguments fail the tool's schema (the model's mistake); else None."""
        try:
            name = instance.name
            if not isinstance(name, str) or not name or _is_handoff(instance, name):
                return None
            arguments = args[0] if args else kwargs.get("args")
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
        if "messages" in kwargs:
            messages = insert_status_block(kwargs["messages"], DIALECT, _agent.get())
            return None if messages is None else (args, {**kwargs, "messages": messages})
        messages = insert_status_block(args[1], DIALECT, _agent.get())
        return None if messages is None else ((args[0], messages, *args[2:]), kwargs)

    # -- who is calling, and when the model's menu is built -------------------------------------

    def _agent_turn(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        agen = wrapped(*args, **kwargs)
        if instance is None or not hasattr(agen, "asend"):
            return agen
        return _ascoped(agen, _agent, instance)

    def _model_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        agen = wrapped(*args, **kwargs)
        return _ascoped(agen, _menu, True) if hasattr(agen, "asend") else agen

    async def _list_tools(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        tools = await wrapped(*args, **kwargs)
        if not _menu.get():
            return tools
        try:
            return visible_tools(tools, lambda t: t.get("name"), agent=_agent.get())
        except Exception:
            logger.debug("otel-breaker: autogen: open tools left on the menu", exc_info=True)
            return tools

    async def _execute_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            # _execute_tool_call(tool_call, workbench, handoff_tools, agent_name, cancellation_token, stream)
            handoff_tools = kwargs["handoff_tools"] if "handoff_tools" in kwargs else args[2]
            agent_name = kwargs["agent_name"] if "agent_name" in kwargs else args[3]
            names = (getattr(tool, "name", None) for tool in handoff_tools or ())
            handoffs = frozenset(name for name in names if isinstance(name, str))
            context = (agent_name if isinstance(agent_name, str) else None, handoffs)
        except Exception:
            return await wrapped(*args, **kwargs)
        token = _tool_call.set(context)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _tool_call.reset(token)
