"""Google ADK: every function-tool call runs in the flows' tool runner.

ADK's flows answer each function call in ``_execute_single_prepared_call``
(before-tool callbacks, the confirmation gate, the runner, after-tool callbacks).
The runner, guarded, is ``_call_tool_async`` in ``_caller`` and, live,
``_call_tool_async`` or ``_call_tool_in_thread_pool`` in ``_live_caller``. A tool's
exception leaves it (then the ``on_tool_error`` callbacks), and a response the
tool's ``_detect_error_in_response`` flags is a failure too. ADK's own answers to
bad arguments (the loop guard counts them), a confirmation or an authentication
request count neither way; nor does a name no tool has, which never reaches the
runner (the loop guard counts it where ``_execute_single_prepared_call`` answers
it). Rejection: the function response ``{"error": <text>}``, ADK's tool error.

``BaseLlmFlow._call_llm_async`` gets each model request: a copy of it gets the
status block on a string ``system_instruction`` and loses the agent's open tools
from its function declarations (``tools_dict`` keeps them).

A run is ``Runner.run_async`` (and ``run_live``): the sync ``Runner.run`` drives
``run_async`` in a thread of its own, and an ``AgentTool``'s sub-agent, run by a
runner of its own inside a tool, joins the run of the agent that called it.

An ``McpToolset`` lists its server's tools on every model request; ADK runs an agent
without the tools of a toolset that fails to load, and tries the server again on the
next request (a dead stdio server is started again, a dead URL waited on again).
Its listing goes through ``mcp_reach.reach``: the failure counts on the server's
upstream breaker, and while that is open the server is not tried; the run goes on
without its tools, and the status block names it.
"""

from __future__ import annotations

import contextvars
from typing import Any

from otel_breaker.classify import IGNORED_RESULT, MISTAKE
from otel_breaker.degrade import Rejection
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.current_call import HoldsCurrentCall
from otel_breaker.instrumentation.mcp_identity import connection_identity
from otel_breaker.instrumentation.mcp_reach import UNREACHED, reach
from otel_breaker.instrumentation.mistakes import arun_unknown
from otel_breaker.instrumentation.patches import argument, prompt_patch, run_patch, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter, status_text
from otel_breaker.menu import hidden_names
from otel_breaker.toolcall import ToolCall

_TOOLS = "google.adk.flows.llm_flows.tools."
# (tool, tool context) of the call being guarded.
_current: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar("otel_breaker_adk", default=None)


def _tool_and_context(args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """``_call_tool_async(tool, args, tool_context)``: the tool and its tool context."""
    tool = args[0] if args else kwargs["tool"]
    tool_context = args[2] if len(args) > 2 else kwargs["tool_context"]
    return tool, tool_context


def _session_id(invocation: Any) -> Any:
    return getattr(getattr(invocation, "session", None), "id", None)


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


class GoogleADKAdapter(HoldsCurrentCall, SpecAdapter):
    name = "google_adk"
    current = _current
    patches = (
        tool_patch(_TOOLS + "_caller", "_call_tool_async"),
        tool_patch(_TOOLS + "_live_caller", "_call_tool_async"),
        tool_patch(_TOOLS + "_live_caller", "_call_tool_in_thread_pool"),
        prompt_patch("google.adk.flows.llm_flows.base_llm_flow", "BaseLlmFlow._call_llm_async", "asyncgen"),
        run_patch("google.adk.runners", "Runner.run_async", "asyncgen"),
        run_patch("google.adk.runners", "Runner.run_live", "asyncgen"),
    )

    def targets(self) -> list[PatchTarget]:
        # Where a name no tool has is answered (after the before-tool callbacks).
        return [
            *super().targets(),
            PatchTarget(_TOOLS + "_caller", "_execute_single_prepared_call", self._prepared),
            PatchTarget(_TOOLS + "_live_caller", "_execute_single_prepared_call", self._prepared),
            PatchTarget("google.adk.tools.mcp_tool.mcp_toolset", "McpToolset.get_tools", _mcp_tools),
        ]

    async def _prepared(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """A prepared call whose name no tool has: ADK's answer, through the loop guard."""
        invocation = args[0]
        prepared = args[1]
        if prepared.tool_lookup_error is None or not self.enabled:
            return await wrapped(*args, **kwargs)
        call = ToolCall(
            str(prepared.tool.name), self.name, agent_name=_agent_name(invocation), session_id=_session_id(invocation)
        )

        def reject(text: str) -> Any:
            from google.adk.flows.llm_flows.tools._caller import _build_response_event

            return _build_response_event(prepared.tool, {"error": text}, prepared.tool_context, invocation)

        return await arun_unknown(call, reject, _error_of, wrapped, args, kwargs)

    def current_of(self, instance: Any, args: tuple, kwargs: dict) -> Any:
        return _tool_and_context(args, kwargs)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        tool, tool_context = _tool_and_context(args, kwargs)
        invocation = _invocation(tool_context)
        agent_name = _agent_name(invocation)
        # ADK runs a copy of the agent per invocation: the name (unique in an agent tree)
        # keys the breaker, so an open breaker outlives the run.
        return ToolCall(
            str(tool.name),
            self.name,
            agent_name,
            agent_name,
            _session_id(invocation),
            tool_context.function_call_id,
            arguments=argument(args, kwargs, 1, "args"),
            origin=origin_of(tool, "google.adk"),
        )

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        tool, tool_context = _current.get() or (None, None)
        actions = getattr(tool_context, "actions", None)
        if actions is not None and (actions.requested_auth_configs or actions.requested_tool_confirmations):
            return IGNORED_RESULT  # waiting for a person: neither outcome
        text = str(result["error"]) if isinstance(result, dict) and set(result) == {"error"} else ""
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
        invocation = args[0]
        request = args[1]
        current = request.config.system_instruction
        if current is not None and not isinstance(current, str):
            return None  # structured instructions are left alone
        text = status_text(current, _agent_name(invocation))
        if text is None:
            return None
        config = request.config.model_copy(update={"system_instruction": text})
        return (invocation, request.model_copy(update={"config": config}), *args[2:]), kwargs

    def without_open_tools(self, instance: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        invocation = args[0]
        request = args[1]
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


def _mcp_server(toolset: Any) -> str | None:
    """The URL, or stdio command and arguments, of an ``McpToolset``'s connection parameters
    (``StdioConnectionParams`` wraps the ``StdioServerParameters`` it was given)."""
    params = getattr(toolset, "_connection_params", None)
    server = getattr(params, "server_params", params)
    return connection_identity(
        {
            "url": getattr(params, "url", None),
            "command": getattr(server, "command", None),
            "args": getattr(server, "args", None),
        }
    )


async def _mcp_tools(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``McpToolset.get_tools`` through :func:`reach`: no tools from a server not reached."""

    async def listing() -> Any:
        return await wrapped(*args, **kwargs)

    tools = await reach(_mcp_server(instance), listing)
    return [] if tools is UNREACHED else tools
