"""The one assertion every corpus case makes: how a real library's error is read."""

from __future__ import annotations

from collections.abc import Callable

from otel_breaker.outcome_rules import FAILURE, Reading, read_exception, read_text


def caught(call: Callable[..., object], *args: object, **kwargs: object) -> BaseException:
    """The exception ``call(*args, **kwargs)`` raises; the case fails if it raises none."""
    try:
        call(*args, **kwargs)
    except BaseException as exc:  # the corpus is made of whatever real calls raise
        return exc
    raise AssertionError(f"{call!r} raised nothing: the case does not reproduce its error")


def expect(exc: BaseException, kind: str, rule: str, text: bool = True) -> Reading:
    """Assert that ``exc`` is read as ``kind`` by ``rule``; the message names the error read.

    With ``text``, its text alone (what a framework that catches the error hands over)
    must not say otherwise: a mistake or a control reads the same kind from the text, and
    a failure's text is a failure or unrecognised (which counts as one)."""
    reading = read_exception(exc)
    described = f"{type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:200]!r}"
    assert reading is not None, f"{described} was not recognised (expected {kind} by {rule})"
    assert (reading.kind, reading.rule) == (kind, rule), f"{described} was read as {reading}"
    if text:
        text_reading = read_text(str(exc))
        text_kind = FAILURE if text_reading is None else text_reading.kind
        assert text_kind == kind, f"the text of {described} was read as {text_reading}"
    return reading
