"""Microsoft Semantic Kernel: every way of calling a plugin function (auto function calling, ``Kernel.invoke``,
``await function(kernel)``) runs its method in ``KernelFunctionFromMethod._invoke_internal``, inside the kernel's
``execute_tool`` span: guarded there, as ``Plugin-function``; a rejection is the method's ``FunctionResult``
holding the text. Arguments it cannot take, and the unknown names and bad arguments ``Kernel.invoke_function_call``
answers itself, are the model's mistakes (for the loop guard); prompt functions are model calls, left unguarded.
In a ``ChatCompletionAgent`` run the status block and the menu are refreshed after each call: the agent keeps
one chat history and one function-choice configuration for the whole run.

A ``ChatCompletionAgent``'s invocation (``_inner_invoke``, which ``get_response`` and ``invoke`` run, and
``invoke_stream``) is a run (:mod:`otel_breaker.runs`): each of its steps runs inside it, and it ends with
the stream. An agent invoked inside it (an agent as a function, a group chat's member) joins it. Other agent
types (the assistant services' agents) run their tools remotely or by their own loop: no run is seen there.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from contextlib import suppress
from traceback import walk_tb
from typing import Any

from otel_breaker.classify import CONTROL, MISTAKE
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name, not_a_tool_call
from otel_breaker.instrumentation.patches import (
    menu_patch,
    observe_patch,
    prompt_patch,
    scoped,
    scoped_steps,
    tool_patch,
)
from otel_breaker.instrumentation.refusals import arun, mark_reached
from otel_breaker.instrumentation.spec import SpecAdapter, argument, status_text
from otel_breaker.menu import menu_may_change, visible_tools
from otel_breaker.runs import async_steps_in_run, joined_or_new
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

_SK = "semantic_kernel."
_AGENT = "semantic_kernel.agents.chat_completion.chat_completion_agent"
_CHOICE = _SK + "connectors.ai.function_choice_behavior"
_FILTERS = _SK + "filters.kernel_filters_extension"


class _AgentRun:
    """A ``ChatCompletionAgent`` run in progress: its agent, the chat history it built, and
    how its model calls' function choice was configured (to configure it again after each call)."""

    __slots__ = ("agent", "configure", "history")

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.history: Any = None
        self.configure: Callable[[], Any] | None = None


_run: contextvars.ContextVar[_AgentRun | None] = contextvars.ContextVar("otel_breaker_sk_run", default=None)
#: The model's id of the function call being invoked (from ``KernelFunction.invoke``'s metadata).
_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_breaker_sk_call_id", default=None)


def _agent_run(wrapped: Any, agent: Any, args: tuple, kwargs: dict) -> Any:
    """A ``ChatCompletionAgent``'s invocation, an async generator: a run (one the caller's run
    already holds, else a new one), each step with the agent's own record of it in ``_run``."""
    steps = scoped_steps(wrapped(*args, **kwargs), _run, _AgentRun(agent))
    return async_steps_in_run(steps, joined_or_new(framework="semantic_kernel"))


def _run_agent() -> Any:
    run = _run.get()
    return None if run is None else run.agent


def _qualified_name(function: Any) -> str:
    return function.fully_qualified_name


class SemanticKernelAdapter(SpecAdapter):
    name = "semantic_kernel"
    patches = (
        tool_patch(_SK + "functions.kernel_function_from_method", "KernelFunctionFromMethod._invoke_internal"),
        prompt_patch("semantic_kernel.agents.agent", "Agent.format_instructions", hook="instructions", after=True),
        menu_patch(_CHOICE, "FunctionChoiceBehavior._check_and_get_config", hook="offered", after=True),
        observe_patch(_AGENT, "ChatCompletionAgent._prepare_agent_chat_history", "_history", "async"),
    )

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            # An agent's run (get_response and invoke run _inner_invoke).
            PatchTarget(_AGENT, "ChatCompletionAgent._inner_invoke", _agent_run),
            PatchTarget(_AGENT, "ChatCompletionAgent.invoke_stream", _agent_run),
            PatchTarget(_SK + "functions.kernel_function", "KernelFunction.invoke", self._invoke),
            PatchTarget(_SK + "kernel", "Kernel.invoke_function_call", self._function_call),
            # Built once the kernel accepted a function call: one it never built was refused.
            PatchTarget(_FILTERS, "KernelFilterExtension.construct_call_stack", mark_reached),
            PatchTarget(_CHOICE, "FunctionChoiceBehavior.configure", self._configure),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        return self._call(instance.fully_qualified_name, argument(args, kwargs, 0, "context").arguments, instance)

    def _call(self, name: str, arguments: Any, function: Any = None) -> ToolCall:
        """A plugin function's call; without ``function``, one the kernel may refuse (no id, no code)."""
        agent = _run_agent()
        if function is None:
            call_id, origin = None, None
        else:
            call_id, origin = _call_id.get(), origin_of(function, "semantic_kernel")
        return ToolCall(
            name, self.name, agent, agent_display_name(agent), call_id=call_id, arguments=arguments, origin=origin
        )

    async def run_async(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """``_invoke_internal`` puts its result in the context and returns None; a rejection
        (text) becomes the method's ``FunctionResult`` there."""
        result = await super().run_async(call, wrapped, args, kwargs)
        if isinstance(result, str):
            from semantic_kernel.functions.function_result import FunctionResult

            context = argument(args, kwargs, 0, "context")
            context.result = FunctionResult(function=wrapped.__self__.metadata, value=result)

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """Arguments the method refused (``gather_function_parameters`` raised): a mistake; a cancellation: control."""
        if any(frame.f_code.co_name == "gather_function_parameters" for frame, _ in walk_tb(exc.__traceback__)):
            return MISTAKE
        return CONTROL if type(exc).__name__ == "OperationCancelledException" else None

    async def _invoke(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A prompt function is a model call (its ``execute_tool`` span no tool's); a call id comes in the metadata."""
        if getattr(instance, "is_prompt", False):
            with not_a_tool_call(instance.fully_qualified_name, self.name):
                return await wrapped(*args, **kwargs)
        metadata = argument(args, kwargs, 2, "metadata")
        call_id = metadata.get("id") if isinstance(metadata, dict) else None
        with scoped(_call_id, call_id if isinstance(call_id, str) else None):
            return await wrapped(*args, **kwargs)

    async def _function_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Through the loop guard, a call the kernel may refuse; then the run's menu and status refreshed."""
        function_call = argument(args, kwargs, 0, "function_call")
        history = argument(args, kwargs, 1, "chat_history")

        def reject(text: str) -> None:
            from semantic_kernel.contents import FunctionResultContent

            answer = FunctionResultContent.from_function_call_content_and_result(function_call, text)
            history.add_message(message=answer.to_chat_message_content())

        def answered() -> str | None:
            """The text of the kernel's answer just added."""
            with suppress(Exception):
                return str(history.messages[-1].items[-1].result)
            return None

        def describe_refusable() -> tuple[ToolCall, bool]:
            return self._refusable(instance, function_call)

        refusable = self.safe_tool_call(describe_refusable)  # type: ignore[arg-type]
        if refusable is None:
            return self._after_call(history, await wrapped(*args, **kwargs))
        call, unknown = refusable
        result = await arun(self.guard, call, unknown, reject, answered, wrapped, args, kwargs)
        return self._after_call(history, result)

    def _refusable(self, kernel: Any, function_call: Any) -> tuple[ToolCall, bool]:
        """The call as the loop guard keys it, and whether no function has its name."""
        unknown = True
        arguments = function_call.arguments
        with suppress(Exception):
            kernel.get_function(function_call.plugin_name, function_call.function_name)
            unknown = False
        with suppress(Exception):
            arguments = function_call.to_kernel_arguments()
        return self._call(function_call.name, arguments), unknown

    def _history(self, instance: Any, args: tuple, kwargs: dict, history: Any) -> None:
        run = _run.get()
        if run is not None and run.agent is instance:
            run.history = history  # built for this run: its system message may be refreshed

    def instructions(self, instance: Any, args: tuple, kwargs: dict, text: Any) -> str | None:
        if text is not None and not isinstance(text, str):
            return None
        return status_text(text, instance)

    def offered(self, instance: Any, args: tuple, kwargs: dict, config: Any) -> Any:
        """The function-choice configuration without the open functions."""
        offered = config.available_functions
        kept = visible_tools(offered, _qualified_name, agent=_run_agent())
        if kept is offered:
            return None
        return type(config)(available_functions=list(kept))

    def _configure(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = _run.get()
        if run is not None:

            def configure_again() -> Any:
                return wrapped(*args, **kwargs)

            run.configure = configure_again  # to offer the functions afresh after each call
        return wrapped(*args, **kwargs)

    def _after_call(self, history: Any, result: Any) -> Any:
        run = _run.get()
        if run is None:
            return result
        try:
            if run.configure is not None and menu_may_change():
                run.configure()
            self._refresh_status(run, history)
        except Exception:
            logger.debug("otel-breaker: semantic_kernel: menu or status block not refreshed", exc_info=True)
        return result

    def _refresh_status(self, run: _AgentRun, history: Any) -> None:
        """The status block in the run's system message, as it is now."""
        messages = history.messages if history is run.history else ()
        if not messages or messages[0].role != "system":  # AuthorRole is a str enum
            return
        new = status_text(messages[0].content, run.agent)
        if new:
            messages[0].content = new
