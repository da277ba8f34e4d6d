"""MCP clients: every tool call goes out through ``ClientSession.call_tool``.

Every MCP client stack (the SDK's ``Client``, agent frameworks' MCP toolsets,
hand-written loops) ends in the session's ``call_tool``. ``Client.call_tool`` is
guarded too, as the one *logical* call: it may send ``tools/call`` more than once
(input-required rounds, a resend after a header mismatch), and those sends pass
through. A tool is keyed by its server (:mod:`.mcp_identity`) and the name the
server reports; outcomes and the rejection are MCP's (:mod:`.mcp_results`).

A name neither listed nor answered as a real tool gets no breaker and no metric
series: its first call runs as without us and, once the server has shown it is a
real tool, is counted after the fact through the call path's ``observe`` (the
upstream's share included) and given its span. Menu: ``ClientSession.list_tools``
and ``Client.list_tools`` return a copy without this server's open tools; the
session's state and the client's cache keep it all. Every listing the session
receives is noted (:data:`.mcp_identity.LISTINGS`): a listed tool that answers
"Tool not found" is reporting a missing thing of its own, not an unknown tool.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
import weakref
from typing import Any

from otel_breaker import loops, runs
from otel_breaker.call_path import NO_OUTPUT
from otel_breaker.classify import is_excluded, is_transport_error
from otel_breaker.instrumentation import mcp_results
from otel_breaker.instrumentation.base import GuardedCall, active_call, active_call_var, same_logical_call
from otel_breaker.instrumentation.mcp_identity import LISTINGS, mcp_call, note_effects, server_identity
from otel_breaker.instrumentation.mcp_results import MCPAnswers
from otel_breaker.instrumentation.mcp_runs import RUN_META_KEY as RUN_META_KEY  # where tests and users find it
from otel_breaker.instrumentation.mcp_runs import call_run, listing_run
from otel_breaker.instrumentation.patches import argument, context_patch, menu_patch, observe_patch, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter
from otel_breaker.menu import visible_tools
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.toolcall import ToolCall
from otel_breaker.verdicts import judge_raised, judge_returned

logger = logging.getLogger("otel_breaker")

_SESSION = "mcp.client.session"
_CLIENT = "mcp.client.client"
_MAX_CONFIRMED = 4096
#: How long a half-open server's ``ping`` may take before it counts as failed (seconds):
#: generous, a busy server is not a dead one; a ping that hangs must not hold the probe forever.
PROBE_TIMEOUT = 30.0
# Inside ``Client.list_tools``: the session's listing passes through whole (the client caches it).
_client_listing: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_breaker_mcp_listing", default=False)


def _tool_name(tool: Any) -> str | None:
    return tool.name


class MCPAdapter(MCPAnswers, SpecAdapter):
    """Guards the tool calls an MCP client session sends."""

    name = "mcp"
    patches = (
        tool_patch(_CLIENT, "Client.call_tool"),
        tool_patch(_SESSION, "ClientSession.call_tool"),
        # Applied first, so inside the menu patch: the listing is noted whole, before any hiding.
        observe_patch(_SESSION, "ClientSession.list_tools", "note_listing", "async"),
        menu_patch(_SESSION, "ClientSession.list_tools", "async", "visible", after=True),
        context_patch(_CLIENT, "Client.list_tools", _client_listing, lambda *_: True),
        menu_patch(_CLIENT, "Client.list_tools", "async", "visible", after=True),
        # Outermost: a listing is made in its session's run, so the tools that run hid leave it.
        context_patch(_SESSION, "ClientSession.list_tools", runs.RUN_VARIABLE, listing_run),
        context_patch(_CLIENT, "Client.list_tools", runs.RUN_VARIABLE, listing_run),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._confirmed: set[tuple[str | None, str]] = set()  # (server, name) answered as a real tool
        self._confirmed_lock = threading.Lock()
        _ADAPTERS.add(self)

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        name = argument(args, kwargs, 0, "name")
        if not isinstance(name, str) or not name:
            return None
        outer, source = active_call(), server_identity(instance)
        if source is None and outer is not None and outer.framework == self.name and outer.tool == name:
            source = outer.source  # a send of the Client's logical call: its server
        return mcp_call(name, self.name, argument(args, kwargs, 1, "arguments"), source)

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The tool wrapper: the call runs in its run (:func:`call_run`) unless a framework's
        run is open around it."""
        token = runs.enter(call_run(instance, kwargs))
        try:
            return await self._guarded(wrapped, instance, args, kwargs)
        finally:
            runs.leave(token)

    async def _guarded(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The guarded call, which also lets a never-listed name's first call run as without us."""
        call = self.call_of(instance, args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        outermost = not same_logical_call(active_call(), call)
        if outermost and not self._known(instance, call):
            answer = loops.check_unknown(call, self)  # a name that already failed as unknown
            return answer if answer is not loops.RUN else await self._first_call(call, wrapped, args, kwargs)
        if outermost:
            await self._probe_first(instance, call)
        return await self.run_async(call, wrapped, args, kwargs)

    async def _probe_first(self, instance: Any, call: ToolCall) -> None:
        """Before a destructive or unannounced tool's call reaches a half-open server, ping it
        on the same session (``upstream_gate.probe_safely``): answered, the upstream closes
        and the call goes through; failed, the upstream opens again and the call is rejected."""
        try:  # the Client's session (the Client's own ``send_ping`` is deprecated), else the session itself
            session = getattr(instance, "session", None) if type(instance).__name__ == "Client" else instance
            if getattr(session, "send_ping", None) is None or getattr(session, "list_tools", None) is None:
                return
        except Exception:
            return  # no session to probe on: the first real call is the probe, as without one

        # The SDK's own event-loop layer (asyncio or trio), there wherever ``mcp`` is; imported
        # here, as adapters import their framework, so this module loads where ``mcp`` is not.
        import anyio

        async def probe() -> None:
            with anyio.fail_after(PROBE_TIMEOUT):
                try:
                    await session.send_ping()
                except Exception as exc:
                    if is_transport_error(exc):
                        raise
                    # No ping in this protocol version (removed in 2026-07-28): a listing, also free of effects.
                    await session.list_tools()

        await self.guard.aprobe_upstream(call, probe)

    def unknown_outcome(self, call: ToolCall, exc: BaseException, message: str) -> Any:
        """A destructive tool's call in doubt (a timeout, a dropped connection) answers as the
        server's own failure does, an ``isError`` result with ``message``: MCP's rejection form."""
        return mcp_results.rejection(message)

    def visible(self, instance: Any, args: tuple, kwargs: dict, result: Any) -> Any:
        """A ``ListToolsResult`` copy without this server's open tools; None when nothing is hidden."""
        tools = getattr(result, "tools", None)
        if not tools or _client_listing.get():
            return None
        source, outer = server_identity(instance), active_call()
        kept = visible_tools(tools, _tool_name, lambda t: source, agent=outer.agent if outer else None)
        return None if kept is tools else result.model_copy(update={"tools": list(kept)})

    def note_listing(self, instance: Any, args: tuple, kwargs: dict, result: Any) -> None:
        """Note the tools a session's ``tools/list`` answered (the whole page, before any
        hiding): a listed tool answering "Tool not found" is then no unknown tool."""
        tools = getattr(result, "tools", None)
        if isinstance(tools, list):
            source = server_identity(instance)
            LISTINGS.note(source, (t.name for t in tools), first_page=_first_page(kwargs))
            note_effects(source, tools)

    # -- unknown tool names: no breaker, no metric series ------------------------------------

    def _known(self, instance: Any, call: ToolCall) -> bool:
        try:
            listed = getattr(getattr(instance, "_session", instance), "_tool_output_schemas", None)
            if isinstance(listed, dict) and listed and call.tool in listed:
                return True
            return (call.source, call.tool) in self._confirmed
        except Exception:
            return True

    async def _first_call(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """A name neither listed nor answered yet: run it as without us; once the server
        has shown it is a real tool, count it and give it its span after the fact."""
        start_ns = time.time_ns()
        token = active_call_var.set(GuardedCall(call))  # the session's send passes through
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            if self.exception_hint(call, exc) is None and not is_excluded(exc):
                self._observe(call, start_ns, None, exc)
            raise
        finally:
            active_call_var.reset(token)
        if mcp_results.is_unknown_tool_result(result, call.tool, self.tool_listed(call)):
            loops.unknown_tool_called(call, mcp_results.result_text(result))
        else:
            self._observe(call, start_ns, result, None)
        return result

    def _observe(self, call: ToolCall, start_ns: int, result: Any, exc: BaseException | None) -> None:
        """Count a first call that turned out to be a real tool's through the call path's
        ``observe``, judged as the call path judges one (and so is its span)."""
        end_ns = time.time_ns()
        try:
            with self._confirmed_lock:
                if len(self._confirmed) >= _MAX_CONFIRMED:
                    return
                self._confirmed.add((call.source, call.tool))
            breaker = self.guard.breaker_for(call)
            if breaker is None:
                return
            # Judged by the call path's own steps, before the upstream's share, which leaves a
            # transport failure neutral for the tool: its span still shows the failure, as on the call path.
            if exc is not None:
                verdict, err = judge_raised(breaker, call, self, exc)
            else:
                verdict, err, _ = judge_returned(breaker, call, self, result, 0.0, False)
            self.guard.observe(call, verdict.outcome, NO_OUTPUT if exc is not None else result, exc, self)
            TELEMETRY.past_call(call, breaker, start_ns, end_ns, err, exc, None)
        except Exception:
            logger.debug("otel-breaker: mcp: could not count a first call", exc_info=True)


def _first_page(kwargs: dict) -> bool:
    """Whether a session's ``list_tools`` asked for the first page (no ``params.cursor``):
    a later page adds to the listing noted before."""
    return getattr(kwargs.get("params"), "cursor", None) is None


#: Every MCP adapter made in this process, weakly: the fork handler replaces their locks.
_ADAPTERS: weakref.WeakSet[MCPAdapter] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    """A thread noting a confirmed tool at the fork holds its adapter's lock in the child
    forever (the child has only the forking thread), and the child's next first call of a
    never-listed tool would wait on it: every adapter gets a fresh lock."""
    for adapter in list(_ADAPTERS):
        adapter._confirmed_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)
