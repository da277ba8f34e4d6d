"""Claude Agent SDK: in-process MCP tools guarded where they run, the CLI's other tools through its hooks.

The SDK drives the Claude Code CLI, a separate process that runs the agent loop and
most tools. Three kinds of tool call, three ways in:

* **In-process tools** (``@tool`` served by ``create_sdk_mcp_server``, or any
  ``mcp.server.Server`` given as an ``sdk`` server) run in this process: the CLI sends
  each ``tools/call`` over the control channel, and ``SdkMcpBridge.handle`` hands it to
  the server. That call is guarded. The SDK turns a handler's exception into an
  ``isError`` result with its text, so the outcome is MCP's answer, judged as every MCP
  answer is (:mod:`.mcp_results`); a JSON-RPC error is judged by its code. A rejection
  is the same error result a failing tool gives, which the CLI shows Claude. A tool is
  keyed by its server's ``name@version`` and its name; a name the server does not list
  runs unguarded (no breaker, no metric series).
* **Tools that run outside the process** (the CLI's built-in tools, external MCP
  servers it starts itself) are seen through the SDK's own extension point, hooks: a
  ``PreToolUse`` hook denies a call whose breaker is open, with the rejection text as
  the reason Claude reads, and ``PostToolUse`` / ``PostToolUseFailure`` report how
  the call ended through the call path's ``observe``. They are added where ``Query``
  takes the options' hooks, after the user's own, which are never replaced. A built-in
  tool is keyed by its name and ``claude-code``; an external MCP tool by its bare name
  and its server's command (or URL, or configured name).
* **External stdio MCP servers fronted by the proxy**: with
  ``OTEL_BREAKER_CLAUDE_PROXY_MCP=true``, each stdio entry of ``mcp_servers`` is started
  as ``python -m otel_breaker mcp-proxy -- <command> <args>`` (rewritten where the
  subprocess transport takes the options), so its calls are guarded in the proxy with
  MCP's own outcomes, and the hooks leave them alone.

A run (the loop guard's and the waste budget's scope) is one ``query()`` call (its
``Query``), or, with a ``ClaudeSDKClient``, one ``client.query()`` and the tool calls
the CLI makes until the next ``client.query()`` (the turn it answers). A loop stop or a
spent budget cannot end the CLI's run from here, nor change the tool list the CLI
holds: the call gets the loop guard's or the budget's text as its error result instead.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import os
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from otel_breaker import runs
from otel_breaker.breaker_state import REJECTED
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS, judge_text
from otel_breaker.degrade import Rejection
from otel_breaker.instrumentation.base import PatchTarget
from otel_breaker.instrumentation.mcp_identity import (
    LISTINGS,
    configured_name,
    connection_identity,
    implementation_identity,
)
from otel_breaker.instrumentation.mcp_results import MCPAnswers, rejection, says_unknown_tool
from otel_breaker.instrumentation.patches import argument, with_argument
from otel_breaker.instrumentation.spec import SpecAdapter
from otel_breaker.loops import ToolLoopError, loop_message
from otel_breaker.sanitize import bounded
from otel_breaker.toolcall import ToolCall, named_agent

logger = logging.getLogger("otel_breaker")

_BRIDGE = "claude_agent_sdk._internal.sdk_mcp_bridge"
_QUERY = "claude_agent_sdk._internal.query"
_CLIENT = "claude_agent_sdk.client"
_TRANSPORT = "claude_agent_sdk._internal.transport.subprocess_cli"

#: The switch that fronts each external stdio MCP server with ``otel-breaker mcp-proxy``.
PROXY_SWITCH = "OTEL_BREAKER_CLAUDE_PROXY_MCP"
#: Where the CLI's built-in tools run, for their key.
CLI_SOURCE = "claude-code"
#: The arguments that start the proxy in front of a command (``python`` comes first).
PROXY_ARGUMENTS = ("-m", "otel_breaker", "mcp-proxy", "--")
#: The meta key under which the CLI sends the model's tool use id with ``tools/call``.
_TOOL_USE_ID = "claudecode/toolUseId"

# The ``Query`` whose control request (a hook callback, an MCP message) is being handled.
_query: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_breaker_claude_query", default=None)
# The run of a client's latest ``client.query()``, by its ``Query``; weak, so a closed
# client leaves no trace.
_turns: weakref.WeakKeyDictionary[Any, runs.Run] = weakref.WeakKeyDictionary()


def _run_of_query(query: Any) -> runs.Run | None:
    """The run a ``Query``'s control requests are in: its client's latest turn, else the
    ``Query`` itself (one ``query()`` call)."""
    try:
        turn = _turns.get(query)
    except TypeError:  # not weak-referenceable: no run of its own
        return None
    return turn if turn is not None else runs.run_of(query, "claude_agent_sdk")


async def _control_request(wrapped: Any, query: Any, args: tuple, kwargs: dict) -> Any:
    """``Query._handle_control_request``: the query marked for the request, which is made
    in the query's run (a run open around it already wins)."""
    marked = _query.set(query)
    found = _run_of_query(query)
    entered = None if found is None else runs.enter(found)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        runs.leave(entered)
        _query.reset(marked)


async def _client_turn(wrapped: Any, client: Any, args: tuple, kwargs: dict) -> Any:
    """``ClaudeSDKClient.query``: a new run for the turn it starts; the previous turn's ends."""
    query = getattr(client, "_query", None)
    if query is not None:
        try:
            previous = _turns.get(query)
            _turns[query] = runs.Run(runs.new_run_id(), "claude_agent_sdk")
        except TypeError:
            previous = None
        if previous is not None:
            runs.run_closed(previous)
    return await wrapped(*args, **kwargs)


def _run_id() -> str | None:
    """The identity of the run a call is made in."""
    current = runs.current_run()
    return None if current is None else current.id


class _RpcError(NamedTuple):
    code: Any
    message: Any


class SdkMcpError(Exception):
    """A JSON-RPC error an in-process server (or the SDK's bridge) answered a ``tools/call``
    with; judged by its code, as every MCP protocol error is. ``response`` is returned
    to the CLI unchanged."""

    def __init__(self, response: dict[str, Any]) -> None:
        error = response.get("error") if isinstance(response.get("error"), dict) else {}
        self.error = _RpcError(error.get("code"), error.get("message"))
        self.response = response
        super().__init__(str(error.get("message") or "JSON-RPC error"))


def _tool_result(response: Any) -> Any:
    """The ``CallToolResult`` of a ``tools/call`` response; raises :class:`SdkMcpError` for an error."""
    if not isinstance(response, dict):
        return response
    if "error" in response:
        raise SdkMcpError(response)
    from mcp.types import CallToolResult

    try:
        return CallToolResult.model_validate(response.get("result") or {})
    except Exception:
        return response  # not a tool result: neither outcome (mcp_results)


def _response(request_id: Any, result: Any) -> dict[str, Any]:
    """The JSON-RPC response carrying ``result`` (a rejection's ``CallToolResult``)."""
    body = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {"jsonrpc": "2.0", "id": request_id, "result": body}


def _params(args: tuple, kwargs: dict) -> dict[str, Any]:
    message = argument(args, kwargs, 0, "message")
    params = message.get("params") if isinstance(message, dict) else None
    return params if isinstance(params, dict) else {}


def _server_source(bridge: Any) -> str | None:
    """``name@version`` of the in-process server behind a bridge, else its configured name."""
    server = getattr(bridge, "_server", None)
    return implementation_identity(server) or configured_name(getattr(bridge, "name", None))


def proxy_switch_on(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``OTEL_BREAKER_CLAUDE_PROXY_MCP`` asks to front stdio MCP servers with the proxy."""
    env = os.environ if environ is None else environ
    return env.get(PROXY_SWITCH, "").strip().lower() in ("1", "true", "yes", "on")


def is_proxied(entry: Any) -> bool:
    """Whether an ``mcp_servers`` entry already starts ``otel-breaker mcp-proxy``."""
    if not isinstance(entry, Mapping):
        return False
    command, args = entry.get("command"), [str(a) for a in entry.get("args") or ()]
    return "mcp-proxy" in args and (command == "otel-breaker" or "otel_breaker" in args)


def proxied(entry: Any, python: str | None = None, environ: Mapping[str, str] | None = None) -> Any:
    """A stdio ``mcp_servers`` entry rewritten to start its server behind the proxy
    (``python -m otel_breaker mcp-proxy -- <command> <args>``); any other entry (SDK,
    HTTP, SSE, already proxied) unchanged. The proxy gets this process's ``OTEL_*``
    settings (the CLI does not pass its whole environment to a server), under the
    entry's own ``env``, which wins."""
    if not isinstance(entry, Mapping) or entry.get("type", "stdio") != "stdio" or is_proxied(entry):
        return entry
    command = entry.get("command")
    if not isinstance(command, str) or not command:
        return entry
    args = [*PROXY_ARGUMENTS, command, *(str(a) for a in entry.get("args") or ())]
    settings = {k: v for k, v in (os.environ if environ is None else environ).items() if k.startswith("OTEL_")}
    env = {**settings, **(entry.get("env") or {})}
    return {**entry, "command": python or sys.executable, "args": args, **({"env": env} if env else {})}


class _Servers:
    """The MCP servers of one ``Query``, as its hooks need them: which run in this
    process or behind the proxy (guarded there), and the identity of the others."""

    def __init__(self, in_process: Any, configured: Any) -> None:
        self.guarded = set(in_process or ())
        self.sources: dict[str, str | None] = {}
        for key, entry in (configured or {}).items() if isinstance(configured, Mapping) else ():
            if not isinstance(key, str):
                continue
            if is_proxied(entry) or (isinstance(entry, Mapping) and entry.get("type") == "sdk"):
                self.guarded.add(key)
            else:
                self.sources[key] = connection_identity(entry) or configured_name(key)

    def call(self, tool_name: Any, tool_input: Any, tool_use_id: Any, agent_name: Any) -> ToolCall | None:
        """The call a hook reports, or None for a tool guarded elsewhere (or no tool name)."""
        if not isinstance(tool_name, str) or not tool_name:
            return None
        tool, source, tool_type = tool_name, CLI_SOURCE, "function"
        if tool_name.startswith("mcp__"):
            key = next((k for k in (*self.guarded, *self.sources) if tool_name.startswith(f"mcp__{k}__")), None)
            if key in self.guarded:
                return None
            if key is None:  # a server from the CLI's own settings: its configured name
                key = tool_name[len("mcp__") :].split("__", 1)[0]
            tool = tool_name[len(f"mcp__{key}__") :] or tool_name
            source, tool_type = self.sources.get(key) or configured_name(key), "extension"
        return ToolCall(
            bounded(tool),
            ClaudeAgentSDKAdapter.name,
            agent_name=agent_name if isinstance(agent_name, str) and agent_name else None,
            session_id=_run_id(),
            call_id=str(tool_use_id) if tool_use_id else None,
            tool_type=tool_type,
            arguments=tool_input,
            source=source,
        )


class ClaudeAgentSDKAdapter(MCPAnswers, SpecAdapter):
    """Guards the Claude Agent SDK's in-process MCP tools and, through its hooks, the CLI's own."""

    name = "claude_agent_sdk"

    def targets(self) -> list[PatchTarget]:
        return [
            *super().targets(),
            PatchTarget(_QUERY, "Query._handle_control_request", _control_request),
            PatchTarget(_CLIENT, "ClaudeSDKClient.query", _client_turn),
            PatchTarget(_BRIDGE, "SdkMcpBridge.handle", self._handle),
            PatchTarget(_QUERY, "Query.__init__", self._with_hooks),
            PatchTarget(_TRANSPORT, "SubprocessCLITransport.__init__", self._with_proxies),
        ]

    # -- in-process tools -----------------------------------------------------------------

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        params = _params(args, kwargs)
        name = params.get("name")
        if not isinstance(name, str) or not name:
            return None
        source = _server_source(instance)
        if LISTINGS.lists(source, name) is False:
            return None  # a name the server does not list: its answer says so, no breaker
        meta = params.get("_meta")
        call_id = meta.get(_TOOL_USE_ID) if isinstance(meta, dict) else None
        return ToolCall(
            name,
            self.name,
            agent_name=named_agent(),
            session_id=_run_id(),
            call_id=str(call_id) if call_id else None,
            tool_type="extension",
            arguments=params.get("arguments"),
            source=source,
        )

    async def _handle(self, wrapped: Any, bridge: Any, args: tuple, kwargs: dict) -> Any:
        """``SdkMcpBridge.handle``: a ``tools/call`` guarded, a ``tools/list`` noted."""
        message = argument(args, kwargs, 0, "message")
        method = message.get("method") if isinstance(message, dict) else None
        if method == "tools/call":
            call = self.call_of(bridge, args, kwargs)
            if call is not None:
                return await self._guarded(call, message, wrapped, args, kwargs)
        response = await wrapped(*args, **kwargs)
        if method == "tools/list":
            self._note_listing(bridge, message, response)
        return response

    async def _guarded(self, call: ToolCall, message: dict, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """One ``tools/call`` through the call path; the server's own response is returned
        unchanged, a rejection as the JSON-RPC response of an error result."""
        answered: list[Any] = []  # the server's response, once the tool ran

        async def send() -> Any:
            response = await wrapped(*args, **kwargs)
            answered.append(response)
            return _tool_result(response)

        try:
            outcome = await self.run_async(call, send, (), {})
        except SdkMcpError as error:
            return error.response
        except ToolLoopError as error:  # the CLI's run cannot be stopped from here: Claude reads why
            outcome = rejection(loop_message(error))
        if answered:
            return answered[-1]
        return _response(message.get("id"), outcome)

    def _note_listing(self, bridge: Any, message: dict, response: Any) -> None:
        """Note the tools an in-process server listed: a name it does not list gets no breaker."""
        try:
            tools = response.get("result", {}).get("tools") if isinstance(response, dict) else None
            if isinstance(tools, list):
                first_page = not (message.get("params") or {}).get("cursor")
                names = (t.get("name") for t in tools if isinstance(t, dict))
                LISTINGS.note(_server_source(bridge), names, first_page=first_page)
        except Exception:
            logger.debug("otel-breaker: claude_agent_sdk: could not note a tool listing", exc_info=True)

    # -- the CLI's own tools, through hooks -------------------------------------------------

    def _with_hooks(self, wrapped: Any, query: Any, args: tuple, kwargs: dict) -> Any:
        """``Query.__init__``: our hooks after the user's, for the tools not guarded in process."""
        try:
            transport = argument(args, kwargs, 0, "transport")
            options = getattr(transport, "_options", None)
            servers = _Servers(argument(args, kwargs, 4, "sdk_mcp_servers"), getattr(options, "mcp_servers", None))
            hooks = merged_hooks(argument(args, kwargs, 3, "hooks"), self._hook_callbacks(servers))
            args, kwargs = with_argument(args, kwargs, 3, "hooks", hooks)
        except Exception:
            logger.debug("otel-breaker: claude_agent_sdk: could not add the hooks", exc_info=True)
        return wrapped(*args, **kwargs)

    def _hook_callbacks(self, servers: _Servers) -> dict[str, Callable[..., Any]]:
        adapter = self

        async def before(hook_input: Any, tool_use_id: Any, context: Any) -> dict[str, Any]:
            return adapter.before_tool(servers, hook_input, tool_use_id)

        async def after(hook_input: Any, tool_use_id: Any, context: Any) -> dict[str, Any]:
            adapter.after_tool(servers, hook_input, tool_use_id)
            return {}

        return {"PreToolUse": before, "PostToolUse": after, "PostToolUseFailure": after}

    def _hook_call(self, servers: _Servers, hook_input: Any, tool_use_id: Any) -> ToolCall | None:
        if not self.enabled or not isinstance(hook_input, Mapping):
            return None
        return servers.call(
            hook_input.get("tool_name"),
            hook_input.get("tool_input"),
            hook_input.get("tool_use_id") or tool_use_id,
            hook_input.get("agent_type"),
        )

    def before_tool(self, servers: _Servers, hook_input: Any, tool_use_id: Any) -> dict[str, Any]:
        """``PreToolUse``: deny a call whose breaker would reject it, with the rejection text."""
        try:
            call = self._hook_call(servers, hook_input, tool_use_id)
            breaker = None if call is None else self.guard.breaker_for(call)
            if breaker is None or breaker.retry_after <= 0:
                return {}  # admitted: its outcome is counted with its admission once it has run
            permit = breaker.try_acquire()
            if permit is not REJECTED:
                breaker.on_ignored(permit)  # its cooldown ended meanwhile (or observe mode): it runs
                return {}
            from otel_breaker import call_steps  # loaded with the first call, not the import

            _, text = call_steps.reject(breaker, call, _HookRejection(), None, True)
            output = {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": text}
            return {"hookSpecificOutput": output}
        except Exception:
            logger.debug("otel-breaker: claude_agent_sdk: PreToolUse failed; the call runs", exc_info=True)
            return {}

    def after_tool(self, servers: _Servers, hook_input: Any, tool_use_id: Any) -> None:
        """``PostToolUse`` / ``PostToolUseFailure``: the outcome of a call that ran outside the
        process, counted through the call path's ``observe`` and given its span."""
        try:
            call = self._hook_call(servers, hook_input, tool_use_id)
            breaker = None if call is None else self.guard.breaker_for(call)
            if breaker is None:
                return
            from otel_breaker.telemetry import TELEMETRY

            outcome, err = SUCCESS, None
            if hook_input.get("hook_event_name") == "PostToolUseFailure":
                outcome, err = self._failure_outcome(breaker, call, hook_input), "tool_error"
            self.guard.observe(call, outcome)
            end_ns = time.time_ns()
            duration = hook_input.get("duration_ms")
            elapsed_ns = int(duration * 1e6) if isinstance(duration, (int, float)) and duration >= 0 else 0
            TELEMETRY.past_call(call, breaker, end_ns - elapsed_ns, end_ns, err, None, None)
        except Exception:
            logger.debug("otel-breaker: claude_agent_sdk: could not count a tool's outcome", exc_info=True)

    def _failure_outcome(self, breaker: Any, call: ToolCall, hook_input: Mapping[str, Any]) -> int:
        """How a failure the CLI reported ends: an interrupt or an unknown MCP tool is
        neither outcome; any other error is judged by its text."""
        text = hook_input.get("error")
        text = text if isinstance(text, str) else ""
        if hook_input.get("is_interrupt") or (call.tool_type == "extension" and says_unknown_tool(text, call.tool)):
            return IGNORED
        verdict = judge_text(text, breaker.config)
        return verdict.outcome if verdict.outcome in (FAILURE, IGNORED) else FAILURE

    # -- external stdio servers behind the proxy ------------------------------------------------

    def _with_proxies(self, wrapped: Any, transport: Any, args: tuple, kwargs: dict) -> Any:
        """``SubprocessCLITransport.__init__``: with the switch on, the options' stdio MCP
        servers start behind ``otel-breaker mcp-proxy`` (a copy of the options)."""
        if proxy_switch_on():
            try:
                options = argument(args, kwargs, 1, "options")
                servers = getattr(options, "mcp_servers", None)
                if isinstance(servers, Mapping):
                    rewritten = {key: proxied(entry) for key, entry in servers.items()}
                    if any(rewritten[key] is not servers[key] for key in servers):
                        options = dataclasses.replace(options, mcp_servers=rewritten)
                        args, kwargs = with_argument(args, kwargs, 1, "options", options)
            except Exception:
                logger.debug("otel-breaker: claude_agent_sdk: could not front the MCP servers", exc_info=True)
        return wrapped(*args, **kwargs)


class _HookRejection:
    """The rejection form of a ``PreToolUse`` denial: the text Claude reads as the reason."""

    def rejection(self, call: ToolCall, info: Rejection) -> str:
        return info.message

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        return None


def merged_hooks(hooks: Any, callbacks: Mapping[str, Callable[..., Any]]) -> dict[str, list[dict[str, Any]]]:
    """``Query``'s hooks (``{event: [{"matcher": ..., "hooks": [...]}]}``) with one matcher per
    event for ``callbacks`` after the user's: a new dict, the user's lists left as they are."""
    merged = {event: list(matchers) for event, matchers in (hooks or {}).items()}
    for event, callback in callbacks.items():
        merged.setdefault(event, []).append({"matcher": None, "hooks": [callback]})
    return merged
