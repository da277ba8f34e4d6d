"""Microsoft Semantic Kernel (``semantic-kernel``): a breaker on every ``KernelFunction.invoke``.

Auto function calling (``Kernel.invoke_function_call`` and its filters),
``Kernel.invoke`` and a direct ``await function(kernel)`` all run a plugin
function through ``KernelFunction.invoke`` (async; a sync method runs on the
loop inside it). That is the breaker point. Prompt functions pass through:
their "tool" is a model call.

* A function that raises is counted. Auto function calling turns the
  exception into the text the model reads ("An error occurred while invoking
  the function ..."); ``Kernel.invoke`` raises ``KernelInvokeException``.
  Neither changes.
* Model mistakes and control flow pass uncounted: arguments that cannot be
  bound to the method's parameters (``gather_function_parameters`` raised),
  ``OperationCancelledException``. Unknown functions, missing arguments and
  auto-invocation filters that terminate or answer instead of the function
  are settled before ``invoke`` and never reach it.
* A rejected call returns a ``FunctionResult`` holding the text: the kernel
  puts it in the function-result content the model reads and the loop goes on.
* The kernel's own ``execute_tool`` span (when its diagnostics are on) is a
  child of ours and is not counted again by the span processor.

``ChatCompletionAgent`` marks which agent runs, for the steps of its run only,
and ``Agent.format_instructions`` returns the agent's instructions with the
tool-status block appended when ``OTEL_BREAKER_STATUS_IN_PROMPT=true``: that
text is the system message of every model call of the run.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator
from typing import Any

from otel_breaker.degrade import Rejection, augment_instructions, status_in_prompt_enabled
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.instrumentation.base import FrameworkAdapter, PatchTarget, _active_call, agent_display_name
from otel_breaker.toolcall import ToolCall

FRAMEWORK = "semantic_kernel"
logger = logging.getLogger("otel_breaker")

_AGENT = "semantic_kernel.agents.chat_completion.chat_completion_agent"

# The agent whose run step is executing in this context.
_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_semantic_kernel_agent", default=None)
# The function of the guarded call in this context (its rejection names it).
_function: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_semantic_kernel_function", default=None)
# Set while a guarded call binds its arguments; true when binding failed (the model's mistake).
_binding: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "otel_breaker_semantic_kernel_binding", default=None
)


class _Neutral:
    """An exception raised for a reason other than a broken tool, carried past the breaker."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def _scoped(agen: Any, value: Any) -> AsyncIterator[Any]:
    """Iterate ``agen`` with the agent mark set only while it runs (never left in the consumer)."""
    try:
        while True:
            token = _agent.set(value)
            try:
                item = await agen.__anext__()
            except StopAsyncIteration:
                return
            finally:
                _agent.reset(token)
            yield item
    finally:
        await agen.aclose()  # a consumer that stops early closes the agent's run too


async def _not_a_tool(function: Any, wrapped: Any, args: tuple, kwargs: dict) -> Any:
    """Run a prompt function (a model call) unguarded. The kernel still traces it as
    ``execute_tool``: marking it as the call in progress keeps the span processor from
    taking it for a tool (``invoke_prompt`` names each one afresh, one breaker per call).
    Plugin functions it calls are guarded as usual."""
    token = _active_call.set(ToolCall(function.fully_qualified_name, framework=FRAMEWORK))
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _active_call.reset(token)


class SemanticKernelAdapter(FrameworkAdapter):
    name = FRAMEWORK
    distribution = "semantic-kernel"
    version_range = ">=1.45,<2"

    def targets(self) -> list[PatchTarget]:
        return [
            PatchTarget("semantic_kernel.functions.kernel_function", "KernelFunction.invoke", self._invoke),
            PatchTarget(
                "semantic_kernel.functions.kernel_function_from_method",
                "KernelFunctionFromMethod.gather_function_parameters",
                self._gather,
            ),
            PatchTarget(_AGENT, "ChatCompletionAgent._inner_invoke", self._agent_steps),
            PatchTarget(_AGENT, "ChatCompletionAgent.invoke_stream", self._agent_steps),
            PatchTarget("semantic_kernel.agents.agent", "Agent.format_instructions", self._instructions),
        ]

    # -- the breaker point ---------------------------------------------------------------

    async def _invoke(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if getattr(instance, "is_prompt", False):
            return await _not_a_tool(instance, wrapped, args, kwargs)
        call = self.safe_tool_call(lambda: self._describe(instance, args, kwargs))
        if call is None:
            return await wrapped(*args, **kwargs)
        binding: list[bool] = []

        async def run() -> Any:
            token = _binding.set(binding)
            try:
                return await wrapped(*args, **kwargs)
            except Exception as exc:
                if binding or type(exc).__name__ == "OperationCancelledException":
                    return _Neutral(exc)
                raise
            finally:
                _binding.reset(token)

        token = _function.set(instance)
        try:
            result = await self.run_async(call, run, (), {})
        finally:
            _function.reset(token)
        if isinstance(result, _Neutral):
            raise result.exc
        return result

    def _describe(self, function: Any, args: tuple, kwargs: dict) -> ToolCall:
        name = function.fully_qualified_name
        metadata = args[2] if len(args) > 2 else kwargs.get("metadata")
        call_id = metadata.get("id") if isinstance(metadata, dict) else None
        agent = _agent.get()
        return ToolCall(
            name,
            framework=FRAMEWORK,
            agent=agent,
            agent_name=agent_display_name(agent) if agent is not None else None,
            call_id=call_id if isinstance(call_id, str) else None,
            arguments=args[1] if len(args) > 1 else kwargs.get("arguments"),
        )

    def _gather(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            return wrapped(*args, **kwargs)
        except Exception:
            binding = _binding.get()
            if binding is not None:
                binding.append(True)
            raise

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return IGNORED_RESULT if isinstance(result, _Neutral) else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        from semantic_kernel.functions.function_result import FunctionResult

        return FunctionResult(function=_function.get().metadata, value=info.message)

    # -- who runs, and the tool-status block -------------------------------------------------

    def _agent_steps(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        agen = wrapped(*args, **kwargs)
        if instance is None or not hasattr(agen, "__anext__"):
            return agen
        return _scoped(agen, instance)

    async def _instructions(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        text = await wrapped(*args, **kwargs)
        if not status_in_prompt_enabled() or not (text is None or isinstance(text, str)):
            return text
        return augment_instructions(text, instance)
