"""smolagents: a breaker on every ``Tool.__call__``, where both agent types reach a tool.

``ToolCallingAgent`` calls it from ``execute_tool_call`` (which knows the model's call id),
``CodeAgent`` from the model's code in the executor's worker thread (``timeout``, given the
caller's context). A rejection is raised: smolagents shows the model its text as the step error
(a returned string would read as a successful observation). Arguments ``validate_tool_arguments``
refuses and names no tool has are the model's mistakes, for the loop guard. An action step's
messages get the status block; a ``ToolCallingAgent``'s menu loses the open tools. Not covered:
remote executors; managed agents (called as agents).
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation import refusals
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name
from otel_breaker.instrumentation.chat_messages import content_text, with_content_text
from otel_breaker.instrumentation.mistakes import wrong_arguments
from otel_breaker.instrumentation.patches import argument, context_patch, prompt_patch, tool_patch
from otel_breaker.instrumentation.property_menu import MenuProperty
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.instrumentation.sync_context import decorator_in_caller_context
from otel_breaker.toolcall import ToolCall

_AGENTS, _TOOLS = "smolagents.agents", "smolagents.tools"
_UNGUARDED_TOOLS = frozenset({"final_answer"})
_Var = contextvars.ContextVar
# (agent, tool-call id) of the step or tool call running in this context.
_caller: _Var[tuple[Any, str | None] | None] = _Var("otel_breaker_smolagents_caller", default=None)
# Tool-call ids of the model message being processed: (by id of the arguments object, by unique tool name).
_call_ids: _Var[tuple[dict[int, str], dict[str, str]] | None] = _Var("otel_breaker_smolagents_ids", default=None)


def _ids_of(instance: Any, args: tuple, kwargs: dict) -> Any:
    """The tool-call ids of a model message, by its arguments objects and by unique name."""
    by_arguments, names = {}, {}
    for tool_call in getattr(argument(args, kwargs, 0, "chat_message"), "tool_calls", None) or []:
        call_id, function = getattr(tool_call, "id", None), getattr(tool_call, "function", None)
        if isinstance(call_id, str) and function is not None:
            if getattr(function, "arguments", None):
                by_arguments[id(function.arguments)] = call_id
            names.setdefault(getattr(function, "name", None), []).append(call_id)
    return by_arguments, {name: ids[0] for name, ids in names.items() if isinstance(name, str) and len(ids) == 1}


class SmolagentsAdapter(MenuProperty, SpecAdapter):
    name = "smolagents"
    patches = (
        tool_patch(_TOOLS, "Tool.__call__", "sync"),
        tool_patch(_TOOLS, "PipelineTool.__call__", "sync"),
        prompt_patch(_AGENTS, "MultiStepAgent.write_memory_to_messages", "sync", "status_messages", after=True),
        context_patch(_AGENTS, "MultiStepAgent._run_stream", _caller, lambda agent, *_: (agent, None), "gen"),
        context_patch(_AGENTS, "ToolCallingAgent.process_tool_calls", _call_ids, _ids_of, "gen"),
    )
    modules = (_TOOLS, _AGENTS, "smolagents.local_python_executor")
    menu_property = (_AGENTS, "ToolCallingAgent", "tools_and_managed_agents")  # read for every model call's tools

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_AGENTS, "ToolCallingAgent.execute_tool_call", self._execute_tool_call),
            PatchTarget(_AGENTS, "validate_tool_arguments", self._validate),
            PatchTarget("smolagents.local_python_executor", "timeout", decorator_in_caller_context),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        if not (name := _tool_name(instance)):
            return None
        agent, call_id = _caller.get() or (None, None)
        tool_kwargs = {k: v for k, v in kwargs.items() if k != "sanitize_inputs_outputs"}
        arguments = tool_kwargs or (args[0] if len(args) == 1 else list(args) or None)
        agent_name = None if agent is None else agent_display_name(agent) or type(agent).__name__
        origin = origin_of(instance, "smolagents")
        return ToolCall(name, self.name, agent, agent_name, call_id=call_id, arguments=arguments, origin=origin)

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        raise info.error()  # smolagents turns a raised exception into the step error the model reads

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if wrong_arguments(exc, "smolagents/tools.py") else None  # called with arguments it lacks

    def _execute_tool_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Runs knowing its agent and call id; a name no tool has (smolagents raises) goes to the loop guard."""
        name, arguments = argument(args, kwargs, 0, "tool_name"), argument(args, kwargs, 1, "arguments")
        call_id, ids = None, _call_ids.get()
        if ids is not None:  # execute_tool_call receives the very arguments object of the model's tool call
            call_id = ids[0].get(id(arguments)) if arguments else None
            if call_id is None and isinstance(name, str):
                call_id = ids[1].get(name)
        token = _caller.set((instance, call_id))
        try:
            return wrapped(*args, **kwargs)
        except Exception as exc:
            if isinstance(name, str) and name not in {**instance.tools, **instance.managed_agents}:
                call = ToolCall(name, self.name, instance, agent_display_name(instance) or type(instance).__name__)
                refusals.refused(self.guard, call, str(exc), refusals.raising(type(exc), instance.logger), unknown=True)
            raise
        finally:
            _caller.reset(token)

    def _validate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Arguments a tool's inputs refuse before it runs, for the loop guard (its answer raised like the check's)."""
        try:
            return wrapped(*args, **kwargs)
        except (ValueError, TypeError) as exc:
            from smolagents.tools import Tool

            tool, arguments = argument(args, kwargs, 0, "tool"), argument(args, kwargs, 1, "arguments")
            if isinstance(tool, Tool):
                named = isinstance(arguments, dict)
                call = self._call_of(tool, () if named else (arguments,), dict(arguments) if named else {})
                if call is not None:
                    refusals.refused(self.guard, call, str(exc), refusals.raising(ValueError))
            raise

    def status_messages(self, instance: Any, args: tuple, kwargs: dict, messages: Any) -> Any:
        """The block in an action step's leading system message; planning and final answers have none."""
        if not isinstance(messages, list) or not messages or not _DIALECT.is_system(messages[0]):
            return None
        return insert_status_block(messages, _DIALECT, instance)

    def menu_tool_name(self, agent: Any) -> Any:
        """A menu entry's guarded name: tools only (managed agents are not tools here)."""
        managed = tuple((getattr(agent, "managed_agents", None) or {}).values())
        return lambda entry: None if any(entry is m for m in managed) else _tool_name(entry)


def _tool_name(tool: Any) -> str | None:
    name = getattr(tool, "name", None)
    return name if isinstance(name, str) and name not in _UNGUARDED_TOOLS else None


def _system_message(text: str) -> Any:
    from smolagents.models import ChatMessage, MessageRole

    return ChatMessage(role=MessageRole.SYSTEM, content=[{"type": "text", "text": text}])


_DIALECT = MessageDialect(
    is_system=lambda m: getattr(m, "role", None) == "system",
    text=lambda m: content_text(m.content),
    with_text=lambda m, text: dataclasses.replace(m, content=with_content_text(m.content, text)),
    system=_system_message,
)
