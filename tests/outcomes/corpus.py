"""The one assertion every corpus case makes: how a real library's error is read, and
what the breaker makes of it (a mistake or a control is neutral, a failure is counted)."""

from __future__ import annotations

from collections.abc import Callable

from otel_breaker import classify
from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.outcome_rules import FAILURE, Reading, read_exception, read_text


def caught(call: Callable[..., object], *args: object, **kwargs: object) -> BaseException:
    """The exception ``call(*args, **kwargs)`` raises; the case fails if it raises none."""
    try:
        call(*args, **kwargs)
    except BaseException as exc:  # the corpus is made of whatever real calls raise
        return exc
    raise AssertionError(f"{call!r} raised nothing: the case does not reproduce its error")


def expect(exc: BaseException, kind: str, rule: str, text: bool = True) -> Reading:
    """Assert that ``exc`` is read as ``kind`` by ``rule`` and that the breaker ignores a mistake
    or a control and counts a failure; the message names the error read.

    With ``text``, its text alone (what a framework that catches the error hands over)
    must not say otherwise: a mistake or a control reads the same kind from the text, and
    a failure's text is a failure or unrecognised (which counts as one)."""
    reading = read_exception(exc)
    described = f"{type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:200]!r}"
    assert reading is not None, f"{described} was not recognised (expected {kind} by {rule})"
    assert (reading.kind, reading.rule) == (kind, rule), f"{described} was read as {reading}"
    counted = classify.FAILURE if kind == FAILURE else classify.IGNORED
    outcome = classify.classify_exception(exc, CircuitBreakerConfig())
    assert outcome == counted, f"the breaker judged {described} {classify.OUTCOME_NAMES[outcome]}"
    if text:
        text_reading = read_text(str(exc))
        text_kind = FAILURE if text_reading is None else text_reading.kind
        assert text_kind == kind, f"the text of {described} was read as {text_reading}"
        outcome = classify.judge_text(str(exc), CircuitBreakerConfig()).outcome
        assert outcome == counted, f"the breaker judged the text of {described} {classify.OUTCOME_NAMES[outcome]}"
    return reading


def expect_unrecognised(exc: BaseException) -> None:
    """Assert that no rule reads ``exc`` and that the breaker counts it: a broken tool is never hidden."""
    assert read_exception(exc) is None
    assert classify.classify_exception(exc, CircuitBreakerConfig()) == classify.FAILURE
