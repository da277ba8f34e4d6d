"""What a rejected call answers: the rejection, its cached result, and the escalation gate.

Below the telemetry and the call path (both use :class:`Rejection`), above the
registry (a rejection names the configured fallbacks that are not open now).
Every field a model reads goes through :mod:`otel_breaker.sanitize`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from otel_breaker.listeners import add_follow_listener, add_global_listener
from otel_breaker.loglines import logger
from otel_breaker.sanitize import MAX_ALTERNATIVES, optional_name, safe_name, sanitize
from otel_breaker.toolcall import ToolCall

if TYPE_CHECKING:
    from otel_breaker.breaker import CircuitBreaker, CircuitOpenError, State, StateChange

# The state machine is loaded with the first breaker, not with this module: adapters
# import the rejection's type when a framework is imported, before any call.


class CachedRejection(NamedTuple):
    """A rejection's graceful result, reused while ``valid_from <= clock() < valid_until``
    (the whole seconds of ``retry_after`` hold), for the same caller and generation.
    Kept in the breaker's ``rejection_cache`` by :func:`rejection_result`."""

    valid_from: float
    valid_until: float
    call: ToolCall | None
    generation: int
    result: dict[str, Any]


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
            self._retry_after = whole_seconds(self.breaker.peek_retry_after())
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
        from otel_breaker.breaker import CircuitOpenError

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


def whole_seconds(value: float) -> int | None:
    """Seconds as the model and the board read them: rounded up (a probe is never early), None while forced open."""
    return None if math.isinf(value) else math.ceil(value)


def rejection_result(breaker: CircuitBreaker, call: ToolCall | None) -> dict[str, Any]:
    """``Rejection(...).as_dict()``, cached per breaker while nothing in it changes.

    The rejection path must be much cheaper than the call it avoids: building
    the texts costs microseconds, a copy of a cached dict a tenth of that. The
    cache holds while the generation, the caller and the whole seconds of
    ``retry_after`` stay the same.
    """
    cached = breaker.rejection_cache
    now = breaker.clock()
    if cached is not None and cached[0] <= now < cached[1] and cached[2] is call and cached[3] == breaker.generation:
        return cached[4].copy()
    generation = breaker.generation
    remaining = breaker.peek_retry_after()
    seconds = whole_seconds(remaining)
    if breaker.state.value == "open" and seconds is not None:
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
        breaker.rejection_cache = CachedRejection(valid[0], valid[1], call, generation, result)
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


def _on_followed(breaker: CircuitBreaker, from_state: State, to_state: State) -> None:
    """A shared store moved a fallback's breaker (another process's transition): the same."""
    from otel_breaker.breaker import StateChange

    _on_transition(StateChange(breaker, from_state, to_state, "followed", 0.0))


add_global_listener(_on_transition)
add_follow_listener(_on_followed)


def healthy_alternatives(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names among ``names`` whose breakers are not open."""
    if not names:
        return ()
    from otel_breaker.registry import default_registry

    registry = default_registry()
    healthy = []
    for name in names:
        breakers = registry.find(name)
        if not any(b.state.value == "open" for b in breakers):
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
