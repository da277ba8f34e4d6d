"""Graceful degradation: what the model reads when a tool is unavailable.

A breaker alone stops the waste but also stops progress. This module turns a
rejection into text an agent can act on (retry later, use an alternative, or
tell the user), lists unavailable tools for a system prompt, routes calls to
fallbacks, and gates high-stakes tools behind a human escalation hook.

Everything here that can reach a prompt goes through :mod:`otel_breaker.sanitize`:
names are reduced to plain characters and capped, text is length-capped and
stripped of control characters and prompt-like markup, and nothing a failing
tool returned is ever included. That holds for every field of a rejection
result, not only its texts.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from otel_breaker.breaker import CircuitOpenError, State, StateChange, add_global_listener
from otel_breaker.classify import FAILURE
from otel_breaker.sanitize import (  # noqa: F401 - re-exported: the sanitiser adapters use
    MAX_ALTERNATIVES,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    optional_name,
    safe_name,
    sanitize,
)
from otel_breaker.upstream import upstream_name

if TYPE_CHECKING:
    from otel_breaker.breaker import CircuitBreaker
    from otel_breaker.registry import BreakerRegistry
    from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")


def _seconds(value: float | None) -> str:
    if value is None or math.isinf(value):
        return "until an operator closes it"
    return f"in about {max(1, math.ceil(value))}s"


class Rejection:
    """Why a call was not run, and what the caller should do instead."""

    __slots__ = ("_alternatives", "_retry_after", "breaker", "call", "state")

    def __init__(self, breaker: CircuitBreaker, call: ToolCall) -> None:
        self.breaker = breaker
        self.call = call
        self.state: State = breaker.state
        self._retry_after: float | None = -1.0
        self._alternatives: tuple[str, ...] | None = None

    @property
    def tool(self) -> str:
        return self.call.tool

    @property
    def retry_after(self) -> float | None:
        """Whole seconds (rounded up) until a probe may run; None while forced open."""
        if self._retry_after == -1.0:
            self._retry_after = _whole_seconds(self.breaker.peek_retry_after())
        return self._retry_after

    @property
    def alternatives(self) -> tuple[str, ...]:
        """Configured fallbacks whose breakers are not open right now (at most
        :data:`MAX_ALTERNATIVES`, names as the model may read them)."""
        if self._alternatives is None:
            healthy = healthy_alternatives(self.breaker.config.fallbacks)[:MAX_ALTERNATIVES]
            self._alternatives = tuple(safe_name(name) for name in healthy)
        return self._alternatives

    @property
    def error(self) -> Callable[[], CircuitOpenError]:
        return lambda: CircuitOpenError(self.call.tool, self.state, self.retry_after, self.message)

    @property
    def summary(self) -> str:
        return f"Tool '{safe_name(self.call.tool)}' circuit breaker open - too many recent failures"

    @property
    def remediation(self) -> str:
        tool = safe_name(self.call.tool)
        when = _seconds(self.retry_after)
        alternatives = self.alternatives
        if alternatives:
            names = ", ".join(f"'{a}'" for a in alternatives)
            return sanitize(f"Tool '{tool}' may be retried {when}. Use an alternative instead: {names}.")
        return (
            f"Tool '{tool}' may be retried {when}. No alternative is available: do not retry it now; "
            "tell the user this capability is temporarily degraded."
        )

    @property
    def message(self) -> str:
        """The text the model reads: the tool, that it is temporarily unavailable,
        when it may be retried, and what to do instead. Never the tool's own error."""
        tool = safe_name(self.call.tool)
        return sanitize(
            f"Tool '{tool}' is temporarily unavailable: its circuit breaker is {self.state.value.replace('_', '-')} "
            f"after repeated failures, so the call was not made. {self.remediation}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The graceful error result returned instead of running the tool.

        Every field a model reads is sanitised: names and ids by :func:`safe_name`
        (at most :data:`MAX_NAME_CHARS` characters), texts by :func:`sanitize`."""
        call = self.call
        return {
            "error": self.summary,
            "circuit_open": True,
            "tool": safe_name(call.tool),
            "agent_name": optional_name(call.agent_name),
            "session_id": optional_name(call.session_id),
            "retry_after_s": self.retry_after,
            "remediation": self.remediation,
            "alternatives": list(self.alternatives),
        }


def _whole_seconds(value: float) -> int | None:
    return None if math.isinf(value) else math.ceil(value)


def rejection_result(breaker: CircuitBreaker, call: ToolCall | None) -> dict[str, Any]:
    """``Rejection(...).as_dict()``, cached per breaker while nothing in it changes.

    The rejection path must be much cheaper than the call it avoids: building
    the texts costs microseconds, a copy of a cached dict a tenth of that. The
    cache holds while the generation, the caller and the whole seconds of
    ``retry_after`` stay the same.
    """
    cached = breaker.rejection_cache
    now = breaker._clock()
    if cached is not None and cached[0] <= now < cached[1] and cached[2] is call and cached[3] == breaker._generation:
        return cached[4].copy()
    from otel_breaker.toolcall import ToolCall

    generation = breaker.generation
    remaining = breaker.peek_retry_after()
    seconds = _whole_seconds(remaining)
    if breaker.state is State.OPEN and seconds is not None:
        # ceil(open_until - t) == seconds  <=>  open_until - seconds <= t < open_until - seconds + 1
        open_until = now + remaining
        valid = (open_until - seconds, open_until - seconds + 1)
    else:
        valid = (-math.inf, math.inf)
    info = Rejection(
        breaker, call or ToolCall(breaker.name, agent_name=breaker.agent_name, session_id=breaker.session_id)
    )
    info._retry_after = seconds
    fallbacks = breaker.config.fallbacks
    if fallbacks:
        # The alternatives depend on the fallbacks' breakers: a transition of
        # any of them drops this cached answer (see _on_transition).
        for name in fallbacks:
            _dependents.setdefault(name, weakref.WeakSet()).add(breaker)
        epoch = _fallback_epoch[0]
    result = info.as_dict()
    if not fallbacks or epoch == _fallback_epoch[0]:
        breaker.rejection_cache = (valid[0], valid[1], call, generation, result)
    return result.copy()


# Breakers whose cached rejection names a fallback, by fallback name.
_dependents: dict[str, weakref.WeakSet[CircuitBreaker]] = {}
# Bumped before dependents' caches are dropped, so an answer computed during
# a fallback's transition is not cached.
_fallback_epoch = [0]


def _on_transition(change: StateChange) -> None:
    """A fallback's breaker moved: rejections naming it are built afresh."""
    dependents = _dependents.get(change.breaker.name)
    if dependents:
        _fallback_epoch[0] += 1
        for breaker in list(dependents):
            breaker.rejection_cache = None


add_global_listener(_on_transition)


def healthy_alternatives(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names among ``names`` whose breakers are not open."""
    if not names:
        return ()
    from otel_breaker.registry import default_registry

    registry = default_registry()
    healthy = []
    for name in names:
        breakers = registry.find(name)
        if not any(b.state is State.OPEN for b in breakers):
            healthy.append(name)
    return tuple(healthy)


# -- human escalation --------------------------------------------------------------

EscalationHook = Callable[["ToolCall", Rejection], bool]
_escalation: EscalationHook | None = None


def set_escalation(hook: EscalationHook | None) -> None:
    """Install the confirmation gate for high-stakes tools.

    ``hook(call, rejection) -> bool``: True lets this one call through, False
    returns the rejection. Neither counts as a tool failure.
    """
    global _escalation
    _escalation = hook


def escalation_approves(call: ToolCall, info: Rejection) -> bool:
    hook = _escalation
    if hook is None:
        return False
    try:
        return bool(hook(call, info))
    except Exception:
        logger.exception("otel-breaker: escalation hook failed; treating it as a denial")
        return False


# -- awareness: the tool-status block for system prompts -----------------------------

#: First line of the status block; :func:`augment_instructions` finds an earlier block by it.
STATUS_HEADER = "Tool status (circuit breakers):"
MAX_STATUS_TOOLS = 10
MAX_STATUS_LINE_CHARS = 240
MAX_STATUS_CHARS = 2000


class ToolStatus(NamedTuple):
    """One unavailable tool as the status block describes it."""

    tool: str
    state: State
    retry_after: int | None
    """Whole seconds until a call may be tried again; None while forced open."""
    alternatives: tuple[str, ...]
    source: str | None = None
    """Where the tool runs (an MCP server), when its name alone does not say it."""
    upstream: str | None = None
    """Set when this entry is an upstream's breaker: every tool behind it is unavailable."""


def status_in_prompt_enabled() -> bool:
    """Whether adapters add the tool-status block to system prompts
    (``OTEL_BREAKER_STATUS_IN_PROMPT``, off by default)."""
    from otel_breaker.config import get_settings

    return bool(get_settings().status_in_prompt)


def _breakers_for(registry: BreakerRegistry, agent: Any) -> list[CircuitBreaker]:
    """The breakers that can reject a call of ``agent``: its own, the process-wide
    ones, and the current session's. Every breaker when ``agent`` is None."""
    from otel_breaker.registry import current_session

    everything = registry.breakers()
    if agent is None:
        return everything
    session = current_session()
    shared = [
        b
        for b in everything
        if (b.agent_name is None and b.session_id is None) or (session is not None and b.session_id == session)
    ]
    if isinstance(agent, str):
        own = [b for b in everything if b.agent_name == agent and b.session_id is None]
    else:
        own = registry.breakers_of(agent)
        if not own:
            from otel_breaker.instrumentation.base import agent_display_name

            name = agent_display_name(agent)
            own = [b for b in everything if name is not None and b.agent_name == name and b.session_id is None]
    seen: set[int] = set()
    return [b for b in (*own, *shared) if not (id(b) in seen or seen.add(id(b)))]


def unavailable_tools(agent: Any = None, registry: BreakerRegistry | None = None) -> list[ToolStatus]:
    """Tools whose breakers are open or half-open, sorted by name.

    ``agent``: an agent object or agent name, to list only the breakers that
    can reject its calls. A tool guarded by several breakers (several agents or
    sessions) is listed once, with the earliest time any of them allows a call.
    """
    if registry is None:
        from otel_breaker.registry import default_registry

        registry = default_registry()
    found: dict[tuple[str, str], ToolStatus] = {}
    for breaker in _breakers_for(registry, agent):
        state = breaker.state
        if state is State.CLOSED:
            continue
        retry = _whole_seconds(breaker.retry_after)
        source = breaker.source
        status = ToolStatus(
            breaker.name, state, retry, healthy_alternatives(breaker.config.fallbacks), source, upstream_name(breaker)
        )
        key = (breaker.name, source or "")
        known = found.get(key)
        if known is None or _sooner(status.retry_after, known.retry_after):
            found[key] = status
    return [found[key] for key in sorted(found)]


def _sooner(a: int | None, b: int | None) -> bool:
    return a is not None and (b is None or a < b)


def _status_line(status: ToolStatus) -> str:
    tool = safe_name(status.tool)
    state = status.state.value.replace("_", "-")
    if status.retry_after is None:
        when = "unavailable until an operator restores it"
    elif status.retry_after <= 0:
        when = "one trial call may be made now" if status.state is State.HALF_OPEN else "may be retried now, once"
    else:
        when = f"may be retried in about {status.retry_after}s"
    if status.alternatives:
        advice = "Use " + ", ".join(f"'{safe_name(a)}'" for a in status.alternatives) + " instead."
    else:
        advice = "No alternative: tell the user this capability is temporarily degraded."
    where = f" on server '{safe_name(status.source)}'" if status.source else ""
    if status.upstream is not None:
        tool, where = f"every tool of upstream '{safe_name(status.upstream)}'", ""
        return "- " + sanitize(f"{tool} ({state}, unreachable): {when}. {advice}", MAX_STATUS_LINE_CHARS)
    return "- " + sanitize(f"'{tool}'{where} ({state}): {when}. {advice}", MAX_STATUS_LINE_CHARS)


def tool_status_block(agent: Any = None, registry: BreakerRegistry | None = None) -> str:
    """A short text for a system prompt naming the tools that are open or
    half-open and when they may be retried; ``""`` when every tool is healthy.

    Built only from validated tool names, breaker states and numbers: nothing
    a tool returned or raised can reach it. Each line is sanitised and capped,
    at most :data:`MAX_STATUS_TOOLS` tools are listed, and the whole block is
    capped at :data:`MAX_STATUS_CHARS` characters.
    """
    statuses = unavailable_tools(agent, registry)
    if not statuses:
        return ""
    lines = [
        STATUS_HEADER,
        "These tools are temporarily unavailable after repeated failures; calls to them are "
        "rejected without running. Do not retry them before the time shown.",
    ]
    lines.extend(_status_line(s) for s in statuses[:MAX_STATUS_TOOLS])
    if len(statuses) > MAX_STATUS_TOOLS:
        lines.append(f"- and {len(statuses) - MAX_STATUS_TOOLS} more unavailable tools.")
    block = "\n".join(lines)
    return block if len(block) <= MAX_STATUS_CHARS else block[: MAX_STATUS_CHARS - 1] + "…"


def augment_instructions(text: str | None, agent: Any = None, registry: BreakerRegistry | None = None) -> str | None:
    """``text`` (a system prompt or agent instructions) with the tool-status
    block appended, for adapters to call where the framework builds its
    system prompt.

    Unchanged when ``OTEL_BREAKER_STATUS_IN_PROMPT`` is off. A block appended
    by an earlier call is replaced (or removed once every tool is healthy), so
    calling this on every turn never stacks blocks. Never raises: on any
    internal error the text is returned unchanged.
    """
    try:
        if not status_in_prompt_enabled():
            return text
        base = text
        if base and STATUS_HEADER in base:
            base = base[: base.index(STATUS_HEADER)].rstrip()
        block = tool_status_block(agent, registry)
        if not block:
            return base
        return f"{base}\n\n{block}" if base else block
    except Exception:
        logger.debug("otel-breaker: building the tool-status block failed", exc_info=True)
        return text


# -- fallback routing in code ----------------------------------------------------------

Candidate = Callable[..., Any] | tuple[str, Callable[..., Any]]


class _Attempt:
    """The adapter for one fallback attempt: notes a rejection or an invalid
    result instead of building a framework value."""

    __slots__ = ("config", "invalid", "rejected")

    def __init__(self, config: Any) -> None:
        self.config = config
        self.rejected: Rejection | None = None
        self.invalid = False

    def result_error(self, call: ToolCall, result: Any) -> str | None:
        from otel_breaker.classify import result_failed
        from otel_breaker.guard import INVALID_RESULT_ERROR_TYPE

        if self.config.is_failure_result is not None and result_failed(result, self.config):
            self.invalid = True
            return INVALID_RESULT_ERROR_TYPE
        return None

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        self.rejected = info
        return info


def _resolve(
    item: Candidate, registry: BreakerRegistry, agent: Any, agent_name: str | None
) -> tuple[ToolCall, Callable[..., Any], CircuitBreaker]:
    from otel_breaker.breaker import CircuitBreaker
    from otel_breaker.toolcall import ToolCall

    if isinstance(item, tuple):
        name, fn = item
    else:
        fn = item
        name = getattr(fn, "__name__", None)
    if not callable(fn):
        raise TypeError(f"call_with_fallback: {item!r} is not a callable or a (name, callable) pair")
    own = getattr(fn, "breaker", None)
    if isinstance(own, CircuitBreaker):
        # Already guarded (``@guard(clock=...)``, ``@breaker``): run the plain
        # function through that breaker so it is counted once.
        call = ToolCall(own.name, agent_name=own.agent_name, session_id=own.session_id)
        return call, getattr(fn, "__wrapped__", fn), own
    if not isinstance(name, str) or not name:
        raise TypeError(f"call_with_fallback: name {item!r} with a (name, callable) pair")
    call = ToolCall(name, agent=agent, agent_name=agent_name)
    return call, fn, registry.breaker_for(call)


def _plan(
    primary: Candidate,
    alternatives: tuple[Candidate, ...],
    tools: Mapping[str, Callable[..., Any]] | None,
    registry: BreakerRegistry | None,
    agent: Any,
    agent_name: str | None,
) -> list[tuple[ToolCall, Callable[..., Any], CircuitBreaker]]:
    if registry is None:
        from otel_breaker.registry import default_registry

        registry = default_registry()
    plan = [_resolve(primary, registry, agent, agent_name)]
    if not alternatives and tools:
        alternatives = tuple((name, tools[name]) for name in plan[0][2].config.fallbacks if name in tools)
    plan.extend(_resolve(item, registry, agent, agent_name) for item in alternatives)
    return plan


def _fails(breaker: CircuitBreaker, exc: BaseException) -> bool:
    from otel_breaker.classify import classify_exception

    return isinstance(exc, Exception) and classify_exception(exc, breaker.config) == FAILURE


def _give_up(last: Rejection | BaseException) -> Any:
    if isinstance(last, _InvalidResult):
        return last.result
    if isinstance(last, Rejection):
        if last.breaker.config.graceful_degradation:
            return last.as_dict()
        raise last.error()
    raise last


def call_with_fallback(
    primary: Candidate,
    *alternatives: Candidate,
    args: tuple = (),
    kwargs: Mapping[str, Any] | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    agent: Any = None,
    agent_name: str | None = None,
    registry: BreakerRegistry | None = None,
) -> Any:
    """Call ``primary(*args, **kwargs)``; when its breaker rejects the call or
    the call fails, try each alternative in turn, each through its own breaker.

    Candidates are callables (the breaker is named after ``__name__``; a
    function carrying a ``.breaker`` uses that one) or ``(name, callable)``
    pairs. With no ``alternatives`` given, the primary's configured
    ``fallbacks`` are looked up by name in ``tools``.

    Returns the first successful result. Otherwise the last candidate's
    outcome: its exception is re-raised, or its rejection is returned as the
    graceful error result (raised as :class:`CircuitOpenError` when that
    breaker has ``graceful_degradation=False``). Exceptions that are not tool
    failures (cancellation, approval or permission denied) propagate at once.
    """
    from otel_breaker.guard import run_sync

    last: Rejection | BaseException | None = None
    for call, fn, breaker in _plan(primary, alternatives, tools, registry, agent, agent_name):
        attempt = _Attempt(breaker.config)
        try:
            result = run_sync(breaker, fn, tuple(args), dict(kwargs or {}), call, attempt)
        except BaseException as exc:
            if not _fails(breaker, exc):
                raise
            logger.debug("otel-breaker: %s failed; trying the next alternative", call.tool)
            last = exc
            continue
        last = _shortfall(attempt, call, result)
        if last is None:
            return result
    return _give_up(last) if last is not None else None


async def acall_with_fallback(
    primary: Candidate,
    *alternatives: Candidate,
    args: tuple = (),
    kwargs: Mapping[str, Any] | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    agent: Any = None,
    agent_name: str | None = None,
    registry: BreakerRegistry | None = None,
) -> Any:
    """:func:`call_with_fallback` for async tools (plain functions work too);
    each attempt is awaited and cancelled at its breaker's ``timeout``."""
    from otel_breaker.guard import run_async

    last: Rejection | BaseException | None = None
    for call, fn, breaker in _plan(primary, alternatives, tools, registry, agent, agent_name):
        attempt = _Attempt(breaker.config)
        try:
            result = await run_async(breaker, fn, tuple(args), dict(kwargs or {}), call, attempt)
        except BaseException as exc:
            if not _fails(breaker, exc):
                raise
            logger.debug("otel-breaker: %s failed; trying the next alternative", call.tool)
            last = exc
            continue
        last = _shortfall(attempt, call, result)
        if last is None:
            return result
    return _give_up(last) if last is not None else None


def _shortfall(attempt: _Attempt, call: ToolCall, result: Any) -> Rejection | BaseException | None:
    """Why an attempt that returned did not succeed (rejected, or an invalid result), else None."""
    if attempt.rejected is not None:
        return attempt.rejected
    if attempt.invalid:
        return _InvalidResult(call.tool, result)
    return None


class _InvalidResult(Exception):
    """A result the tool's ``is_failure_result`` validator rejected; when it is
    the last candidate's outcome, the result itself is returned."""

    def __init__(self, tool: str, result: Any) -> None:
        super().__init__(f"Tool '{tool}' returned a result its validator marks as failed")
        self.result = result
