"""Calls a framework refuses before its tool path runs, as the loop guard sees them.

Several frameworks check the model's tool call themselves and answer it without
running anything: a name no tool has, or arguments the tool's schema rejects.
The breaker must not count these (they say nothing about the tool), but the loop
guard must: an identical repeat of such a call can never succeed. An adapter that
sees the framework refuse a call asks :func:`refused`, at the place the framework
decides and before its answer reaches the model:

* below the limit the refusal is counted and the framework's own answer stands
  (the model reads exactly what it reads without otel-breaker);
* from ``loop_limit`` identical refusals on, the answer is the loop guard's:
  ``reject`` hands the loop message to ``reject`` (the framework's own form for a
  refused call), ``stop`` raises :class:`~otel_breaker.loops.ToolLoopError`.

A refusal the adapter only learns after the framework answered can be counted
with :func:`count`; :func:`check` then answers the next identical call before the
framework judges it. :func:`raising` is the ``reject`` of a framework that shows
the model the error it raises.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from typing import Any

from otel_breaker import loops
from otel_breaker.degrade import Rejection
from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

#: What :func:`refused` and :func:`check` return when the framework's own answer stands.
RUN = loops.RUN


class _Refusal:
    """The adapter as the loop guard sees a refused call: its rejection is ``reject(text)``."""

    __slots__ = ("reject",)

    def __init__(self, reject: Callable[[str], Any]) -> None:
        self.reject = reject

    def rejection(self, call: ToolCall, info: Rejection) -> Any:
        return self.reject(info.message)


def _signature(call: ToolCall) -> str:
    return loops.signature(call.tool, loops.arguments_of(call, (), {}))


def check(guard: Any, call: ToolCall, reject: Callable[[str], Any], unknown: bool = False) -> Any:
    """Before the framework judges ``call``: RUN, or the loop guard's answer when the
    identical call was already refused ``loop_limit`` times (``reject(text)``, or
    :class:`~otel_breaker.loops.ToolLoopError` under ``stop``). ``unknown``: no tool
    has the name. Cheap while no refusal of that tool is remembered; no breaker is
    made for a call that never runs."""
    if unknown:
        return loops.check_unknown(call, _Refusal(reject))
    try:
        scope = loops.LOOPS.scope(call)
        if not loops.LOOPS.might_repeat(scope, call.tool):
            return RUN
        config = guard.registry.settings.config_for(call.tool)
        count, last_error = loops.LOOPS.count(scope, _signature(call))
        if count < config.loop_limit:
            return RUN
        loops.LOOPS.detected(call, config.loop_action, count)
        action = config.loop_action
    except Exception:
        logger.debug("otel-breaker: the loop guard failed; the call runs", exc_info=True)
        return RUN
    if action == "warn":
        return RUN
    error = loops.ToolLoopError(call.tool, count, last_error)
    if action == "stop":
        raise error
    return reject(loops.loop_message(error))


def count(guard: Any, call: ToolCall, error: str | None, unknown: bool = False) -> None:
    """The framework refused ``call`` (the model's mistake): one more for the loop guard."""
    if unknown:
        loops.unknown_tool_called(call, error)
        return
    try:
        if loops.MISTAKES in guard.registry.settings.config_for(call.tool).loop_count:
            loops.LOOPS.counted(loops.LOOPS.scope(call), call.tool, _signature(call), error)
    except Exception:
        logger.debug("otel-breaker: loop bookkeeping failed", exc_info=True)


def raising(error: Callable[..., BaseException], *args: Any) -> Callable[[str], Any]:
    """A ``reject`` for a framework that shows the model the error it raises: raises
    ``error(text, *args)``, the framework's own error, answered as it always is."""

    def reject(text: str) -> Any:
        raise error(text, *args) from None

    return reject


def refused(guard: Any, call: ToolCall, error: str | None, reject: Callable[[str], Any], unknown: bool = False) -> Any:
    """The framework refused ``call`` with ``error``: RUN (counted; the framework's own
    answer stands), or the loop guard's answer (see :func:`check`)."""
    answer = check(guard, call, reject, unknown)
    if answer is RUN:
        count(guard, call, error, unknown)
    return answer


# -- a framework that decides inside one call, before a point it reaches only for accepted calls --

_reached: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("otel_breaker_reached", default=None)


def mark_reached(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """Patch wrapper for the point the framework reaches only once it accepted the call
    in progress (for :func:`arun`)."""
    reached = _reached.get()
    if reached is not None:
        reached.append(True)
    return wrapped(*args, **kwargs)


async def arun(
    guard: Any,
    call: ToolCall,
    unknown: bool,
    reject: Callable[[str], Any],
    answer: Callable[[], str | None],
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
) -> Any:
    """Await ``fn(*args, **kwargs)``, the framework deciding on ``call`` and answering it:
    first the loop guard's answer, if it has one (:func:`check`); a call that never
    reached :func:`mark_reached` was refused, and :func:`count` counts it with the
    framework's answer (``answer()``)."""
    loop_answer = check(guard, call, reject, unknown)
    if loop_answer is not RUN:
        return loop_answer
    token = _reached.set([])
    try:
        result = await fn(*args, **kwargs)
    finally:
        reached = _reached.get()
        _reached.reset(token)
    if not reached:
        count(guard, call, answer(), unknown)
    return result
