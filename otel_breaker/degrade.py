"""Graceful degradation: what the model reads when a tool is unavailable.

A breaker alone stops the waste but also stops progress. This module turns a
rejection into text an agent can act on (retry later, use an alternative, or
tell the user), lists unavailable tools for a system prompt, routes calls to
fallbacks, and gates high-stakes tools behind a human escalation hook.

Everything here that can reach a prompt is sanitised: tool names are
validated, text is length-capped and stripped of control characters and
prompt-like markup, and nothing a failing tool returned is ever included.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from otel_breaker.breaker import CircuitOpenError, State

if TYPE_CHECKING:
    from otel_breaker.breaker import CircuitBreaker
    from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

MAX_NAME_CHARS = 64
MAX_TEXT_CHARS = 600
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
_MARKUP = re.compile(r"<\|?/?[A-Za-z_][\w\-|]*\|?>|\[/?(INST|SYS)\]|```|<<\s*/?SYS\s*>>", re.IGNORECASE)
_SAFE_NAME = re.compile(r"[^\w.:/@+\-]")


def safe_name(name: str) -> str:
    """A tool or agent name fit for a prompt: plain characters only, capped."""
    cleaned = _SAFE_NAME.sub("_", str(name))[:MAX_NAME_CHARS]
    return cleaned or "tool"


def sanitize(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """Cap ``text`` and strip control characters and prompt-like markup."""
    cleaned = _MARKUP.sub("", _CONTROL.sub(" ", str(text)))
    cleaned = re.sub(r"\s+", " ", cleaned).strip()
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


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
        """Configured fallbacks whose breakers are not open right now."""
        if self._alternatives is None:
            self._alternatives = healthy_alternatives(self.breaker.config.fallbacks)
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
            names = ", ".join(f"'{safe_name(a)}'" for a in alternatives)
            return f"Tool '{tool}' may be retried {when}. Use an alternative instead: {names}."
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
        """The graceful error result returned instead of running the tool."""
        return {
            "error": self.summary,
            "circuit_open": True,
            "tool": self.call.tool,
            "agent_name": self.call.agent_name,
            "session_id": self.call.session_id,
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
    result = info.as_dict()
    breaker.rejection_cache = (valid[0], valid[1], call, generation, result)
    return result.copy()


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
