"""smolagents: a breaker on every ``Tool.__call__``.

Both agent types reach a tool through ``Tool.__call__``: ``ToolCallingAgent``
from ``execute_tool_call`` and ``CodeAgent`` from the model-written code run by
the local Python executor. That is the one point where a tool body runs, so it
is where the breaker sits. Everything else patched here only tells that point
who is calling:

* ``MultiStepAgent._run_stream`` marks the running agent (its steps are a
  generator, so the mark is set for each step of the iteration only, never
  left behind in the caller's context);
* ``ToolCallingAgent.process_tool_calls`` / ``execute_tool_call`` carry the
  model's tool-call id, which exists only on the tool-calling path;
* ``local_python_executor.timeout`` runs CodeAgent's code in a fresh worker
  thread without copying context variables; wrapping it carries the caller's
  context (our agent mark and the current span) into that thread;
* ``MultiStepAgent.write_memory_to_messages`` builds the messages of every
  action step's model call, the agent's system prompt first: with
  ``OTEL_BREAKER_STATUS_IN_PROMPT=true`` the tool-status block is appended to
  that system message of the returned list (a fresh copy: the agent's memory
  and prompt templates are never changed), so each model call reads the
  breakers' state at that moment. Planning and final-answer calls carry no
  system prompt of the agent and are left as they are.

A tool failure already surfaces as an exception in ``Tool.__call__``, so no
swallowed-failure detection is needed. A rejection must be raised, too:
smolagents shows the exception's text to the model as the step error and the
loop goes on, whereas a returned string would read as a successful
observation. The exception is :class:`~otel_breaker.CircuitOpenError` carrying
the sanitized rejection text.

Open tools leave the menu (``OTEL_BREAKER_HIDE_OPEN_TOOLS``): a
``ToolCallingAgent`` sends the model ``tools_and_managed_agents`` on every step,
a property read nowhere else; it is replaced by one that leaves the open tools out
(restored by ``uninstrument``). A ``CodeAgent`` renders its tools into the system
prompt once per run: it has no seam, and the status block is what tells it.

Not covered: remote executors (e2b, docker, modal, blaxel) run tools in another
process, and managed agents are called as agents, not through ``Tool.__call__``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
from collections.abc import Generator
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection, status_in_prompt_enabled
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation import refusals
from otel_breaker.instrumentation.base import PatchTarget, _Patched, agent_display_name
from otel_breaker.instrumentation.spec import MessageDialect, SpecAdapter, insert_status_block, tool_patch
from otel_breaker.menu import visible_tools
from otel_breaker.toolcall import ToolCall

FRAMEWORK = "smolagents"

logger = logging.getLogger("otel_breaker")

# (agent, tool-call id) of the step or tool call running in this context.
_caller: contextvars.ContextVar[tuple[Any, str | None] | None] = contextvars.ContextVar(
    "otel_breaker_smolagents_caller", default=None
)
# Tool-call ids of the model message being processed: (by id of the arguments object, by unique tool name).
_call_ids: contextvars.ContextVar[tuple[dict[int, str], dict[str, str]] | None] = contextvars.ContextVar(
    "otel_breaker_smolagents_call_ids", default=None
)

_UNGUARDED_TOOLS = frozenset({"final_answer"})
_AGENTS = "smolagents.agents"
_MENU = "tools_and_managed_agents"


def _scoped(gen: Generator, var: contextvars.ContextVar, value: Any) -> Generator:
    """Iterate ``gen`` with ``var`` set to ``value`` only while ``gen`` runs.

    A generator runs in its consumer's context; setting a variable once would
    leak it into the consumer between steps (and across ``run(stream=True)``).
    """
    method, arg = gen.send, None
    while True:
        token = var.set(value)
        try:
            item = method(arg)
        except StopIteration as stop:
            return stop.value
        finally:
            var.reset(token)
        try:
            arg = yield item
            method = gen.send
        except GeneratorExit:
            gen.close()
            raise
        except BaseException as exc:
            method, arg = gen.throw, exc


def _bind_arguments(args: tuple, kwargs: dict) -> Any:
    """The tool's arguments as the agent passed them (a dict, or the single positional)."""
    if kwargs:
        return dict(kwargs)
    if len(args) == 1:
        return args[0]
    return list(args) if args else None


class SmolagentsAdapter(SpecAdapter):
    name = "smolagents"
    requires = "smolagents>=1.20,<2"
    patches = (
        tool_patch("smolagents.tools", "Tool.__call__", "sync"),
        tool_patch("smolagents.tools", "PipelineTool.__call__", "sync"),
    )
    modules = ("smolagents.tools", _AGENTS, "smolagents.local_python_executor")

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_AGENTS, "MultiStepAgent._run_stream", self._run_stream),
            PatchTarget(_AGENTS, "ToolCallingAgent.process_tool_calls", self._process_tool_calls),
            PatchTarget(_AGENTS, "ToolCallingAgent.execute_tool_call", self._execute_tool_call),
            PatchTarget(_AGENTS, "validate_tool_arguments", self._validate),
            PatchTarget("smolagents.local_python_executor", "timeout", self._timeout),
            PatchTarget(_AGENTS, "MultiStepAgent.write_memory_to_messages", self._memory_messages),
        ]

    # -- open tools leave the menu (ToolCallingAgent) ---------------------------------------------

    def patch(self) -> list[str]:
        skipped = super().patch()
        reason = self._wrap_menu()
        return [*skipped, f"{_AGENTS}:{_MENU}: {reason}"] if reason else skipped

    def patch_module(self, module_name: str) -> list[str]:
        skipped = super().patch_module(module_name)
        reason = self._wrap_menu() if module_name == _AGENTS else None
        return [*skipped, f"{_AGENTS}:{_MENU}: {reason}"] if reason else skipped

    def _wrap_menu(self) -> str | None:
        """``ToolCallingAgent.tools_and_managed_agents``, the property read for every model
        call's ``tools_to_call_from`` and nowhere else, becomes one that leaves the open
        tools out when ``OTEL_BREAKER_HIDE_OPEN_TOOLS`` is on. Tool calls run from
        ``agent.tools``, so a call to a hidden tool still reaches the guard."""
        try:
            from smolagents.agents import ToolCallingAgent
        except ImportError as exc:
            return f"cannot import ({exc})"
        original = ToolCallingAgent.__dict__.get(_MENU)
        if not isinstance(original, property) or original.fget is None:
            return "not found"
        if any(p.owner is ToolCallingAgent and p.attribute == _MENU for p in self._patched):
            return "already patched"
        adapter = self
        fget = original.fget

        def tools_and_managed_agents(agent: Any) -> Any:
            tools = fget(agent)
            if not adapter.enabled:
                return tools
            try:
                return visible_tools(tools, _menu_tool_name(agent), agent=agent)
            except Exception:
                logger.debug("otel-breaker: smolagents: could not hide open tools", exc_info=True)
                return tools

        wrapper = property(tools_and_managed_agents, doc=original.__doc__)
        setattr(ToolCallingAgent, _MENU, wrapper)
        self._patched.append(_Patched(ToolCallingAgent, _MENU, original, wrapper))
        return None

    # -- the breaker point ---------------------------------------------------------------------

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = getattr(instance, "name", None)
        if not isinstance(name, str) or not name or name in _UNGUARDED_TOOLS:
            return None
        agent, call_id = _caller.get() or (None, None)
        tool_kwargs = {k: v for k, v in kwargs.items() if k != "sanitize_inputs_outputs"}
        return ToolCall(
            name,
            framework=FRAMEWORK,
            agent=agent,
            agent_name=_agent_name(agent) if agent is not None else None,
            call_id=call_id,
            arguments=_bind_arguments(args, tool_kwargs),
            origin=origin_of(instance, "smolagents"),
        )

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        # smolagents turns a raised exception into the step error the model reads.
        raise info.error()

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """A ``TypeError`` raised in smolagents' own tool plumbing (``Tool.__call__``
        handing the arguments to ``forward``, or the ``@tool`` wrapper handing them to
        the function): the generated code called the tool with arguments it does not
        take (the model's mistake); the tool body never ran."""
        if not isinstance(exc, TypeError):
            return None
        tb = exc.__traceback__
        if tb is None:
            return None
        while tb.tb_next is not None:
            tb = tb.tb_next
        code = tb.tb_frame.f_code
        if code.co_filename.replace("\\", "/").endswith("smolagents/tools.py"):
            return MISTAKE
        return None

    # -- who is calling ----------------------------------------------------------------------------

    def _run_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        gen = wrapped(*args, **kwargs)
        if instance is None or not hasattr(gen, "send"):
            return gen
        return _scoped(gen, _caller, (instance, None))

    def _process_tool_calls(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        gen = wrapped(*args, **kwargs)
        try:
            message = args[0] if args else kwargs["chat_message"]
            by_arguments: dict[int, str] = {}
            names: dict[str, list[str]] = {}
            for tool_call in getattr(message, "tool_calls", None) or []:
                call_id = getattr(tool_call, "id", None)
                function = getattr(tool_call, "function", None)
                if not isinstance(call_id, str) or function is None:
                    continue
                arguments = getattr(function, "arguments", None)
                if arguments:
                    by_arguments[id(arguments)] = call_id
                names.setdefault(getattr(function, "name", None), []).append(call_id)
            unique = {name: ids[0] for name, ids in names.items() if isinstance(name, str) and len(ids) == 1}
        except Exception:
            return gen
        if not hasattr(gen, "send"):
            return gen
        return _scoped(gen, _call_ids, (by_arguments, unique))

    def _execute_tool_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call_id = None
        ids = _call_ids.get()
        if ids is not None:
            tool_name = args[0] if args else kwargs.get("tool_name")
            arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
            # execute_tool_call receives the very arguments object of the model's tool call.
            call_id = ids[0].get(id(arguments)) if arguments else None
            if call_id is None and isinstance(tool_name, str):
                call_id = ids[1].get(tool_name)
        token = _caller.set((instance, call_id))
        try:
            return wrapped(*args, **kwargs)
        except Exception as exc:
            # A name no tool has: smolagents answers it before any tool runs.
            name = args[0] if args else kwargs.get("tool_name")
            if isinstance(name, str) and name not in {**instance.tools, **instance.managed_agents}:
                call = ToolCall(name, framework=FRAMEWORK, agent=instance, agent_name=_agent_name(instance))
                error = type(exc)

                def reject(text: str) -> Any:
                    raise error(text, instance.logger) from None

                refusals.refused(self.guard, call, str(exc), reject, unknown=True)
            raise
        finally:
            _caller.reset(token)

    def _validate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """smolagents checking the model's arguments against the tool's inputs, before the
        tool is called: a refusal is the model's mistake, for the loop guard. The loop
        guard's answer is raised like the check's own error, which the model reads."""
        try:
            return wrapped(*args, **kwargs)
        except (ValueError, TypeError) as exc:
            tool = args[0] if args else kwargs.get("tool")
            arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
            from smolagents.tools import Tool

            if isinstance(tool, Tool):
                positional, named = ((), dict(arguments)) if isinstance(arguments, dict) else ((arguments,), {})
                call = self._call_of(tool, positional, named)
                if call is not None:
                    refusals.refused(self.guard, call, str(exc), _raise_value_error)
            raise

    def _timeout(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        decorator = wrapped(*args, **kwargs)
        if not callable(decorator):
            return decorator

        def decorate(func: Any) -> Any:
            # Decorated and called right away in the caller's thread: capture its context now.
            context = contextvars.copy_context()

            @functools.wraps(func)
            def in_caller_context(*a: Any, **k: Any) -> Any:
                return context.copy().run(func, *a, **k)

            return decorator(in_caller_context)

        return decorate

    # -- the tool-status block -----------------------------------------------------------------------

    def _memory_messages(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        messages = wrapped(*args, **kwargs)
        try:
            if not status_in_prompt_enabled():
                return messages
            return _with_status(messages, instance)
        except Exception:
            logger.debug("otel-breaker: smolagents: tool status not added to the prompt", exc_info=True)
            return messages


def _agent_name(agent: Any) -> str:
    return agent_display_name(agent) or type(agent).__name__


def _raise_value_error(text: str) -> Any:
    raise ValueError(text)


def _menu_tool_name(agent: Any) -> Any:
    """The guarded name of a menu entry: tools only (managed agents are not tools here)."""
    managed = tuple((getattr(agent, "managed_agents", None) or {}).values())

    def name_of(entry: Any) -> str | None:
        if any(entry is m for m in managed):
            return None
        name = getattr(entry, "name", None)
        return name if isinstance(name, str) and name not in _UNGUARDED_TOOLS else None

    return name_of


# -- the tool-status block in the system prompt ------------------------------------------------------


def _role(message: Any) -> Any:
    role = getattr(message, "role", None)
    return getattr(role, "value", role)


def _text_index(content: Any) -> int | None:
    """The last text part of a list content (where the system prompt's text is)."""
    for i in range(len(content) - 1, -1, -1):
        if (
            isinstance(content[i], dict)
            and content[i].get("type") == "text"
            and isinstance(content[i].get("text"), str)
        ):
            return i
    return None


def _message_text(message: Any) -> str | None:
    content = message.content
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        index = _text_index(content)
        return content[index]["text"] if index is not None else None
    return None


def _message_with_text(message: Any, text: str) -> Any:
    content = message.content
    if isinstance(content, list):
        index = _text_index(content)
        new_content = [dict(part) if isinstance(part, dict) else part for part in content]
        new_content[index]["text"] = text
        return dataclasses.replace(message, content=new_content)
    return dataclasses.replace(message, content=text)


def _system_message(text: str) -> Any:
    from smolagents.models import ChatMessage, MessageRole

    return ChatMessage(role=MessageRole.SYSTEM, content=[{"type": "text", "text": text}])


_DIALECT = MessageDialect(
    is_system=lambda m: _role(m) == "system",
    text=_message_text,
    with_text=_message_with_text,
    system=_system_message,
)


def _with_status(messages: Any, agent: Any) -> Any:
    """``messages`` with the status block in its leading system message (a new list and
    message; ``messages`` itself is not changed). A list without a leading system
    message (summary mode: planning, final answer) is left as it is."""
    if not isinstance(messages, list) or not messages or _role(messages[0]) != "system":
        return messages
    amended = insert_status_block(messages, _DIALECT, agent)
    return messages if amended is None else amended
