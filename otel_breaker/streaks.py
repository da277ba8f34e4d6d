"""The second signal: a failure streak of different errors for different arguments is the model's.

The rules of :mod:`otel_breaker.outcome_rules` recognise errors by their
protocol. An error they do not recognise counts as a failure, so a broken tool
is never hidden. But a broken backend answers the same error whatever it is
asked, while a model that keeps getting its input wrong meets a different
error for each different call. So an unrecognised failure is neutral (rule
``streak.distinct``) when all of these hold:

* the tool has succeeded in this process, and this is not the first failure
  since its last success (the first one always counts);
* its error, with numbers, quoted text, paths, ids and the call's own argument
  values masked, reads unlike every failure since that success;
* its arguments differ from those of every failure since that success (when the
  framework tells them);
* the streak is younger than the breaker's ``monitor_window`` and no longer than
  twice its ``failure_threshold`` calls.

A broken backend therefore still opens on time: its errors share one shape, so
every one after the first counts as well. One that varies its text with every
call is, at worst, counted from twice the threshold on.

Nothing here is on the path of a successful call: a success since the last
failure is read from the breaker's own counter when the next failure comes.
State is per breaker, in this process, and goes with the breaker.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any

from otel_breaker.breaker import CircuitBreaker
from otel_breaker.patterns import LazyPattern

STREAK_RULE = "streak.distinct"
#: Characters of an error text shaped at most.
MAX_SHAPE_CHARS = 500
#: Argument values masked in an error's text at most (the longest first).
MAX_MASKED_VALUES = 32
#: How many times the threshold a streak may grow before every failure counts.
STREAK_LIMIT_FACTOR = 2

_QUOTED = LazyPattern(r"'[^']{0,300}'|\"[^\"]{0,300}\"|`[^`]{0,300}`")
_PATH_OR_URL = LazyPattern(r"[a-z][a-z0-9+.-]{1,15}://\S+|(?:[~.]?/[^\s/'\"]+)+/?")
_NUMBER_OR_ID = LazyPattern(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b|\b0x[0-9a-f]+\b|\d+(?:\.\d+)?")
_SPACE = LazyPattern(r"\s+")


class _Streak:
    """The failures of one breaker since its last success."""

    __slots__ = ("arguments", "length", "shapes", "started", "successes")

    def __init__(self, successes: int, started: float, shape: str, arguments: str | None) -> None:
        self.successes = successes
        self.started = started
        self.length = 1
        self.shapes = {shape}
        self.arguments = {arguments}


_streaks: weakref.WeakKeyDictionary[CircuitBreaker, _Streak] = weakref.WeakKeyDictionary()


def _argument_values(arguments: Any) -> list[str]:
    """The call's string and number arguments, longest first (masked in its error text)."""
    values: list[str] = []
    pending = [arguments]
    while pending and len(values) < MAX_MASKED_VALUES:
        value = pending.pop()
        if isinstance(value, str):
            if len(value) >= 3:
                values.append(value[:300].lower())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            values.append(str(value))
        elif isinstance(value, dict):
            pending.extend(list(value.values())[:MAX_MASKED_VALUES])
        elif isinstance(value, (list, tuple)):
            pending.extend(value[:MAX_MASKED_VALUES])
    return sorted(values, key=len, reverse=True)


def error_shape(text: str, arguments: Any = None) -> str:
    """``text`` with what differs from call to call masked: the call's own argument values,
    quoted text, paths and URLs, numbers and ids. Two errors of one broken backend share a
    shape; a model's different mistakes rarely do."""
    shape = text[:MAX_SHAPE_CHARS].lower()
    for value in _argument_values(arguments):
        shape = shape.replace(value, "<arg>")
    shape = _QUOTED.sub("<q>", shape)
    shape = _PATH_OR_URL.sub("<path>", shape)
    shape = _NUMBER_OR_ID.sub("<n>", shape)
    return _SPACE.sub(" ", shape).strip()


def _arguments_key(arguments: Any) -> str | None:
    if arguments is None:
        return None
    try:
        text = repr(arguments)[:4000]
    except Exception:
        return None
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()


def distinct_mistake(breaker: CircuitBreaker, text: str, arguments: Any = None) -> bool:
    """Whether an unrecognised failure of ``breaker``'s tool, with error ``text`` for
    ``arguments``, is evidence of the model's mistakes (see the module's rule). Records
    the failure in the tool's streak either way. Never raises."""
    try:
        return _judge(breaker, text, arguments)
    except Exception:
        return False


def _judge(breaker: CircuitBreaker, text: str, arguments: Any) -> bool:
    successes = breaker.lifetime_counts()[0]
    now = breaker.clock()
    shape = error_shape(text, arguments)
    key = _arguments_key(arguments)
    streak = _streaks.get(breaker)
    if streak is None or streak.successes != successes:
        _streaks[breaker] = _Streak(successes, now, shape, key)
        return False  # the first failure since a success always counts
    streak.length += 1
    config = breaker.config
    distinct = (
        successes > 0
        and now - streak.started <= config.monitor_window
        and streak.length <= STREAK_LIMIT_FACTOR * config.failure_threshold
        and shape not in streak.shapes
        and (key is None or key not in streak.arguments)
    )
    streak.shapes.add(shape)
    streak.arguments.add(key)
    return distinct


def forget(breaker: CircuitBreaker) -> None:
    """Drop ``breaker``'s streak (a reset)."""
    _streaks.pop(breaker, None)


__all__ = ["STREAK_RULE", "distinct_mistake", "error_shape", "forget"]
