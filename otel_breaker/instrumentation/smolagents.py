"""smolagents: a breaker on every ``Tool.__call__``, where both agent types reach a tool.

``ToolCallingAgent`` calls it from ``execute_tool_call`` (which knows the model's call id),
``CodeAgent`` from the model's code in the executor's worker thread (``timeout``, given the
caller's context). A rejection is raised: smolagents shows the model its text as the step error
(a returned string would read as a successful observation). Arguments ``validate_tool_arguments``
refuses and names no tool has are the model's mistakes, for the loop guard. An action step's
messages get the status block.

A ``ToolCallingAgent`` hands the model its tools by reading one property,
``tools_and_managed_agents``, on every model call and nowhere else: that property is
replaced by one that leaves the open tools out while ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` is
on, and restored by ``uninstrument`` like any other patch. The agent keeps its tools: a
call to a hidden one still reaches the guard and gets the rejection.

An agent's ``run`` is a run (:mod:`otel_breaker.runs`); with ``stream=True`` its steps run
inside it, and it ends with the stream. A managed agent, called from its manager's step, runs
its own ``run`` inside the manager's run and joins it.

Not covered: remote executors.
"""

from __future__ import annotations

import contextvars
import dataclasses
import importlib
import logging
from collections.abc import Callable
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation import refusals
from otel_breaker.instrumentation.base import Patched, PatchTarget, agent_display_name
from otel_breaker.instrumentation.chat_messages import content_text, with_content_text
from otel_breaker.instrumentation.mistakes import wrong_arguments
from otel_breaker.instrumentation.patches import argument, context_patch, prompt_patch, tool_patch
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.instrumentation.sync_context import decorator_in_caller_context
from otel_breaker.menu import visible_tools
from otel_breaker.runs import close_run, joined_or_new, open_run, steps_in_run
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

_AGENTS = "smolagents.agents"
_TOOLS = "smolagents.tools"
_EXECUTOR = "smolagents.local_python_executor"
#: The tool a ``ToolCallingAgent`` ends its run with: not a tool call to guard.
_UNGUARDED_TOOLS = frozenset({"final_answer"})
#: The class and property a ``ToolCallingAgent`` reads its menu from, for every model call.
_MENU_OWNER = "ToolCallingAgent"
_MENU_PROPERTY = "tools_and_managed_agents"

#: (agent, tool-call id) of the step or tool call running in this context.
_caller: contextvars.ContextVar[tuple[Any, str | None] | None] = contextvars.ContextVar(
    "otel_breaker_smolagents_caller", default=None
)


class _CallIds:
    """The tool-call ids of the model message being processed: by the id of each call's
    arguments object (``execute_tool_call`` receives that very object), and by tool name
    where a name is called once."""

    __slots__ = ("by_arguments", "by_name")

    def __init__(self, by_arguments: dict[int, str], by_name: dict[str, str]) -> None:
        self.by_arguments = by_arguments
        self.by_name = by_name


_call_ids: contextvars.ContextVar[_CallIds | None] = contextvars.ContextVar("otel_breaker_smolagents_ids", default=None)


def _ids_of(instance: Any, args: tuple, kwargs: dict) -> _CallIds:
    """``process_tool_calls(chat_message, ...)``: the ids of the message's tool calls."""
    by_arguments: dict[int, str] = {}
    ids_by_name: dict[Any, list[str]] = {}
    for tool_call in getattr(argument(args, kwargs, 0, "chat_message"), "tool_calls", None) or []:
        call_id = getattr(tool_call, "id", None)
        function = getattr(tool_call, "function", None)
        if not isinstance(call_id, str) or function is None:
            continue
        if getattr(function, "arguments", None):
            by_arguments[id(function.arguments)] = call_id
        ids_by_name.setdefault(getattr(function, "name", None), []).append(call_id)
    by_name = {name: ids[0] for name, ids in ids_by_name.items() if isinstance(name, str) and len(ids) == 1}
    return _CallIds(by_arguments, by_name)


def _running_agent(agent: Any, args: tuple, kwargs: dict) -> tuple[Any, None]:
    """``_run_stream``: its agent is the caller of the tools its steps run (ids not known yet)."""
    return agent, None


def _agent_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``MultiStepAgent.run(task, stream=False, ...)``: a run. A stream's steps run after
    ``run`` returns, so each step enters the run, which ends with the stream's last step."""
    if argument(args, kwargs, 1, "stream", False):
        return steps_in_run(wrapped(*args, **kwargs), joined_or_new(framework="smolagents"))
    token = open_run(framework="smolagents")[1]
    try:
        return wrapped(*args, **kwargs)
    finally:
        close_run(token)


def _agent_name(agent: Any) -> str | None:
    return agent_display_name(agent) or type(agent).__name__


class SmolagentsAdapter(SpecAdapter):
    name = "smolagents"
    patches = (
        tool_patch(_TOOLS, "Tool.__call__", "sync"),
        tool_patch(_TOOLS, "PipelineTool.__call__", "sync"),
        prompt_patch(_AGENTS, "MultiStepAgent.write_memory_to_messages", "sync", "status_messages", after=True),
        context_patch(_AGENTS, "MultiStepAgent._run_stream", _caller, _running_agent, "gen"),
        context_patch(_AGENTS, "ToolCallingAgent.process_tool_calls", _call_ids, _ids_of, "gen"),
    )
    modules = (_TOOLS, _AGENTS, _EXECUTOR)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_AGENTS, "ToolCallingAgent.execute_tool_call", self._execute_tool_call),
            PatchTarget(_AGENTS, "validate_tool_arguments", self._validate),
            PatchTarget(_AGENTS, "MultiStepAgent.run", _agent_run),
            PatchTarget(_EXECUTOR, "timeout", decorator_in_caller_context),
        ]

    def patch(self) -> list[str]:
        return self._with_menu(super().patch(), _AGENTS)

    def patch_module(self, module_name: str) -> list[str]:
        return self._with_menu(super().patch_module(module_name), module_name)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = _tool_name(instance)
        if not name:
            return None
        agent, call_id = _caller.get() or (None, None)
        tool_kwargs = {key: value for key, value in kwargs.items() if key != "sanitize_inputs_outputs"}
        arguments = tool_kwargs or (args[0] if len(args) == 1 else list(args) or None)
        return ToolCall(
            name,
            self.name,
            agent,
            None if agent is None else _agent_name(agent),
            call_id=call_id,
            arguments=arguments,
            origin=origin_of(instance, "smolagents"),
        )

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        raise info.error()  # smolagents turns a raised exception into the step error the model reads

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        # Called with arguments the tool lacks: refused before its body ran.
        return MISTAKE if wrong_arguments(exc, "smolagents/tools.py") else None

    def _execute_tool_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Runs knowing its agent and call id; a name no tool has (smolagents raises) goes to the loop guard."""
        name = argument(args, kwargs, 0, "tool_name")
        arguments = argument(args, kwargs, 1, "arguments")
        token = _caller.set((instance, _call_id(name, arguments)))
        try:
            return wrapped(*args, **kwargs)
        except Exception as exc:
            if isinstance(name, str) and name not in {**instance.tools, **instance.managed_agents}:
                call = ToolCall(name, self.name, instance, _agent_name(instance))
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

            tool = argument(args, kwargs, 0, "tool")
            arguments = argument(args, kwargs, 1, "arguments")
            if isinstance(tool, Tool):
                if isinstance(arguments, dict):
                    call = self.call_of(tool, (), dict(arguments))
                else:
                    call = self.call_of(tool, (arguments,), {})
                if call is not None:
                    refusals.refused(self.guard, call, str(exc), refusals.raising(ValueError))
            raise

    def status_messages(self, instance: Any, args: tuple, kwargs: dict, messages: Any) -> Any:
        """The block in an action step's leading system message; planning and final answers have none."""
        if not isinstance(messages, list) or not messages or not _DIALECT.is_system(messages[0]):
            return None
        return insert_status_block(messages, _DIALECT, instance)

    def _with_menu(self, skipped: list[str], module_name: str) -> list[str]:
        """Once ``module_name`` is the agents module, its menu property leaves the open tools
        out; ``skipped`` gains why not, if it cannot."""
        if module_name != _AGENTS:
            return skipped
        try:
            owner = getattr(importlib.import_module(_AGENTS), _MENU_OWNER)
            reason = self._wrap_menu_property(owner)
        except (ImportError, AttributeError) as exc:
            reason = f"cannot import ({exc})"
        if reason is None:
            return skipped
        return [*skipped, f"{_AGENTS}:{_MENU_PROPERTY}: {reason}"]

    def _wrap_menu_property(self, owner: type) -> str | None:
        """Replace the menu property of ``owner`` by one without the open tools. Returns why not, or None."""
        original = owner.__dict__.get(_MENU_PROPERTY)
        if not isinstance(original, property) or original.fget is None:
            return "not found"
        if any(p.owner is owner and p.attribute == _MENU_PROPERTY for p in self.patched_points):
            return "already patched"
        read_menu = original.fget
        adapter = self

        def menu(agent: Any) -> Any:
            tools = read_menu(agent)
            if not adapter.enabled:
                return tools
            try:
                return visible_tools(tools, _menu_tool_name(agent), agent=agent)
            except Exception:
                logger.debug("otel-breaker: %s: could not hide open tools", adapter.name, exc_info=True)
                return tools

        wrapper = property(menu, doc=original.__doc__)
        setattr(owner, _MENU_PROPERTY, wrapper)
        self.patched_points.append(Patched(owner, _MENU_PROPERTY, original, wrapper))
        return None


def _call_id(name: Any, arguments: Any) -> str | None:
    """The model's id of the tool call ``execute_tool_call`` runs: found by its arguments
    object, else by its name where the message calls that name once."""
    ids = _call_ids.get()
    if ids is None:
        return None
    call_id = ids.by_arguments.get(id(arguments)) if arguments else None
    if call_id is None and isinstance(name, str):
        call_id = ids.by_name.get(name)
    return call_id


def _menu_tool_name(agent: Any) -> Callable[[Any], str | None]:
    """A menu entry's guarded name: tools only (managed agents are not tools here)."""
    managed = tuple((getattr(agent, "managed_agents", None) or {}).values())

    def guarded_name(entry: Any) -> str | None:
        if any(entry is managed_agent for managed_agent in managed):
            return None
        return _tool_name(entry)

    return guarded_name


def _tool_name(tool: Any) -> str | None:
    name = getattr(tool, "name", None)
    return name if isinstance(name, str) and name not in _UNGUARDED_TOOLS else None


def _system_message(text: str) -> Any:
    from smolagents.models import ChatMessage, MessageRole

    return ChatMessage(role=MessageRole.SYSTEM, content=[{"type": "text", "text": text}])


def _is_system(message: Any) -> bool:
    return getattr(message, "role", None) == "system"


def _text(message: Any) -> str | None:
    return content_text(message.content)


def _with_text(message: Any, text: str) -> Any:
    return dataclasses.replace(message, content=with_content_text(message.content, text))


_DIALECT = MessageDialect(is_system=_is_system, text=_text, with_text=_with_text, system=_system_message)
