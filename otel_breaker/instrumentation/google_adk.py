"""Google ADK: every function-tool call runs in the flows' tool runner.

Why there: ADK's LLM flows answer each function call in ``_execute_single_prepared_call``:
before-tool callbacks, the confirmation gate, then the tool runner, then the
after-tool callbacks. The runner is ``_call_tool_async`` (``tool.run_async``) in
``_caller`` (batch and parallel calls) and, in live mode, ``_call_tool_async`` or
``_call_tool_in_thread_pool`` in ``_live_caller``; each call reaches exactly one of
them. A call a callback answers, an unknown tool (the model's mistake) and a call
held for confirmation never reach the runner and are not counted; the loop guard
counts an unknown name where ``_execute_single_prepared_call`` answers it, and
ADK's answer to invalid arguments (``result_hint``).

Failures: a tool's exception leaves the runner (ADK then hands it to the
``on_tool_error`` callbacks) and is counted. A tool whose
``_detect_error_in_response`` (ADK's own hook) flags its response counts too. Answers
ADK writes itself for bad arguments, a pending or rejected confirmation, or an
authentication request count neither way.

Rejection: the function response ``{"error": <rejection text>}``, ADK's shape for a
tool error, which the model reads on its next turn.

Status block: ``BaseLlmFlow._call_llm_async`` receives each model request; a string
``system_instruction`` of a copy of the request gets the block. With
``OTEL_BREAKER_HIDE_OPEN_TOOLS=true`` the copy's function declarations
(``config.tools``, what the model is offered) lose the agent's open tools;
``tools_dict`` keeps them, so a call the model makes anyway gets the rejection.
"""

from __future__ import annotations

import contextvars
from typing import Any

from otel_breaker.classify import MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.guard import IGNORED_RESULT
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.mistakes import arun_unknown
from otel_breaker.instrumentation.spec import SpecAdapter, prompt_patch, status_text, tool_patch
from otel_breaker.menu import hidden_names
from otel_breaker.toolcall import ToolCall

_TOOLS = "google.adk.flows.llm_flows.tools."
# (tool, tool context) of the call being guarded, for result_error.
_current: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar("otel_breaker_adk", default=None)


def _tool_and_context(args: tuple, kwargs: dict) -> tuple[Any, Any]:
    return (args[0] if args else kwargs["tool"]), (args[2] if len(args) > 2 else kwargs["tool_context"])


def _invocation(tool_context: Any) -> Any:
    # The private field avoids the copy get_invocation_context() makes per call.
    found = getattr(tool_context, "_invocation_context", None)
    return found if found is not None else tool_context.get_invocation_context()


def _agent_name(invocation: Any) -> str | None:
    name = getattr(invocation.agent, "name", None)
    return name if isinstance(name, str) and name else None


def _error_of(event: Any) -> str | None:
    """The error text of a function response event (None: no error, or no event)."""
    parts = getattr(getattr(event, "content", None), "parts", None) or ()
    response = getattr(getattr(parts[0], "function_response", None), "response", None) if parts else None
    return str(response["error"]) if isinstance(response, dict) and "error" in response else None


class GoogleADKAdapter(SpecAdapter):
    """Guards Google ADK tools, scoped per agent."""

    name = "google_adk"
    patches = (
        tool_patch(_TOOLS + "_caller", "_call_tool_async"),
        tool_patch(_TOOLS + "_live_caller", "_call_tool_async"),
        tool_patch(_TOOLS + "_live_caller", "_call_tool_in_thread_pool"),
        prompt_patch("google.adk.flows.llm_flows.base_llm_flow", "BaseLlmFlow._call_llm_async", "asyncgen"),
    )

    def targets(self) -> list[PatchTarget]:
        # Where a name no tool has is answered (after the before-tool callbacks).
        return [
            *super().targets(),
            PatchTarget(_TOOLS + "_caller", "_execute_single_prepared_call", self._prepared),
            PatchTarget(_TOOLS + "_live_caller", "_execute_single_prepared_call", self._prepared),
        ]

    async def _prepared(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        invocation, prepared = args[0], args[1]
        if prepared.tool_lookup_error is None or not self._enabled:
            return await wrapped(*args, **kwargs)
        name = _agent_name(invocation)
        session = getattr(invocation, "session", None)
        call = ToolCall(str(prepared.tool.name), framework=self.name, agent_name=name, session_id=session.id)

        def reject(text: str) -> Any:
            from google.adk.flows.llm_flows.tools._caller import _build_response_event

            return _build_response_event(prepared.tool, {"error": text}, prepared.tool_context, invocation)

        return await arun_unknown(call, reject, _error_of, wrapped, args, kwargs)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        tool, tool_context = _tool_and_context(args, kwargs)
        invocation = _invocation(tool_context)
        name = _agent_name(invocation)
        session = getattr(invocation, "session", None)
        return ToolCall(
            tool=str(tool.name),
            framework=self.name,
            # ADK runs a copy of the agent per invocation: the name (unique in an
            # agent tree) keys the breaker, so an open breaker outlives the run.
            agent=name,
            agent_name=name,
            session_id=getattr(session, "id", None),
            call_id=tool_context.function_call_id,
            arguments=args[1] if len(args) > 1 else kwargs.get("args"),
            origin=origin_of(tool, "google.adk"),
        )

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = _current.set(_tool_and_context(args, kwargs))
        try:
            return await super()._tool_async(wrapped, instance, args, kwargs)
        finally:
            _current.reset(token)

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        tool, tool_context = _current.get() or (None, None)
        actions = getattr(tool_context, "actions", None)
        if actions is not None and (actions.requested_auth_configs or actions.requested_tool_confirmations):
            return IGNORED_RESULT  # waiting for a person: neither outcome
        if isinstance(result, dict) and set(result) == {"error"}:
            text = str(result["error"])
            if text.startswith(f"Invoking `{call.tool}()` failed") or text == "This tool call is rejected.":
                return IGNORED_RESULT  # bad arguments, or a person said no
        detector = getattr(tool, "_detect_error_in_response", None)
        return detector(result) if detector is not None else None

    def result_hint(self, call: ToolCall, result: Any) -> str | None:
        """ADK's own answer to arguments that fail the tool's schema: the model's mistake."""
        refused = isinstance(result, dict) and set(result) == {"error"}
        return MISTAKE if refused and str(result["error"]).startswith(f"Invoking `{call.tool}()` failed") else None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return {"error": info.message}

    def with_status(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        invocation, request = args[0], args[1]
        current = request.config.system_instruction
        if current is not None and not isinstance(current, str):
            return None  # structured instructions are left alone
        text = status_text(current, _agent_name(invocation))
        if text is None:
            return None
        config = request.config.model_copy(update={"system_instruction": text})
        return (invocation, request.model_copy(update={"config": config}), *args[2:]), kwargs

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        invocation, request = args[0], args[1]
        tools = request.config.tools or []
        names = [d.name for t in tools for d in getattr(t, "function_declarations", None) or ()]
        hidden = hidden_names(names, agent=_agent_name(invocation))
        if not hidden:
            return None
        kept = []
        for tool in tools:
            declarations = getattr(tool, "function_declarations", None)
            left = [d for d in declarations or () if d.name not in hidden]
            if not declarations or left:  # built-in tools and partly hidden ones stay
                kept.append(tool.model_copy(update={"function_declarations": left}) if declarations else tool)
        config = request.config.model_copy(update={"tools": kept or None})
        return (invocation, request.model_copy(update={"config": config}), *args[2:]), kwargs
