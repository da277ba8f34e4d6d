"""Breakers for PydanticAI (``pydantic-ai-slim``).

``ToolManager.execute_tool_call`` runs every tool call. ``ToolFailedError`` is a
failure, ``ToolRetryError`` (``ModelRetry``) the model's retry request (neutral unless
counted), any other exception ends the run and counts. The rejection is the run's own
"tool failed", which costs no retry budget. Calls that run no body (invalid arguments,
deferred or approval-gated) count for no breaker; the loop guard counts invalid ones
and unknown names. Status block: a dynamic ``InstructionPart`` where a request's
instructions are resolved, only while ``ModelRequestNode._prepare_request`` prepares
one (it also decides whether a resumed run has anything new to send). Menu: the
request parameters' ``function_tools``.

A run is ``Agent.iter``, which ``run``, ``run_sync``, ``run_stream`` and
``run_stream_events`` all go through; an agent a tool runs joins the run of the
agent that called the tool.

A rejection counts against the tool's retry budget (``max_retries``) as the call's
failure would have: a tool whose failures PydanticAI charged here (a ``ModelRetry``, or
an exception that ended the run) has each rejection charged, so a run whose model
keeps calling an open tool ends where it would without otel-breaker
(``UnexpectedModelBehavior``) instead of at ``request_limit``. A tool whose failure is
``ToolFailed`` (charged nothing by PydanticAI), or whose failures this process never saw
(a breaker another worker opened through a shared store), is charged nothing.

An ``MCPToolset`` that cannot connect aborts the run in PydanticAI. Its connection
(``__aenter__``) goes through ``mcp_reach.reach``: a server that cannot be reached
counts on its upstream breaker and contributes no tools to the run, which goes on
with the other toolsets; while that breaker is open it is not tried.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import threading
import weakref
from collections import OrderedDict
from typing import Any, NamedTuple

from otel_breaker import loops
from otel_breaker.classify import MISTAKE, RETRY_REQUEST
from otel_breaker.degrade import STATUS_HEADER, Rejection, status_in_prompt_enabled
from otel_breaker.identity import origin_of
from otel_breaker.instrumentation.base import PatchTarget, agent_display_name, nested_failure
from otel_breaker.instrumentation.mcp_identity import connection_identity, implementation_identity
from otel_breaker.instrumentation.mcp_reach import UNREACHED, reach
from otel_breaker.instrumentation.mistakes import arun_invalid
from otel_breaker.instrumentation.patches import SKIP, argument, context_patch, menu_patch, prompt_patch, tool_patch
from otel_breaker.instrumentation.spec import SpecAdapter, status_text
from otel_breaker.menu import visible_tools
from otel_breaker.runs import close_run, open_run
from otel_breaker.toolcall import ToolCall

_GRAPH = "pydantic_ai._agent_graph"
_AGENT = "pydantic_ai.agent"
_MCP = "pydantic_ai.mcp"


class _Answering(NamedTuple):
    """The call a rejection answers: its part (its own id, kind and form), whether the
    caller wants PydanticAI's wrapped errors, and the run step's tool manager and tool
    (whose retry budget a rejection is charged against)."""

    part: Any
    wrap: bool
    manager: Any
    tool: Any


_part: contextvars.ContextVar[_Answering | None] = contextvars.ContextVar("otel_breaker_pydantic_ai_part", default=None)

#: How a tool's last failure reached PydanticAI, by (tool, source): ``ToolFailed`` costs
#: no retry budget, so neither does a rejection of that tool; any other (a ``ModelRetry``,
#: an exception ending the run) is charged. A tool whose failures were not seen here is not.
_FREE = "tool_failed"
_CHARGED = "charged"
_MAX_FORMS = 4096
_forms: OrderedDict[tuple[str, str | None], str] = OrderedDict()
_forms_lock = threading.Lock()


def _reinit_after_fork() -> None:
    """A thread noting a tool's failure at the fork holds this lock in the child forever
    (the child has only the forking thread), and the child's next tool failure would wait
    on it: the child gets a fresh lock."""
    global _forms_lock
    _forms_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)

#: Set while ``ModelRequestNode._prepare_request`` prepares a request (and the status block is on).
_preparing: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_breaker_pydantic_ai_request", default=False)

#: What a run ended by a spent retry budget is raised from: the tool's request to retry.
_RETRY_CAUSES = frozenset({"ToolRetryError", "ModelRetry"})


def _preparing_with_status(instance: Any, args: tuple, kwargs: dict) -> Any:
    """``_prepare_request``: a request is prepared, marked only while the status block is on."""
    return status_in_prompt_enabled() or SKIP


def _definition_name(tool_def: Any) -> str:
    return tool_def.name


class PydanticAIAdapter(SpecAdapter):
    name = "pydantic_ai"
    patches = (
        tool_patch("pydantic_ai.tool_manager", "ToolManager.execute_tool_call"),
        context_patch(_GRAPH, "ModelRequestNode._prepare_request", _preparing, _preparing_with_status),
        prompt_patch(_GRAPH, "_get_instructions", "async", "instructions", after=True),
        # From 2.78 a request resolves its instructions here instead.
        prompt_patch(_GRAPH, "ModelRequestNode._resolve_step_instructions", "async", "instructions", after=True),
        menu_patch(_GRAPH, "_prepare_request_parameters", "async", "request_parameters", after=True),
    )

    def targets(self) -> list[PatchTarget]:
        """The declared patches, and ``Agent.iter`` as a run (an async context manager,
        which the run patch shapes do not cover)."""
        return [
            *super().targets(),
            PatchTarget(_AGENT, "Agent.iter", _agent_iter),
            PatchTarget(_MCP, "MCPToolset.__aenter__", _mcp_enter),
            PatchTarget(_MCP, "MCPToolset.__aexit__", _mcp_exit),
            PatchTarget(_MCP, "MCPToolset.get_tools", _mcp_tools),
        ]

    def request_parameters(self, instance: Any, args: tuple, kwargs: dict, parameters: Any) -> Any:
        """The request's ``function_tools`` without the open ones; the run's tool manager
        keeps them, so a call the model makes anyway still reaches the guard."""
        manager = argument(args, kwargs, 0, "ctx").deps.tool_manager
        tools = manager.tools or {}
        offered = parameters.function_tools

        def source(tool_def: Any) -> str | None:
            return toolset_source(getattr(tools.get(tool_def.name), "toolset", None))

        kept = visible_tools(offered, _definition_name, source, agent=getattr(manager.ctx, "agent", None))
        if kept is offered:
            return None
        return dataclasses.replace(parameters, function_tools=list(kept))

    def instructions(self, instance: Any, args: tuple, kwargs: dict, parts: Any) -> Any:
        """The resolved ``InstructionPart`` list (``(ctx, run_context)`` arguments) with the block."""
        if not _preparing.get() or any(STATUS_HEADER in (part.content or "") for part in parts or ()):
            return None  # not a request, or a nested resolution already added the block
        block = status_text(None, getattr(argument(args, kwargs, 1, "run_context"), "agent", None))
        if not block:
            # None would let the model fall back to the history's instructions (an earlier
            # request's block, if it carries one): an empty list means no instructions.
            from pydantic_ai._instrumentation import get_instructions_source

            ctx = argument(args, kwargs, 0, "ctx")
            held = get_instructions_source(ctx.state.message_history) if parts is None else None
            return [] if held is not None and STATUS_HEADER in (held.instructions or "") else None
        from pydantic_ai.messages import InstructionPart

        # Dynamic: it changes between requests, so it goes after the static parts a provider may cache.
        return [*(parts or ()), InstructionPart(block, dynamic=True)]

    async def _tool_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The spec's tool wrapper, the call's part at hand for :meth:`rejection`. Invalid arguments
        or a name no tool has run no body: only the loop guard counts PydanticAI's retry for them."""
        call = self.call_of(instance, args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        validated = argument(args, kwargs, 0, "validated")
        wrap = kwargs.get("wrap_validation_errors", True) is not False
        token = _part.set(_Answering(validated.call, wrap, instance, getattr(validated, "tool", None)))
        try:
            if validated.args_valid is not False:
                return await self.run_async(call, wrapped, args, kwargs)
            if getattr(validated, "tool", None) is not None:
                return await arun_invalid(self, call, _InvalidArguments(self), wrapped, args, kwargs)
            return await self._unknown_tool(call, wrapped, args, kwargs)
        finally:
            _part.reset(token)

    async def _unknown_tool(self, call: ToolCall, wrapped: Any, args: tuple, kwargs: dict) -> Any:
        """A name no tool has: no breaker; the loop guard keyed by the name counts PydanticAI's retry."""
        answer = loops.check_unknown(call, self)
        if answer is not loops.RUN:
            return answer
        try:
            return await wrapped(*args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ == "ToolRetryError":
                loops.unknown_tool_called(call, str(exc))
            raise

    def describe(self, instance: Any, args: tuple, kwargs: dict) -> ToolCall | None:
        """The call; one whose arguments failed validation too (for the loop guard only, without
        the tool's code origin); None for a deferred or approval-gated one (no body runs)."""
        validated = argument(args, kwargs, 0, "validated")
        if getattr(validated, "deferral", None) is not None:
            return None
        part = validated.call
        tool = validated.tool
        ctx = validated.ctx
        agent = getattr(ctx, "agent", None)
        session = getattr(ctx, "conversation_id", None) or getattr(ctx, "run_id", None)
        return ToolCall(
            part.tool_name,
            self.name,
            agent,
            agent_display_name(agent),
            session if isinstance(session, str) else None,
            part.tool_call_id,
            arguments=part.args,
            source=toolset_source(getattr(tool, "toolset", None)),
            origin=origin_of(tool, "pydantic_ai") if validated.args_valid is not False else None,
        )

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        """The tool's request to retry (``ModelRetry``): ``ToolRetryError``, or the run's
        ``UnexpectedModelBehavior`` raised from one (or from the ``ModelRetry`` itself, as
        pydantic-ai 2.78 raises it) once the retry budget is spent. After a
        nested failure it is an MCP toolset's retry for an error result the session below
        already counted. It also notes how the tool's failure reached PydanticAI, for
        the retry budget its rejections are charged against."""
        _note_form(call, exc)
        if nested_failure():
            return None
        if type(exc).__name__ == "ToolRetryError":
            return RETRY_REQUEST
        if type(exc).__name__ == "UnexpectedModelBehavior" and type(exc.__cause__).__name__ in _RETRY_CAUSES:
            return RETRY_REQUEST
        return None

    def unknown_outcome(self, call: ToolCall, exc: BaseException, message: str) -> BaseException | None:
        """A destructive tool's call in doubt, reported the way it failed: a "tool failed"
        the run hands the model (``ToolFailedError``) carries the message in its part, so
        the run goes on and the model reads it; any other exception ends the run as before."""
        if type(exc).__name__ != "ToolFailedError":
            return None
        part = exc.tool_failed  # type: ignore[attr-defined]
        return type(exc)(dataclasses.replace(part, content=message))

    def retried(self, call: ToolCall, failure: Any, note: str) -> Any:
        """The last "tool failed" of a call retried below the model: the part the model
        reads ends with the number of attempts (any other exception: the call path's default)."""
        if type(failure).__name__ != "ToolFailedError" or not isinstance(failure.tool_failed.content, str):
            return None
        part = failure.tool_failed
        noted = type(failure)(dataclasses.replace(part, content=f"{part.content} {note}"))
        noted.__cause__ = failure.__cause__
        return noted

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        """Raise the run's own "tool failed" signal; returning a value would read as success.
        Charged against the tool's retry budget as its failure would have been: once it is
        spent, the run ends with PydanticAI's own ``UnexpectedModelBehavior``."""
        from pydantic_ai.exceptions import ToolFailed, ToolFailedError
        from pydantic_ai.messages import ToolReturnPart

        answering = _part.get()
        if answering is None:
            answering = _Answering(None, True, None, None)
        if not answering.wrap:
            raise ToolFailed(info.message)  # handle_call(wrap_validation_errors=False) expects the raw one
        _charge(call, answering, info.message)
        part = answering.part
        if getattr(part, "tool_name", None) != call.tool:
            part = None  # another tool's part: the call's own id, no kind
        call_id = getattr(part, "tool_call_id", None) or call.call_id
        kind = getattr(part, "tool_kind", None)
        raise ToolFailedError(ToolReturnPart(call.tool, info.message, call_id, tool_kind=kind, outcome="failed"))


def _note_form(call: ToolCall, exc: BaseException) -> None:
    """Remember whether PydanticAI charged ``call``'s failure to the tool's retry budget."""
    form = _FREE if type(exc).__name__ == "ToolFailedError" else _CHARGED
    key = (call.tool, call.source)
    with _forms_lock:
        _forms[key] = form
        _forms.move_to_end(key)
        if len(_forms) > _MAX_FORMS:
            _forms.popitem(last=False)


def _charge(call: ToolCall, answering: _Answering, message: str) -> None:
    """Charge a rejection to the tool's retry budget, the way ``ToolManager`` charges a
    ``ModelRetry``: the step's failed tools carry the count to the next step, and a spent
    budget raises ``UnexpectedModelBehavior``. Nothing for a tool whose failures cost none
    or were not seen here, or where the manager is not the one this was written against."""
    with _forms_lock:
        form = _forms.get((call.tool, call.source))
    manager = answering.manager
    check = getattr(manager, "_check_max_retries", None)
    failed = getattr(manager, "failed_tools", None)
    if form != _CHARGED or not callable(check) or not isinstance(failed, set):
        return
    from pydantic_ai.exceptions import ModelRetry

    name = getattr(answering.part, "tool_name", None) or call.tool
    max_retries = getattr(answering.tool, "max_retries", None)
    if not isinstance(max_retries, int):
        max_retries = getattr(manager, "default_max_retries", 1)
    check(name, max_retries, ModelRetry(message))
    failed.add(name)


class _RunScope:
    """``Agent.iter``'s context manager inside a run: opened on entry (or joined, for an
    agent a tool runs), closed on exit."""

    def __init__(self, manager: Any, run_id: Any) -> None:
        self._manager = manager
        self._run_id = run_id
        self._token: contextvars.Token | None = None

    async def __aenter__(self) -> Any:
        self._token = open_run(self._run_id, framework="pydantic_ai")[1]
        try:
            return await self._manager.__aenter__()
        except BaseException:
            close_run(self._token)
            raise

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self._manager.__aexit__(*exc_info)
        finally:
            close_run(self._token)


def _agent_iter(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``Agent.iter``: a run, named by the ``run_id`` the caller gave, if any."""
    manager = wrapped(*args, **kwargs)
    if not callable(getattr(manager, "__aenter__", None)):
        return manager
    return _RunScope(manager, kwargs.get("run_id"))


class _InvalidArguments(loops.Mistakes):
    """A call whose arguments failed validation: the retry PydanticAI raises is the mistake."""

    def exception_hint(self, call: ToolCall, exc: BaseException) -> str | None:
        return MISTAKE if type(exc).__name__ == "ToolRetryError" else None


def toolset_source(toolset: Any) -> str | None:
    """The MCP server (``name@version``) behind a tool's toolset, through wrapper toolsets
    (prefixed, renamed, filtered...); None for a toolset that is not an MCP server's."""
    for _ in range(16):
        info = getattr(toolset, "_server_info", None)
        if info is not None or toolset is None:
            break
        toolset = getattr(toolset, "wrapped", None)
    return implementation_identity(info)


# -- an MCP server that cannot be reached ----------------------------------------------------------

#: Entries of an ``MCPToolset`` answered without a connection (its server was not reached):
#: their exits close nothing, and its listing is empty while it has no connection.
_unreached: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
#: The ``name@version`` each toolset's server gave when it last connected: a server that
#: dies later is counted on the upstream its tools were counted on.
_identities: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _mcp_identity(toolset: Any) -> str | None:
    """The server of ``toolset``: its ``name@version`` when it ever connected, else the URL or
    command its transport was made with."""
    known = _identities.get(toolset)
    if known is not None:
        return known
    transport = getattr(getattr(toolset, "client", None), "transport", None)
    url = getattr(transport, "url", None)
    command = getattr(transport, "command", None)
    return connection_identity({"url": url, "command": command, "args": getattr(transport, "args", None)})


def _connected(toolset: Any) -> bool:
    count = getattr(toolset, "_running_count", 0)
    return isinstance(count, int) and count > 0


async def _mcp_enter(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``MCPToolset.__aenter__`` through :func:`reach`; one already connected enters as before."""
    if _connected(instance):
        return await wrapped(*args, **kwargs)
    entered = await reach(_mcp_identity(instance), _deferred(wrapped, args, kwargs))
    if entered is UNREACHED:
        _unreached[instance] = _unreached.get(instance, 0) + 1
        return instance
    identity = toolset_source(instance)
    if identity is not None:
        _identities[instance] = identity
    return entered


async def _mcp_exit(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``MCPToolset.__aexit__``: nothing to close for an entry that made no connection."""
    left = _unreached.get(instance, 0)
    if left > 0 and not _connected(instance):
        _unreached[instance] = left - 1
        return None
    return await wrapped(*args, **kwargs)


async def _mcp_tools(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``MCPToolset.get_tools``: no tools from a server the run could not reach."""
    if _unreached.get(instance, 0) > 0 and not _connected(instance):
        return {}
    return await wrapped(*args, **kwargs)


def _deferred(wrapped: Any, args: tuple, kwargs: dict) -> Any:
    """``wrapped(*args, **kwargs)`` as a callable of no arguments, for :func:`reach`."""

    async def call() -> Any:
        return await wrapped(*args, **kwargs)

    return call
