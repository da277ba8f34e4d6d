"""smolagents: a breaker on every ``Tool.__call__``.

Both agent types reach a tool there: ``ToolCallingAgent`` from ``execute_tool_call``,
``CodeAgent`` from the model-written code of the local Python executor. The other
patches tell that point who is calling (the running agent, for the steps of its run;
the model's tool-call id) and carry the caller's context into the executor's worker
thread (``local_python_executor.timeout``). A rejection is raised: smolagents shows the
exception's text to the model as the step error (a returned string would read as a
successful observation). Arguments ``validate_tool_arguments`` refuses and names no
tool has are answered by ``execute_tool_call`` itself: the model's mistakes, for the
loop guard. The status block goes into the system message of each action step's
messages (``write_memory_to_messages``, a copy); a ``ToolCallingAgent``'s menu
(``tools_and_managed_agents``) loses the open tools. Not covered: remote executors,
and managed agents (called as agents).
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
from otel_breaker.instrumentation.patches import argument, prompt_patch, tool_patch
from otel_breaker.instrumentation.property_menu import patched_with_menu
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block
from otel_breaker.instrumentation.sync_context import decorator_in_caller_context, generator_wrapper
from otel_breaker.toolcall import ToolCall

_AGENTS, _TOOLS = "smolagents.agents", "smolagents.tools"
_MENU = (_AGENTS, "ToolCallingAgent", "tools_and_managed_agents")
_Var = contextvars.ContextVar
# (agent, tool-call id) of the step or tool call running in this context.
_caller: _Var[tuple[Any, str | None] | None] = _Var("otel_breaker_smolagents_caller", default=None)
# Tool-call ids of the model message being processed: (by id of the arguments object, by unique tool name).
_call_ids: _Var[tuple[dict[int, str], dict[str, str]] | None] = _Var("otel_breaker_smolagents_ids", default=None)
_UNGUARDED_TOOLS = frozenset({"final_answer"})


def _agent_name(agent: Any) -> str:
    return agent_display_name(agent) or type(agent).__name__


def _agent_step(agent: Any, args: tuple, kwargs: dict) -> tuple[Any, None] | None:
    return (agent, None) if agent is not None else None


def _raise_value_error(text: str) -> Any:
    raise ValueError(text)


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


class SmolagentsAdapter(SpecAdapter):
    name = "smolagents"
    patches = (
        tool_patch(_TOOLS, "Tool.__call__", "sync"),
        tool_patch(_TOOLS, "PipelineTool.__call__", "sync"),
        prompt_patch(_AGENTS, "MultiStepAgent.write_memory_to_messages", "sync", "status_messages", after=True),
    )
    modules = (_TOOLS, _AGENTS, "smolagents.local_python_executor")

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_AGENTS, "MultiStepAgent._run_stream", generator_wrapper(_caller, _agent_step)),
            PatchTarget(_AGENTS, "ToolCallingAgent.process_tool_calls", generator_wrapper(_call_ids, _ids_of)),
            PatchTarget(_AGENTS, "ToolCallingAgent.execute_tool_call", self._execute_tool_call),
            PatchTarget(_AGENTS, "validate_tool_arguments", self._validate),
            PatchTarget("smolagents.local_python_executor", "timeout", decorator_in_caller_context),
        ]

    # A ToolCallingAgent's menu: the property read for every model call's tools.
    def patch(self) -> list[str]:
        return patched_with_menu(self, super().patch(), _AGENTS, _MENU, _menu_tool_name)

    def patch_module(self, module_name: str) -> list[str]:
        return patched_with_menu(self, super().patch_module(module_name), module_name, _MENU, _menu_tool_name)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = getattr(instance, "name", None)
        if not isinstance(name, str) or not name or name in _UNGUARDED_TOOLS:
            return None
        agent, call_id = _caller.get() or (None, None)
        tool_kwargs = {k: v for k, v in kwargs.items() if k != "sanitize_inputs_outputs"}
        arguments = dict(tool_kwargs) if tool_kwargs else args[0] if len(args) == 1 else list(args) or None
        return ToolCall(
            name,
            framework=self.name,
            agent=agent,
            agent_name=_agent_name(agent) if agent is not None else None,
            call_id=call_id,
            arguments=arguments,
            origin=origin_of(instance, "smolagents"),
        )

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        raise info.error()  # smolagents turns a raised exception into the step error the model reads

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """A ``TypeError`` raised in smolagents' own plumbing (``tools.py`` handing the
        arguments on): code called the tool with arguments it does not take; no body ran."""
        tb = exc.__traceback__ if isinstance(exc, TypeError) else None
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/") if tb is not None else ""
        return MISTAKE if path.endswith("smolagents/tools.py") else None

    def _execute_tool_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        ids, call_id = _call_ids.get(), None
        tool_name, arguments = argument(args, kwargs, 0, "tool_name"), argument(args, kwargs, 1, "arguments")
        if ids is not None:  # execute_tool_call receives the very arguments object of the model's tool call
            call_id = ids[0].get(id(arguments)) if arguments else None
            if call_id is None and isinstance(tool_name, str):
                call_id = ids[1].get(tool_name)
        token = _caller.set((instance, call_id))
        try:
            return wrapped(*args, **kwargs)
        except Exception as exc:
            if isinstance(tool_name, str) and tool_name not in {**instance.tools, **instance.managed_agents}:
                call = ToolCall(tool_name, framework=self.name, agent=instance, agent_name=_agent_name(instance))
                error = type(exc)

                def reject(text: str) -> Any:
                    raise error(text, instance.logger) from None

                refusals.refused(self.guard, call, str(exc), reject, unknown=True)
            raise
        finally:
            _caller.reset(token)

    def _validate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The model's arguments checked against the tool's inputs, before it is called: the
        loop guard's answer is raised like the check's own error, which the model reads."""
        try:
            return wrapped(*args, **kwargs)
        except (ValueError, TypeError) as exc:
            from smolagents.tools import Tool

            tool, arguments = argument(args, kwargs, 0, "tool"), argument(args, kwargs, 1, "arguments")
            if isinstance(tool, Tool):
                named = isinstance(arguments, dict)
                call = self._call_of(tool, () if named else (arguments,), dict(arguments) if named else {})
                if call is not None:
                    refusals.refused(self.guard, call, str(exc), _raise_value_error)
            raise

    def status_messages(self, instance: Any, args: tuple, kwargs: dict, messages: Any) -> Any:
        """The status block in the leading system message of an action step's messages (a
        copy); planning and final-answer calls carry no system prompt and are left alone."""
        if not isinstance(messages, list) or not messages or _role(messages[0]) != "system":
            return None
        return insert_status_block(messages, _DIALECT, instance)


def _menu_tool_name(agent: Any) -> Any:
    """The guarded name of a menu entry: tools only (managed agents are not tools here)."""
    managed = tuple((getattr(agent, "managed_agents", None) or {}).values())

    def name_of(entry: Any) -> str | None:
        name = getattr(entry, "name", None)
        is_tool = isinstance(name, str) and name not in _UNGUARDED_TOOLS
        return name if is_tool and not any(entry is m for m in managed) else None

    return name_of


def _role(message: Any) -> Any:
    return getattr(getattr(message, "role", None), "value", getattr(message, "role", None))


def _system_message(text: str) -> Any:
    from smolagents.models import ChatMessage, MessageRole

    return ChatMessage(role=MessageRole.SYSTEM, content=[{"type": "text", "text": text}])


_DIALECT = MessageDialect(
    is_system=lambda m: _role(m) == "system",
    text=lambda m: content_text(m.content),
    with_text=lambda m, text: dataclasses.replace(m, content=with_content_text(m.content, text)),
    system=_system_message,
)
