"""Microsoft Semantic Kernel (``semantic-kernel``): a breaker where a plugin function's method runs.

Auto function calling (``Kernel.invoke_function_call``), ``Kernel.invoke`` and a
direct ``await function(kernel)`` all go through ``KernelFunction.invoke``, which
starts the kernel's own ``execute_tool`` span, runs the function-invocation
filters and then ``KernelFunctionFromMethod._invoke_internal``: the method itself
(a sync one on the loop). That is the breaker point; ours nests inside the
kernel's span and the span processor does not count a call twice. The tool is
the function's qualified name, ``Plugin-function``, as the model sees it.

* A method that raises is counted. Auto function calling turns the exception
  into the text the model reads ("An error occurred while invoking the function
  ..."); ``Kernel.invoke`` raises ``KernelInvokeException``. Neither changes.
* Model mistakes and control flow pass uncounted: arguments the method cannot
  take (``gather_function_parameters`` raised) and ``OperationCancelledException``
  from inside. Unknown functions, missing arguments, filters that cancel or
  answer instead are settled before the method runs.
* A rejection is a ``FunctionResult`` holding the text, the method's result:
  the kernel puts it in the function-result content the model reads, and the
  loop goes on.
* Prompt functions are model calls, named afresh by ``invoke_prompt``: they run
  unguarded and are kept from the span processor, which would take their
  ``execute_tool`` spans for tools.

``ChatCompletionAgent`` marks the running agent for the steps of its run only.
With ``OTEL_BREAKER_STATUS_IN_PROMPT=true`` the status block is appended to what
``Agent.format_instructions`` returns (every agent type's instructions) and, in a
``ChatCompletionAgent`` run, refreshed in the run's own system message after each
function call, so every model call reads the breakers' state at that moment.

Open tools: with ``OTEL_BREAKER_HIDE_OPEN_TOOLS=true`` the function-choice
behavior's configuration (``FunctionChoiceBehavior._check_and_get_config``, where
its own ``filters`` apply) leaves out the open functions, so the service is never
told about them; in a ``ChatCompletionAgent`` run it is configured again after
each function call, like the status block. The kernel keeps the functions, so a
call the model makes anyway gets the rejection.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection, status_in_prompt_enabled
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation import refusals
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name, not_a_tool_call
from otel_breaker.instrumentation.spec import SpecAdapter, status_text, tool_patch
from otel_breaker.menu import hide_open_tools_enabled, visible_tools
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

_AGENT = "semantic_kernel.agents.chat_completion.chat_completion_agent"
_METHOD = "semantic_kernel.functions.kernel_function_from_method"
_CHOICE = "semantic_kernel.connectors.ai.function_choice_behavior"
_FILTERS = "semantic_kernel.filters.kernel_filters_extension"


class _Run:
    """The agent whose run step is executing, the chat history that run built, and
    how its model calls' function choice was configured (to configure it again)."""

    __slots__ = ("agent", "configure", "history")

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.history: Any = None
        self.configure: Any = None


_run: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("otel_breaker_sk_run", default=None)
# The tool-call id of the KernelFunction.invoke in progress.
_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_breaker_sk_call_id", default=None)
_binding_failed: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("otel_breaker_sk_bd", default=None)
# Set once the function call in progress passed the kernel's own checks (its filter stack is built).
_reached: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("otel_breaker_sk_reached", default=None)


async def _scoped(agen: Any, run: _Run) -> AsyncIterator[Any]:
    """Iterate an agent's run with its mark set only while the run executes."""
    try:
        while True:
            token = _run.set(run)
            try:
                item = await agen.__anext__()
            except StopAsyncIteration:
                return
            finally:
                _run.reset(token)
            yield item
    finally:
        await agen.aclose()


class SemanticKernelAdapter(SpecAdapter):
    name = "semantic_kernel"
    requires = "semantic-kernel>=1.45,<2"
    patches = (tool_patch(_METHOD, "KernelFunctionFromMethod._invoke_internal", "async"),)

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget("semantic_kernel.functions.kernel_function", "KernelFunction.invoke", self._invoke),
            PatchTarget(_METHOD, "KernelFunctionFromMethod.gather_function_parameters", self._binding),
            PatchTarget(_AGENT, "ChatCompletionAgent._inner_invoke", self._agent_run),
            PatchTarget(_AGENT, "ChatCompletionAgent.invoke_stream", self._agent_run),
            PatchTarget(_AGENT, "ChatCompletionAgent._prepare_agent_chat_history", self._history),
            PatchTarget("semantic_kernel.agents.agent", "Agent.format_instructions", self._instructions),
            PatchTarget("semantic_kernel.kernel", "Kernel.invoke_function_call", self._function_call),
            PatchTarget(_FILTERS, "KernelFilterExtension.construct_call_stack", self._call_stack),
            PatchTarget(_CHOICE, "FunctionChoiceBehavior._check_and_get_config", self._menu),
            PatchTarget(_CHOICE, "FunctionChoiceBehavior.configure", self._configure),
        ]

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        context = args[0] if args else kwargs["context"]
        run = _run.get()
        agent = run.agent if run is not None else None
        return ToolCall(
            instance.fully_qualified_name,
            framework=self.name,
            agent=agent,
            agent_name=agent_display_name(agent) if agent is not None else None,
            call_id=_call_id.get(),
            arguments=getattr(context, "arguments", None),
            origin=origin_of(instance, "semantic_kernel"),
        )

    async def run_async(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        token = _binding_failed.set([])
        try:
            result = await super().run_async(call, wrapped, args, kwargs)
        finally:
            _binding_failed.reset(token)
        if isinstance(result, str):  # rejected: the text is the method's result, as the kernel reads it
            from semantic_kernel.functions.function_result import FunctionResult

            context = args[0] if args else kwargs["context"]
            context.result = FunctionResult(function=wrapped.__self__.metadata, value=result)
        return None

    def is_neutral(self, exc: BaseException) -> bool:
        """A cancellation from inside."""
        return type(exc).__name__ == "OperationCancelledException"

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """Arguments the method cannot take: the model's mistake."""
        return MISTAKE if _binding_failed.get() else super().exception_hint(call, exc)

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return info.message  # run_async makes it the FunctionResult the kernel reads

    async def _invoke(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if getattr(instance, "is_prompt", False):
            # A model call, not a tool: the processor leaves its execute_tool span alone.
            with not_a_tool_call(instance.fully_qualified_name, self.name):
                return await wrapped(*args, **kwargs)
        metadata = args[2] if len(args) > 2 else kwargs.get("metadata")
        call_id = metadata.get("id") if isinstance(metadata, dict) else None
        token = _call_id.set(call_id if isinstance(call_id, str) else None)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _call_id.reset(token)

    def _binding(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            return wrapped(*args, **kwargs)
        except Exception:
            failed = _binding_failed.get()
            if failed is not None:
                failed.append(True)  # the model's arguments do not fit the method: is_neutral
            raise

    # -- who runs, and the tool-status block -------------------------------------------------

    def _agent_run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        agen = wrapped(*args, **kwargs)
        return _scoped(agen, _Run(instance)) if hasattr(agen, "__anext__") else agen

    async def _history(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        history = await wrapped(*args, **kwargs)
        run = _run.get()
        if run is not None and run.agent is instance:
            run.history = history  # built for this run: its system message may be refreshed
        return history

    async def _instructions(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        text = await wrapped(*args, **kwargs)
        if status_in_prompt_enabled() and (text is None or isinstance(text, str)):
            new = status_text(text, instance)
            return text if new is None else new
        return text

    def _menu(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The functions offered to the model, without the open ones."""
        config = wrapped(*args, **kwargs)
        if not hide_open_tools_enabled():
            return config
        try:
            run = _run.get()
            offered = config.available_functions
            kept = visible_tools(offered, lambda f: f.fully_qualified_name, agent=run.agent if run else None)
            if kept is not offered:
                return type(config)(available_functions=list(kept))
        except Exception:
            logger.debug("otel-breaker: semantic_kernel: open tools not hidden", exc_info=True)
        return config

    def _configure(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = _run.get()
        if run is not None:  # remembered, to offer the functions afresh after each function call
            run.configure = lambda: wrapped(*args, **kwargs)
        return wrapped(*args, **kwargs)

    # -- calls the kernel refuses before any function runs: the model's mistakes -----------------

    async def _function_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The kernel answers a name no function has, and arguments missing or unexpected,
        itself: the loop guard counts those answers and, from its limit on, answers instead."""
        refusal = self.safe_tool_call(lambda: self._refusable(instance, args, kwargs))
        if refusal is not None:
            call, unknown, function_call, history = refusal

            def reject(text: str) -> None:
                from semantic_kernel.contents import FunctionResultContent

                answer = FunctionResultContent.from_function_call_content_and_result(
                    function_call_content=function_call, result=text
                )
                history.add_message(message=answer.to_chat_message_content())

            if refusals.check(self.guard, call, reject, unknown) is not refusals.RUN:
                return self._after_call(args, kwargs, None)
        token = _reached.set([])
        try:
            result = await wrapped(*args, **kwargs)
        finally:
            reached = _reached.get()
            _reached.reset(token)
        if refusal is not None and not reached:
            refusals.count(self.guard, call, _last_result(history), unknown)
        return self._after_call(args, kwargs, result)

    def _refusable(self, kernel: Any, args: tuple, kwargs: dict) -> tuple[ToolCall, bool, Any, Any]:
        """The call as the loop guard keys it, whether no function has its name, the
        function call content and the chat history."""
        function_call = args[0] if args else kwargs["function_call"]
        history = args[1] if len(args) > 1 else kwargs["chat_history"]
        try:
            kernel.get_function(function_call.plugin_name, function_call.function_name)
            unknown = False
        except Exception:
            unknown = True
        try:
            arguments: Any = function_call.to_kernel_arguments()
        except Exception:
            arguments = function_call.arguments
        run = _run.get()
        agent = run.agent if run is not None else None
        name = function_call.name
        return (
            ToolCall(
                name,
                framework=self.name,
                agent=agent,
                agent_name=agent_display_name(agent) if agent is not None else None,
                arguments=arguments,
            ),
            unknown,
            function_call,
            history,
        )

    def _call_stack(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        reached = _reached.get()
        if reached is not None:
            reached.append(True)
        return wrapped(*args, **kwargs)

    def _after_call(self, args: tuple, kwargs: dict, result: Any) -> Any:
        run = _run.get()
        if run is not None and run.configure is not None and hide_open_tools_enabled():
            try:
                run.configure()
            except Exception:
                logger.debug("otel-breaker: semantic_kernel: tool menu not refreshed", exc_info=True)
        if run is None or run.history is None or not status_in_prompt_enabled():
            return result
        try:
            history = args[1] if len(args) > 1 else kwargs.get("chat_history")
            first = history.messages[0] if history is run.history and history.messages else None
            if first is not None and getattr(first.role, "value", first.role) == "system":
                new = status_text(first.content, run.agent)
                if new:
                    first.content = new
        except Exception:
            logger.debug("otel-breaker: semantic_kernel: status block not refreshed", exc_info=True)
        return result


def _last_result(history: Any) -> str | None:
    """The text of the kernel's answer just added to ``history``."""
    try:
        return str(history.messages[-1].items[-1].result)
    except Exception:
        return None
