"""Fallback routing in code: try a tool, then its configured alternatives.

Above the call path: every attempt runs through its driver (:mod:`otel_breaker.call_path`),
upstream breaker, waste budget and loop guard included.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from otel_breaker import upstream as _upstream
from otel_breaker.breaker import CircuitBreaker
from otel_breaker.call_path import CallPath
from otel_breaker.call_steps import INVALID_RESULT_ERROR_TYPE
from otel_breaker.classify import FAILURE, classify_exception, result_failed
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.rejection import Rejection
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")


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
) -> list[tuple[ToolCall, Callable[..., Any], CircuitBreaker, CircuitBreaker | None]]:
    """Each candidate's call, function, breaker and the upstream breaker it runs behind (or None)."""
    if registry is None:
        registry = default_registry()
    resolved = [_resolve(primary, registry, agent, agent_name)]
    if not alternatives and tools:
        alternatives = tuple((name, tools[name]) for name in resolved[0][2].config.fallbacks if name in tools)
    resolved.extend(_resolve(item, registry, agent, agent_name) for item in alternatives)
    return [(call, fn, breaker, _upstream.breaker_for_call(registry, call)) for call, fn, breaker in resolved]


def _fails(breaker: CircuitBreaker, exc: BaseException) -> bool:

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

    last: Rejection | BaseException | None = None
    path = CallPath(registry)
    for call, fn, breaker, upstream in _plan(primary, alternatives, tools, registry, agent, agent_name):
        attempt = _Attempt(breaker.config)
        try:
            # the call path's driver; behind an upstream its breaker is asked first
            result = path.drive(breaker, fn, tuple(args), dict(kwargs or {}), call, attempt, upstream)
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

    last: Rejection | BaseException | None = None
    path = CallPath(registry)
    for call, fn, breaker, upstream in _plan(primary, alternatives, tools, registry, agent, agent_name):
        attempt = _Attempt(breaker.config)
        try:
            result = await path.adrive(breaker, fn, tuple(args), dict(kwargs or {}), call, attempt, upstream)
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
