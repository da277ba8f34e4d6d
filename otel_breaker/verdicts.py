"""The verdict on one call, judged once: every judging rule of a tool call in one place.

A call ends by raising or by returning. :func:`judge_raised` and :func:`judge_returned`
turn that into one :class:`~otel_breaker.classify.Verdict` (outcome, reason, rule) and
the ``error.type`` the span and metrics carry. The framework adapter speaks first where
only it can read the ending (``exception_hint``, ``result_error``, ``result_hint``, an
exception it saw swallowed); the outcome rules (``classify.py``) decide the rest; a run
of distinct unrecognised errors is the model's mistakes (``streaks.py``). The call path
(``call_steps.py``) judges each attempt here once, and the breaker, the upstream's share,
the loop guard, the span and the metrics all read that one value. The loop guard's own
runs (a call the framework refuses before its tool path) are judged here too.

Judging never raises: a failure of our bookkeeping is logged and the call counts as
an unrecognised failure (a raised call) or a success (a returned one).
"""

from __future__ import annotations

from typing import Any

from otel_breaker import streaks
from otel_breaker.breaker import CircuitBreaker
from otel_breaker.classify import (
    CONTROL,
    FAILURE,
    IGNORED,
    IGNORED_RESULT,
    MISTAKE,
    RETRY_REQUEST,
    SUCCEEDED,
    UNRECOGNISED,
    Verdict,
    error_description,
    error_type,
    judge_exception,
    judge_text,
    result_failed,
    result_text,
)
from otel_breaker.loglines import bookkeeping_failed
from otel_breaker.toolcall import ToolCall

#: ``error.type`` of a call that ran past its breaker's ``timeout``.
TIMEOUT_ERROR_TYPE = "timeout"
#: ``error.type`` of a value the breaker's ``is_failure_result`` calls a failure.
INVALID_RESULT_ERROR_TYPE = "invalid_result"


class ToolTimeoutError(TimeoutError):
    """An async tool ran past its breaker's ``timeout`` and was cancelled."""

    def __init__(self, tool: str, timeout: float):
        self.tool = tool
        self.timeout = timeout
        super().__init__(f"Tool '{tool}' timed out after {timeout:g}s")


def _result_error(breaker: CircuitBreaker, call: ToolCall | None, result: Any, adapter: Any) -> str | None:
    """``error.type`` for a returned value the framework or a validator calls a failure."""
    try:
        if adapter is not None:
            err = adapter.result_error(call, result)
            if err is not None:
                return err
        if breaker.config.is_failure_result is not None and result_failed(result, breaker.config):
            return INVALID_RESULT_ERROR_TYPE
    except Exception:
        bookkeeping_failed("classifying a result")
    return None


_TIMED_OUT = Verdict(FAILURE, None, TIMEOUT_ERROR_TYPE)
_INVALID_RESULT = Verdict(FAILURE, None, "predicate")
_UNRECOGNISED = Verdict(FAILURE, None, UNRECOGNISED)
_DISTINCT_MISTAKE = Verdict(IGNORED, MISTAKE, streaks.STREAK_RULE)


def _arguments(call: ToolCall | None) -> Any:
    return call.arguments if call is not None else None


def _judge_raised(breaker: CircuitBreaker, exc: BaseException, call: ToolCall | None, adapter: Any) -> Verdict:
    try:
        hint = None
        if adapter is not None:
            read = getattr(adapter, "exception_hint", None)
            if read is not None:
                hint = read(call, exc)
        verdict = judge_exception(exc, breaker.config, hint)
        if verdict.rule == UNRECOGNISED and streaks.distinct_mistake(
            breaker, error_description(None, exc), _arguments(call)
        ):
            return _DISTINCT_MISTAKE
        return verdict
    except Exception:
        bookkeeping_failed("classifying an exception")
        return _UNRECOGNISED


def judge_raised(
    breaker: CircuitBreaker, call: ToolCall | None, adapter: Any, exc: BaseException
) -> tuple[Verdict, str | None]:
    """(verdict, ``error.type``) of a call that raised ``exc``."""
    if isinstance(exc, ToolTimeoutError):
        return _TIMED_OUT, TIMEOUT_ERROR_TYPE
    verdict = _judge_raised(breaker, exc, call, adapter)
    return verdict, (error_type(exc) if verdict.outcome == FAILURE else None)


def _ignored_result(call: ToolCall | None, result: Any, adapter: Any) -> Verdict:
    """The verdict on a value the adapter calls neither outcome: the model's mistake when
    the adapter's ``result_hint`` says so (arguments its schema refused), else control."""
    try:
        read = getattr(adapter, "result_hint", None)
        hint = read(call, result) if read is not None else None
        if hint == MISTAKE:
            return Verdict(IGNORED, MISTAKE, "framework.mistake")
        if hint == RETRY_REQUEST:
            return Verdict(IGNORED, RETRY_REQUEST, "framework.retry")
    except Exception:
        bookkeeping_failed("classifying a result")
    return Verdict(IGNORED, CONTROL, "framework.control")


def judge_error_result(breaker: CircuitBreaker, call: ToolCall | None, result: Any, err: str, adapter: Any) -> Verdict:
    """The verdict on a failure the framework turned into a value (an MCP ``isError``
    answer, a tool's exception as text): the exception itself where the adapter saw it
    (``swallowed``), else the rules read the value's text. Never raises."""
    try:
        swallowed = getattr(adapter, "swallowed", None)
        if isinstance(swallowed, BaseException):
            return judge_exception(swallowed, breaker.config)
        return judge_text(result_text(result), breaker.config, err)
    except Exception:
        bookkeeping_failed("classifying a result")
        return _UNRECOGNISED


def _error_result_text(result: Any, err: str, adapter: Any) -> str:
    """What the second signal compares of a failed result: the swallowed exception, else the text."""
    swallowed = getattr(adapter, "swallowed", None)
    if isinstance(swallowed, BaseException):
        return error_description(None, swallowed)
    return f"{err}: {result_text(result)}"


def judge_returned(
    breaker: CircuitBreaker, call: ToolCall | None, adapter: Any, result: Any, start: float, timed: bool
) -> tuple[Verdict, str | None, float]:
    """(verdict, ``error.type``, elapsed seconds) of a call that returned ``result``."""
    elapsed = breaker.clock() - start if timed else 0.0
    config = breaker.config
    err = None
    if config.timeout is not None and elapsed > config.timeout:
        return _TIMED_OUT, TIMEOUT_ERROR_TYPE, elapsed
    if adapter is not None or config.is_failure_result is not None:
        err = _result_error(breaker, call, result, adapter)
    if err is None:
        return SUCCEEDED, None, elapsed
    if err == IGNORED_RESULT:
        return _ignored_result(call, result, adapter), None, elapsed
    if err == INVALID_RESULT_ERROR_TYPE:
        return _INVALID_RESULT, err, elapsed
    verdict = judge_error_result(breaker, call, result, err, adapter)
    if verdict.rule == UNRECOGNISED and streaks.distinct_mistake(
        breaker, _error_result_text(result, err, adapter), _arguments(call)
    ):
        verdict = _DISTINCT_MISTAKE
    return verdict, (err if verdict.outcome == FAILURE else None), elapsed
