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

The workbench turns a tool's exception into ``ToolResult(is_error=True)`` with
the exception's text, so the exception itself is the failure signal, and a
rejection is raised too (:class:`~otel_breaker.CircuitOpenError` carrying the
sanitized text): the model reads exactly that text as an error result and the
loop goes on. Handoff tools are never guarded: AutoGen runs them outside the
workbench, where an exception would abort the agent, and they do no I/O.

The tool-status block (``OTEL_BREAKER_STATUS_IN_PROMPT=true``): every model
call of ``AssistantAgent`` (each tool-loop iteration and the reflection call,
streaming or not) passes its messages, system messages first, through the
staticmethod ``AssistantAgent._get_compatible_context`` right before
``create``/``create_stream``. The returned list gets the block appended to its
first ``SystemMessage`` (a new message: the agent's own system messages and
its model context are not changed), or a ``SystemMessage`` holding only the
block in front when the agent has none, for the agent whose turn is running.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncGenerator
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection, augment_instructions, status_in_prompt_enabled
from otel_breaker.instrumentation.base import FrameworkAdapter, PatchTarget, agent_display_name
from otel_breaker.toolcall import ToolCall

FRAMEWORK = "autogen"

logger = logging.getLogger("otel_breaker")

# The agentchat agent whose turn is running in this context.
_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_autogen_agent", default=None)
# (agent name, names of the handoff tools) of the ``_execute_tool_call`` in progress.
_tool_call: contextvars.ContextVar[tuple[str | None, frozenset[str]] | None] = contextvars.ContextVar(
    "otel_breaker_autogen_tool_call", default=None
)

_ITEM, _END, _ERROR = 0, 1, 2


def _bind(args: tuple, kwargs: dict) -> tuple[Any, str | None]:
    """(arguments, call_id) of ``run_json(args, cancellation_token, call_id=None)``."""
    arguments = args[0] if args else kwargs.get("args")
    call_id = args[2] if len(args) > 2 else kwargs.get("call_id")
    return arguments, call_id if isinstance(call_id, str) else None


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
    func = getattr(tool, "_func", None)
    return getattr(func, "__name__", None) == "_handoff_tool"


# The name of the args model of the tool whose ``run_json`` is running in this context.
_args_model: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_breaker_autogen_args", default=None)


def _args_model_name(tool: Any) -> str | None:
    try:
        return tool.args_type().__name__
    except Exception:
        return None


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


class AutoGenAdapter(FrameworkAdapter):
    name = "autogen"
    distribution = "autogen-core"
    version_range = ">=0.4,<0.8"

    def targets(self) -> list[PatchTarget]:
        return [
            PatchTarget("autogen_core.tools._base", "BaseTool.run_json", self._run_json),
            PatchTarget("autogen_core.tools._base", "BaseStreamTool.run_json_stream", self._run_json_stream),
            PatchTarget(
                "autogen_agentchat.agents._assistant_agent", "AssistantAgent.on_messages_stream", self._agent_turn
            ),
            PatchTarget(
                "autogen_agentchat.agents._assistant_agent", "AssistantAgent._execute_tool_call", self._execute_call
            ),
            PatchTarget(
                "autogen_agentchat.agents._assistant_agent",
                "AssistantAgent._get_compatible_context",
                self._model_messages,
            ),
        ]

    # -- the breaker points ----------------------------------------------------------------------

    def _describe(self, tool: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = getattr(tool, "name", None)
        if not isinstance(name, str) or not name or _is_handoff(tool, name):
            return None
        arguments, call_id = _bind(args, kwargs)
        agent = _agent.get()
        current = _tool_call.get()
        agent_name = agent_display_name(agent) if agent is not None else None
        if agent_name is None and current is not None:
            agent_name = current[0]
        if agent_name is None:
            agent_name = _runtime_agent()
        return ToolCall(
            name,
            framework=FRAMEWORK,
            agent=agent,
            agent_name=agent_name,
            call_id=call_id,
            arguments=dict(arguments) if arguments is not None else None,
        )

    async def _run_json(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self.safe_tool_call(lambda: self._describe(instance, args, kwargs))
        if call is None:
            return await wrapped(*args, **kwargs)
        token = _args_model.set(_args_model_name(instance))
        try:
            return await self.run_async(call, wrapped, args, kwargs)
        finally:
            _args_model.reset(token)

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """``run_json`` validates the model's arguments against the tool's args model
        first: a ``ValidationError`` of that model is the model's mistake."""
        name = _args_model.get()
        if name is not None and type(exc).__name__ == "ValidationError" and getattr(exc, "title", None) == name:
            return MISTAKE
        return None

    def _run_json_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self.safe_tool_call(lambda: self._describe(instance, args, kwargs))
        if call is None:
            return wrapped(*args, **kwargs)
        return self._guarded_stream(call, wrapped, args, kwargs)

    async def _guarded_stream(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> AsyncGenerator:
        """Stream the tool's items while the whole stream runs as one guarded call.

        The guarded call path takes a coroutine, so a task drives the stream
        through it and hands each item over a one-slot queue: items reach the
        caller as they come, the stream's outcome (its final value or its
        exception) is what the breaker records, and a rejection raises before
        the tool starts.
        """
        queue: asyncio.Queue = asyncio.Queue(maxsize=1)

        async def drive() -> Any:
            last = None
            async for item in wrapped(*args, **kwargs):
                last = item
                await queue.put((_ITEM, item))
            return last

        async def run() -> None:
            try:
                result = await self.run_async(call, drive, (), {})
            except asyncio.CancelledError:
                raise  # the consumer went away
            except BaseException as exc:
                await queue.put((_ERROR, exc))
            else:
                await queue.put((_END, result))

        task = asyncio.ensure_future(run())
        try:
            while True:
                kind, value = await queue.get()
                if kind == _ITEM:
                    yield value
                elif kind == _ERROR:
                    raise value
                else:
                    return
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        # The workbench hands the exception's text to the model as an error result.
        raise info.error()

    # -- who is calling ------------------------------------------------------------------------------

    def _agent_turn(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        agen = wrapped(*args, **kwargs)
        if instance is None or not hasattr(agen, "asend"):
            return agen
        return _ascoped(agen, _agent, instance)

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

    # -- the tool-status block in the system prompt ---------------------------------------------------

    def _model_messages(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        messages = wrapped(*args, **kwargs)
        try:
            if not status_in_prompt_enabled():
                return messages
            return _with_status(messages, _agent.get())
        except Exception:
            logger.debug("otel-breaker: autogen: tool status not added to the prompt", exc_info=True)
            return messages


def _with_status(messages: Any, agent: Any) -> Any:
    """``messages`` with the status block in its first system message (a new list)."""
    from autogen_core.models import SystemMessage

    items = list(messages)
    index = next((i for i, m in enumerate(items) if isinstance(m, SystemMessage)), None)
    if index is None:
        block = augment_instructions(None, agent)
        if not block:
            return messages
        return [SystemMessage(content=block), *items]
    current = items[index].content
    text = augment_instructions(current, agent)
    if not isinstance(text, str) or text == current:
        return messages
    items[index] = items[index].model_copy(update={"content": text})
    return items
