"""Breakers for DSPy (``dspy``) tool-using programs such as ``dspy.ReAct``.

Every tool a DSPy program runs is a ``dspy.Tool``, called through ``Tool.__call__``
(``ReAct.forward``; an async tool run from there too) or ``Tool.acall``
(``ReAct.aforward``): both guarded. ReAct writes what a tool raises into the
trajectory as the observation; the guard counts it first. ReAct's own ``finish``
is control flow. Arguments ``Tool`` refuses before the body runs (names it does not
take, a failed schema) are the model's mistake: the loop guard counts them, not the
breaker. A rejection is the tool's result, the observation the model reads next.

A program's call (``Module.__call__`` / ``acall``) is a run, which the modules it
calls join. The agent is the running ``ReAct`` module (its ``name``, when set). Each ReAct step
is predicted with ``signature=`` carrying the status block, and the listing of the
tools without the agent's open ones (``next_tool_name`` still accepts every name).
"""

from __future__ import annotations

import contextvars
from typing import Any

from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import agent_display_name
from otel_breaker.instrumentation.mistakes import Refusals, arun_invalid, run_invalid
from otel_breaker.instrumentation.patches import context_patch, prompt_patch, run_patch, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter, status_text
from otel_breaker.menu import hidden_names
from otel_breaker.toolcall import ToolCall

_TOOL = "dspy.adapters.types.tool"
_REACT = "dspy.predict.react"
_MODULE = "dspy.primitives.module"

# The ReAct module whose loop is running in this context.
_agent: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_dspy_agent", default=None)


def _refuses(tool: Any, kwargs: dict) -> bool:
    """Whether ``Tool`` refuses these arguments (names it does not take, or a failed
    schema) before its body runs: the model's mistake, which the breaker does not count."""
    try:
        # DSPy's own private (3.4, ``Tool._validate_and_parse_args``): the very check ``Tool``
        # runs before its body, so a refusal is told from the tool's own failure.
        tool._validate_and_parse_args(**kwargs)
    except Exception:
        return True
    return False


def _any(exc: BaseException) -> bool:
    """Past ``_refuses``, whatever the call raises is the refusal."""
    return True


def _running_react(react: Any, args: tuple, kwargs: dict) -> Any:
    """``ReAct.forward``/``aforward``: the running ReAct module is the agent of its loop's tool calls."""
    return react


class DSPyAdapter(SpecAdapter):
    name = "dspy"
    patches = (
        tool_patch(_TOOL, "Tool.__call__", "sync"),
        tool_patch(_TOOL, "Tool.acall", "async"),
        prompt_patch(_REACT, "ReAct._call_with_potential_trajectory_truncation", "sync"),
        prompt_patch(_REACT, "ReAct._async_call_with_potential_trajectory_truncation", "async"),
        context_patch(_REACT, "ReAct.forward", _agent, _running_react, "sync"),
        context_patch(_REACT, "ReAct.aforward", _agent, _running_react, "async"),
        # A program's call is a run; the modules it calls (ReAct's predictors, a ReAct
        # inside a larger program) join it.
        run_patch(_MODULE, "Module.__call__", "sync"),
        run_patch(_MODULE, "Module.acall", "async"),
    )

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        agent = _agent.get()
        if instance.name == "finish" and agent is not None and agent.tools.get("finish") is instance:
            return None  # ReAct's own end-of-loop signal
        return ToolCall(
            tool=instance.name,
            framework=self.name,
            agent=agent,
            agent_name=agent_display_name(agent) if agent is not None else None,
            arguments=kwargs,
            origin=origin_of(instance, "dspy"),
        )

    def _tool_sync(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self.call_of(instance, args, kwargs)
        if call is None:
            return wrapped(*args, **kwargs)
        if _refuses(instance, kwargs):
            return run_invalid(self, call, Refusals(self, raised=_any), wrapped, args, kwargs)
        return self.run_sync(call, wrapped, args, kwargs)

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call = self.call_of(instance, args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        if _refuses(instance, kwargs):
            return await arun_invalid(self, call, Refusals(self, raised=_any), wrapped, args, kwargs)
        return await self.run_async(call, wrapped, args, kwargs)

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The step predictor called with ``signature=`` carrying the status block."""
        module = args[0] if args else kwargs.get("module")
        signature = getattr(module, "signature", None)
        if "signature" in kwargs or signature is None or module is not getattr(instance, "react", None):
            return None
        text = status_text(signature.instructions, instance)
        return None if text is None else (args, {**kwargs, "signature": signature.with_instructions(text)})

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The step predictor called with ``signature=`` listing only the tools on the menu."""
        module = args[0] if args else kwargs.get("module")
        signature = kwargs.get("signature") or getattr(module, "signature", None)
        if signature is None or module is not getattr(instance, "react", None):
            return None
        tools = list(instance.tools.values())
        hidden = hidden_names([t.name for t in tools if t.name != "finish"], agent=instance)
        listing = "\n".join(f"({i}) {t}" for i, t in enumerate(tools, 1))
        if not hidden or listing not in signature.instructions:
            return None
        kept = "\n".join(f"({i}) {t}" for i, t in enumerate((t for t in tools if t.name not in hidden), 1))
        new = signature.with_instructions(signature.instructions.replace(listing, kept, 1))
        return args, {**kwargs, "signature": new}
